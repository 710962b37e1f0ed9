"""Losing KUBUS_EVENTS is loud and converges; KUBUS_STATE's tombstones expire (issue 15).

Before: KUBUS_EVENTS deleted and created again numbered its events from 1, the reconciler's positions lay past
its end and it skipped everything, ingest resumed from its checkpoints without a relist: nothing happened, and
nothing said so. And KUBUS_STATE kept a tombstone per deleted object for ever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import NotFoundError
from prometheus_client import REGISTRY

from kube.testing import replicaset
from messages import subjects
from messages.codec import decode_observed
from messages.observed import ADDED, DELETED_FINAL_STATE_UNKNOWN
from reconciler.consuming import SoleReconciler
from reconciler.core.batch import CONSUMER
from reconciler.core.stepping import partition_number
from runtime.bus import Bus, connect, ensure_streams, events_info, identity
from store.memory import MemoryStore
from store.streams import INGEST, RECONCILER
from tests.leases.test_split_reconcilers import until
from tests.pipeline.harness import Pipeline
from tests.pipeline.test_loop_rebuild import publish
from tests.simulation import wait_for


@pytest.fixture
def pipeline(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Pipeline]:
    args_for = getattr(request, "param", None) or {}
    p = Pipeline(tmp_path, "--termination-seconds", "0.2", args_for=args_for, metrics=True)
    try:
        yield p
    finally:
        p.stop()


def on_nats(p: Pipeline, work: Any) -> Any:
    """Runs `work(bus)` on a connection of the test's own."""
    async def run() -> Any:
        nc = await connect(p.nats_url, "test")
        try:
            return await work(await ensure_streams(nc, prefix=p.prefix, partitions=4))
        finally:
            await nc.close()
    return asyncio.run(run())


def test_a_recreated_events_stream_is_a_loud_rebootstrap_that_converges(pipeline: Pipeline) -> None:
    p = pipeline
    p.start_all()
    p.ask_for_pods("before", 3)
    before = {pod["metadata"]["name"] for pod in p.wait_for_pods("before", 3)}

    async def recreate(bus: Any) -> str:
        events = bus.stream(subjects.EVENTS_STREAM)
        await bus.js.delete_stream(events)
        # what a kubus service starting after JetStream lost its data does: create the missing stream
        await ensure_streams(bus.nc, prefix=p.prefix, partitions=4)
        return str((await bus.js.stream_info(events)).created.isoformat())

    created = on_nats(p, recreate)
    # a ReplicaSet created after the loss gets its pods: the reconciler does not skip the new stream's events
    p.ask_for_pods("after", 2)
    p.wait_for_pods("after", 2, timeout=90)
    # and one from before is still managed: a pod deleted is replaced, once
    victim = sorted(before)[0]
    code, body = p.sim.request("DELETE", f"/api/v1/namespaces/before/pods/{victim}")
    assert code == 200, body
    wait_for(lambda: (names := {pod["metadata"]["name"] for pod in p.pods("before")}) and victim not in names
             and len(names) == 3, timeout=60, what="the deleted pod replaced")
    assert len(p.pods("before")) == 3 and len(p.pods("after")) == 2

    # loud: a metric on both services, an error line naming the stream and both identities, a row in the audit
    assert p.metric("reconcile", "kubus_stream_resets_total", service="reconciler") >= 1
    assert p.metric("ingest", "kubus_stream_resets_total", service="ingest") >= 1
    events = f"KUBUS_EVENTS_{p.prefix.upper()}"
    reconciler_log = (p.workdir / "reconcile.log").read_text()
    line = next((line for line in reconciler_log.splitlines() if "was reset" in line), None)
    assert line is not None, p.logs()
    assert "ERROR" in line and events in line and created in line and "positions" in line, line
    assert "was reset" in (p.workdir / "ingest.log").read_text()
    rows = p.sql("SELECT stream, old_created, new_created, reason FROM stream_resets")
    assert len(rows) == 1 and rows[0][0] == events and rows[0][2] == created and rows[0][1] != created, rows
    identities = p.sql("SELECT created FROM stream_identities WHERE name IN ('ingest', 'reconciler')")
    assert identities == [(created,), (created,)]
    # the audit trail's events of the old stream moved below 1: the new stream's own are all recorded
    assert p.sql("SELECT count(*) FROM observed_events WHERE stream_seq > 0 AND namespace = 'after'")[0][0] > 0
    # KUBUS_STATE, rebuilt for the new stream, records the cluster again: another cluster's ingest is still refused
    assert last_on(p, subjects.STATE_STREAM, subjects.cluster_subject(p.prefix)) is not None


