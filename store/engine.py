"""Opening the store: URL to engine, connection check, migrations, and the `Store` facade.

SQLite (the default, a file in the data directory) is migrated on open; PostgreSQL is migrated by
`kubus db upgrade` (`upgrade()` here) and only checked on open, so that services started with a
stale schema say so instead of failing on their first write.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from kube.times import Clock, utcnow
from reconciler.core.batch import Stored
from store import (
    audit,
    backoff,
    checkpoints,
    decisions,
    expectations,
    json_text,
    migrating,
    outbox,
    positions,
    results,
    retention,
    shadow,
    sqlite_driver,
    streams,
)
from store.audit import ALL_TIME, ControllerHistory, PodHistory, Row, TimelineRows, TimeRange
from store.decisions import Decision
from store.errors import DatabaseUnavailable, SchemaMismatch, describe
from store.leases import LeaseClock
from store.outbox import OutboxRow
from store.results import ResultRow
from store.transaction import Transaction
from store.urls import Database, create_private, resolve

__all__ = ["DatabaseUnavailable", "SchemaMismatch", "Store", "current", "open_store", "upgrade"]

# How long a SQLite writer waits for another process's write transaction before failing; the
# reconciler, relay and executor of `kubus up` share one file.
SQLITE_BUSY_TIMEOUT_MS = 15_000
PG_CONNECT_TIMEOUT_S = 10  # asyncpg's default of 60 s is a long time to wait for a typo'd host
# PostgreSQL's statement_timeout for the services (--db-statement-timeout): a statement stuck on a lock, a
# hung server or a full disk errors after this long, and the service retries as if the database were away,
# instead of hanging with its transaction (and the lease rows it locked) open. Lock waits count towards it.
DEFAULT_STATEMENT_TIMEOUT_S = 30.0


def create_engine(target: Database, statement_timeout: float | None = None) -> AsyncEngine:
    """The engine for `target`; on PostgreSQL, every connection with `statement_timeout` seconds (None: the
    server's own setting, which is no limit unless its administrator set one: migrations run that way)."""
    if target.backend == "sqlite":
        # one trip to aiosqlite's thread per statement (store/sqlite_driver.py); a connection rolls back as it closes
        engine = create_async_engine(target.url, module=sqlite_driver.dbapi(), json_serializer=json_text.dumps,
                                     connect_args={"factory": _SqliteConnection})
        _configure_sqlite(engine)
        return engine
    import asyncpg  # type: ignore[import-untyped]  # only PostgreSQL needs it

    dsn = target.dsn
    server_settings: dict[str, str] = {}
    if statement_timeout is not None:
        server_settings["statement_timeout"] = str(max(1, round(statement_timeout * 1000)))

    async def connect() -> Any:
        # asyncpg reads the DSN as libpq does (sslmode, sslrootcert, sslcert, sslkey, passfile) and takes the
        # password from PGPASSWORD / PGPASSFILE when the URL has none; SQLAlchemy's own connect would pass the
        # URL's query to asyncpg.connect() as keyword arguments, which it refuses
        return await asyncpg.connect(dsn, timeout=PG_CONNECT_TIMEOUT_S, server_settings=server_settings or None)

    # pre-ping: a pooled connection that died with a PostgreSQL restart is replaced, not used
    return create_async_engine(target.url, pool_pre_ping=True, async_creator=connect, json_serializer=json_text.dumps)


class _SqliteConnection(sqlite3.Connection):
    """Rolls back an open transaction before it closes. SQLAlchemy closes (terminates) a connection whose task was
    cancelled in the middle of a statement (a stop, a lease round's timeout) without a rollback, and the cancelled
    frames still hold the statement's cursor: sqlite3 then only marks the connection a zombie, to go when that
    statement is finalized (at the garbage collector's pleasure), and its transaction keeps the database's write
    lock meanwhile: every writer, of every kubus process on the file, waited out the busy timeout and failed. A
    ROLLBACK ends the transaction, and with it the lock, whatever statements are left unfinalized."""

    def close(self) -> None:
        if self.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # closing anyway: SQLite rolls back what it can itself
                self.rollback()
        super().close()


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        # The driver's implicit BEGIN is DEFERRED and issued lazily; take transactions over (below).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        # busy_timeout first: switching to WAL takes a lock another process (migrating) may hold
        for pragma in (f"busy_timeout={SQLITE_BUSY_TIMEOUT_MS}", "journal_mode=WAL", "synchronous=NORMAL",
                       "foreign_keys=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def on_begin(conn: Connection) -> None:
        # A DEFERRED transaction that reads and then writes cannot wait for the lock (SQLite
        # answers SQLITE_BUSY at once to avoid a deadlock); write transactions begin IMMEDIATE.
        # Run on aiosqlite's thread with the transaction's first statement (store/sqlite_driver.py): no trip of its own.
        mode = conn.get_execution_options().get("kubus_sqlite_begin", "DEFERRED")
        driver = conn.connection.dbapi_connection
        assert isinstance(driver, sqlite_driver.OneTripConnection), driver
        driver.begin_with_next_statement(f"BEGIN {mode}")


async def open_store(url: str | None, data_dir: str, *, clock: Clock = utcnow,
                     statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT_S,
                     lease_clock: LeaseClock = "database") -> Store:
    """Connect to the database at `url` (None: SQLite in `data_dir`) and make sure its schema fits.

    `statement_timeout`: seconds a PostgreSQL statement may run (None: no limit of kubus's). `lease_clock`:
    what leases are measured against (store/leases.py): the database's clock, or "local", the callers'
    (tests that move a fake clock).

    Raises DatabaseUnavailable (one line: which database, what failed, how to fix it).
    """
    target = resolve(url, data_dir)
    engine = create_engine(target, statement_timeout)
    try:
        await _check_connection(engine, target)
        if target.backend == "sqlite":
            await migrating.upgrade(engine)
        else:
            await _check_schema(engine, target)
    except BaseException:
        await engine.dispose()
        raise
    return Store(engine, target, clock, lease_clock)


async def upgrade(url: str | None, data_dir: str) -> str:
    """Migrate the database to the newest schema (a no-op when it is there); the revision."""
    async with _engine(url, data_dir) as engine:
        await migrating.upgrade(engine)
        return migrating.head()


async def current(url: str | None, data_dir: str) -> str | None:
    """The database's schema revision, None if never migrated."""
    async with _engine(url, data_dir) as engine:
        return await migrating.current(engine)


@asynccontextmanager
async def _engine(url: str | None, data_dir: str) -> AsyncIterator[AsyncEngine]:
    target = resolve(url, data_dir)
    engine = create_engine(target)
    try:
        await _check_connection(engine, target)
        yield engine
    finally:
        await engine.dispose()


async def _check_connection(engine: AsyncEngine, target: Database) -> None:
    try:
        if target.backend == "sqlite" and target.url.database not in (None, "", ":memory:"):
            # Probe with the stdlib first: aiosqlite's worker thread, after a failed connect,
            # reports to the event loop later, by which time a short-lived caller's loop is closed.
            await asyncio.to_thread(_probe_sqlite, target.url.database)
        async with engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))
    except Exception as exc:  # whatever the driver raises, the user's fix is the same
        raise DatabaseUnavailable(f"cannot connect to {target.label} ({describe(exc)}); {target.hint}") from exc


