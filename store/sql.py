"""Dialect-specific statements the repositories share: insert-or-ignore and upsert."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

Insert = sqlite.Insert | postgresql.Insert


def values_of(row: Any) -> dict[str, Any]:
    """A row dataclass as column values: dataclasses.asdict without its deep copies (the values are
    immutable: str, int, datetime, frozenset), which cost more than the insert itself."""
    return {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}


def insert(conn: AsyncConnection, table: sa.Table) -> Insert:
    """An INSERT that knows ON CONFLICT, in the connection's dialect (both spell it the same)."""
    name = conn.dialect.name
    if name == "postgresql":
        return postgresql.insert(table)
    if name == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"kubus's store supports SQLite and PostgreSQL, not {name}")


async def insert_or_ignore(conn: AsyncConnection, table: sa.Table, rows: Sequence[dict[str, Any]],
                           returning: sa.Column[Any]) -> list[Any]:
    """Insert the rows whose primary key is new; return `returning` of the ones inserted.

    Executed as one statement per batch: SQLAlchemy's "insertmanyvalues" folds an executemany
    with RETURNING into multi-row VALUES on both SQLite and asyncpg.
    """
    if not rows:
        return []
    stmt = insert(conn, table).on_conflict_do_nothing().returning(returning)
    result = await conn.execute(stmt, list(rows))
    return list(result.scalars())


async def upsert(conn: AsyncConnection, table: sa.Table, rows: Sequence[dict[str, Any]],
                 update: Sequence[str]) -> None:
    """Insert the rows, or overwrite the `update` columns of those whose primary key exists."""
    if not rows:
        return
    keys = [c.name for c in table.primary_key.columns]
    # PostgreSQL refuses to update one row twice in a statement: the last value for a key wins.
    rows = list({tuple(r[k] for k in keys): r for r in rows}.values())
    stmt = insert(conn, table)
    stmt = stmt.on_conflict_do_update(index_elements=keys, set_={c: stmt.excluded[c] for c in update})
    await conn.execute(stmt, list(rows))
