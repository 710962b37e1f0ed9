"""How an ingest process is set up: the lead's `kubus ingest` / `kubus up` fill this in."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Literal

from ingest.checkpoints import Checkpoints
from ingest.kinds import DEFAULT_KINDS
from messages import subjects


def default_instance() -> str:
    return f"ingest-{socket.gethostname()}-{os.getpid()}"


@dataclass
class IngestConfig:
    nats_url: str = "nats://127.0.0.1:4222"
    prefix: str = subjects.PREFIX
    partitions: int = subjects.DEFAULT_PARTITIONS  # used only when the streams are created
    kubeconfig: str | None = None  # None: $KUBECONFIG, ~/.kube/config, in-cluster (runtime/kubeconfig.py)
    context: str | None = None  # None: the kubeconfig's current-context
    kinds: tuple[str, ...] = DEFAULT_KINDS
    instance: str = field(default_factory=default_instance)  # stamped on every event as `ingest`
    # "kv": the `<prefix>_ingest` NATS KV bucket; "memory": none (every start relists); or a store
    checkpoints: Literal["kv", "memory"] | Checkpoints = "kv"
    checkpoint_interval: float = 0.5  # seconds between checkpoint writes while events flow
    window: int = 512  # unacked publishes per kind
    ack_timeout: float = 5.0  # a publish not acked by then is resent (de-duplicated if it did arrive)
    backoff_initial: float = 0.2
    backoff_max: float = 30.0
    watch_timeout: float = 300.0  # the API ends each watch after this; it is reopened from the cursor
    list_page_size: int = 500
    stop_timeout: float = 5.0  # on shutdown, how long to wait for outstanding acks
    stream_check_interval: float = 5.0  # seconds between two looks at whether KUBUS_EVENTS was created anew
    # seconds a deleted object's last event stays in KUBUS_STATE (--state-tombstone-ttl); None: for ever
    tombstone_ttl: float | None = 3600.0
    # how this ingest's kubus gets streams and a store of its own, for the message refusing another cluster's
    # streams (ingest/identity.py); "": identity.OWN_STATE, the general answer
    own_state: str = ""
