"""The reconciler over real NATS and SQLite: events in, one transaction, actions out, exactly once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import sqlalchemy as sa

from kube.testing import replicaset
from messages import codec, subjects
from messages.actions import CreatePods
from messages.observed import ObservedEvent
from reconciler.service import run_reconciler
from runtime.bus import Bus
from runtime.serving import Health
from store.engine import open_store
from tests.reconciler.builders import observed


def replicaset_event(namespace: str, pods: int, rv: str = "10") -> ObservedEvent:
    """A ReplicaSet `web` asking for `pods` pods in `namespace`, its status up to date: its sync issues one
    CreatePods and nothing else (no status write)."""
    rs = replicaset("web").ns(namespace).rv(rv).selector(app="web").replicas(pods).observed_generation(1).build()
    rs.status.terminating_replicas = 0  # as the sync counts them (DeploymentReplicaSetTerminatingReplicas is on)
    return observed(rs)


async def publish(bus: Bus, event: ObservedEvent) -> None:
    subject = subjects.event_subject(bus.partition_of(event.namespace), event.kind, event.uid, bus.prefix)
    await bus.js.publish(subject, codec.encode(event), headers={"Nats-Msg-Id": event.msg_id})


async def actions(bus: Bus, want: int, timeout: float = 10.0) -> list[CreatePods]:
    sub = await bus.js.pull_subscribe(f"{bus.prefix}.actions.>", durable="probe",
                                      stream=bus.stream(subjects.ACTIONS_STREAM))
    seen: list[CreatePods] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(seen) < want and loop.time() < deadline:
        try:
            for msg in await sub.fetch(10, timeout=0.5):
                action = codec.decode_action(msg.data)
                assert isinstance(action, CreatePods)
                seen.append(action)
                await msg.ack()
        except TimeoutError:
            continue
    return seen


async def test_replicaset_becomes_one_create_action_and_sql_rows(bus: Bus, tmp_path: Path) -> None:
    """A ReplicaSet asking for 3 pods yields one CreatePods of 3, recorded as decision, outbox and position."""
    store = await open_store(None, str(tmp_path))
    task = asyncio.create_task(run_reconciler(bus, store, Health()))
    try:
        await publish(bus, replicaset_event("demo", 3))
        got = await actions(bus, 1)
        assert len(got) == 1 and len(got[0].pods) == 3
        assert got[0].decision_id > 0 and got[0].controller == "ReplicaSet/demo/web"
        # the same event again (a redelivery, a replay) decides nothing new
        await publish(bus, replicaset_event("demo", 3, rv="11"))
        assert await actions(bus, 1, timeout=1.5) == []
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    async with store.engine.connect() as conn:
        decisions = (await conn.execute(sa.text("select controller_key, summary from decisions"))).all()
        outbox = (await conn.execute(sa.text("select state from outbox"))).all()
        positions = (await conn.execute(sa.text("select stream_seq from consumer_positions"))).all()
    await store.close()
    assert [d[0] for d in decisions] == ["ReplicaSet/demo/web", "ReplicaSet/demo/web"]
    assert [o[0] for o in outbox] == ["sent"]
    assert positions == [(2,)]
