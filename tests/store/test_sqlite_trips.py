"""SQLite: each statement makes one trip to aiosqlite's thread (store/sqlite_driver.py), with the same results."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from store import checkpoints, decisions, expectations, leases, positions, sql, streams, ticks
from store.decisions import Decision
from store.engine import Store, open_store
from store.expectations import ExpectationsRow
from store.tables import consumer_positions
from tests.store.builders import FakeClock, event

AT = datetime(2026, 11, 28, 12, tzinfo=UTC)


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await open_store(f"sqlite:///{tmp_path / 'kubus.db'}", str(tmp_path), clock=FakeClock())
    try:
        yield opened
    finally:
        await opened.close()


@contextmanager
def trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The functions run on aiosqlite's thread meanwhile, by name."""
    ran: list[str] = []
    original = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        ran.append(getattr(fn, "__name__", repr(fn)))
        return await original(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    try:
        yield ran
    finally:
        monkeypatch.setattr(aiosqlite.Connection, "_execute", original)


async def test_a_statement_is_one_trip(sqlite_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLAlchemy's own adapter makes three or four (cursor, execute, fetchall, close): ~100-200 µs of CPU each."""
    async with sqlite_store.transaction() as tx:
        with trips(monkeypatch) as ran:
            assert (await tx.conn.execute(sa.select(sa.literal(7)))).scalar() == 7
        assert len(ran) == 1, ran
        with trips(monkeypatch) as ran:
            await positions.advance(tx.conn, "reconciler", 3, 10, at=AT)
        assert len(ran) == 1, ran


async def test_rows_rowcount_and_executemany_are_as_the_driver_says(sqlite_store: Store) -> None:
    async with sqlite_store.transaction() as tx:
        conn = tx.conn
        values = [{"consumer": "c", "partition": p, "stream_seq": p * 10, "updated_at": AT} for p in range(5)]
        await conn.execute(sa.insert(consumer_positions), values)  # executemany
        inserted = await conn.execute(sa.insert(consumer_positions).returning(consumer_positions.c.partition),
                                      [{"consumer": "d", "partition": p, "stream_seq": 1, "updated_at": AT}
                                       for p in range(3)])
        assert sorted(inserted.scalars()) == [0, 1, 2]
        changed = await conn.execute(sa.update(consumer_positions).where(consumer_positions.c.consumer == "c",
                                                                         consumer_positions.c.partition < 3)
                                     .values(stream_seq=99))
        assert changed.rowcount == 3
        rows = (await conn.execute(sa.select(consumer_positions.c.partition, consumer_positions.c.stream_seq,
                                             consumer_positions.c.updated_at)
                                   .where(consumer_positions.c.consumer == "c")
                                   .order_by(consumer_positions.c.partition))).all()
        assert [(p, s) for p, s, _ in rows] == [(0, 99), (1, 99), (2, 99), (3, 30), (4, 40)]
        assert all(at == AT for _, _, at in rows)  # DATETIME read back through the same type processing


async def test_an_error_is_the_drivers_and_rolls_back(sqlite_store: Store) -> None:
    row = {"consumer": "c", "partition": 1, "stream_seq": 1, "updated_at": AT}
    with pytest.raises(IntegrityError, match="UNIQUE"):
        async with sqlite_store.transaction() as tx:
            await tx.conn.execute(sa.insert(consumer_positions), [row])
            await tx.conn.execute(sa.insert(consumer_positions), [row])
    async with sqlite_store.transaction() as tx:
        assert await tx.positions("c") == {}


async def test_a_write_transaction_is_its_statements_and_commit(sqlite_store: Store,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """No trip for the pool's rollback of a connection it takes back after its commit (sqlite3 would do nothing)."""
    with trips(monkeypatch) as ran:
        async with sqlite_store.transaction() as tx:
            await positions.advance(tx.conn, "reconciler", 3, 10, at=AT)
    assert ran == ["_run", "commit"], ran  # BEGIN IMMEDIATE with the upsert, COMMIT
    async with sqlite_store.transaction() as tx:
        assert await tx.positions("reconciler") == {3: 10}


async def test_a_rollback_in_a_transaction_still_rolls_back(sqlite_store: Store) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with sqlite_store.transaction() as tx:
            await positions.advance(tx.conn, "reconciler", 3, 10, at=AT)
            raise Boom
    async with sqlite_store.transaction() as tx:
        assert await tx.positions("reconciler") == {}


async def test_positions_of_several_partitions_are_one_statement(sqlite_store: Store,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's positions (one per partition it read, up to 17) were one upsert each; still monotonic per row."""
    async with sqlite_store.transaction() as tx:
        await positions.advance_all(tx.conn, "reconciler", {0: 5, 1: 50, 16: 7}, at=AT)
        with trips(monkeypatch) as ran:
            await positions.advance_all(tx.conn, "reconciler", {0: 9, 1: 40, 2: 3, 16: 7}, at=AT)
        assert len(ran) == 1, ran
        assert await tx.positions("reconciler") == {0: 9, 1: 50, 2: 3, 16: 7}


async def test_the_lease_fence_is_two_driver_statements(sqlite_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every commit of a split reconciler checks and extends its leases: the lock's SELECT and the extension's
    UPDATE (each with its IN list of the fence's partitions) run on the driver, one trip each, and SQLAlchemy
    executes nothing; a lease that moved on still raises LeaseLost."""
    async with sqlite_store.transaction() as tx:
        assert await leases.acquire(tx.conn, "r-0", [2, 0], now=AT, ttl=30) == {0: 1, 2: 1}
    executions: list[str] = []
    sa.event.listen(sqlite_store.engine.sync_engine, "before_cursor_execute",
                    lambda *args: executions.append(args[2]))
    async with sqlite_store.transaction() as tx:
        await positions.advance(tx.conn, "reconciler", 0, 3, at=AT)
        with trips(monkeypatch) as ran:
            await leases.check_fence(tx.conn, "r-0", {0: 1, 2: 1}, now=AT, ttl=40)
        assert ran == ["_run", "_run"], ran
    assert executions == []
    async with sqlite_store.engine.connect() as conn:
        assert [(lease.partition, lease.expires_at) for lease in await leases.leases(conn)] == [
            (0, AT + timedelta(seconds=40)), (2, AT + timedelta(seconds=40))]
    with pytest.raises(leases.LeaseLost, match=r"partition\(s\) 2"):
        async with sqlite_store.transaction() as tx:
            await leases.check_fence(tx.conn, "r-0", {0: 1, 2: 7}, now=AT, ttl=40)


async def test_a_read_is_its_statement_and_the_pools_rollback(sqlite_store: Store,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A read's BEGIN (DEFERRED) goes with its SELECT; the pool's rollback ends its read transaction."""
    with trips(monkeypatch) as ran:
        assert await sqlite_store.pending(10) == []
    assert ran == ["_run", "rollback"], ran


async def test_a_transaction_without_statements_makes_no_trip(sqlite_store: Store,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with trips(monkeypatch) as ran:
        async with sqlite_store.transaction():
            pass
    assert ran == [], ran
    async with sqlite_store.transaction() as tx:  # the connection it used is as good as new
        await positions.advance(tx.conn, "reconciler", 3, 10, at=AT)
    async with sqlite_store.transaction() as tx:
        assert await tx.positions("reconciler") == {3: 10}


async def test_a_write_transaction_still_begins_immediate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While another process holds the file's write lock, a write transaction that reads first waits for the
    lock at its first statement (BEGIN IMMEDIATE, run with it) and fails after the busy timeout; DEFERRED would
    have read at once. Once the lock is free, the same store writes and reads back."""
    monkeypatch.setattr("store.engine.SQLITE_BUSY_TIMEOUT_MS", 100)
    path = tmp_path / "kubus.db"
    store = await open_store(f"sqlite:///{path}", str(tmp_path), clock=FakeClock())
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(OperationalError, match="database is locked"):
            async with store.transaction() as tx:
                await tx.positions("reconciler")
        other.execute("ROLLBACK")
        async with store.transaction() as tx:
            assert await tx.positions("reconciler") == {}
            await positions.advance(tx.conn, "reconciler", 3, 10, at=AT)
        assert other.execute("SELECT partition, stream_seq FROM consumer_positions").fetchall() == [(3, 10)]
    finally:
        other.close()
        await store.close()


async def test_a_failed_begin_is_tried_again_with_the_next_statement(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A BEGIN that found the database locked began nothing: the transaction's next statement begins it (its
    writes then commit or roll back together), never runs outside a transaction."""
    monkeypatch.setattr("store.engine.SQLITE_BUSY_TIMEOUT_MS", 100)
    path = tmp_path / "kubus.db"
    store = await open_store(f"sqlite:///{path}", str(tmp_path), clock=FakeClock())
    other = sqlite3.connect(path, isolation_level=None)
    try:
        async with store.engine.connect() as conn:
            await conn.execution_options(kubus_sqlite_begin="IMMEDIATE")
            trans = await conn.begin()
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(OperationalError, match="database is locked"):
                await conn.execute(sa.select(consumer_positions))
            other.execute("ROLLBACK")
            await positions.advance(conn, "reconciler", 3, 10, at=AT)
            raw = await conn.get_raw_connection()
            assert raw.driver_connection._conn.in_transaction
            await trans.rollback()
        assert other.execute("SELECT count(*) FROM consumer_positions").fetchone() == (0,)
    finally:
        other.close()
        await store.close()


async def test_stream_results_run_in_the_transaction(sqlite_store: Store) -> None:
    """A server-side cursor (SQLAlchemy's own, its own trips) as a transaction's first statement: the BEGIN
    runs before it, so what the transaction writes after it still rolls back."""
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with sqlite_store.transaction() as tx:
            streamed = await tx.conn.stream(sa.select(sa.literal(7)))
            assert [row async for row in streamed.scalars()] == [7]
            raw = await tx.conn.get_raw_connection()
            assert raw.driver_connection._conn.in_transaction
            await positions.advance(tx.conn, "reconciler", 3, 10, at=AT)
            raise Boom
    async with sqlite_store.transaction() as tx:
        assert await tx.positions("reconciler") == {}


async def test_driver_statements_skip_sqlalchemys_execution_not_the_transaction(
        sqlite_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """sql.execute_driver in a transaction: one trip (the BEGIN with it), no SQLAlchemy execution; its writes
    roll back with the transaction; its errors are SQLAlchemy's."""
    class Boom(Exception):
        pass

    executions: list[str] = []
    sa.event.listen(sqlite_store.engine.sync_engine, "before_cursor_execute",
                    lambda *args: executions.append(args[2]))
    insert = "INSERT INTO ingest_checkpoints (kind, resource_version, updated_at) VALUES (?, ?, ?)"
    with trips(monkeypatch) as ran, pytest.raises(Boom):
        async with sqlite_store.transaction() as tx:
            assert await sql.execute_driver(tx.conn, insert, ("Pod", "1", "2026-11-28 12:00:00.000000")) == ([], 1)
            assert await sql.execute_driver(tx.conn, "SELECT kind, resource_version FROM ingest_checkpoints",
                                            None) == ([("Pod", "1")], -1)
            raise Boom
    assert ran == ["_run", "_run", "rollback"], ran
    assert executions == []
    assert await sqlite_store.checkpoints() == {}
    with pytest.raises(IntegrityError, match=r"UNIQUE constraint failed: ingest_checkpoints\.kind") as raised:
        async with sqlite_store.transaction() as tx:
            await sql.execute_driver(tx.conn, insert, [("Node", "1", "x"), ("Node", "2", "x")], many=True)
    assert isinstance(raised.value.orig, sqlite3.IntegrityError) and raised.value.statement == insert
    assert await sqlite_store.checkpoints() == {}


async def test_a_driver_statement_outside_a_transaction_begins_one(sqlite_store: Store) -> None:
    """As SQLAlchemy's execution does (autobegin): what it wrote goes with the connection's rollback."""
    async with sqlite_store.engine.connect() as conn:
        await sql.execute_driver(conn, "INSERT INTO ingest_checkpoints (kind, resource_version, updated_at) "
                                       "VALUES ('Pod', '1', 'x')", None)
        assert conn.in_transaction()
    assert await sqlite_store.checkpoints() == {}



async def _sqlalchemys(conn: AsyncConnection, key: tuple[str, ...], build: Callable[[], Any],
                       values: dict[str, Any] | list[dict[str, Any]]) -> list[Any]:
    """sql.execute as SQLAlchemy's execution of the statement."""
    result = await conn.execute(sql.statement(conn, key, build), values)
    return list(result.all()) if result.returns_rows else []


async def _write(conn: AsyncConnection) -> list[Any]:
    """What a reconciler's commit and ingest write through sql.execute, twice (the second an update), and read."""
    done: list[Any] = []
    for n in (1, 2):
        at = AT.replace(microsecond=n)
        await positions.advance_all(conn, "reconciler", {0: 5 * n, 16: 7, 3: 9 - n}, at=at)
        tick = ticks.Tick(instance="r-0", kind=ticks.BATCH, at=at, caught_up=n == 1, first_seq=3, last_seq=None,
                          partitions=[0, 16] if n == 2 else None, result_keys=["k-1"],
                          results=[{"key": "k-1", "code": 201, "é": [1.5, None]}], decision_ids=[4, n])
        done.append(await ticks.record(conn, tick))
        await checkpoints.save(conn, "Pod", str(10 * n), at=at)
        await expectations.save(conn, [ExpectationsRow(controller_key="ReplicaSet/ns/web", adds=n, dels=1,
                                                       deletion_keys=frozenset({"ns/b", "ns/a"}), set_at=at)])
        await streams.record(conn, streams.RECONCILER, "KUBUS_EVENTS", f"2026-11-2{n}T00:00:00Z", at=at)
        done.append(await streams.identity(conn, streams.RECONCILER))
        if n == 1:
            assert await leases.acquire(conn, "r-0", [5, 0, 3], now=at, ttl=30) == {0: 1, 3: 1, 5: 1}
        # the fence's lock and extension (the second time extending only 0 and 3), and a renewal
        await leases.check_fence(conn, "r-0", {0: 1, 3: 1, 5: 1} if n == 1 else {0: 1, 3: 1}, now=at, ttl=40 * n)
        # the second time a minute on: 5's lease (at + 45 s) ran out, 0's (at + 80 s) did not
        done.append(await leases.renew(conn, "r-0", {5: 1, 0: 1}, now=at + timedelta(seconds=60 * (n - 1)), ttl=45))
        done.append(await leases.leases(conn))
        done.append(await decisions.insert(conn, [
            Decision(correlation_id=f"c-{n}-{k}", controller_key="ReplicaSet/ns/web", controller_kind="ReplicaSet",
                     partition=k, stream_seq=9, trigger=None if k else "Pod:u:9:MODIFIED", decided_at=at,
                     duration_ms=0.1 * k, summary={"why": "é", "n": [k, None]}, lease_epoch=k or None)
            for k in range(3 * n)]))
    return done


async def test_statements_compiled_for_the_driver_write_what_sqlalchemys_execution_wrote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sql.execute on SQLite (each statement compiled once for the driver) against SQLAlchemy's execution of the
    same statements with the same values: the same rows, byte for byte, with their storage classes, and the
    same values read back."""
    stored = []
    for path in ("sqlalchemy", "driver"):
        with monkeypatch.context() as patched:
            if path == "sqlalchemy":
                patched.setattr(sql, "execute", _sqlalchemys)
            (tmp_path / path).mkdir()
            store = await open_store(None, str(tmp_path / path), clock=FakeClock())
            try:
                async with store.transaction() as tx:
                    read = await _write(tx.conn)
            finally:
                await store.close()
        db = sqlite3.connect(tmp_path / path / "kubus.db")
        tables = {}
        for table in ("consumer_positions", "reconciler_ticks", "ingest_checkpoints", "expectations",
                      "stream_identities", "decisions", "partition_leases"):
            columns = [c for (_, c, *_) in db.execute(f"PRAGMA table_info({table})")]
            typed = ", ".join(f"quote({c}), typeof({c})" for c in columns)
            tables[table] = db.execute(f"SELECT {typed} FROM {table} ORDER BY rowid").fetchall()
        db.close()
        stored.append((read, tables))
    assert stored[0] == stored[1]
    read, tables = stored[1]
    assert [r for r in read if not isinstance(r, list) or not isinstance(r[0], leases.Lease)] == [
        1, "2026-11-21T00:00:00Z", {0, 5}, [1, 2, 3], 2, "2026-11-22T00:00:00Z", {0}, [4, 5, 6, 7, 8, 9]]
    assert [(lease.partition, lease.expires_at - AT) for lease in read[-2]] == [
        (0, timedelta(seconds=105, microseconds=2)), (3, timedelta(seconds=80, microseconds=2)),
        (5, timedelta(seconds=45, microseconds=1))]
    assert [len(rows) for rows in tables.values()] == [3, 2, 1, 1, 1, 9, 3]


async def test_a_duplicate_decision_is_an_integrity_error(sqlite_store: Store) -> None:
    """A decision's correlation_id twice in a batch or across batches: SQLAlchemy's IntegrityError, nothing kept."""
    row = Decision(correlation_id="c-1", controller_key="ReplicaSet/ns/web", controller_kind="ReplicaSet",
                   partition=0, stream_seq=1, trigger=None, decided_at=AT, duration_ms=1.0)
    for batches in ([[row, replace(row, stream_seq=2)]], [[row], [row]]):
        with pytest.raises(IntegrityError, match=r"UNIQUE constraint failed: decisions\.correlation_id"):
            async with sqlite_store.transaction() as tx:
                for batch in batches:
                    await decisions.insert(tx.conn, batch)
        assert await sqlite_store.decisions_for("ReplicaSet/ns/web") == []


async def test_a_cancellation_in_a_driver_statement_leaves_nothing_written(sqlite_store: Store) -> None:
    """A task cancelled while one of its transaction's statements run by sql.execute_driver is on aiosqlite's
    thread (here: the events' insert, held by a trigger): the transaction rolls back, what it wrote before goes
    with it, and the next writer does not wait for a lock."""
    running, release = threading.Event(), threading.Event()

    def hold() -> int:
        running.set()
        release.wait(20)
        return 1

    async def commit() -> None:
        async with sqlite_store.transaction() as tx:
            await tx.advance("reconciler", 0, 7)
            raw = await tx.conn.get_raw_connection()
            await raw.driver_connection.create_function("hold", 0, hold)
            await tx.conn.exec_driver_sql("CREATE TEMP TRIGGER held AFTER INSERT ON observed_events "
                                          "BEGIN SELECT hold(); END")
            await tx.record_events([event(7)])
            await tx.advance("reconciler", 1, 7)

    task = asyncio.create_task(commit())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not running.is_set():
        assert loop.time() < deadline and not task.done(), "the insert never ran"
        await asyncio.sleep(0.01)
    task.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    began = loop.time()
    async with sqlite_store.transaction() as tx:
        assert await tx.positions("reconciler") == {}
        assert await tx.record_events([event(7)]) == 1  # was not recorded
    assert loop.time() - began < 2.0


async def test_a_statement_cancelled_while_queued_on_the_thread_leaves_no_transaction_open(
        sqlite_store: Store) -> None:
    """A transaction's first statement (its BEGIN IMMEDIATE in the same trip) cancelled while it waits behind other
    work on aiosqlite's thread: the trip still runs once the thread gets to it, after its caller has gone. The
    rollback of the cancelled transaction goes to the thread behind it and ends what it began; judged from the
    event loop before the trip ran, the connection looked idle, the rollback was skipped, and the transaction the
    trip then began kept the write lock: the next writer (a reconciler's lease release at its stop, in CI) waited
    out the busy timeout."""
    running, release = threading.Event(), threading.Event()
    driver: list[aiosqlite.Connection] = []
    blocker: list[asyncio.Future[None]] = []

    def hold() -> None:
        running.set()
        release.wait(20)

    async def write() -> None:
        async with sqlite_store.transaction() as tx:
            raw = await tx.conn.get_raw_connection()
            driver.append(raw.driver_connection)
            blocker.append(asyncio.ensure_future(driver[0]._execute(hold)))  # type: ignore[no-untyped-call]
            while not running.is_set():  # the thread is in hold(): what comes next waits in its queue
                await asyncio.sleep(0.01)
            await tx.advance("reconciler", 0, 7)  # queued behind hold(), its BEGIN with it

    task = asyncio.create_task(write())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    # the statement's trip is queued behind hold(): the thread runs hold() and the trip waits in its queue
    while not (running.is_set() and driver and driver[0]._tx.qsize() >= 1):
        assert loop.time() < deadline and not task.done(), "the statement was never queued"
        await asyncio.sleep(0.01)
    task.cancel()
    # the cancellation reaches the transaction's end (its rollback) while the trip is still queued
    while not (task.done() or driver[0]._tx.qsize() >= 2):
        assert loop.time() < deadline, "the cancelled transaction never ended"
        await asyncio.sleep(0.01)
    release.set()
    await blocker[0]
    with pytest.raises(asyncio.CancelledError):
        await task
    began = loop.time()
    async with sqlite_store.transaction() as tx:
        assert await tx.positions("reconciler") == {}
        await tx.advance("reconciler", 1, 8)
    assert loop.time() - began < 2.0, "the next writer waited for a lock the cancelled transaction left held"
