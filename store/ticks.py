"""The reconciler's input log: what each committed batch fed the controllers (see migration 0002).

A replay walks these rows in order and gives the controllers the same events, the same executor
results and the same clock, which is what makes its decisions comparable with the recorded ones
(`kubus replay`, docs/replay.md).

Two kinds of row, per reconciler instance:

- ``start``: a process started. ``first_seq`` is where its replay of KUBUS_EVENTS began, ``last_seq``
  the newest event its cache was bootstrapped with from KUBUS_STATE, and ``state`` what it loaded from
  the store: ``{"positions": {partition: seq}, "expectations": {key: {...}}, "backoff": {key: {...}}}``
  (see :func:`state_of`). Recorded with the instance's first commit.
- ``batch``: one committed batch. ``at`` is the clock given to the controllers, ``caught_up`` the loop's
  flag as the batch began, ``first_seq``/``last_seq`` the stream range of its messages (all partitions,
  skipped ones included), ``results`` the executor results fed to the controllers (``result_keys``
  their keys), in order, and ``decision_ids`` the decisions committed with it, in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

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
    results: list[dict[str, Any]] = field(default_factory=list)  # messages.actions.ActionResult as builtins
    decision_ids: list[int] = field(default_factory=list)
    state: dict[str, Any] | None = None  # START only: see state_of
    lease_epoch: int | None = None
    id: int | None = None


def state_of(positions: Mapping[int, int], expectations: Mapping[str, Any], backoff: Mapping[str, Any]
             ) -> dict[str, Any]:
    """A start tick's ``state``: the store's positions, expectations and backoff rows as JSON.

    ``expectations`` values have adds, dels, deletion_keys and set_at (store.expectations.Expectations or
    reconciler.core.expectations.Expectations); ``backoff`` values delay_seconds and last_update."""
    return {
        "positions": {str(p): int(s) for p, s in sorted(positions.items())},
        "expectations": {k: {"adds": e.adds, "dels": e.dels, "deletion_keys": sorted(e.deletion_keys),
                             "set_at": None if e.set_at is None else e.set_at.isoformat()}
                         for k, e in sorted(expectations.items())},
        "backoff": {k: {"delay_seconds": b.delay_seconds, "last_update": b.last_update.isoformat()}
                    for k, b in sorted(backoff.items())},
    }


async def record(conn: AsyncConnection, tick: Tick) -> int:
    values = {k: v for k, v in sql.values_of(tick).items() if k != "id"}
    (tick_id,) = (await conn.execute(sa.insert(t).values(values).returning(t.c.id))).one()
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
