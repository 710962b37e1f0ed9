"""Observed events: the ingested watch events a reconciler consumed, kept for the audit trail."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

import msgspec
from sqlalchemy.ext.asyncio import AsyncConnection

from kube import codec
from kube.apps import ControllerRevision, DaemonSet, ReplicaSet
from kube.core import Pod
from kube.times import parse_time
from messages.observed import QUARANTINED, ObservedEvent
from reconciler.core.audit_facts import NONE, Facts, object_facts
from store import sql
from store.tables import observed_events as t


class ObservedEventRow(msgspec.Struct, frozen=True, kw_only=True):
    """A row of observed_events, all but recorded_at. A msgspec Struct, not a frozen dataclass: the reconciler builds
    one per event it consumes, and a frozen dataclass's __init__ (a object.__setattr__ per field) cost ~1.5 µs of
    the ~4 µs its row took to build; a Struct's ~0.1 µs (bench/observed_rows_bench.py)."""

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
    # column by column (sql.insert_new): a list per column costs less than a dict per row
    return await sql.insert_new(conn, t, sql.columns_of(t, list(rows), recorded_at=at))


def row_of(event: ObservedEvent, seq: int, obj: Any = None) -> ObservedEventRow:
    """The row of an event the reconciler consumed at `seq`; `obj`: its object as the reconciler's cache decoded
    it (for a deletion, the last state it held), else the event's is decoded here."""
    owner, facts = object_facts(obj) if obj is not None else facts_of(event)
    return ObservedEventRow(stream_seq=seq, msg_id=event.msg_id, kind=event.kind, event_type=event.type,
                            namespace=event.namespace, name=event.name, uid=event.uid,
                            resource_version=event.resource_version,
                            observed_at=parse_time(event.observed_at), owner=owner, facts=facts)


_MODELS: Final[dict[str, type[Any]]] = {"Pod": Pod, "DaemonSet": DaemonSet, "ReplicaSet": ReplicaSet,
                                         "ControllerRevision": ControllerRevision}


def facts_of(event: ObservedEvent) -> Facts:
    """What the audit trail keeps of the event's object for `kubus audit timeline` (reconciler.core.audit_facts):
    NONE for other kinds, and for an object that does not decode (the controllers never saw it either)."""
    model = _MODELS.get(event.kind)
    if event.type == QUARANTINED or model is None:
        return NONE
    try:
        return object_facts(codec.decode(event.object, model))
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        return NONE
