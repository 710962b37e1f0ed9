"""Failed-pod backoff of the DaemonSet controller (upstream's flowcontrol.Backoff), per
"<ds-uid>/<generation>/<node>" key, so a restart does not reset the delays of crash-looping pods."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from reconciler.core.daemonset.backoff import FailedPodBackoff
from store import sql
from store.tables import pod_backoff as t


@dataclass(frozen=True, slots=True, kw_only=True)
class BackoffRow:
    key: str
    delay_seconds: float
    last_update: datetime


async def load(conn: AsyncConnection, keys: Iterable[str]) -> dict[str, BackoffRow]:
    keys = list(keys)
    if not keys:
        return {}
    rows = await conn.execute(sa.select(t).where(t.c.key.in_(keys)))
    return {r.key: BackoffRow(key=r.key, delay_seconds=r.delay_seconds, last_update=r.last_update) for r in rows}


async def save(conn: AsyncConnection, entries: Iterable[BackoffRow]) -> None:
    rows = [{"key": b.key, "delay_seconds": b.delay_seconds, "last_update": b.last_update} for b in entries]
    await sql.upsert(conn, t, rows, update=["delay_seconds", "last_update"])


async def delete(conn: AsyncConnection, keys: Iterable[str]) -> None:
    keys = list(keys)
    if keys:
        await conn.execute(sa.delete(t).where(t.c.key.in_(keys)))


async def gc(conn: AsyncConnection, updated_before: datetime) -> int:
    """Drop entries not updated since `updated_before` (upstream: older than 2 x the max delay)."""
    result = await conn.execute(sa.delete(t).where(t.c.last_update < updated_before))
    return int(result.rowcount)


async def load_all(conn: AsyncConnection) -> dict[str, BackoffRow]:
    """Every entry: what a starting reconciler holds in memory."""
    rows = await conn.execute(sa.select(t))
    return {r.key: BackoffRow(key=r.key, delay_seconds=r.delay_seconds, last_update=r.last_update) for r in rows}


def row_of(entry: FailedPodBackoff) -> BackoffRow:
    return BackoffRow(key=entry.key, delay_seconds=entry.delay_seconds, last_update=entry.last_update)


def value_of(row: BackoffRow) -> FailedPodBackoff:
    return FailedPodBackoff(key=row.key, delay_seconds=row.delay_seconds, last_update=row.last_update)
