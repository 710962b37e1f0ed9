"""Leases in the store: acquisition bumps the epoch, renewal keeps it, and a commit fenced with a
stale epoch raises LeaseLost and leaves nothing behind. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import leases
from store.engine import Store
from store.leases import LeaseLost
from tests.store.builders import action, at, decision

TTL = 10.0


async def acquire(store: Store, me: str, *partitions: int, now: float) -> dict[int, int]:
    async with store.transaction() as tx:
        return await leases.acquire(tx.conn, me, partitions, now=at(now), ttl=TTL)


async def table(store: Store) -> dict[int, tuple[str | None, int]]:
    async with store.engine.connect() as conn:
        return {lease.partition: (lease.owner, lease.epoch) for lease in await leases.leases(conn)}


async def test_acquire_free_then_refused_while_held(store: Store) -> None:
    """A free partition is taken at epoch 1; another reconciler cannot take it while it is held."""
    assert await acquire(store, "a", 0, 1, now=0) == {0: 1, 1: 1}
    assert await acquire(store, "b", 0, 1, 2, now=5) == {2: 1}
    assert await table(store) == {0: ("a", 1), 1: ("a", 1), 2: ("b", 1)}


async def test_expired_lease_is_taken_over_with_a_new_epoch(store: Store) -> None:
    """Once expired (at acquired + ttl exactly), another reconciler takes it, one epoch up."""
    await acquire(store, "a", 0, now=0)
    assert await acquire(store, "b", 0, now=9.9) == {}
    assert await acquire(store, "b", 0, now=10) == {0: 2}
    async with store.engine.connect() as conn:
        [lease] = await leases.leases(conn)
    assert (lease.owner, lease.epoch, lease.acquired_at, lease.expires_at) == ("b", 2, at(10), at(20))


async def test_own_lease_of_an_earlier_run_is_taken_back_at_once(store: Store) -> None:
    """A reconciler restarted under the same name need not wait for its old leases: it takes them
    back at once, under a new epoch that fences its earlier incarnation."""
    await acquire(store, "a", 0, now=0)
    assert await acquire(store, "a", 0, now=1) == {0: 2}


async def test_renew_keeps_the_epoch_and_extends(store: Store) -> None:
    await acquire(store, "a", 0, 1, now=0)
    async with store.transaction() as tx:
        assert await leases.renew(tx.conn, "a", {0: 1, 1: 1}, now=at(8), ttl=TTL) == {0, 1}
    assert await acquire(store, "b", 0, now=15) == {}  # renewed to 18
    assert await table(store) == {0: ("a", 1), 1: ("a", 1)}


async def test_renew_fails_for_stale_epoch_expired_or_foreign_lease(store: Store) -> None:
    """Only the tenure named by (owner, epoch) and unexpired is renewed; an expired one is not
    revived even if nobody took it (the keeper acquires it afresh)."""
    await acquire(store, "a", 0, 1, 2, now=0)
    await acquire(store, "b", 1, now=10)  # a's lease on 1 expired and b took it (epoch 2)
    async with store.transaction() as tx:
        assert await leases.renew(tx.conn, "a", {0: 1, 1: 1, 2: 7, 3: 1}, now=at(9), ttl=TTL) == {0}
    async with store.transaction() as tx:
        assert await leases.renew(tx.conn, "a", {2: 1}, now=at(10), ttl=TTL) == set()


async def test_release_lets_another_take_it_at_once(store: Store) -> None:
    await acquire(store, "a", 0, 1, now=0)
    async with store.transaction() as tx:
        assert await leases.release(tx.conn, "a", {0: 1, 1: 9}) == {0}  # wrong epoch: not released
    assert await table(store) == {0: (None, 1), 1: ("a", 1)}
    assert await acquire(store, "b", 0, 1, now=1) == {0: 2}


class Crash(Exception):
    pass


async def decisions_in(store: Store) -> int:
    async with store.engine.connect() as conn:
        return int(await conn.scalar(sa.text("SELECT count(*) FROM decisions")) or 0)


async def commit_fenced(store: Store, me: str, fence: dict[int, int], *, now: float, cid: str = "c-1") -> None:
    """A reconciler's batch: a decision with its actions and position, fenced, in one transaction."""
    async with store.transaction() as tx:
        decision_id = await tx.insert_decision(decision(cid, seq=7, lease_epoch=fence.get(0)))
        await tx.enqueue([action(f"{cid}-a", decision_id)])
        await tx.advance("reconciler", 0, 7)
        await leases.check_fence(tx.conn, me, fence, now=at(now), ttl=TTL)


async def test_fenced_commit_with_the_current_epoch_commits(store: Store) -> None:
    await acquire(store, "a", 0, now=0)
    await commit_fenced(store, "a", {0: 1}, now=5)
    assert await decisions_in(store) == 1
    [stored] = await store.decisions_for("ns/ds")
    assert stored.lease_epoch == 1


