"""JetStream streams and subjects, and how objects map to partitions.

Every namespace belongs to one of a fixed number of partitions (chosen when the streams are
created and recorded in the stream's metadata), so a reconciler that owns a partition sees every
object of its namespaces; cluster-scoped objects (nodes) go to the `cluster` partition, which
every reconciler reads.

    kubus.events.<partition>.<kind>.<uid>     the full history            stream KUBUS_EVENTS
    kubus.state.<partition>.<kind>.<uid>      the last event per object   stream KUBUS_STATE
    kubus.actions.<partition>                 commands for executors      stream KUBUS_ACTIONS
    kubus.results.<partition>                 what the executors did      stream KUBUS_RESULTS
    kubus.dead.<origin>                       messages nobody could use   stream KUBUS_DEAD
    kubus.cluster                             whose cluster the streams are (kube-system's uid)  stream KUBUS_STATE

KUBUS_STATE is sourced from KUBUS_EVENTS by the server with a subject transform and keeps one
message per subject, so it is the compacted current state a reconciler bootstraps from.
"""

from __future__ import annotations

import zlib
from typing import Final

PREFIX: Final = "kubus"
DEFAULT_PARTITIONS: Final = 16
CLUSTER: Final = "cluster"

EVENTS_STREAM: Final = "KUBUS_EVENTS"
STATE_STREAM: Final = "KUBUS_STATE"
ACTIONS_STREAM: Final = "KUBUS_ACTIONS"
RESULTS_STREAM: Final = "KUBUS_RESULTS"
DEAD_STREAM: Final = "KUBUS_DEAD"

KINDS: Final = ("Node", "Pod", "DaemonSet", "ReplicaSet", "ControllerRevision")


def partition_of(namespace: str, partitions: int) -> str:
    """The partition of a namespace: a stable hash, so every process agrees without coordination."""
    if not namespace:
        return CLUSTER
    return str(zlib.crc32(namespace.encode()) % partitions)


def event_subject(partition: str, kind: str, uid: str, prefix: str = PREFIX) -> str:
    return f"{prefix}.events.{partition}.{kind}.{uid}"


def events_filter(partition: str, prefix: str = PREFIX) -> str:
    return f"{prefix}.events.{partition}.>"


def cluster_subject(prefix: str = PREFIX) -> str:
    """Where ingest records the cluster the streams belong to: a subject of KUBUS_STATE's own, outside
    `<prefix>.state.>`, so no reader of the objects' states meets it."""
    return f"{prefix}.cluster"


def action_subject(partition: str, prefix: str = PREFIX) -> str:
    return f"{prefix}.actions.{partition}"


def result_subject(partition: str, prefix: str = PREFIX) -> str:
    return f"{prefix}.results.{partition}"


def dead_subject(origin: str, prefix: str = PREFIX) -> str:
    return f"{prefix}.dead.{origin}"


def stream_name(base: str, prefix: str = PREFIX) -> str:
    """Stream names carry the prefix when it is not the default, so test runs never collide."""
    return base if prefix == PREFIX else f"{base}_{prefix.upper().replace('-', '_')}"
