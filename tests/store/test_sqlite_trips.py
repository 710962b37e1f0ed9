"""SQLite: each statement makes one trip to aiosqlite's thread (store/sqlite_driver.py), with the same results."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from store import positions
from store.engine import Store, open_store
from store.tables import consumer_positions
from tests.store.builders import FakeClock

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


async def test_a_write_transaction_is_begin_statement_commit(sqlite_store: Store,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """No trip for the pool's rollback of a connection it takes back after its commit (sqlite3 would do nothing)."""
    with trips(monkeypatch) as ran:
        async with sqlite_store.transaction() as tx:
            await positions.advance(tx.conn, "reconciler", 3, 10, at=AT)
    assert ran == ["_run", "_run", "commit"], ran  # BEGIN IMMEDIATE, the upsert, COMMIT
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