async def test_fenced_commit_with_a_stale_epoch_commits_nothing(store: Store) -> None:
    """After b took partition 0 over, a's commit under epoch 1 raises LeaseLost and rolls back the
    decision, its outbox rows and the position advance."""
    await acquire(store, "a", 0, 1, now=0)
    await acquire(store, "b", 0, now=10)
    with pytest.raises(LeaseLost) as lost:
        await commit_fenced(store, "a", {0: 1, 1: 1}, now=10)
    assert lost.value.partitions == {0, 1}  # 1 expired at 10 as well
    assert await decisions_in(store) == 0
    assert await store.pending(10) == []
    async with store.transaction() as tx:
        assert await tx.position("reconciler", 0) == 0


@pytest.mark.parametrize("case", ["released", "expired", "never-acquired", "other-owner"])
async def test_fence_refuses_every_lost_tenure(store: Store, case: str) -> None:
    await acquire(store, "a", 0, now=0)
    await acquire(store, "b", 1, now=0)
    fence, now = {0: 1}, 5.0
    if case == "released":
        async with store.transaction() as tx:
            await leases.release(tx.conn, "a", {0: 1})
    elif case == "expired":
        now = 10.0
    elif case == "never-acquired":
        fence = {0: 1, 2: 1}
    else:
        fence = {0: 1, 1: 1}
    with pytest.raises(LeaseLost):
        await commit_fenced(store, "a", fence, now=now)
    assert await decisions_in(store) == 0


async def test_fenced_commit_renews(store: Store) -> None:
    """A fenced commit extends the leases: b cannot take partition 0 when a's first lease would have run out."""
    await acquire(store, "a", 0, now=0)
    await commit_fenced(store, "a", {0: 1}, now=8)
    assert await acquire(store, "b", 0, now=12) == {}
    await commit_fenced(store, "a", {0: 1}, now=17, cid="c-2")
    assert await decisions_in(store) == 2


async def test_empty_fence_checks_nothing(store: Store) -> None:
    await commit_fenced(store, "a", {}, now=0)
    assert await decisions_in(store) == 1


async def test_fence_holds_the_lease_rows_until_commit(backend: str, store: Store) -> None:
    """Between check_fence and the commit no takeover can slip in. PostgreSQL locks the lease rows: a takeover
    waits (here: until its lock timeout). SQLite has a single writer: a takeover's write transaction cannot
    begin while the fenced one is open. After the commit the takeover finds the lease renewed."""
    await acquire(store, "a", 0, now=0)
    async with store.transaction() as tx:
        await tx.insert_decision(decision("c-1"))
        await leases.check_fence(tx.conn, "a", {0: 1}, now=at(9.9), ttl=TTL)
        if backend == "postgresql":
            async with store.engine.connect() as other:
                with pytest.raises(sa.exc.DBAPIError, match="lock timeout"):
                    async with other.begin():
                        await other.execute(sa.text("SET LOCAL lock_timeout = '200ms'"))
                        await leases.acquire(other, "b", [0], now=at(10), ttl=TTL)
        else:
            with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                await asyncio.to_thread(_begin_writing, str(store.engine.url.database))
    assert await acquire(store, "b", 0, now=10) == {}  # a's commit renewed it to 19.9
    assert await table(store) == {0: ("a", 1)}


def _begin_writing(path: str) -> None:
    """Another process's takeover on SQLite: a write transaction on the same file, waiting 200 ms for its lock."""
    other = sqlite3.connect(path, timeout=0.2, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()


async def members(conn: AsyncConnection) -> list[tuple[str, float]]:
    return [(m.instance, (m.heartbeat_at - at(0)).total_seconds()) for m in await leases.members(conn)]


async def test_membership(store: Store) -> None:
    """join, heartbeat, live within the ttl, leave."""
    async with store.transaction() as tx:
        await leases.join(tx.conn, "b", now=at(0), info={"host": "h1", "pid": 2})
        await leases.join(tx.conn, "a", now=at(0))
        await leases.heartbeat(tx.conn, "a", now=at(8))
        await leases.heartbeat(tx.conn, "c", now=at(9))  # a heartbeat inserts a member not there (one that left)
    async with store.transaction() as tx:
        assert await members(tx.conn) == [("a", 8), ("b", 0), ("c", 9)]
        assert await leases.live_members(tx.conn, now=at(10), ttl=TTL) == ["a", "c"]
        [_, b, _] = await leases.members(tx.conn)
        assert (b.started_at, b.info) == (at(0), {"host": "h1", "pid": 2})
        await leases.leave(tx.conn, "c")
        assert await leases.live_members(tx.conn, now=at(10), ttl=TTL) == ["a"]
