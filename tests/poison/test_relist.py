"""Poison and newer messages where ingest reads the bus: its relist reads KUBUS_STATE and the last event per
subject of KUBUS_EVENTS, against a real `kubus sim` and NATS. An unusable one is moved to KUBUS_DEAD (stored once,
however many read it), and the relist goes on; a newer kubus's one stops that kind (not the others), /readyz
false, until an upgraded ingest lists it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
import pytest

from ingest.config import IngestConfig
from ingest.service import Ingest
from kube.testing import pod
from messages import codec, subjects
from messages.observed import SCHEMA_VERSION
from reconciler.bootstrapping import wait_for_state
from runtime.bus import Bus
from runtime.serving import Health
from tests.poison.conftest import dead_counts, dead_letters, eventually, halted_gauge
from tests.reconciler.builders import observed
from tests.simulation import SimProcess


@asynccontextmanager
async def ingesting(bus: Bus, sim: SimProcess) -> AsyncIterator[tuple[Ingest, Health, asyncio.Task[None]]]:
    """An ingest of Pods and Nodes with no checkpoints, so it starts with a relist of both."""
    config = IngestConfig(prefix=bus.prefix, partitions=bus.partitions, kubeconfig=str(sim.kubeconfig),
                          kinds=("Node", "Pod"), instance="ingest-poison", checkpoints="memory",
                          backoff_initial=0.05, backoff_max=0.5, stop_timeout=2.0)
    ingest, health = Ingest(config), Health()
    task = asyncio.create_task(ingest.run(bus, health))
    try:
        yield ingest, health, task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def publish_pod_event(bus: Bus, data: bytes, uid: str) -> int:
    subject = subjects.event_subject(bus.partition_of("ghosts"), "Pod", uid, bus.prefix)
    return (await bus.js.publish(subject, data)).seq


async def test_unusable_messages_in_the_relists_input_are_dead_lettered_once(bus: Bus, sim: SimProcess) -> None:
    good = observed(pod("ghost").ns("ghosts").uid("ghost-uid").build())
    await publish_pod_event(bus, codec.encode(good), good.uid)
    await publish_pod_event(bus, b"not json at all", "junk-uid")
    await publish_pod_event(bus, msgspec.json.encode({**msgspec.json.decode(codec.encode(good)), "uid": "late-uid",
                                                      "observed_at": "yesterday"}), "late-uid")
    await wait_for_state(bus)
    before = dead_counts()
    async with ingesting(bus, sim) as (_, health, task):
        await eventually(lambda: _ready(health), "ingest synced", running=(task,))
        # the relist read the good event: its object is gone from the API, so it gets its tombstone
        await eventually(lambda: _tombstoned(bus, "ghost-uid"), "the ghost's tombstone", running=(task,))
    after = dead_counts()
    grew = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    # each message read from both streams: each copy is counted where it was read
    assert grew == {("state", codec.UNDECODABLE): 1, ("events", codec.UNDECODABLE): 1,
                    ("state", codec.BAD_TIMESTAMP): 1, ("events", codec.BAD_TIMESTAMP): 1}
    dead = await dead_letters(bus)
    assert sorted((m.subject, (m.headers or {}).get("Kubus-Dead-Reason")) for m in dead) == sorted([
        (subjects.dead_subject(origin, bus.prefix), reason)
        for origin in ("state", "events") for reason in (codec.UNDECODABLE, codec.BAD_TIMESTAMP)])
    assert {(m.headers or {}).get("Kubus-Dead-By") for m in dead} == {"ingest-poison"}


async def test_a_newer_event_stops_that_kinds_relist_until_an_upgraded_ingest(
        bus: Bus, sim: SimProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    newer = observed(pod("future").ns("ghosts").uid("future-uid").build())
    await publish_pod_event(bus, msgspec.json.encode({**msgspec.json.decode(codec.encode(newer)),
                                                      "v": SCHEMA_VERSION + 1}), newer.uid)
    await wait_for_state(bus)
    async with ingesting(bus, sim) as (ingest, health, task):
        await eventually(lambda: _halted("relist-Pod"), "the Pod relist to stop", running=(task,))
        response = await health.readyz(None)  # type: ignore[arg-type]
        assert response.status == 503 and "[-]ingest-no-newer-messages failed" in str(response.text)
        # the other kind runs on, and the process with it
        await eventually(lambda: _watching(ingest, "Node"), "Nodes watched", running=(task,))
        assert not ingest.counters()["watching"].get("Pod", False)
    assert not await _tombstoned(bus, "future-uid")  # nothing was planned against what it could not read
    monkeypatch.setattr(codec, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    async with ingesting(bus, sim) as (ingest, health, task):
        await eventually(lambda: _ready(health), "an upgraded ingest synced", running=(task,))
        await eventually(lambda: _tombstoned(bus, "future-uid"), "the future pod's tombstone", running=(task,))
        assert halted_gauge("relist-Pod") == 0
    assert await dead_letters(bus) == []


async def _ready(health: Health) -> bool:
    return (await health.readyz(None)).status == 200  # type: ignore[arg-type]


async def _halted(consumer: str) -> bool:
    return halted_gauge(consumer) == 1


async def _watching(ingest: Ingest, kind: str) -> bool:
    return bool(ingest.counters()["watching"].get(kind))


async def _tombstoned(bus: Bus, uid: str) -> bool:
    """Whether the last event of `uid` in KUBUS_EVENTS is the relist's DELETED_FINAL_STATE_UNKNOWN."""
    subject = subjects.event_subject(bus.partition_of("ghosts"), "Pod", uid, bus.prefix)
    try:
        msg = await bus.js.get_last_msg(bus.stream(subjects.EVENTS_STREAM), subject)
    except Exception:
        return False
    try:
        return codec.decode_observed(msg.data or b"").type == "DELETED_FINAL_STATE_UNKNOWN"
    except (codec.BadMessage, codec.NewerSchema):
        return False
