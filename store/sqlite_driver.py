"""SQLAlchemy's aiosqlite adapter, with one trip to the database thread per statement instead of three or four.

aiosqlite runs sqlite3 on a thread of its own; every call is a trip there and back (a queue put, the thread woken,
`call_soon_threadsafe` to wake the event loop): about 100 - 200 µs of CPU on a small VM, more than most of the
statements themselves. SQLAlchemy's adapter (sqlalchemy.connectors.asyncio.AsyncAdapt_dbapi_cursor) makes a trip to
create the cursor, one to execute, one to fetch the rows and one to close it. The cursor here does all four in one
function run on aiosqlite's thread (cursor, execute or executemany, fetchall when the statement returns rows,
close), and keeps what SQLAlchemy reads afterwards (description, rowcount, lastrowid, the rows). A commit or a
rollback with no transaction open (the pool resets every connection it takes back, after its commit) makes no trip:
sqlite3 would do nothing with it. A transaction's BEGIN (`begin_with_next_statement`, engine.py's "begin" listener)
makes no trip of its own either: it is run on the thread just before the transaction's first statement, in that
statement's trip, as SQLAlchemy would have run it just before (nothing reaches the database in between); a
transaction with no statement begins nothing, as sqlite3's commit and rollback then have nothing to end.

The same SQL, the same parameters and the same sqlite3 connection: what is written and read is unchanged, as are
the errors (raised on the thread, translated by the adapter as before). Server-side cursors (stream results) keep
SQLAlchemy's own cursor.
"""

from __future__ import annotations

import collections
import sqlite3
from collections.abc import Sequence
from typing import Any

import aiosqlite
from sqlalchemy import exc
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util import EMPTY_DICT
from sqlalchemy.util.concurrency import await_

Done = tuple[Any, int, int | None, list[Any]]


class _Trip:
    """One trip's progress on aiosqlite's thread, read from the event loop. A trip whose caller was cancelled is still
    queued or running there: its BEGIN and statement run after the caller has gone, so the connection's transaction
    state can only be judged once it has finished (OneTripConnection._idle)."""

    __slots__ = ("finished",)

    def __init__(self) -> None:
        self.finished = False


def _run(trip: _Trip, conn: sqlite3.Connection, begin: str | None, operation: str, parameters: Any,
         many: bool) -> Done:
    """On aiosqlite's thread: the transaction's BEGIN statement first if `begin` is one, then the statement, from a
    cursor of its own to its rows."""
    try:
        return _statement(conn, begin, operation, parameters, many)
    finally:
        trip.finished = True


def _statement(conn: sqlite3.Connection, begin: str | None, operation: str, parameters: Any, many: bool) -> Done:
    if begin is not None:
        conn.execute(begin).close()
    cursor = conn.cursor()
    try:
        if many:
            cursor.executemany(operation, parameters)
        elif parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else []
        # read after the rows: sqlite3 counts a RETURNING statement's rows as they are fetched
        return description, cursor.rowcount, cursor.lastrowid, rows
    finally:
        cursor.close()


class OneTripCursor(AsyncAdapt_aiosqlite_cursor):
    """A cursor whose statement makes one trip to aiosqlite's thread (see the module's docstring)."""

    __slots__ = ("_arraysize", "_description", "_lastrowid", "_rowcount")

    def __init__(self, adapt_connection: Any) -> None:  # no driver cursor: each statement makes its own
        self._adapt_connection = adapt_connection
        self._connection = adapt_connection._connection
        self._cursor = None  # type: ignore[assignment]
        self._soft_closed_memoized = EMPTY_DICT
        self._rows = collections.deque()
        self._description: Any = None
        self._rowcount = -1
        self._lastrowid: int | None = None
        self._arraysize = 1

    @property
    def description(self) -> Any:
        return self._description

    @property
    def rowcount(self) -> int:
        return self._rowcount

    @property
    def lastrowid(self) -> int:
        return self._lastrowid  # type: ignore[return-value]

    @property
    def arraysize(self) -> int:
        return self._arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._arraysize = value

    async def _async_soft_close(self) -> None:
        return  # the driver's cursor was closed on the thread, its rows kept here

    def close(self) -> None:
        self._rows.clear()

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        try:
            return await_(self._trip(operation, parameters, False))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    def executemany(self, operation: Any, seq_of_parameters: Sequence[Any]) -> Any:
        try:
            return await_(self._trip(operation, seq_of_parameters, True))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    async def _trip(self, operation: Any, parameters: Any, many: bool) -> None:
        connection: aiosqlite.Connection = self._connection  # type: ignore[assignment]
        adapt = self._adapt_connection
        assert isinstance(adapt, OneTripConnection)
        async with adapt._execute_mutex:
            begin = adapt.pending_begin
            trip = adapt.last_trip = _Trip()
            try:
                done: Done = await connection._execute(  # type: ignore[no-untyped-call]
                    _run, trip, connection._conn, begin, operation, parameters, many)
            finally:
                # begun, even if the statement then failed; a BEGIN that failed (busy) is tried again with the next
                if begin is not None and connection._conn.in_transaction:
                    adapt.pending_begin = None
        self._description, self._rowcount, self._lastrowid, rows = done
        self._rows = collections.deque(rows)


