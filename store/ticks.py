"""The reconciler's input log in SQL (see migration 0002): the ticks of reconciler/core/ticks.py, one row each.

A replay walks these rows in order and gives the controllers the same events, the same executor
results and the same clock, which is what makes its decisions comparable with the recorded ones
(`kubus replay`, docs/replay.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from reconciler.core.ticks import BATCH, START, Tick, state_of
from store import sql
from store.tables import reconciler_ticks as t

__all__ = ["BATCH", "START", "Outline", "Tick", "load", "outline", "record", "state_of"]


# built once, the tick's values given as its parameters: built with them in place (each coerced into a bound
# parameter of its column, the statement's cache key generated anew) it cost more than its execution, for every
# batch. The same SQL and bound values (tests/store/test_prebuilt_statements.py)
INSERT = sa.insert(t).returning(t.c.id)


async def record(conn: AsyncConnection, tick: Tick) -> int:
    values = {k: v for k, v in sql.values_of(tick).items() if k != "id"}
    [(tick_id,)] = await sql.execute(conn, ("tick",), lambda: INSERT, values)
    return int(tick_id)


async def load(conn: AsyncConnection, instance: str | None = None, *, after_id: int = 0,
               until_id: int | None = None, limit: int | None = None) -> Sequence[Tick]:
    """Ticks in commit order (all instances, or one), from after `after_id` (to `until_id`, included)."""
    stmt = sa.select(t).where(t.c.id > after_id).order_by(t.c.id)
    if instance is not None:
        stmt = stmt.where(t.c.instance == instance)
    if until_id is not None:
        stmt = stmt.where(t.c.id <= until_id)
    if limit is not None:
        stmt = stmt.limit(limit)
    rows = (await conn.execute(stmt)).mappings().all()
    return [Tick(**{k: v for k, v in row.items()}) for row in rows]


@dataclass(frozen=True, slots=True)
class Outline:
    """A tick without its payload: enough to choose which ticks a replay takes."""

    id: int
    instance: str
    kind: str
    at: datetime
    first_seq: int | None
    last_seq: int | None
    has_state: bool  # a start tick that recorded what it loaded


async def outline(conn: AsyncConnection) -> list[Outline]:
    """Every tick's outline, in commit order."""
    starts = {int(i): s is not None for i, s in await conn.execute(
        sa.select(t.c.id, t.c.state).where(t.c.kind == START))}
    stmt = sa.select(t.c.id, t.c.instance, t.c.kind, t.c.at, t.c.first_seq, t.c.last_seq).order_by(t.c.id)
    return [Outline(int(i), str(n), str(k), a, f, s, starts.get(int(i), False))
            for i, n, k, a, f, s in await conn.execute(stmt)]
