"""Controller expectations: upstream's ControllerExpectations with UID-tracking of deletions.

A reconciler that created or deleted pods must not act on the same controller again until the
watch shows those effects; persisting the counts makes that hold across a restart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from reconciler.core import expectations as core
from store import sql
from store.tables import expectations as t


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpectationsRow:
    controller_key: str
    adds: int
    dels: int
    deletion_keys: frozenset[str]  # "namespace/name" of pods whose deletion is expected
    set_at: datetime


async def save(conn: AsyncConnection, rows: Iterable[ExpectationsRow]) -> None:
    values = [
        {"controller_key": e.controller_key, "adds": e.adds, "dels": e.dels,
         # sorted, so the stored JSON is deterministic and diffs of the audit trail are stable
         "deletion_keys": sorted(e.deletion_keys), "set_at": e.set_at}
        for e in rows
    ]
    await sql.upsert(conn, t, values, update=["adds", "dels", "deletion_keys", "set_at"])


async def delete(conn: AsyncConnection, keys: Iterable[str]) -> None:
    keys = list(keys)
    if keys:
        await conn.execute(sa.delete(t).where(t.c.controller_key.in_(keys)))


async def load(conn: AsyncConnection, keys: Iterable[str]) -> dict[str, ExpectationsRow]:
    keys = list(keys)
    if not keys:
        return {}
    rows = await conn.execute(sa.select(t).where(t.c.controller_key.in_(keys)))
    return {
        r.controller_key: ExpectationsRow(controller_key=r.controller_key, adds=r.adds, dels=r.dels,
                                          deletion_keys=frozenset(r.deletion_keys), set_at=r.set_at)
        for r in rows
    }


async def load_all(conn: AsyncConnection) -> dict[str, ExpectationsRow]:
    """Every controller's expectations: what a starting reconciler holds in memory."""
    rows = await conn.execute(sa.select(t))
    return {
        r.controller_key: ExpectationsRow(controller_key=r.controller_key, adds=r.adds, dels=r.dels,
                                          deletion_keys=frozenset(r.deletion_keys), set_at=r.set_at)
        for r in rows
    }


def row_of(key: str, value: core.Expectations) -> ExpectationsRow:
    """The row of a controller's expectations (the reconciler's commit always sets set_at)."""
    assert value.set_at is not None, key
    return ExpectationsRow(controller_key=key, adds=value.adds, dels=value.dels,
                           deletion_keys=frozenset(value.deletion_keys), set_at=value.set_at)


def value_of(row: ExpectationsRow) -> core.Expectations:
    return core.Expectations(row.adds, row.dels, frozenset(row.deletion_keys), row.set_at)
