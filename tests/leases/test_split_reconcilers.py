"""Reconcilers sharing the partitions over real NATS, on SQLite and PostgreSQL: each namespace is decided
for by the member holding its partition, under that lease's epoch; a member that leaves hands its
partitions over; a reconciler whose lease moved on commits nothing.

A ReplicaSet per namespace whose status is up to date (one CreatePods each) and no executor keep the
cluster out of it: what is tested is who decides, not what.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from messages import subjects
from reconciler.consuming import Reconciler
from reconciler.service import run_reconciler
from replay.engine import Engine
from replay.source import Window, live_bundles
from runtime.bus import Bus
from runtime.serving import Health
from store import leases, ticks
from store.engine import Store
from store.leases import LeaseLost
from tests.pipeline.test_reconciler import actions, publish, replicaset_event

TTL = 2.0
PARTITIONS = 4  # the bus fixture's


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)  # polling interval of the wait, not a synchronisation


async def owners(store: Store) -> dict[int, str]:
    now = datetime.now(UTC)
    async with store.engine.connect() as conn:
        return {lease.partition: lease.owner for lease in await leases.leases(conn)
                if lease.owner is not None and lease.held_at(now)}


def namespaces_per_partition(count: int) -> dict[int, list[str]]:
    """`count` namespaces in each partition."""
    found: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    i = 0
    while any(len(v) < count for v in found.values()):
        name = f"team-{i}"
        p = int(subjects.partition_of(name, PARTITIONS))
        if len(found[p]) < count:
            found[p].append(name)
        i += 1
    return found


@pytest.fixture
async def members(bus: Bus, store: Store) -> AsyncIterator[dict[str, asyncio.Task[None]]]:
    started: dict[str, asyncio.Task[None]] = {}
    for name in ("a", "b"):
        started[name] = asyncio.create_task(run_reconciler(bus, store, Health(), name, lease_ttl=TTL))
    yield started
    for task in started.values():
        task.cancel()
    await asyncio.gather(*started.values(), return_exceptions=True)


async def decided_by(store: Store) -> dict[str, tuple[str, int, int | None]]:
    """controller key -> (instance, partition, lease epoch) of the decision that created its pods."""
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.text(
            "select d.id, d.controller_key, d.partition, d.lease_epoch from decisions d "
            "join outbox o on o.decision_id = d.id"))).all()
        instance_of = {i: t.instance for t in await ticks.load(conn) for i in t.decision_ids}
    keys = Counter(r[1] for r in rows)
    assert all(n == 1 for n in keys.values()), f"a controller decided to create twice: {keys}"
    return {r[1]: (instance_of[r[0]], r[2], r[3]) for r in rows}


async def test_each_namespace_is_decided_by_the_owner_of_its_partition(
        bus: Bus, store: Store, members: dict[str, asyncio.Task[None]]) -> None:
    async def balanced() -> bool:
        held = Counter((await owners(store)).values())
        return sorted(held.items()) == [("a", 2), ("b", 2)]

    await until(balanced, "the 4 partitions split 2 and 2 between a and b")
    names = namespaces_per_partition(2)
    for group in names.values():
        for name in group:
            await publish(bus, replicaset_event(name, 1))
    got = await actions(bus, 8, timeout=20)
    assert sorted(a.controller for a in got) == sorted(f"ReplicaSet/{n}/web" for g in names.values() for n in g)

    owner = await owners(store)
    async with store.engine.connect() as conn:
        epochs = {lease.partition: lease.epoch for lease in await leases.leases(conn)}
    for key, (instance, partition, epoch) in (await decided_by(store)).items():
        assert instance == owner[partition], f"{key} in partition {partition} decided by {instance}"
        assert epoch == epochs[partition], f"{key} decided under epoch {epoch}, the lease is at {epochs[partition]}"
    assert not any(task.done() for task in members.values())


async def test_a_member_that_leaves_hands_its_partitions_over(
        bus: Bus, store: Store, members: dict[str, asyncio.Task[None]]) -> None:
    async def balanced() -> bool:
        return sorted(Counter((await owners(store)).values()).values()) == [2, 2]

    await until(balanced, "2 and 2")
    members["a"].cancel()  # a clean shutdown: releases its leases and leaves
    await asyncio.gather(members["a"], return_exceptions=True)

    async def all_b() -> bool:
        return await owners(store) == dict.fromkeys(range(PARTITIONS), "b")

    await until(all_b, "b holding every partition", timeout=3 * TTL + 10)
    names = [group[0] for group in namespaces_per_partition(1).values()]
    for name in names:
        await publish(bus, replicaset_event(name, 2))
    got = await actions(bus, len(names), timeout=20)
    assert sorted(a.controller for a in got) == sorted(f"ReplicaSet/{n}/web" for n in names)
    assert {instance for instance, _, _ in (await decided_by(store)).values()} == {"b"}

    # each member replays on its own, its second set of partitions included, deciding what it decided
    members["b"].cancel()
    await asyncio.gather(members["b"], return_exceptions=True)
    engine = await replayed(bus, store, Window(instance="b"))
    assert engine.divergence is None, f"replay of b: {engine.divergence}"
    assert engine.stats.starts >= 1 and engine.stats.compared > 0
    if await live_bundles(store, bus, Window(instance="a")) is not None:  # "a" may have left before any commit
        engine = await replayed(bus, store, Window(instance="a"))
        assert engine.divergence is None, f"replay of a: {engine.divergence}"


async def replayed(bus: Bus, store: Store, window: Window) -> Engine:
    found = await live_bundles(store, bus, window)
    assert found is not None
    bundles, close = found
    engine = Engine(compare=True)
    try:
        async for bundle in bundles:
            engine.feed(bundle)
            if engine.divergence is not None:
                break
    finally:
        await close()
    return engine


async def test_a_reconciler_whose_lease_moved_on_commits_nothing(bus: Bus, store: Store) -> None:
    name = namespaces_per_partition(1)[1][0]
    now = datetime.now(UTC)
    async with store.transaction() as tx:
        epochs = await leases.acquire(tx.conn, "a", [1], now=now, ttl=60)
    # "a" decides with an epoch it no longer holds (another member took the partition meanwhile)
    stale = Reconciler(bus, store, instance="a", partitions={1: epochs[1] - 1}, lease_ttl=60)
    await publish(bus, replicaset_event(name, 1))
    with pytest.raises(LeaseLost) as lost:
        await asyncio.wait_for(stale.run(), 20)
    assert lost.value.partitions == {1}
    async with store.engine.connect() as conn:
        for table in ("decisions", "outbox", "consumer_positions", "reconciler_ticks"):
            count = (await conn.execute(sa.text(f"select count(*) from {table}"))).scalar_one()
            assert count == 0, f"{table} has {count} rows committed under a lost lease"

    # under the current epoch the same history is decided and committed
    current = Reconciler(bus, store, instance="a", partitions=epochs, lease_ttl=60)
    task = asyncio.create_task(current.run())

    async def committed() -> bool:
        async with store.engine.connect() as conn:
            return bool((await conn.execute(sa.text("select count(*) from outbox"))).scalar_one())

    try:
        await until(committed, "the decision under the current epoch")
    finally:
        current.stop()
        await asyncio.wait_for(task, 20)
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.text(
            "select d.controller_key, d.partition, d.lease_epoch from decisions d "
            "join outbox o on o.decision_id = d.id"))).all()
    assert rows == [(f"ReplicaSet/{name}/web", 1, epochs[1])]


async def test_a_member_catches_up_when_the_history_ends_in_other_partitions(bus: Bus, store: Store) -> None:
    """Catching up is reaching the stream's end, whichever partition its last events are in."""
    names = namespaces_per_partition(1)
    await publish(bus, replicaset_event(names[1][0], 1))
    for group in (names[0], names[2], names[3]):
        await publish(bus, replicaset_event(group[0], 1))
    async with store.transaction() as tx:
        epochs = await leases.acquire(tx.conn, "a", [1], now=datetime.now(UTC), ttl=60)
        await tx.advance("reconciler", 1, 1)  # a previous owner committed partition 1's event
    member = Reconciler(bus, store, instance="a", partitions=epochs, lease_ttl=60)
    task = asyncio.create_task(member.run())

    async def decided() -> bool:
        async with store.engine.connect() as conn:
            return bool((await conn.execute(sa.text("select count(*) from outbox"))).scalar_one())

    try:
        await until(decided, "the decision for the namespace in partition 1")
        assert member.caught_up
    finally:
        member.stop()
        await asyncio.wait_for(task, 20)
    async with store.engine.connect() as conn:
        keys = (await conn.execute(sa.text("select controller_key from decisions"))).scalars().all()
    assert keys == [f"ReplicaSet/{names[1][0]}/web"]
