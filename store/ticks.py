"""The reconciler's input log: what each committed batch fed the controllers (see migration 0002).

A replay walks these rows in order and gives the controllers the same events, the same executor
results and the same clock, which is what makes its decisions comparable with the recorded ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import sql
from store.tables import reconciler_ticks as t

START = "start"
BATCH = "batch"


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    instance: str
    kind: str  # START | BATCH
    at: datetime
    caught_up: bool
    first_seq: int | None = None
    last_seq: int | None = None
    partitions: list[int] | None = None  # None: every partition
    result_keys: list[str] = field(default_factory=list)
    lease_epoch: int | None = None
    id: int | None = None


async def record(conn: AsyncConnection, tick: Tick) -> int:
    values = {k: v for k, v in sql.values_of(tick).items() if k != "id"}
    (tick_id,) = (await conn.execute(sa.insert(t).values(values).returning(t.c.id))).one()
    return int(tick_id)


async def load(conn: AsyncConnection, instance: str | None = None, *, after_id: int = 0,
               limit: int | None = None) -> Sequence[Tick]:
    """Ticks in commit order (all instances, or one), from after `after_id`."""
    stmt = sa.select(t).where(t.c.id > after_id).order_by(t.c.id)
    if instance is not None:
        stmt = stmt.where(t.c.instance == instance)
    if limit is not None:
        stmt = stmt.limit(limit)
    rows = (await conn.execute(stmt)).mappings().all()
    return [Tick(**{k: v for k, v in row.items()}) for row in rows]
