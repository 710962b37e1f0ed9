"""Dialect-specific statements the repositories share: insert-or-ignore, upsert, and the count-only bulk insert."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from store import sqlite_driver

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


async def execute_driver(conn: AsyncConnection, operation: str, parameters: Any, *, many: bool = False
                         ) -> tuple[list[Any], int]:
    """`operation` in the driver's SQL, its parameters bound as the driver takes them (executemany with `many`), as
    `conn.exec_driver_sql` executes it: its rows and rowcount. On SQLite without SQLAlchemy's execution (its context,
    events, greenlet switch and result: ~80 µs of CPU a statement, the trip to aiosqlite's thread ~35), straight
    through the connection's one-trip cursor (store/sqlite_driver.py), in the same transaction, an error raised as
    SQLAlchemy raises it."""
    if conn.dialect.name == "sqlite" and conn.in_transaction():  # else SQLAlchemy's execution begins one
        driver = conn.sync_connection.connection.dbapi_connection  # type: ignore[union-attr]
        assert isinstance(driver, sqlite_driver.OneTripConnection), driver
        return await sqlite_driver.execute(driver, operation, parameters, many)
    result = await conn.exec_driver_sql(operation, parameters)
    return (list(result.all()) if result.returns_rows else []), result.rowcount


async def execute(conn: AsyncConnection, key: tuple[str, ...], build: Callable[[], Any],
                  values: dict[str, Any] | list[dict[str, Any]]) -> list[Any]:
    """`statement(conn, key, build)` executed with `values` (a list: executemany), its rows (tuples, or SQLAlchemy's
    Rows off the driver), each column's value as SQLAlchemy's execution reads it (its type's result processing).

    On SQLite, in a transaction, the statement is compiled once (per `key` and the values' names) to the driver's SQL
    and each parameter's bind processor, its values bound by those and run by `execute_driver`: the same SQL and
    bound values SQLAlchemy's execution sends, without its cache key, compiled cache, parameter dictionaries and
    execution (tests/store/test_sqlite_trips.py compares the rows written and read). A list parameter of an
    expanding IN (`bindparam(.., expanding=True)`; single `values` only) is compiled once per length of its list, as
    SQLAlchemy renders it: for lists of few lengths (a lease fence's partitions). Elsewhere SQLAlchemy's execution."""
    if conn.dialect.name != "sqlite" or not conn.in_transaction():
        result = await conn.execute(statement(conn, key, build), values)
        return list(result.all()) if result.returns_rows else []
    rows = values if isinstance(values, list) else [values]
    assert rows, "no values: the callers write nothing instead"
    names = tuple(rows[0])
    compiled = statement(conn, ("driver", *key, "", *names),
                         lambda: _driver_sql(conn.dialect, statement(conn, key, build), names))
    if compiled.expanding:
        assert not isinstance(values, list), "an expanding IN is bound per execution, not per executemany row"
        lengths = tuple(len(values[name]) for name in compiled.expanding)
        compiled = statement(conn, ("driver", *key, "", *names, "", *map(str, lengths)),
                             lambda: _expanded(compiled, conn.dialect, statement(conn, key, build), values))
        bound = [tuple(process(v) if process is not None else v for process, v in
                       zip(compiled.processors, (get(values) for get in compiled.getters), strict=True))]
    else:
        bound = [tuple(v if process is None else process(v) for process, v in
                       zip(compiled.processors, map(row.__getitem__, compiled.order), strict=True)) for row in rows]
    if not isinstance(values, list):
        got = (await execute_driver(conn, compiled.operation, bound[0]))[0]
    elif not compiled.returning:
        got = (await execute_driver(conn, compiled.operation, bound, many=True))[0]
    else:
        # sqlite3's executemany drops the rows a statement returns: as SQLAlchemy's "insertmanyvalues" sends one
        got = await _values_returning(conn, ("driver_values", *key, "", *names), compiled.operation,
                                      len(compiled.order), len(bound),
                                      lambda start, stop: tuple(v for row in bound[start:stop] for v in row))
    if compiled.results is None:
        return got
    return [tuple(v if process is None else process(v) for process, v in zip(compiled.results, row, strict=True))
            for row in got]


async def _values_returning(conn: AsyncConnection, key: tuple[str, ...], operation: str, width: int, count: int,
                            flat: Callable[[int, int], tuple[Any, ...]]) -> list[Any]:
    """An SQLite INSERT of one row (`operation`, `width` parameters) .. RETURNING, run for `count` rows as one
    multi-row INSERT .. VALUES (?, ..), (?, ..) .. per chunk of as many rows as SQLITE_MAX_VARIABLES holds; `flat`
    gives the values of rows [start, stop), row by row. The rows returned, in order."""
    head, group, tail = statement(conn, key, lambda: _values_group(operation))
    chunk = SQLITE_MAX_VARIABLES // width
    returned: list[Any] = []
    for start in range(0, count, chunk):
        stop = min(start + chunk, count)
        rows, _ = await execute_driver(conn, f"{head}{', '.join([group] * (stop - start))}{tail}", flat(start, stop))
        returned.extend(rows)
    return returned


@dataclasses.dataclass(frozen=True, slots=True)
class DriverSql:
    """A statement compiled for the driver (`execute`): its SQL, the names of its parameters in the order of their
    "?" and each one's bind processor (None: the value as it is), whether it returns rows, and each returned
    column's result processor (`results` None: every column as the driver reads it). `expanding`: the parameters
    that are lists of an expanding IN, compiled per length of their lists (`_expanded`), whose `getters` take
    each "?"'s value from the parameters."""

    operation: str
    order: tuple[str, ...]
    processors: tuple[Processor, ...]
    returning: bool
    results: tuple[Processor, ...] | None
    expanding: tuple[str, ...] = ()
    getters: tuple[Callable[[dict[str, Any]], Any], ...] = ()


def _driver_sql(dialect: sa.Dialect, stmt: Any, names: tuple[str, ...]) -> DriverSql:
    """`stmt` in `dialect` with values named `names` (an insert's columns) as `execute` runs it."""
    compiled = stmt.compile(dialect=dialect, column_keys=list(names) if stmt.is_insert else None)
    order = tuple(compiled.positiontup or ())
    assert set(order) <= set(names), (order, names)  # no default SQLAlchemy would fill in
    binds = [compiled.binds[name] for name in order]
    columns = list(stmt.selected_columns) if stmt.is_select else list(compiled.effective_returning or ())
    results = tuple(c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns)
    return DriverSql(compiled.string, order,
                     tuple(bind.type.dialect_impl(dialect).bind_processor(dialect) for bind in binds),
                     bool(compiled.effective_returning) or stmt.is_select,
                     None if all(process is None for process in results) else results,
                     tuple(bind.key for bind in binds if bind.expanding))


def _expanded(base: DriverSql, dialect: sa.Dialect, stmt: Any, values: dict[str, Any]) -> DriverSql:
    """`base` with its expanding IN lists rendered for the lengths of those in `values`, as SQLAlchemy renders them
    at its execution: one "?" an element, each bound by its list's processor."""
    compiled = stmt.compile(dialect=dialect)
    state = compiled.construct_expanded_state(values)
    element = {expanded: (name, i) for name, names in state.parameter_expansion.items()
               for i, expanded in enumerate(names)}
    processor = dict(zip(base.order, base.processors, strict=True))
    getters: list[Callable[[dict[str, Any]], Any]] = []
    processors: list[Processor] = []
    for name in state.positiontup or ():
        if name in element:
            listed, i = element[name]
            getters.append(lambda v, listed=listed, i=i: v[listed][i])  # type: ignore[misc]
            processors.append(processor[listed])
        else:
            getters.append(itemgetter(name))
            processors.append(processor[name])
    return dataclasses.replace(base, operation=state.statement, processors=tuple(processors), getters=tuple(getters))


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

    await execute(conn, ("upsert", table.name, *update), build, list(rows))


Processor = Callable[[Any], Any] | None  # a type's bind processor in a dialect; None: the driver takes the value


@dataclasses.dataclass(frozen=True, slots=True)
class Same:
    """A column's value in every row of an `insert_new` (bound once, not once a row)."""

    value: Any


def columns_of(table: sa.Table, rows: Sequence[Any], **same: Any) -> list[Sequence[Any] | Same]:
    """`insert_new`'s columns from row objects whose attributes are named as `table`'s columns: per column, in the
    table's order, every row's value of it, or `Same(value)` for a column given in `same`."""
    return [Same(same[c.name]) if c.name in same else list(map(attrgetter(c.name), rows)) for c in table.columns]


async def insert_new(conn: AsyncConnection, table: sa.Table, columns: Sequence[Sequence[Any] | Same]) -> int:
    """Insert the rows whose primary key is new (also within the batch: the first of a key wins); how many were.
    `columns`: per column of `table`, in the table's order, its values (all of the same length, at least the first
    column a sequence) or `Same(value)`.

    The same rows as `insert_or_ignore` writes, at less CPU a row for a caller that only counts them: the values
    are bound column by column, each column's values by its type's own bind processor in one pass (SQLAlchemy
    would build a parameter dictionary per row and run every processor per value), and sent as the driver takes
    them: on SQLite one executemany of tuples (sqlite3 sums the rows each execution changed: 0 for a row ON
    CONFLICT DO NOTHING skipped), on PostgreSQL one INSERT .. SELECT from unnest of one array per column (asyncpg
    encodes each array itself; the count is the INSERT's command tag, the rows inserted). No RETURNING: sqlite3's
    executemany drops the rows a statement returns (and counts none), and returning a row per row only to count
    them costs a row per row.
    """
    sql, processed = _prepared(conn, table, columns)
    if not processed[0]:
        return 0
    if conn.dialect.name == "postgresql":
        _, count = await execute_driver(conn, sql, tuple(processed))
    else:
        _, count = await execute_driver(conn, sql, list(zip(*processed, strict=True)), many=True)
    return count


def _sqlite_max_variables() -> int:
    """SQLite's limit on a statement's host parameters ("?"), SQLITE_MAX_VARIABLE_NUMBER, as the library this
    process links was built with (32766 by default since 3.32.0, 999 before; a distribution may build another):
    a multi-row VALUES of `insert_new_returning` holds at most this many values. Asked of a throwaway in-memory
    connection of the same library, at most 32766 (a longer statement gains nothing)."""
    probe = sqlite3.connect(":memory:")
    try:
        return min(probe.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER), 32766)
    finally:
        probe.close()


SQLITE_MAX_VARIABLES = _sqlite_max_variables()


async def insert_new_returning(conn: AsyncConnection, table: sa.Table, columns: Sequence[Sequence[Any] | Same],
                               returning: sa.Column[Any]) -> list[Any]:
    """`insert_new` for a caller that needs to know which rows were new: `returning` of each row inserted, in the
    rows' order (the first of a key; a key already stored or earlier in the batch is not returned), as
    `insert_or_ignore` returns them.

    Bound as `insert_new` binds them (column by column, one pass of each type's bind processor), but each
    statement returns its rows, so not as an executemany (sqlite3's drops them): on SQLite one multi-row
    INSERT .. VALUES (?, ..), (?, ..) .. RETURNING per chunk of as many rows as SQLITE_MAX_VARIABLES holds, on
    PostgreSQL `insert_new`'s INSERT .. SELECT FROM unnest(..) with RETURNING, one statement.
    """
    sql, processed = _prepared(conn, table, columns, returning)
    count = len(processed[0])
    if not count:
        return []
    if conn.dialect.name == "postgresql":
        return [key for key, in (await execute_driver(conn, sql, tuple(processed)))[0]]
    # SQLite: `sql` is the statement of one row; its values column by column, flattened row by row for each chunk
    width = len(processed)

    def flat(start: int, stop: int) -> tuple[Any, ...]:
        values: list[Any] = [None] * ((stop - start) * width)
        for i, column in enumerate(processed):
            values[i::width] = column[start:stop]
        return tuple(values)

    rows = await _values_returning(conn, ("insert_new_values", table.name, returning.name), sql, width, count, flat)
    return [key for key, in rows]


def _values_group(sql: str) -> tuple[str, str, str]:
    """An SQLite INSERT of one row as (what precedes its VALUES group, the group "(?, ?, ..)", what follows)."""
    head, values, rest = sql.partition(" VALUES ")
    group, close, tail = rest.partition(")")
    assert values and close and set(group[1:].split(", ")) == {"?"}, sql
    return head + values, group + close, tail


def _prepared(conn: AsyncConnection, table: sa.Table, columns: Sequence[Sequence[Any] | Same],
              returning: sa.Column[Any] | None = None) -> tuple[str, list[Sequence[Any]]]:
    """The statement of `insert_new` (RETURNING `returning` if given) in the connection's dialect, built once, and
    every column's values bound (none when the first column is empty)."""
    assert not isinstance(columns[0], Same)
    count = len(columns[0])
    key = ("insert_new", table.name) if returning is None else ("insert_new", table.name, returning.name)
    sql, processors = statement(conn, key, lambda: _insert_new(conn.dialect, table, returning))
    if not count:
        return sql, [[]]
    return sql, [_bound(process, values, count) for process, values in zip(processors, columns, strict=True)]


def _bound(process: Processor, values: Sequence[Any] | Same, count: int) -> Sequence[Any]:
    """A column's values as the driver takes them: each through its type's bind processor (`process`, None for
    a type the driver takes as it is), a `Same` value once."""
    if isinstance(values, Same):
        return [values.value if process is None else process(values.value)] * count
    return values if process is None else list(map(process, values))


def _insert_new(dialect: sa.Dialect, table: sa.Table,
                returning: sa.Column[Any] | None = None) -> tuple[str, list[Processor]]:
    """`insert_new`'s SQL in `dialect` (of one row on SQLite), RETURNING `returning` if given, and the bind
    processor of each column (None: the value as it is)."""
    names = [c.name for c in table.columns]
    processors: list[Processor] = [c.type.dialect_impl(dialect).bind_processor(dialect) for c in table.columns]
    if dialect.name == "postgresql":
        # $n::<type>[]: the column's type as the schema compiles it in PostgreSQL (BIGINT, JSONB, TIMESTAMP WITH
        # TIME ZONE, ...); unnest of several arrays yields their rows side by side, in order
        quote = dialect.identifier_preparer
        arrays = ", ".join(f"${i}::{c.type.compile(dialect)}[]" for i, c in enumerate(table.columns, 1))
        sql = (f"INSERT INTO {quote.format_table(table)} ({', '.join(quote.quote(n) for n in names)}) "
               f"SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING")
        if returning is not None:
            sql += f" RETURNING {quote.quote(returning.name)}"
        return sql, processors
    if dialect.name != "sqlite":
        raise NotImplementedError(f"kubus's store supports SQLite and PostgreSQL, not {dialect.name}")
    stmt = sqlite.insert(table).on_conflict_do_nothing()
    compiled = (stmt if returning is None else stmt.returning(returning)).compile(dialect=dialect, column_keys=names)
    assert list(compiled.positiontup or []) == names, compiled.positiontup  # "?" in the columns' order
    return compiled.string, processors