def state_subject(p: Pipeline, pod: dict[str, Any]) -> str:
    partition = subjects.partition_of(pod["metadata"]["namespace"], 4)
    return f"{p.prefix}.state.{partition}.Pod.{pod['metadata']['uid']}"


def last_on(p: Pipeline, stream: str, subject: str) -> Any:
    async def get(bus: Any) -> Any:
        try:
            return await bus.js.get_last_msg(bus.stream(stream), subject)
        except NotFoundError:
            return None
    return on_nats(p, get)


TTL = 4.0


@pytest.mark.parametrize("pipeline", [{"ingest": ["--state-tombstone-ttl", f"{TTL:g}s"]}], indirect=True)
def test_tombstones_expire_and_a_relist_still_finds_what_is_really_gone(pipeline: Pipeline) -> None:
    p = pipeline
    p.start_all()
    p.ask_for_pods("t", 3)
    old, young, gone = p.wait_for_pods("t", 3)

    def delete(pod: dict[str, Any]) -> None:
        code, body = p.sim.request("DELETE", f"/api/v1/namespaces/t/pods/{pod['metadata']['name']}")
        assert code == 200, body

    def tombstoned(pod: dict[str, Any]) -> bool:
        msg = last_on(p, subjects.STATE_STREAM, state_subject(p, pod))
        return msg is not None and str((msg.headers or {}).get("Nats-Msg-Id", "")).endswith("/DELETED")

    delete(old)
    wait_for(lambda: tombstoned(old), timeout=30, what="the first pod's tombstone in KUBUS_STATE")
    # the second tombstone is half a TTL younger: by the server's clock, not a sleep
    stored = last_on(p, subjects.STATE_STREAM, state_subject(p, old))

    def half_a_ttl_later() -> bool:
        async def now(bus: Any) -> Any:
            probe = await bus.js.publish(f"{p.prefix}.dead.test", b"clock")
            return await bus.js.get_msg(bus.stream(subjects.DEAD_STREAM), probe.seq)
        return bool((on_nats(p, now).time - stored.time).total_seconds() >= TTL / 2)

    wait_for(half_a_ttl_later, timeout=10, interval=0.2, what="half a TTL on the server's clock")
    delete(young)
    wait_for(lambda: tombstoned(young), timeout=30, what="the second pod's tombstone")
    wait_for(lambda: last_on(p, subjects.STATE_STREAM, state_subject(p, old)) is None, timeout=3 * TTL,
             interval=0.2, what="the first tombstone expired")
    assert tombstoned(young), "a tombstone younger than the TTL was purged"

    # the history ages the first pod out too: the bus knows nothing of it any more
    on_nats(p, lambda bus: bus.js.purge_stream(
        bus.stream(subjects.EVENTS_STREAM),
        subject=f"{p.prefix}.events.{subjects.partition_of('t', 4)}.Pod.{old['metadata']['uid']}"))
    # a pod deleted while ingest is away, and a relist: DELETED_FINAL_STATE_UNKNOWN for that one only
    p.kill("ingest")
    delete(gone)
    wait_for(lambda: gone["metadata"]["name"] not in {x["metadata"]["name"] for x in p.pods("t")}, timeout=30,
             what="the pod deleted while ingest was away gone from the API")
    p.sql("DELETE FROM ingest_checkpoints")
    p.restarts["ingest"] += 1
    p.start("ingest")

    async def final_state_unknown(bus: Any) -> set[str]:
        from ingest.relisting import read_stream

        found = set()
        async for msg in read_stream(bus.js, bus.stream(subjects.EVENTS_STREAM), f"{p.prefix}.events.>"):
            event = decode_observed(msg.data)
            if event.type == DELETED_FINAL_STATE_UNKNOWN:
                found.add(event.uid)
        return found

    uids = wait_for(lambda: on_nats(p, final_state_unknown), timeout=60, interval=0.3,
                    what="the relist's DELETED_FINAL_STATE_UNKNOWN")
    assert uids == {gone["metadata"]["uid"]}, (uids, p.logs())
    p.wait_for_pods("t", 3)


