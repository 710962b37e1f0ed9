"""The lease keeper: reconcilers sharing the partitions through the store, on SQLite and PostgreSQL.

The clock is a FakeClock moved by the tests and every round is an explicit `tick()`: no sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest

from reconciler.leases import LeaseKeeper, StaticLeases
from store import leases
from store.engine import Store
from store.leases import LeaseClock, LeaseLost
from tests.store.builders import FakeClock, decision

P = 16
TTL = 10.0
STEP = TTL / 3  # the keeper's default interval


@pytest.fixture
def lease_clock() -> LeaseClock:
    """These tests move a FakeClock through lease expiries: the store measures leases on it, on PostgreSQL
    too (test_clock_skew.py runs keepers on PostgreSQL's own clock)."""
    return "local"


class Recorder:
    """A consuming loop's side of the handshake: it records what it is told."""

    def __init__(self) -> None:
        self.acquired: list[dict[int, int]] = []
        self.revoked: list[frozenset[int]] = []
        self.lost: list[frozenset[int]] = []
        self.got_some = asyncio.Event()

    def on_acquired(self, leases: Mapping[int, int]) -> None:
        self.acquired.append(dict(leases))
        self.got_some.set()

    def on_revoked(self, partitions: frozenset[int]) -> None:
        self.revoked.append(partitions)

    def on_lost(self, partitions: frozenset[int]) -> None:
        self.lost.append(partitions)


def keeper(store: Store, clock: FakeClock, name: str, listener: Recorder | None = None) -> LeaseKeeper:
    return LeaseKeeper(store, name, P, ttl=TTL, clock=clock, listener=listener, info={"test": name})


async def owners(store: Store) -> dict[int, str | None]:
    async with store.engine.connect() as conn:
        return {lease.partition: lease.owner for lease in await leases.leases(conn)}


async def settle(clock: FakeClock, *keepers: LeaseKeeper) -> None:
    """Tick every keeper, one interval apart, until a whole round changes nothing."""
    for _ in range(10):
        changed = False
        for k in keepers:
            clock.tick(0.1)
            report = await k.tick()
            changed |= bool(report.acquired or report.released or report.lost or report.waiting)
        if not changed:
            return
    raise AssertionError("the keepers did not settle within 10 rounds")


def assert_split(*keepers: LeaseKeeper) -> None:
    owned = [set(k.fence()) for k in keepers]
    assert sorted(p for o in owned for p in o) == list(range(P)), "every partition exactly once"
    assert max(map(len, owned)) - min(map(len, owned)) <= 1


async def test_single_reconciler_owns_everything_at_once(store: Store, clock: FakeClock) -> None:
    """Alone and unconfigured, a reconciler takes every partition on its first tick, as today."""
    a = keeper(store, clock, "a")
    report = await a.tick()
    assert report.live == ("a",)
    assert report.acquired == dict.fromkeys(range(P), 1)
    assert a.fence() == dict.fromkeys(range(P), 1)


async def test_two_reconcilers_share_evenly(store: Store, clock: FakeClock) -> None:
    """A newcomer waits while the holder gives up its share, then takes it: 8 and 8."""
    a, b = keeper(store, clock, "a"), keeper(store, clock, "b")
    await a.tick()
    first = await b.tick()
    assert first.acquired == {} and len(first.waiting) == P // 2  # still a's: a is live
    clock.tick(STEP)
    assert len((await a.tick()).released) == P // 2  # no listener: a releases at once
    taken = await b.tick()
    assert len(taken.acquired) == P // 2 and set(taken.acquired.values()) == {2}
    assert_split(a, b)
    assert await owners(store) == {p: "a" if p in a.fence() else "b" for p in range(P)}


async def test_three_reconcilers_balance(store: Store, clock: FakeClock) -> None:
    ks = [keeper(store, clock, n) for n in ("a", "b", "c")]
    await settle(clock, *ks)
    assert_split(*ks)
    assert sorted(len(k.fence()) for k in ks) == [5, 5, 6]


async def test_dead_reconcilers_partitions_move_after_the_ttl(store: Store, clock: FakeClock) -> None:
    """b stops heartbeating (a crash): a takes b's partitions once b's leases expire, not before,
    under new epochs; b's decisions under its old epochs can no longer commit. When b comes back
    it finds its leases lost, rejoins, and the partitions are shared again."""
    a, b = keeper(store, clock, "a"), keeper(store, clock, "b")
    await settle(clock, a, b)
    b_fence = b.fence()
    b_renewed = clock.now
    while clock.now - b_renewed < timedelta(seconds=TTL):
        report = await a.tick()
        assert report.acquired == {}, "b's leases are taken before they expire"
        clock.tick(STEP)
    report = await a.tick()
    assert set(report.acquired) == set(b_fence)
    assert all(epoch == b_fence[p] + 1 for p, epoch in report.acquired.items())
    assert set(a.fence()) == set(range(P))

    with pytest.raises(LeaseLost):  # b's loop, waking up mid-batch: nothing commits
        async with store.transaction() as tx:
            await tx.insert_decision(decision("late", lease_epoch=b_fence[min(b_fence)]))
            await leases.check_fence(tx.conn, "b", b_fence, now=clock.now)
    assert await store.decisions_for("ns/ds") == []

    back = await b.tick()
    assert back.lost == frozenset(b_fence) and b.fence() == {}
    await settle(clock, a, b)
    assert_split(a, b)


async def test_revocation_waits_for_the_loop(store: Store, clock: FakeClock) -> None:
    """With a listener, the keeper asks the loop to give partitions up and keeps renewing them until
    the loop releases them; only then can the newcomer take them."""
    loop = Recorder()
    a = LeaseKeeper(store, "a", P, ttl=TTL, clock=clock, listener=loop, revoke_timeout=60.0)
    b = keeper(store, clock, "b")
    await a.tick()
    assert loop.acquired == [dict.fromkeys(range(P), 1)]
    await b.tick()
    await a.tick()
    [revoked] = loop.revoked
    assert len(revoked) == P // 2 and a.revoking == revoked
    assert set(a.fence()) == set(range(P))  # still ours until released: the batch in flight may commit
    for _ in range(6):  # well past the ttl: a keeps renewing what the loop has not released
        clock.tick(STEP)
        await a.tick()
        assert (await b.tick()).acquired == {}
    assert loop.revoked == [revoked], "revoked once"
    assert await a.release(revoked) == revoked
    assert set(a.fence()) == set(range(P)) - revoked
    assert set((await b.tick()).acquired) == revoked
    assert loop.lost == []


async def test_revocation_not_released_in_time_is_forced(store: Store, clock: FakeClock) -> None:
    loop = Recorder()
    a = LeaseKeeper(store, "a", P, ttl=TTL, clock=clock, listener=loop, revoke_timeout=5.0)
    b = keeper(store, clock, "b")
    await a.tick()
    await b.tick()
    await a.tick()
    [revoked] = loop.revoked
    clock.tick(STEP)
    assert (await a.tick()).released == frozenset()
    clock.tick(STEP)
    report = await a.tick()
    assert report.released == revoked and report.lost == revoked
    assert loop.lost == [revoked]
    assert set((await b.tick()).acquired) == revoked


async def test_leave_hands_over_without_waiting_for_the_ttl(store: Store, clock: FakeClock) -> None:
    a, b = keeper(store, clock, "a"), keeper(store, clock, "b")
    await settle(clock, a, b)
    await b.leave()
    clock.tick(0.1)
    report = await a.tick()
    assert report.live == ("a",) and set(a.fence()) == set(range(P))
    async with store.engine.connect() as conn:
        assert [m.instance for m in await leases.members(conn)] == ["a"]


async def test_restart_under_the_same_name_takes_over_at_once(store: Store, clock: FakeClock) -> None:
    """A restarted reconciler with a stable name (KUBUS_INSTANCE) need not wait out its old leases;
    the new epochs fence the old process if it is in fact still running."""
    old, loop = keeper(store, clock, "a"), Recorder()
    old.listener = loop
    await old.tick()
    clock.tick(1)
    new = keeper(store, clock, "a")
    assert (await new.tick()).acquired == dict.fromkeys(range(P), 2)
    clock.tick(STEP)
    assert (await old.tick()).lost == frozenset(range(P))
    assert loop.lost == [frozenset(range(P))]


@asynccontextmanager
async def broken(store: Store) -> AsyncIterator[None]:
    raise ConnectionError("database away")
    yield  # pragma: no cover


async def test_store_failure_loses_the_leases_when_they_expire(store: Store, clock: FakeClock,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Renewals failing (database away): the keeper keeps its partitions as long as its last
    renewal covers them, then reports them lost to the loop."""
    loop = Recorder()
    a = keeper(store, clock, "a", loop)
    await a.tick()
    renewed = clock.now
    monkeypatch.setattr(store, "transaction", lambda: broken(store))
    for _ in range(2):
        clock.tick(STEP)
        report = await a.tick()
        assert report.error == "database away" and report.lost == frozenset()
    clock.now = renewed + timedelta(seconds=TTL)
    report = await a.tick()
    assert report.lost == frozenset(range(P)) and loop.lost == [frozenset(range(P))]
    assert a.fence() == {}


async def test_commit_that_raised_lease_lost_is_forgotten(store: Store, clock: FakeClock) -> None:
    """`lost()` drops partitions the loop found lost at commit; the next tick takes them back if
    they are still free (here: expired and nobody else wanted them) under a new epoch."""
    loop = Recorder()
    a = keeper(store, clock, "a", loop)
    await a.tick()
    a.lost([3])
    assert 3 not in a.fence()
    clock.tick(TTL)  # 3 was not renewed; the rest expires too without ticks, and is lost
    report = await a.tick()
    assert report.lost == frozenset(range(P)) - {3}
    assert report.acquired == dict.fromkeys(range(P), 2)


async def test_run_ticks_and_leaves_when_cancelled(store: Store) -> None:
    """`run()` with the real clock: acquires everything, and on cancellation releases it all and
    leaves the membership."""
    loop = Recorder()
    a = LeaseKeeper(store, "a", P, ttl=TTL, listener=loop)
    task = asyncio.create_task(a.run())
    await asyncio.wait_for(loop.got_some.wait(), 10)
    assert set(a.fence()) == set(range(P))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loop.lost == [frozenset(range(P))]
    assert set((await owners(store)).values()) == {None}
    async with store.engine.connect() as conn:
        assert await leases.members(conn) == []



async def test_a_leave_that_fails_is_said(store: Store, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """A stopping keeper whose leave the store refuses says so (the others then wait out the ttl), instead of
    ending as if it had left."""
    loop = Recorder()
    a = LeaseKeeper(store, "a", P, ttl=TTL, listener=loop)
    task = asyncio.create_task(a.run())
    await asyncio.wait_for(loop.got_some.wait(), 10)
    monkeypatch.setattr(store, "transaction", lambda: broken(store))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert "could not leave the reconciler group (its partitions go when their leases expire, in 10 s): " \
           "database away" in caplog.text

def test_static_leases_own_everything_and_fence_nothing() -> None:
    static = StaticLeases(4)
    assert static.owned == dict.fromkeys(range(4), 0) and static.fence() == {} and static.owns(3)


async def test_next_round_is_due_no_later_than_the_leases_run_out(store: Store, clock: FakeClock,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The interval normally; 0.5 s while waiting for a handover; and with renewals failing, the
    round that reports the loss comes when the last renewal runs out, not an interval later."""
    a, b = keeper(store, clock, "a"), keeper(store, clock, "b")
    assert a.next_delay(await a.tick()) == pytest.approx(STEP)
    assert b.next_delay(await b.tick()) == 0.5  # waiting for a to hand over
    monkeypatch.setattr(store, "transaction", lambda: broken(store))
    clock.tick(8.5)
    report = await a.tick()
    assert report.error and a.next_delay(report) == pytest.approx(1.5)


def test_both_kinds_of_leases_fit_the_loops_protocol(store: Store, clock: FakeClock) -> None:
    from reconciler.leases import PartitionLeases

    kinds: list[PartitionLeases] = [keeper(store, clock, "a"), StaticLeases(P)]
    assert [k.owns(0) for k in kinds] == [False, True]
