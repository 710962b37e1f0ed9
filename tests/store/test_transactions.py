"""The unit of work: a reconciler's writes for a batch commit together or not at all."""

from __future__ import annotations

import asyncio
import threading

import pytest
import sqlalchemy as sa

from store.engine import Store
from tests.store.builders import action, at, decision, event, expectations


class Crash(Exception):
    pass


async def test_exception_inside_transaction_leaves_nothing(store: Store) -> None:
    """A failure after every write of a sync rolls back the decision, outbox rows, expectations,
    events and the position advance."""
    with pytest.raises(Crash):
        async with store.transaction() as tx:
            await tx.record_events([event(7)])
            decision_id = await tx.insert_decision(decision("c-1", seq=7))
            await tx.enqueue([action("a-1", decision_id)])
            await tx.save_expectations([expectations(adds=1)])
            await tx.advance("reconciler", 0, 7)
            raise Crash
    assert await store.pending(10) == []
    assert await store.decisions_for("ns/ds") == []
    async with store.transaction() as tx:
        assert await tx.position("reconciler", 0) == 0
        assert await tx.load_expectations(["ns/ds"]) == {}
        assert await tx.record_events([event(7)]) == 1  # was not recorded before


async def test_transaction_commits_everything_together(store: Store) -> None:
    """Decision, actions, expectations and position are all visible after the block ends."""
    async with store.transaction() as tx:
        decision_id = await tx.insert_decision(decision("c-1", seq=7))
        await tx.enqueue([action("a-1", decision_id), action("a-2", decision_id, created=1)])
        await tx.save_expectations([expectations(adds=2)])
        await tx.advance("reconciler", 0, 7)
    assert [r.key for r in await store.pending(10)] == ["a-1", "a-2"]
    [stored] = await store.decisions_for("ns/ds")
    assert stored.id == decision_id
    assert [r.key for r in await store.outbox_for(decision_id)] == ["a-1", "a-2"]
    async with store.transaction() as tx:
        assert await tx.position("reconciler", 0) == 7
        assert (await tx.load_expectations(["ns/ds"]))["ns/ds"].adds == 2


async def test_concurrent_transactions_serialize(store: Store) -> None:
    """Read-then-write transactions running at once all commit (SQLite: BEGIN IMMEDIATE waits)."""
    async def sync(n: int) -> None:
        async with store.transaction() as tx:
            seq = await tx.position("reconciler", 0)
            await tx.insert_decision(decision(f"c-{n}", seq=n))
            await tx.advance("reconciler", 0, max(seq, n))

    await asyncio.gather(*(sync(n) for n in range(1, 13)))
    assert len(await store.decisions_for("ns/ds")) == 12
    async with store.transaction() as tx:
        assert await tx.position("reconciler", 0) == 12


async def test_naive_timestamps_are_refused(store: Store) -> None:
    """Timestamps must be timezone-aware; they come back as aware UTC."""
    with pytest.raises(Exception, match="naive datetime"):
        async with store.transaction() as tx:
            await tx.insert_decision(decision(decided_at=at(0).replace(tzinfo=None)))
    async with store.transaction() as tx:
        await tx.insert_decision(decision())
    [stored] = await store.decisions_for("ns/ds")
    assert stored.decided_at == at(1)
    assert stored.decided_at.utcoffset() is not None



async def test_a_transaction_cancelled_in_the_middle_of_a_statement_holds_no_lock(store: Store) -> None:
    """A task cancelled while its transaction's statement runs (a stop, a lease round's own timeout) leaves the
    database free for the next writer. SQLAlchemy then closes the connection; on SQLite a connection closed with
    a statement still unfinalized (the cancelled frames hold its cursor) lived on as a zombie holding the write
    lock, and every writer of every process waited out the busy timeout and failed (a stopping reconciler's lease
    leave among them, so that it took 15 s to stop: stop 22's CI run)."""
    running = threading.Event()  # set by the slow statement itself once it runs (SQLite), or seen running (PG)

    async def writer() -> None:
        async with store.transaction() as tx:
            await tx.conn.execute(sa.text("INSERT INTO ingest_checkpoints (kind, resource_version, updated_at) "
                                          "VALUES ('Pod', '1', :at)"), {"at": at(0)})
            if store.backend == "sqlite":
                raw = await tx.conn.get_raw_connection()
                await raw.driver_connection.create_function("running", 0, lambda: running.set() or 1)
                slow = ("WITH RECURSIVE c(x) AS (SELECT running() UNION ALL SELECT x + 1 FROM c LIMIT 100000000) "
                        "SELECT count(*) FROM c")
            else:
                slow = "SELECT pg_sleep(30) /* the cancelled one */"
            await tx.conn.execute(sa.text(slow))

    async def pg_running() -> bool:
        async with store.engine.connect() as conn:
            return bool(await conn.scalar(sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%the cancelled one%' "
                "AND query NOT LIKE '%pg_stat_activity%'")))

    task = asyncio.create_task(writer())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not (running.is_set() if store.backend == "sqlite" else await pg_running()):
        assert loop.time() < deadline and not task.done(), "the slow statement never ran"
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    began = loop.time()
    await store.save_checkpoint("Node", "9")  # another writer, of another table
    waited = loop.time() - began
    assert waited < 2.0, f"the next writer waited {waited:.1f} s for the cancelled transaction's lock"
    assert await store.checkpoint("Pod") is None, "the cancelled transaction's write was committed"
    assert await store.checkpoint("Node") == "9"