def _probe_sqlite(path: str) -> None:
    create_private(path)  # before sqlite3 creates it with the umask's permissions
    sqlite3.connect(path).close()


async def _check_schema(engine: AsyncEngine, target: Database) -> None:
    have, need = await migrating.current(engine), migrating.head()
    if have == need:
        return
    if have is None:
        raise SchemaMismatch(f"{target.label} has no kubus schema; run `kubus db upgrade` ({target.hint})")
    raise SchemaMismatch(f"{target.label} has schema revision {have}, this kubus needs {need}; "
                         f"run `kubus db upgrade`, or a kubus that knows revision {have}")


class Store:
    """The database behind kubus: units of work for reconcilers, and the relay, executor-result
    and ingest sides, each a short transaction of its own. The SQL adapter of store/port.py's `Port`."""

    def __init__(self, engine: AsyncEngine, target: Database, clock: Clock = utcnow,
                 lease_clock: LeaseClock = "database") -> None:
        self.engine = engine
        # write transactions' connections, from the same pool: on SQLite each begins IMMEDIATE (_configure_sqlite),
        # an option set once here instead of on every connection (a greenlet switch each)
        self._writer = (engine.execution_options(kubus_sqlite_begin="IMMEDIATE") if target.backend == "sqlite"
                        else engine)
        self.backend = target.backend
        self.label = target.label
        self._clock = clock
        self.lease_clock: LeaseClock = lease_clock

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        await self.engine.dispose()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """A unit of work: commits when the block ends, rolls back everything if it raises."""
        async with self._writing() as conn:
            yield Transaction(conn, self._clock, self.lease_clock)

    # the reconciler's start
    async def load(self, consumer: str) -> Stored:
        # in a write transaction, as the reconciler always read it: on SQLite, no commit lands between the reads
        async with self._writing() as conn:
            return Stored(positions=await positions.load_all(conn, consumer),
                          expectations={k: expectations.value_of(v)
                                        for k, v in (await expectations.load_all(conn)).items()},
                          backoff={k: backoff.value_of(v) for k, v in (await backoff.load_all(conn)).items()})

    # which KUBUS_EVENTS the positions and checkpoints refer to (store/streams.py)
    async def stream_identity(self, name: str) -> str | None:
        async with self.engine.connect() as conn:
            return await streams.identity(conn, name)

    async def record_stream_identity(self, name: str, stream: str, created: str) -> None:
        async with self._writing() as conn:
            await streams.record(conn, name, stream, created, at=self._clock())

    async def reset_stream(self, consumer: str, reset: streams.Reset) -> bool:
        async with self._writing() as conn:
            return await streams.reset(conn, consumer, reset, at=self._clock())

    async def stream_resets(self) -> list[dict[str, object]]:
        async with self.engine.connect() as conn:
            return await streams.resets(conn)

    # outbox relay
    async def pending(self, limit: int, subjects: Collection[str] | None = None) -> list[OutboxRow]:
        async with self.engine.connect() as conn:
            return await outbox.pending(conn, limit, subjects)

    async def mark_sent(self, keys: Iterable[str]) -> int:
        async with self._writing() as conn:
            return await outbox.mark_sent(conn, keys, at=self._clock())

    # executor results
    async def record_results(self, rows: Sequence[ResultRow]) -> list[str]:
        """Record results idempotently (by key); the keys that were new."""
        async with self._writing() as conn:
            return await results.record(conn, rows, at=self._clock())

    # ingest checkpoints
    async def checkpoint(self, kind: str) -> str | None:
        async with self.engine.connect() as conn:
            return await checkpoints.load(conn, kind)

    async def checkpoints(self) -> dict[str, str]:
        async with self.engine.connect() as conn:
            return await checkpoints.load_all(conn)

    async def save_checkpoint(self, kind: str, resource_version: str) -> None:
        async with self._writing() as conn:
            await checkpoints.save(conn, kind, resource_version, at=self._clock())

    # audit reads
    async def decisions_for(self, controller_key: str, limit: int = 100) -> list[Decision]:
        async with self.engine.connect() as conn:
            return await decisions.for_controller(conn, controller_key, limit)

    async def outbox_for(self, decision_id: int) -> list[OutboxRow]:
        async with self.engine.connect() as conn:
            return await outbox.by_decision(conn, decision_id)

    async def results_for(self, decision_id: int) -> list[ResultRow]:
        async with self.engine.connect() as conn:
            return await results.for_decision(conn, decision_id)

    # the audit trail's questions (store/audit.py)
    async def pod_history(self, namespace: str, name: str) -> PodHistory | None:
        async with self.engine.connect() as conn:
            return await audit.pod_history(conn, namespace, name)

    async def controller_history(self, namespace: str, name: str, kind: str | None = None,
                                 window: TimeRange = ALL_TIME, limit: int = 500) -> ControllerHistory | None:
        async with self.engine.connect() as conn:
            return await audit.controller_history(conn, namespace, name, kind, window, limit)

    async def failures(self, window: TimeRange = ALL_TIME, limit: int = 100,
                       controller_key: str | None = None) -> list[Row]:
        async with self.engine.connect() as conn:
            return await audit.failures(conn, window, limit, controller_key)

    async def slowest(self, window: TimeRange = ALL_TIME, limit: int = 10) -> list[Row]:
        async with self.engine.connect() as conn:
            return await audit.slowest(conn, window, limit)

    async def created_per_minute(self, window: TimeRange = ALL_TIME) -> list[Row]:
        async with self.engine.connect() as conn:
            return await audit.created_per_minute(conn, window)

    async def timeline_rows(self, kind: str, namespace: str, name: str,
                            until: datetime | None = None) -> TimelineRows | None:
        async with self.engine.connect() as conn:
            return await audit.timeline_rows(conn, kind, namespace, name, until)

    # shadow mode (docs/shadow.md)
    async def shadow_acts(self, since: datetime | None = None, until: datetime | None = None,
                          controller_key: str | None = None) -> list[shadow.ShadowActRow]:
        async with self.engine.connect() as conn:
            return await shadow.load(conn, since, until, controller_key)

    async def shadow_lineage(self, decision_ids: Sequence[int], msg_ids: Sequence[str], namespace: str,
                             since: datetime, until: datetime) -> dict[str, Any]:
        async with self.engine.connect() as conn:
            return await shadow.lineage(conn, decision_ids, msg_ids, namespace, since, until)

    # retention
    async def prune(self, before: datetime, batch: int = retention.BATCH,
                    progress: Callable[[int], None] | None = None) -> retention.Pruned:
        """Delete the audit trail's rows older than `before` (see store/retention.py), one short
        transaction per batch; how many rows of each table went. `progress` is told the rows of each batch."""
        total = retention.Pruned()
        while True:
            async with self._writing() as conn:
                done = await retention.prune(conn, before, batch)
            total.add(done)
            if progress is not None:
                progress(sum(done.as_dict().values()))
            if all(n < batch for n in done.as_dict().values()):
                return total

    @asynccontextmanager
    async def _writing(self) -> AsyncIterator[AsyncConnection]:
        async with self._writer.connect() as conn, conn.begin():
            yield conn


if TYPE_CHECKING:  # the SQL store is the whole port (mypy checks it here)
    from store.port import Port

    def _is_port(store: Store) -> Port:
        return store
