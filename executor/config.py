"""What an executor process is told at start: where NATS and the API are, and how hard to push."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from messages import subjects


def _default_instance() -> str:
    return f"executor-{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, kw_only=True)
class ExecutorConfig:
    nats_url: str = "nats://127.0.0.1:4222"
    nats_connect_timeout: float = 5.0  # at start: NATS not answering by then is an error, not a wait
    prefix: str = subjects.PREFIX
    partitions: int = subjects.DEFAULT_PARTITIONS
    kubeconfig: str | None = None  # None: $KUBECONFIG, ~/.kube/config, in-cluster (runtime/kubeconfig.py)
    context: str | None = None
    # kube-controller-manager's --kube-api-qps and --kube-api-burst defaults; <= 0 disables the limiter
    qps: float = 20.0
    burst: int = 30
    concurrency: int = 64  # actions in flight at once (fetched, applied or waiting for their controller's slot)
    # (controller kind, actions of its controllers applied at once): --concurrent-daemonset-syncs and
    # --concurrent-replicaset-syncs; a kind not listed is bounded by `concurrency` alone
    concurrent_syncs: tuple[tuple[str, int], ...] = ()
    api_workers: int = 16  # threads running the synchronous official client: API calls in flight
    instance: str = field(default_factory=_default_instance)
    durable: str = "executor"  # one durable consumer shared by every executor: they split the work
    fetch_batch: int = 256
    fetch_timeout: float = 1.0  # an idle fetch's wait: also the longest a stop waits for the fetch loop
    request_timeout: float = 30.0
    # per API call within one delivery while no answer comes (or a 504): 0.05 + 0.1 + ... + 0.8 s of backoff,
    # then the action is redelivered (see executor/errors.py)
    api_attempts: int = 6
    api_max_retries: int = 10  # client-go's rest.Request maxRetries: resends of an answer carrying Retry-After
    backoff_initial: float = 0.05
    backoff_max: float = 5.0
    max_deliveries: int = 10  # the delivery that reaches this number reports an unknown outcome as failed
    redelivery_delay: float = 1.0  # NAK delay after the first delivery, doubling, capped at 30 s
    ack_wait: float = 30.0
    shutdown_grace: float = 30.0
    # refuse a CreatePods or CreateControllerRevision whose objects do not belong to its controller
    # (executor/ownership.py); off only in tests of applying that create pods for controllers that do not exist
    check_ownership: bool = True

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.api_workers < 1 or any(n < 1 for _, n in self.concurrent_syncs):
            raise ValueError("concurrency and api_workers must be at least 1")
        if self.max_deliveries < 1 or self.api_attempts < 1:
            raise ValueError("max_deliveries and api_attempts must be at least 1")
        if self.api_max_retries < 0:
            raise ValueError("api_max_retries must not be negative")
