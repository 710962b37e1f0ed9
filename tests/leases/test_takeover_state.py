"""A takeover continues from exactly what the previous owner committed (issue 12).

The previous owner here commits a decision (create one pod, expecting it) and dies before it sees the pod:
its commit is the only record of what it expected. The next owner must replay the events after the point
that commit stands for, so that the pod's ADDED event satisfies the expectation, and scale the ReplicaSet
at once when asked, not after the 5-minute expectations timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import msgspec
import pytest
import sqlalchemy as sa

from kube.testing import node, replicaset
from messages import codec, subjects
from messages.actions import CreatePods
from messages.keys import parse_controller_key
from messages.observed import ADDED, MODIFIED
from reconciler.consuming import Reconciler
from reconciler.service import run_reconciler
from replay.source import Window
from runtime.bus import Bus
from runtime.serving import Health
from store import leases
from store.engine import Store
from tests.leases.test_split_reconcilers import TTL, replayed, until
from tests.reconciler.builders import observed, owned_pod

NAMESPACE = "shop"


async def publish(bus: Bus, obj: object, event_type: str) -> None:
    event = observed(obj, event_type)
    subject = subjects.event_subject(bus.partition_of(event.namespace), event.kind, event.uid, bus.prefix)
    await bus.js.publish(subject, codec.encode(event), headers={"Nats-Msg-Id": event.msg_id})


async def creates(store: Store) -> list[CreatePods]:
    """The CreatePods the reconcilers committed to the outbox, oldest first."""
    async with store.engine.connect() as conn:
        payloads = (await conn.execute(sa.text("select payload from outbox order by created_at, key"))).scalars()
        found = [codec.decode_action(bytes(p)) for p in payloads]
    return [a for a in found if isinstance(a, CreatePods)]


@pytest.fixture
async def running() -> AsyncIterator[list[tuple[Reconciler, asyncio.Task[None]]]]:
    started: list[tuple[Reconciler, asyncio.Task[None]]] = []
    yield started
    for reconciler, task in started:
        reconciler.stop()
        task.cancel()
    await asyncio.gather(*(t for _, t in started), return_exceptions=True)


async def test_the_next_owner_sees_the_pod_the_dead_owner_expected(
        bus: Bus, store: Store, running: list[tuple[Reconciler, asyncio.Task[None]]]) -> None:
    partition = int(bus.partition_of(NAMESPACE))
    rs = replicaset("web").ns(NAMESPACE).uid("rs-1").rv("10").replicas(1).build()
    await publish(bus, rs, ADDED)

    # "a" bootstraps the ReplicaSet from KUBUS_STATE, has nothing to replay, decides one create and commits it
    async with store.transaction() as tx:
        held = await leases.acquire(tx.conn, "a", [partition], now=datetime.now(UTC), ttl=60)
    a = Reconciler(bus, store, instance="a", partitions=held, lease_ttl=60)
    a_task = asyncio.create_task(a.run())

    async def a_decided() -> bool:
        return len(await creates(store)) == 1

    await until(a_decided, "a's decision to create the first pod")
    a_task.cancel()  # kill -9: nothing more of a's is committed
    await asyncio.gather(a_task, return_exceptions=True)
    (first,) = await creates(store)
    assert first.controller == f"ReplicaSet/{NAMESPACE}/web" and len(first.pods) == 1

    # the executor creates the pod; its ADDED event reaches the stream after a died
    await publish(bus, owned_pod(first.pods[0].key, rs).uid("pod-1").rv("11").build(), ADDED)
    async with store.transaction() as tx:
        await leases.release(tx.conn, "a", held)
        taken = await leases.acquire(tx.conn, "b", [partition], now=datetime.now(UTC), ttl=60)
    b = Reconciler(bus, store, instance="b", partitions=taken, lease_ttl=60)
    running.append((b, asyncio.create_task(b.run())))

    async def caught_up() -> bool:
        return b.caught_up

    await until(caught_up, "b caught up")
    await publish(bus, msgspec.structs.replace(rs, spec=msgspec.structs.replace(rs.spec, replicas=2),
                                               metadata=msgspec.structs.replace(rs.metadata, resource_version="12")),
                  MODIFIED)

    async def b_decided() -> bool:
        return len(await creates(store)) == 2

    # the expectation a left is satisfied by the replayed ADDED event; without it b waits for 5 minutes
    await until(b_decided, "b's decision to create the second pod", timeout=10 * TTL)
    second = (await creates(store))[1]
    assert second.controller == first.controller and len(second.pods) == 1
    key = parse_controller_key(first.controller)
    assert key is not None and b.controllers.expectations[key].adds == 1  # b's own create, nothing left of a's

    b.stop()
    await asyncio.wait_for(running[0][1], 20)
    engine = await replayed(bus, store, Window(instance="b"))
    assert engine.divergence is None, f"replay of b: {engine.divergence}"
    assert engine.stats.compared > 0


async def observed_seqs(store: Store) -> list[int]:
    async with store.engine.connect() as conn:
        return list((await conn.execute(sa.text("select stream_seq from observed_events order by stream_seq"))
                     ).scalars())


async def test_the_next_owner_observes_what_a_first_owner_on_an_empty_stream_never_recorded(
        bus: Bus, store: Store, running: list[tuple[Reconciler, asyncio.Task[None]]]) -> None:
    """A fresh deployment: the first owner starts on an empty stream (nothing to bootstrap, it resumes at the
    first event) and commits only the cluster partition's events before it dies, so its partitions have no
    position of their own. The next owner must resume from where that first commit stood, not after its own
    bootstrap: the ReplicaSet's ADDED event, published while nobody ran, is observed by a committed batch
    (the audit trail has every event) and decided on."""
    partition = int(bus.partition_of(NAMESPACE))
    async with store.transaction() as tx:
        held = await leases.acquire(tx.conn, "a", [partition], now=datetime.now(UTC), ttl=60)
    a = Reconciler(bus, store, instance="a", partitions=held, lease_ttl=60)
    a_task = asyncio.create_task(a.run())

    async def a_caught_up() -> bool:
        return a.caught_up

    await until(a_caught_up, "a caught up with the empty stream")
    await publish(bus, node("n1").uid("node-1").rv("1").build(), ADDED)  # seq 1, the cluster partition

    async def node_observed() -> bool:
        return await observed_seqs(store) == [1]

    await until(node_observed, "a's commit of the node's event")
    a_task.cancel()  # kill -9
    await asyncio.gather(a_task, return_exceptions=True)

    await publish(bus, replicaset("web").ns(NAMESPACE).uid("rs-1").rv("2").replicas(1).build(), ADDED)  # seq 2
    async with store.transaction() as tx:
        await leases.release(tx.conn, "a", held)
        taken = await leases.acquire(tx.conn, "b", [partition], now=datetime.now(UTC), ttl=60)
    b = Reconciler(bus, store, instance="b", partitions=taken, lease_ttl=60)
    running.append((b, asyncio.create_task(b.run())))

    async def b_decided() -> bool:
        return len(await creates(store)) == 1

    await until(b_decided, "b's decision to create the pod")
    assert await observed_seqs(store) == [1, 2], "the ReplicaSet's event observed by no committed batch"


async def test_the_next_owner_relays_what_the_dead_owner_committed_exactly_once(
        bus: Bus, store: Store, running: list[tuple[Reconciler, asyncio.Task[None]]]) -> None:
    partition = int(bus.partition_of(NAMESPACE))
    await publish(bus, replicaset("web").ns(NAMESPACE).uid("rs-1").rv("10").replicas(2).build(), ADDED)
    async with store.transaction() as tx:
        held = await leases.acquire(tx.conn, "reconciler-a", [partition], now=datetime.now(UTC), ttl=TTL)
    a = Reconciler(bus, store, instance="reconciler-a", partitions=held, lease_ttl=TTL)
    a_task = asyncio.create_task(a.run())  # the loop alone: its relay never runs

    async def a_decided() -> bool:
        return len(await creates(store)) == 1

    await until(a_decided, "a's decision")
    a_task.cancel()  # kill -9 before its relay published the row
    await asyncio.gather(a_task, return_exceptions=True)
    rows = await store.pending(10)  # the create, and the status write beside it
    assert rows and any(isinstance(codec.decode_action(r.payload), CreatePods) for r in rows)

    # b, a member of the split deployment with its relay, takes the partition over once a's lease runs out
    b = asyncio.create_task(run_reconciler(bus, store, Health(), "b", lease_ttl=TTL))
    try:
        async def relayed() -> bool:
            return not await store.pending(10)

        await until(relayed, "a's outbox row relayed by b", timeout=10 * TTL)
        stream = bus.stream(subjects.ACTIONS_STREAM)
        sub = await bus.js.pull_subscribe(f"{bus.prefix}.actions.>", durable="probe", stream=stream)
        got = [codec.decode_action(m.data).key for m in await sub.fetch(20, timeout=2)]
        assert all(got.count(row.key) == 1 for row in rows), got
        assert not b.done()
    finally:
        b.cancel()
        await asyncio.gather(b, return_exceptions=True)
