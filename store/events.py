"""Observed events: the ingested watch events a reconciler consumed, kept for the audit trail."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from kube.times import parse_time
from messages.observed import ObservedEvent
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


async def record(conn: AsyncConnection, rows: Iterable[ObservedEventRow], *, at: datetime) -> int:
    """Record the events not recorded yet (by stream_seq); how many were new."""
    values = [{**sql.values_of(e), "recorded_at": at} for e in rows]
    return len(await sql.insert_or_ignore(conn, t, values, returning=t.c.stream_seq))


def row_of(event: ObservedEvent, seq: int) -> ObservedEventRow:
    """The row of an event the reconciler consumed at `seq`."""
    return ObservedEventRow(stream_seq=seq, msg_id=event.msg_id, kind=event.kind, event_type=event.type,
                            namespace=event.namespace, name=event.name, uid=event.uid,
                            resource_version=event.resource_version,
                            observed_at=parse_time(event.observed_at))
