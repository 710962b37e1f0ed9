"""Split reconcilers whose hosts' clocks disagree by more than the lease ttl, on PostgreSQL: leases are measured
on the database's clock (store.leases.lease_now), so the partitions are shared and stay put, and a member
that really dies is still taken over within the ttl and a round.

Each member is what `run_reconciler` builds for a split deployment (a LeaseKeeper and a PartitionedReconciler
over real NATS), with the clock it is given: b's runs 30 s ahead of a's, 15 ttls.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from kube.times import Clock, utcnow
from kubus import status_command
from reconciler.leases import LeaseKeeper
from reconciler.partitioned import PartitionedReconciler
from runtime.bus import Bus
from store import leases
from store.engine import Store

TTL = 2.0
INTERVAL = TTL / 3  # the keeper's default
SKEW = timedelta(seconds=30)
ROUNDS = 5  # keeper rounds of each member that must leave the leases as they were
pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


def ahead() -> datetime:
    return utcnow() + SKEW


class MortalKeeper(LeaseKeeper):
    """A keeper that can die as under `kill -9`: its leases and heartbeat are left to run out."""

    dead = False

    async def leave(self) -> None:
        if not self.dead:
            await super().leave()


class Member:
    def __init__(self, bus: Bus, store: Store, name: str, clock: Clock) -> None:
        self.name = name
        self.keeper = MortalKeeper(store, name, bus.partitions, ttl=TTL, clock=clock)
        self.loop = PartitionedReconciler(bus, store, self.keeper, name, clock=clock)
        self.tasks = [asyncio.create_task(self.keeper.run(), name=f"{name}-keeper"),
                      asyncio.create_task(self.loop.run(), name=f"{name}-loop")]

    async def stop(self, die: bool = False) -> None:
        self.keeper.dead = die
        self.loop.stop()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@pytest.fixture
async def members(bus: Bus, store: Store) -> AsyncIterator[dict[str, Member]]:
    started = {"a": Member(bus, store, "a", utcnow), "b": Member(bus, store, "b", ahead)}
    yield started
    for member in started.values():
        await member.stop()


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30.0) -> float:
    """Seconds it took `check` to hold."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    while not await check():
        assert loop.time() - began < timeout, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)  # polling interval of the wait, not a synchronisation
    return loop.time() - began


async def table(store: Store) -> dict[int, tuple[str, int]]:
    """partition -> (owner, epoch) of the leases held now, on the database's clock."""
    async with store.transaction() as tx:
        now = await tx.lease_now(utcnow())
        return {lease.partition: (lease.owner, lease.epoch) for lease in await leases.leases(tx.conn)
                if lease.owner is not None and lease.held_at(now)}


async def heartbeats(store: Store) -> dict[str, datetime]:
    async with store.engine.connect() as conn:
        return {m.instance: m.heartbeat_at for m in await leases.members(conn)}


async def balanced(store: Store) -> dict[int, tuple[str, int]]:
    async def split() -> bool:
        held = Counter(owner for owner, _ in (await table(store)).values())
        return sorted(held.items()) == [("a", 2), ("b", 2)]

    await until(split, "the 4 partitions split 2 and 2 between a and b (b's clock 30 s ahead)")
    return await table(store)


async def test_a_clock_ahead_by_more_than_the_ttl_churns_nothing(store: Store, members: dict[str, Member]) -> None:
    settled = await balanced(store)
    seen: dict[str, set[datetime]] = {"a": set(), "b": set()}

    async def rounds() -> bool:
        assert await table(store) == settled, "a lease moved: churn"
        for name, at in (await heartbeats(store)).items():
            seen[name].add(at)
        return all(len(s) > ROUNDS for s in seen.values())

    await until(rounds, f"{ROUNDS} keeper rounds of each member", timeout=ROUNDS * INTERVAL + 20)
    assert not any(m.keeper.last.lost or m.keeper.last.error for m in members.values())
    # the heartbeats are the database's time: b's are not 30 s in the future
    assert all(abs(at - utcnow()) < SKEW / 3 for at in (await heartbeats(store)).values())

    # `kubus status` on a host whose clock is off too sees both members live, their leases unexpired
    snap = await status_command.read_store(store)
    status = status_command.build(snap, None, status_command.NatsStatus(url=None, reachable=False),
                                  now=datetime.now(UTC) - SKEW, ttl=TTL, partitions=4, prefix="kubus")
    assert [(m.instance, m.live, len(m.partitions)) for m in status.members] == [("a", True, 2), ("b", True, 2)]
    assert all(row.expires_in_s is not None and 0 < row.expires_in_s <= TTL
               for row in status.partitions if row.owner is not None)


@pytest.mark.parametrize("victim", ["a", "b"])
async def test_a_real_death_is_taken_over_within_the_ttl_and_a_round(store: Store, members: dict[str, Member],
                                                                     victim: str) -> None:
    """Whichever dies (the member on time or the one 30 s ahead), the other takes its partitions once their
    leases ran out on the database's clock: within the ttl and two keeper rounds, under new epochs."""
    settled = await balanced(store)
    survivor = "b" if victim == "a" else "a"
    await members[victim].stop(die=True)

    async def taken_over() -> bool:
        return {owner for owner, _ in (await table(store)).values()} == {survivor} and len(await table(store)) == 4

    took = await until(taken_over, f"{survivor} holding every partition")
    assert took <= TTL + 2 * INTERVAL + 1.0, f"the takeover took {took:.1f} s"
    now = await table(store)
    for partition, (owner, epoch) in settled.items():
        assert now[partition][1] == (epoch if owner == survivor else epoch + 1), f"partition {partition}"
