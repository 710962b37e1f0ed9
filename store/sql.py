"""Dialect-specific statements the repositories share: insert-or-ignore and upsert."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

Insert = sqlite.Insert | postgresql.Insert


_FIELDS: dict[type[Any], tuple[str, ...]] = {}


def values_of(row: Any) -> dict[str, Any]:
    """A row dataclass as column values: dataclasses.asdict without its deep copies (the values are
    immutable: str, int, datetime, frozenset), which cost more than the insert itself."""
    names = _FIELDS.get(type(row))
    if names is None:
        names = _FIELDS[type(row)] = tuple(f.name for f in dataclasses.fields(row))
    return {name: getattr(row, name) for name in names}


# Statements built once per dialect and reused (they are immutable): building one, with its ON CONFLICT clause and
# the `excluded` pseudo-table's columns, and generating its cache key cost more than executing it. Keyed by names
# (a Column's == builds an expression, so columns are no dictionary keys).
_STATEMENTS: dict[tuple[str, ...], Any] = {}


def statement(conn: AsyncConnection, key: tuple[str, ...], build: Callable[[], Any]) -> Any:
    """The statement `build()` makes, built once per dialect of `conn` and `key` (which must name all `build` uses
    besides the dialect)."""
    full = (conn.dialect.name, *key)
    stmt = _STATEMENTS.get(full)
    if stmt is None:
        stmt = _STATEMENTS[full] = build()
    return stmt


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
    stmt = statement(conn, ("insert_or_ignore", table.name, returning.name),
                     lambda: insert(conn, table).on_conflict_do_nothing().returning(returning))
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

    def build() -> Insert:
        stmt = insert(conn, table)
        return stmt.on_conflict_do_update(index_elements=keys, set_={c: stmt.excluded[c] for c in update})

    await conn.execute(statement(conn, ("upsert", table.name, *update), build), list(rows))