# --- the reconciler on its own, against a real NATS ------------------------------------------------------------
def resets_counted(bus: Bus) -> float:
    labels = {"stream": bus.stream(subjects.EVENTS_STREAM), "service": "reconciler"}
    return REGISTRY.get_sample_value("kubus_stream_resets_total", labels) or 0.0


async def test_positions_past_the_end_of_the_same_stream_start_over_loudly(
        bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    """A stream that lost its last events keeps its creation time: the positions past its end say it."""
    rs = replicaset("web").ns("shop").uid("rs-1").rv("10").build()
    seq = await publish(bus, rs, ADDED)
    store = MemoryStore()
    store.identities[RECONCILER] = identity(await events_info(bus))
    store.positions[CONSUMER] = {partition_number(bus.partition_of("shop")): seq + 500}
    counted = resets_counted(bus)
    reconciler = SoleReconciler(bus, store, "r-1")
    running = asyncio.create_task(reconciler.run())
    try:
        async def caught_up() -> bool:
            return reconciler.caught_up
        await until(caught_up, "the reconciler caught up")
        # the ReplicaSet was read (not skipped behind the stale position): its controller is known
        assert reconciler.current.cache.named("ReplicaSet", "shop", "web") is not None
    finally:
        reconciler.stop()
        await asyncio.wait_for(running, 30)
    [reset] = store.resets
    assert reset.reason.startswith("lost events") and reset.positions and reset.last_seq == seq
    assert resets_counted(bus) == counted + 1
    assert any(r.levelname == "ERROR" and "was reset" in r.getMessage() for r in caplog.records)


async def test_the_sole_reconciler_starts_over_on_a_stream_created_anew_under_it(bus: Bus) -> None:
    first = replicaset("old").ns("shop").uid("rs-1").rv("10").build()
    await publish(bus, first, ADDED)
    store = MemoryStore()
    reconciler = SoleReconciler(bus, store, "r-1")
    running = asyncio.create_task(reconciler.run())
    try:
        async def sees(name: str) -> bool:
            return reconciler.caught_up and reconciler.current.cache.named("ReplicaSet", "shop", name) is not None
        await until(lambda: sees("old"), "the first ReplicaSet")
        loop = reconciler.current
        await bus.js.delete_stream(bus.stream(subjects.EVENTS_STREAM))
        await ensure_streams(bus.nc, prefix=bus.prefix, partitions=bus.partitions)
        store.identities[INGEST] = identity(await events_info(bus))  # what ingest records once it relisted
        await publish(bus, replicaset("new").ns("shop").uid("rs-2").rv("20").build(), ADDED)
        await until(lambda: sees("new"), "the ReplicaSet of the new stream", timeout=60)
        assert reconciler.current is not loop
        assert reconciler.current.cache.named("ReplicaSet", "shop", "old") is None  # a cache of the new stream only
    finally:
        reconciler.stop()
        await asyncio.wait_for(running, 30)
    [reset] = store.resets
    assert reset.reason == "created anew" and reset.new_created == store.identities[RECONCILER]
