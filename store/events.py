"""Observed events: the ingested watch events a reconciler consumed, kept for the audit trail."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import msgspec
from sqlalchemy.ext.asyncio import AsyncConnection

from kube import codec
from kube.apps import ControllerRevision, DaemonSet, ReplicaSet
from kube.core import Pod
from kube.meta import ObjectMeta
from kube.nodeaffinity import get_target_node_name
from kube.ownership import get_controller_of
from kube.pods import ready_since
from kube.times import parse_time
from messages.observed import QUARANTINED, ObservedEvent
from store import sql
from store.tables import observed_events as t


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservedEventRow:
    stream_seq: int
    msg_id: str
    kind: str
    event_type: str  # ADDED, MODIFIED, DELETED or a synthetic type
    namespace: str  # "" for cluster-scoped objects
    name: str
    uid: str
    resource_version: str
    observed_at: datetime
    owner: str | None = None  # the object's controller, "Kind/name" in its namespace (facts_of)
    facts: dict[str, Any] | None = None  # what `kubus audit timeline` reads of it (facts_of)


async def record(conn: AsyncConnection, rows: Iterable[ObservedEventRow], *, at: datetime) -> int:
    """Record the events not recorded yet (by stream_seq); how many were new."""
    values = [{**sql.values_of(e), "recorded_at": at} for e in rows]
    return len(await sql.insert_or_ignore(conn, t, values, returning=t.c.stream_seq))


def row_of(event: ObservedEvent, seq: int) -> ObservedEventRow:
    """The row of an event the reconciler consumed at `seq`."""
    owner, facts = facts_of(event)
    return ObservedEventRow(stream_seq=seq, msg_id=event.msg_id, kind=event.kind, event_type=event.type,
                            namespace=event.namespace, name=event.name, uid=event.uid,
                            resource_version=event.resource_version,
                            observed_at=parse_time(event.observed_at), owner=owner, facts=facts)


DAEMONSET_HASH_LABEL: Final = "controller-revision-hash"  # apps.DefaultDaemonSetUniqueLabelKey
TEMPLATE_HASH_LABEL: Final = "pod-template-hash"  # a Deployment's ReplicaSets' pods


def _owner(meta: ObjectMeta) -> str | None:
    ref = get_controller_of(meta)
    return f"{ref.kind}/{ref.name}" if ref is not None and ref.kind and ref.name else None


def facts_of(event: ObservedEvent) -> tuple[str | None, dict[str, Any] | None]:
    """What the audit trail keeps of the event's object for `kubus audit timeline` (docs/audit.md): its controller
    ("Kind/name", None without one) and, by kind,

        Pod                 node (spec.nodeName, else the node its affinity pins it to), revision (its
                            controller-revision-hash or pod-template-hash label), ready_since (the Ready condition's
                            lastTransitionTime while Ready, else None), deleting (deletionTimestamp is set)
        DaemonSet, ReplicaSet   generation, min_ready_seconds
        ControllerRevision  revision (its number), hash (its controller-revision-hash label)

    (None, None) for other kinds, and for an object that does not decode (the controllers never saw it either)."""
    if event.type == QUARANTINED:
        return None, None
    try:
        if event.kind == "Pod":
            pod = codec.decode(event.object, Pod)
            labels = pod.metadata.labels
            since = ready_since(pod)
            return _owner(pod.metadata), {
                "node": get_target_node_name(pod),
                "revision": labels.get(DAEMONSET_HASH_LABEL) or labels.get(TEMPLATE_HASH_LABEL),
                "ready_since": None if since is None else since.isoformat().replace("+00:00", "Z"),
                "deleting": pod.metadata.deletion_timestamp is not None}
        if event.kind in ("DaemonSet", "ReplicaSet"):
            controller: DaemonSet | ReplicaSet = (codec.decode(event.object, DaemonSet) if event.kind == "DaemonSet"
                                                   else codec.decode(event.object, ReplicaSet))
            return _owner(controller.metadata), {"generation": controller.metadata.generation,
                                                 "min_ready_seconds": controller.spec.min_ready_seconds}
        if event.kind == "ControllerRevision":
            revision = codec.decode(event.object, ControllerRevision)
            return _owner(revision.metadata), {"revision": revision.revision,
                                               "hash": revision.metadata.labels.get(DAEMONSET_HASH_LABEL)}
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        return None, None
    return None, None