class OneTripConnection(AsyncAdapt_aiosqlite_connection):
    __slots__ = ("last_trip", "pending_begin")
    _cursor_cls = OneTripCursor

    def __init__(self, dbapi: Any, connection: Any) -> None:
        super().__init__(dbapi, connection)
        self.pending_begin: str | None = None  # the BEGIN its next statement's trip runs first
        self.last_trip: _Trip | None = None  # trips run in order on the thread: this one finished, all have

    def begin_with_next_statement(self, begin: str) -> None:
        """Begin the transaction (`begin`: "BEGIN IMMEDIATE" or "BEGIN DEFERRED") in the trip of its first
        statement, not in a trip of its own (see the module's docstring)."""
        self.pending_begin = begin

    def cursor(self, server_side: bool = False) -> Any:
        if server_side and self.pending_begin is not None:
            # SQLAlchemy's own cursor (stream results) makes trips of its own: the BEGIN goes first, alone, as it did
            begin, self.pending_begin = self.pending_begin, None
            cursor = super().cursor()
            try:
                cursor.execute(begin)
            except BaseException:
                self.pending_begin = begin  # began nothing: tried again with the next statement
                raise
            finally:
                cursor.close()
        return super().cursor(server_side)

    def commit(self) -> None:
        self.pending_begin = None  # a transaction without statements: nothing begun, nothing to commit
        if self._idle():
            return
        super().commit()

    def rollback(self) -> None:
        self.pending_begin = None
        if self._idle():
            return  # the pool's reset of a connection returned after its commit: nothing to roll back
        super().rollback()

    def _idle(self) -> bool:
        """No transaction open: sqlite3's commit() and rollback() then do nothing (they look at the same
        sqlite3_get_autocommit), so the trip to the thread is saved. Judged only once the thread has finished this
        connection's last trip: a trip whose caller was cancelled (a stop, a timeout) may still be queued there, its
        BEGIN not run yet; a rollback skipped then left the transaction it begins open, holding the database's write
        lock for every writer of the file (a reconciler's stop waited out the busy timeout on its lease release)."""
        trip = self.last_trip
        if trip is not None and not trip.finished:
            return False  # the rollback or commit goes to the thread behind the trip, and ends what it began
        conn: sqlite3.Connection | None = self._connection._connection
        return conn is not None and not conn.in_transaction


async def execute(adapt: OneTripConnection, operation: str, parameters: Any, many: bool) -> tuple[list[Any], int]:
    """`operation` (the driver's SQL, `parameters` as sqlite3 takes them) in one trip, as a cursor of `adapt` runs it
    (the transaction's pending BEGIN first) but called from the event loop, not from SQLAlchemy's execution: its
    rows and rowcount. A database error is raised as SQLAlchemy raises it (sqlalchemy.exc.IntegrityError, ...)."""
    cursor = OneTripCursor(adapt)
    try:
        await cursor._trip(operation, parameters, many)
    except sqlite3.Error as error:
        raise exc.DBAPIError.instance(operation, parameters, error, sqlite3.Error, ismulti=many) from error
    return list(cursor._rows), cursor.rowcount


class OneTripDBAPI(AsyncAdapt_aiosqlite_dbapi):
    """The DB-API module SQLAlchemy's aiosqlite dialect is given (create_async_engine's `module`)."""

    def connect(self, *arg: Any, **kw: Any) -> OneTripConnection:
        adapted = super().connect(*arg, **kw)
        return OneTripConnection(self, adapted._connection)


def dbapi() -> OneTripDBAPI:
    return OneTripDBAPI(aiosqlite, sqlite3)
