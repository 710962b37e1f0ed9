"""Observed events: the ingested watch events a reconciler consumed, kept for the audit trail."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from store import sql
from store.tables import observed_events as t


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservedEvent:
    stream_seq: int
    msg_id: str
    kind: str
    event_type: str  # ADDED, MODIFIED, DELETED or a synthetic type
    namespace: str  # "" for cluster-scoped objects
    name: str
    uid: str
    resource_version: str
    observed_at: datetime


async def record(conn: AsyncConnection, rows: Iterable[ObservedEvent], *, at: datetime) -> int:
    """Record the events not recorded yet (by stream_seq); how many were new."""
    values = [{**sql.values_of(e), "recorded_at": at} for e in rows]
    return len(await sql.insert_or_ignore(conn, t, values, returning=t.c.stream_seq))
