"""Per-object order on the bus (issue 15): an ingest replica that fell behind cannot move an object backwards.

Two replicas publish every event; JetStream's duplicate window (120 s) catches the second copy only while it
lasts, so a replica cut off from NATS for longer publishes its stale events after the other's newer ones. These
tests play that replica with ingest's own publisher, fed older events under new message ids (what the duplicate
window no longer recognises), against a real nats-server, and check the history, KUBUS_STATE and a reconciler
bootstrapped from it."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import APIError

from ingest.backoff import Backoff
from ingest.config import IngestConfig
from ingest.counting import Counters
from ingest.publishing import EXPECTED_LAST_SUBJECT_SEQ, MSG_ID, WRONG_LAST_SEQUENCE, OrderedPublisher
from ingest.relisting import read_known
from messages import subjects
from messages.codec import encode
from messages.observed import (
    ADDED,
    DELETED,
    DELETED_FINAL_STATE_UNKNOWN,
    MODIFIED,
    RELISTED,
    ObservedEvent,
)
from reconciler.bootstrapping import bootstrap
from reconciler.core.cache import Cache
from runtime.bus import Bus, ensure_streams, jetstream
from tests.ingest.harness import (
    Running,
    api,
    bus_events,
    bus_state,
    delete_now,
    eventually,
    label,
    pod_body,
    unique,
)
from tests.simulation import SimProcess


@pytest.fixture
async def bus(nc: Client, prefix: str) -> Bus:
    return await ensure_streams(nc, prefix=prefix, partitions=4)


def replica(bus: Bus, counters: Counters) -> OrderedPublisher:
    """A publisher with a memory of its own: another ingest replica."""
    return OrderedPublisher(jetstream(bus.nc), "Pod", counters, stream=bus.stream(subjects.EVENTS_STREAM),
                            ack_timeout=2.0, backoff=Backoff(0.01, 0.05))


def event(event_type: str, rv: str, uid: str = "u1") -> ObservedEvent:
    return ObservedEvent(kind="Pod", type=event_type, namespace="shop", name="p", uid=uid, resource_version=rv,
                         observed_at="2026-01-01T00:00:00.000000Z", ingest="test", object=msgspec.Raw(b"{}"))


async def send(pub: OrderedPublisher, bus: Bus, observed: ObservedEvent, msg_id: str | None = None) -> None:
    subject = subjects.event_subject(bus.partition_of(observed.namespace), "Pod", observed.uid, bus.prefix)
    await pub.publish(subject, msg_id or observed.msg_id, observed.type, encode(observed), None,
                      observed.resource_version)
    await pub.drain()


async def history(js: JetStreamContext, prefix: str, uid: str = "u1") -> list[tuple[str, str]]:
    return [(m.event.type, m.event.resource_version) for m in await bus_events(js, prefix, "Pod")
            if m.event.uid == uid]


async def test_replicas_publish_each_event_once_and_never_backwards(bus: Bus, js: JetStreamContext,
                                                                    prefix: str) -> None:
    """Both replicas publish every event; the subject's history is each version once, in order, whichever replica
    was first; a stale version is refused even under a message id JetStream no longer recognises."""
    a_counts, b_counts = Counters(), Counters()
    a, b = replica(bus, a_counts), replica(bus, b_counts)
    await send(a, bus, event(ADDED, "1"))
    await send(b, bus, event(ADDED, "1"))  # b knows nothing of the subject: the stream says a was first
    await send(b, bus, event(MODIFIED, "2"))  # b first this time, after what it read
    await send(a, bus, event(MODIFIED, "2"))
    await send(a, bus, event(MODIFIED, "3"))
    await send(b, bus, event(MODIFIED, "2"), msg_id="Pod/u1/2/MODIFIED/late")  # stale, a new id
    await send(b, bus, event(RELISTED, "3"))  # the same version again: nothing new
    await send(b, bus, event(DELETED_FINAL_STATE_UNKNOWN, "2"))  # a tombstone planned from an older view
    assert await history(js, prefix) == [(ADDED, "1"), (MODIFIED, "2"), (MODIFIED, "3")]
    await send(a, bus, event(DELETED, "4"))
    await send(b, bus, event(MODIFIED, "5"), msg_id="Pod/u1/5/MODIFIED/late")  # a deletion is final
    await send(a, bus, event(ADDED, "1"), msg_id="Pod/u1/1/ADDED/late")  # a forgot the subject at the deletion
    assert await history(js, prefix) == [(ADDED, "1"), (MODIFIED, "2"), (MODIFIED, "3"), (DELETED, "4")]
    assert (a_counts.published, a_counts.duplicates, a_counts.superseded) == (
        {("Pod", ADDED): 1, ("Pod", MODIFIED): 1, ("Pod", DELETED): 1}, {"Pod": 1}, {"Pod": 1})
    assert (b_counts.published, b_counts.duplicates, b_counts.superseded) == (
        {("Pod", MODIFIED): 1}, {"Pod": 1}, {"Pod": 4})


async def test_a_restarted_replica_learns_every_subject_in_one_pass(bus: Bus, js: JetStreamContext,
                                                                     prefix: str) -> None:
    """A publisher that did not publish an object's earlier events (a restarted ingest) learns where all of the
    kind's subjects are from the stream's headers once, instead of reading each subject before its first update;
    a deleted object is not learnt, and its late update is refused by the stream and then dropped."""
    first = replica(bus, Counters())
    for uid in ("u1", "u2", "u3"):
        await send(first, bus, event(ADDED, "1", uid))
    await send(first, bus, event(DELETED, "2", "u3"))

    class Counting:
        def __init__(self, inner: JetStreamContext) -> None:
            self.inner, self.reads = inner, 0

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        async def get_last_msg(self, *args: object, **kwargs: object) -> object:
            self.reads += 1
            return await self.inner.get_last_msg(*args, **kwargs)  # type: ignore[arg-type]

    counting, counters = Counting(jetstream(bus.nc)), Counters()
    restarted = OrderedPublisher(counting, "Pod", counters,  # type: ignore[arg-type]
                                 stream=bus.stream(subjects.EVENTS_STREAM),
                                 subjects_filter=f"{bus.prefix}.events.*.Pod.*", backoff=Backoff(0.01, 0.05))
    for uid in ("u1", "u2"):
        await send(restarted, bus, event(MODIFIED, "5", uid))
    assert counting.reads == 0
    await send(restarted, bus, event(MODIFIED, "3", "u3"), msg_id="Pod/u3/3/MODIFIED/late")
    assert counting.reads == 1  # the refused publish reads the deletion
    assert counters.published == {("Pod", MODIFIED): 2} and counters.superseded == {"Pod": 1}
    for uid, life in (("u1", [ADDED, MODIFIED]), ("u2", [ADDED, MODIFIED]), ("u3", [ADDED, DELETED])):
        assert [t for t, _ in await history(js, prefix, uid)] == life


async def test_versions_that_are_not_integers_follow_the_stream(bus: Bus, js: JetStreamContext, prefix: str) -> None:
    pub = replica(bus, Counters())
    await send(pub, bus, event(ADDED, "b"))
    await send(pub, bus, event(MODIFIED, "a"))
    assert await history(js, prefix) == [(ADDED, "b"), (MODIFIED, "a")]


async def test_an_async_publish_refused_by_jetstream_fails_its_future(bus: Bus, nc: Client) -> None:
    """nats-py leaves a publish_async future unresolved when JetStream answers an error; runtime.bus.jetstream's
    context fails it, so a refused publish costs a round trip, not an ack timeout."""
    js = jetstream(nc)
    subject = subjects.event_subject("0", "Pod", "u9", bus.prefix)
    await js.publish(subject, b"x", headers={MSG_ID: "one"})
    future = await js.publish_async(subject, b"y", headers={MSG_ID: "two", EXPECTED_LAST_SUBJECT_SEQ: "0"})
    with pytest.raises(APIError) as refused:
        await asyncio.wait_for(future, 5.0)
    assert refused.value.err_code == WRONG_LAST_SEQUENCE


async def test_a_replica_back_after_the_duplicate_window_brings_no_deleted_pod_back(
        sim: SimProcess, bus: Bus, js: JetStreamContext, config: IngestConfig, prefix: str, namespace: str) -> None:
    """Ingest publishes a pod's life up to its deletion; a second replica, back from a NATS outage longer than the
    duplicate window, publishes that pod's older events (new message ids: the window forgot the old ones). The
    history ends with the deletion, KUBUS_STATE keeps the tombstone, a reconciler bootstrapped from it does not
    hold the pod, and a relist has nothing to say about it."""
    ingest = Running(config)
    try:
        await ingest.synced()
        created = await api(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod_body(unique("pod")))
        uid, path = created["metadata"]["uid"], f"/api/v1/namespaces/{namespace}/pods/{created['metadata']['name']}"
        await label(sim, path, "one")
        await delete_now(sim, path)

        async def deleted() -> list[ObservedEvent]:
            mine = [m.event for m in await bus_events(js, prefix, "Pod") if m.event.uid == uid]
            return mine if mine and mine[-1].type == DELETED else []
        life = await eventually(deleted, what="the pod's deletion on the bus")

        counters = Counters()
        late = replica(bus, counters)
        for observed in life[:-1]:
            await send(late, bus, observed, msg_id=f"{observed.msg_id}/after-the-window")
        assert [t for t, _ in await history(js, prefix, uid)][-1:] == [DELETED]

        async def state_is_tombstone() -> bool:
            mine = [m.event for m in await bus_state(js, prefix) if m.event.uid == uid]
            return [e.type for e in mine] == [DELETED]
        await eventually(state_is_tombstone, what="KUBUS_STATE to hold the pod's tombstone")

        cache = Cache()
        await bootstrap(bus, cache, lambda subject: True)
        assert cache.get("Pod", uid) is None
        assert uid in cache.deleted
        known = await read_known(bus, "Pod")
        assert known[uid].type == DELETED
        assert counters.superseded == {"Pod": len(life) - 1}
        assert counters.published == {}
    finally:
        await ingest.stop()


async def test_a_publisher_that_forgot_a_recreated_stream_publishes_the_same_versions_into_it(
        bus: Bus, js: JetStreamContext, prefix: str) -> None:
    """KUBUS_EVENTS deleted and created anew (stream loss): the relist publishes every object again, at the version
    the publisher already stored in the old stream. Its memory of the old stream must not call them stale."""
    counters = Counters()
    pub = replica(bus, counters)
    await send(pub, bus, event(ADDED, "5"))
    await send(pub, bus, event(MODIFIED, "6"))
    await js.delete_stream(bus.stream(subjects.EVENTS_STREAM))
    await ensure_streams(bus.nc, prefix=prefix, partitions=4)
    pub.forget()  # what ingest does before relisting into the new stream
    assert pub.max_seq == 0
    await send(pub, bus, event(ADDED, "6"))
    assert await history(js, prefix) == [(ADDED, "6")]
    assert counters.superseded["Pod"] == 0
