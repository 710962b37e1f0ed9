"""Action results as executors report them: one row per result key, a redelivery is ignored."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import sql
from store.tables import action_results as t


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultRow:
    key: str  # the result's own idempotency key (its Nats-Msg-Id)
    action_key: str  # the outbox key of the action it answers
    decision_id: int | None
    action: str  # e.g. CreatePod, DeletePod, UpdateStatus
    outcome: str  # e.g. succeeded, failed, skipped
    code: int | None  # the API's HTTP status, when there was a response
    reason: str  # the API Status reason, "" when none
    message: str
    object_uid: str | None  # the uid of the object created or acted on
    executor: str  # the executor instance that applied it
    attempts: int
    finished_at: datetime
    recorded_at: datetime | None = None  # set by the store
    subject: str | None = None  # "namespace/name" of the object the effect was on, as the executor names it
    resource_version: str | None = None  # the object's resourceVersion in the API's answer


async def record(conn: AsyncConnection, rows: Iterable[ResultRow], *, at: datetime) -> list[str]:
    """Record the results not recorded yet; the keys of those that were new."""
    # column by column (sql.insert_new_returning): a list per column costs less than a dict per row
    return await sql.insert_new_returning(conn, t, sql.columns_of(t, list(rows), recorded_at=at), returning=t.c.key)


async def for_decision(conn: AsyncConnection, decision_id: int) -> list[ResultRow]:
    stmt = sa.select(t).where(t.c.decision_id == decision_id).order_by(t.c.finished_at, t.c.key)
    return [ResultRow(**r._asdict()) for r in await conn.execute(stmt)]
