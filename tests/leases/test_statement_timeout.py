"""PostgreSQL's statement timeout (--db-statement-timeout): a statement stuck behind a lock errors instead of
hanging, the error counts as the database being away (store.errors.database_away), and a split reconciler
whose commit hit it starts again from what the store holds, after a backoff, without crashing, losing or
doubling anything."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
import sqlalchemy as sa

from kube.times import utcnow
from reconciler.consuming import SoleReconciler
from reconciler.core.batch import CONSUMER, Commit
from reconciler.leases import LeaseKeeper
from reconciler.partitioned import PartitionedReconciler
from runtime.bus import Bus
from store import leases
from store.engine import Store, open_store
from store.errors import database_away
from store.port import Fence
from tests.pipeline.test_reconciler import publish, replicaset_event
from tests.store.builders import result

TIMEOUT = 0.5  # the statement timeout under test, seconds
pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


@pytest.fixture
async def timed(store: Store, db_url: str, tmp_path: Path) -> AsyncIterator[Store]:
    """A second store on the (emptied) test database whose statements time out after TIMEOUT."""
    opened = await open_store(db_url, str(tmp_path), statement_timeout=TIMEOUT)
    yield opened
    await opened.close()


@contextlib.asynccontextmanager
async def holding(db_url: str, statement: str) -> AsyncIterator[None]:
    """Another session holding the lock `statement` takes, in an open transaction, until the block ends."""
    conn = await asyncpg.connect(sa.make_url(db_url).set(drivername="postgresql").render_as_string(False))
    try:
        async with conn.transaction():
            await conn.execute(statement)
            yield
    finally:
        await conn.close()


async def test_a_statement_stuck_on_a_lock_errors_as_the_database_away(timed: Store, db_url: str) -> None:
    """A commit whose fence waits for a lease row another session holds fails after the timeout (not when the
    other lets go), rolls back whole, and is told apart from a real error; once the lock is gone it commits."""
    async with timed.transaction() as tx:
        epochs = await leases.acquire(tx.conn, "a", [0], now=await tx.lease_now(utcnow()), ttl=60)
    fence = Fence("a", epochs, ttl=60)
    async with holding(db_url, "SELECT * FROM partition_leases FOR UPDATE"):
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(Exception) as raised:
            async with asyncio.timeout(10 * TIMEOUT):  # would hang for as long as the lock is held
                async with timed.transaction() as tx:
                    await tx.record_results([result("r1")], utcnow())
                    await tx.commit(_commit(), fence)
        assert TIMEOUT <= loop.time() - began < 5 * TIMEOUT
        assert database_away(raised.value), f"{raised.value!r} not taken for the database away"
        assert "statement timeout" in str(raised.value)
    async with timed.transaction() as tx:
        assert await tx.record_results([result("r1")], utcnow()) == ["r1"]  # the first attempt left nothing
        await tx.commit(_commit(), fence)


async def test_what_counts_as_the_database_away(timed: Store, tmp_path: Path) -> None:
    """Unreachable, or a statement timeout: away (retry). A constraint or a bad statement: not (a bug to show)."""
    with pytest.raises(Exception) as refused:
        await open_store("postgresql://kubus@127.0.0.1:1/none", str(tmp_path))
    assert database_away(refused.value)
    with pytest.raises(sa.exc.DBAPIError) as slow:
        async with timed.engine.connect() as conn:
            await conn.execute(sa.text(f"SELECT pg_sleep({TIMEOUT * 4})"))
    assert database_away(slow.value)
    with pytest.raises(sa.exc.IntegrityError) as duplicate:
        async with timed.engine.begin() as conn:
            row = {"kind": "Pod", "resource_version": "1", "updated_at": utcnow()}
            await conn.execute(sa.text("INSERT INTO ingest_checkpoints VALUES (:kind, :resource_version, "
                                       ":updated_at)"), [row, row])
    assert not database_away(duplicate.value)
    with pytest.raises(sa.exc.ProgrammingError) as wrong:
        async with timed.engine.connect() as conn:
            await conn.execute(sa.text("SELECT nothing FROM nowhere"))
    assert not database_away(wrong.value)


async def test_a_reconciler_whose_commit_times_out_retries_and_commits_once(
        bus: Bus, timed: Store, db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """The decisions table locked by another session: every commit of the reconciler's batch times out, the
    loop starts again from the store after a backoff (the service stays up); once the lock is gone, the
    decision is committed, once."""
    caplog.set_level(logging.WARNING, logger="kubus.reconciler")
    keeper = LeaseKeeper(timed, "a", bus.partitions, ttl=3.0)
    split = PartitionedReconciler(bus, timed, keeper, "a")
    tasks = [asyncio.create_task(keeper.run()), asyncio.create_task(split.run())]
    try:
        await until(lambda: split.caught_up and len(keeper.owned) == bus.partitions, "a caught up, every partition")
        async with holding(db_url, "LOCK TABLE decisions IN EXCLUSIVE MODE"):
            await publish(bus, replicaset_event("stuck", 1))
            await until(lambda: _away(caplog) >= 2, "two commits timed out")
            assert not any(t.done() for t in tasks)
        await until_committed(timed)
        assert not any(t.done() for t in tasks), "the service went down"
    finally:
        split.stop()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    async with timed.engine.connect() as conn:
        rows = (await conn.execute(sa.text("SELECT controller_key FROM decisions"))).scalars().all()
    assert rows == ["ReplicaSet/stuck/web"]


async def test_the_sole_reconciler_of_kubus_up_retries_too(
        bus: Bus, timed: Store, db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """The same with `kubus up`'s reconciler (alone, unfenced, no leases): it starts over from the store
    instead of taking the process down."""
    caplog.set_level(logging.WARNING, logger="kubus.reconciler")
    sole = SoleReconciler(bus, timed, instance="up")
    task = asyncio.create_task(sole.run())
    try:
        await until(lambda: sole.caught_up, "the reconciler caught up")
        async with holding(db_url, "LOCK TABLE decisions IN EXCLUSIVE MODE"):
            await publish(bus, replicaset_event("stuck", 1))
            await until(lambda: _away(caplog) >= 2, "two commits timed out")
            assert not task.done()
        await until_committed(timed)
        assert not task.done(), "the service went down"
    finally:
        sole.stop()
        await asyncio.wait_for(task, 30)
    async with timed.engine.connect() as conn:
        rows = (await conn.execute(sa.text("SELECT controller_key FROM decisions"))).scalars().all()
    assert rows == ["ReplicaSet/stuck/web"]


def _away(caplog: pytest.LogCaptureFixture) -> int:
    return sum("the database is away" in r.getMessage() and "statement timeout" in r.getMessage()
               for r in caplog.records)


async def until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)  # polling interval of the wait, not a synchronisation


async def until_committed(store: Store, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        async with store.engine.connect() as conn:
            if (await conn.execute(sa.text("SELECT count(*) FROM outbox"))).scalar_one():
                return
        assert loop.time() < deadline, "timed out waiting for the decision's commit"
        await asyncio.sleep(0.05)  # polling interval of the wait, not a synchronisation


def _commit() -> Commit:
    return Commit(consumer=CONSUMER, at=utcnow(), empty=False, positions={0: 3})
