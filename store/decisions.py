"""Decisions: one row per controller sync, with the event sequence it saw and what it decided and why."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from reconciler.core.batch import Sync
from store import sql
from store.tables import decisions as t


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    correlation_id: str  # unique; also carried by the actions and results the decision produced
    controller_key: str  # "Kind/namespace/name" of the DaemonSet or ReplicaSet, e.g. "ReplicaSet/default/web"
    controller_kind: str
    partition: int
    stream_seq: int  # the sequence of the event the sync saw last
    trigger: str | None  # the Nats-Msg-Id of the event that triggered the sync, if one did
    decided_at: datetime
    duration_ms: float
    summary: dict[str, Any] = field(default_factory=dict)
    lease_epoch: int | None = None
    id: int | None = None  # assigned by the database


async def insert(conn: AsyncConnection, rows: Sequence[Decision]) -> list[int]:
    """Insert the decisions in one statement; their ids, in the order given.

    A duplicate correlation_id raises IntegrityError: consumer positions prevent a replay from
    deciding twice, so a duplicate is a bug to surface, not a case to absorb.
    """
    if not rows:
        return []
    values = [{k: v for k, v in sql.values_of(d).items() if k != "id"} for d in rows]
    # Matched back by correlation_id rather than RETURNING order: SQLite cannot promise the order
    # of a multi-row insert, and SQLAlchemy would fall back to one statement per row there.
    ids = {cid: int(i) for cid, i in await sql.execute(
        conn, ("decisions",), lambda: sql.insert(conn, t).returning(t.c.correlation_id, t.c.id), values)}
    return [ids[d.correlation_id] for d in rows]


async def for_controller(conn: AsyncConnection, controller_key: str, limit: int = 100) -> list[Decision]:
    """The controller's latest decisions, newest first."""
    stmt = (sa.select(t).where(t.c.controller_key == controller_key)
            .order_by(t.c.decided_at.desc(), t.c.id.desc()).limit(limit))
    return [Decision(**r._asdict()) for r in await conn.execute(stmt)]


def row_of(sync: Sync, at: datetime) -> Decision:
    """The row of a decision the reconciler commits at `at` (its id assigned on insert)."""
    d = sync.decided
    return Decision(correlation_id=d.correlation_id, controller_key=d.controller_key,
                    controller_kind=d.controller_kind, partition=sync.partition, stream_seq=d.stream_seq,
                    trigger=d.trigger, decided_at=at, duration_ms=d.duration_ms, summary=d.summary,
                    lease_epoch=sync.lease_epoch)
