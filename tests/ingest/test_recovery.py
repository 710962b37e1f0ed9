"""Ingest surviving its surroundings: history lost (410), the API failing, NATS restarting."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from ingest.config import IngestConfig
from ingest.relisting import read_known
from messages import subjects
from messages.observed import ADDED, DELETED_FINAL_STATE_UNKNOWN, RELISTED, ObservedEvent
from runtime.bus import Bus
from runtime.natsserver import EmbeddedNats
from tests.ingest.harness import (
    PATHS,
    ApiRecorder,
    Running,
    api,
    bus_events,
    create_pods,
    current_rv,
    delete_now,
    eventually,
    label,
    unique,
    wait_caught_up,
)
from tests.simulation import SimProcess


@pytest.fixture(scope="module")
def short_history_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """A sim that keeps only 20 watch events: a watch from an older resourceVersion gets 410 Gone."""
    proc = SimProcess(tmp_path_factory.mktemp("short-sim"), "--nodes", "1", "--watch-history", "20",
                      "--kubelet-delay", "0.05", "--bookmark-interval", "0.5", "--seed", "13")
    yield proc
    assert proc.stop() == 0, proc.log_path.read_text()


async def _alive_on_bus(nc: Client, js: JetStreamContext, prefix: str) -> dict[str, dict[str, ObservedEvent]]:
    bus = Bus(nc, js, prefix, 4)
    return {kind: {uid: e for uid, e in (await read_known(bus, kind)).items() if not e.is_deletion}
            for kind in subjects.KINDS}


async def _listed(sim: SimProcess) -> dict[str, dict[str, str]]:
    """uid -> resourceVersion of every object of every kind, as the API lists them now."""
    out = {}
    for kind, path in PATHS.items():
        items = (await api(sim, "GET", path))["items"]
        out[kind] = {i["metadata"]["uid"]: i["metadata"]["resourceVersion"] for i in items}
    return out


async def _all_running(sim: SimProcess, namespace: str) -> bool:
    pods = (await api(sim, "GET", f"/api/v1/namespaces/{namespace}/pods"))["items"]
    return all(p.get("status", {}).get("phase") == "Running" for p in pods)


async def test_relist_after_410_publishes_exactly_what_changed_while_ingest_was_down(
        short_history_sim: SimProcess, nc: Client, js: JetStreamContext, config: IngestConfig,
        prefix: str) -> None:
    """Resuming past the API's history relists: ADDED, RELISTED and tombstones for exactly the changes."""
    sim = short_history_sim
    config = dataclasses.replace(config, kubeconfig=str(sim.kubeconfig), checkpoints="kv")
    ns = unique("relist")
    await api(sim, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    rs_path = f"/apis/apps/v1/namespaces/{ns}/replicasets"
    await api(sim, "POST", rs_path, {"metadata": {"name": "doomed"}, "spec": {
        "replicas": 0, "selector": {"matchLabels": {"app": "x"}},
        "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "a", "image": "b"}]}}}})
    pods = await create_pods(sim, ns, 12, stem="old")
    await eventually(lambda: _all_running(sim, ns), what="the first pods to run")
    first = Running(config)
    await first.synced()
    await eventually(lambda: _bus_matches_api(nc, js, prefix, sim), what="the bus to match the API")
    await first.stop()

    # more than 60 writes while ingest is down: creates (each also bound and started), updates, deletes
    before = await _alive_on_bus(nc, js, prefix)
    await create_pods(sim, ns, 20, stem="new")
    for pod in pods[:4]:
        await label(sim, f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", "2")
    for pod in pods[4:10]:
        await delete_now(sim, f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")
    await delete_now(sim, f"{rs_path}/doomed")
    await api(sim, "POST", f"/apis/apps/v1/namespaces/{ns}/controllerrevisions",
              {"metadata": {"name": "fresh"}, "data": {}, "revision": 1})
    await eventually(lambda: _all_running(sim, ns), what="the new pods to run")
    listed = await _listed(sim)
    assert int((await api(sim, "GET", "/api/v1/namespaces"))["metadata"]["resourceVersion"]) > \
        int(first.counters()["last_resource_version"]["Pod"]) + 60
    expected = set()
    for kind in subjects.KINDS:
        expected |= {(kind, ADDED, uid) for uid in listed[kind].keys() - before[kind].keys()}
        expected |= {(kind, RELISTED, uid) for uid in listed[kind].keys() & before[kind].keys()
                     if listed[kind][uid] != before[kind][uid].resource_version}
        expected |= {(kind, DELETED_FINAL_STATE_UNKNOWN, uid) for uid in before[kind].keys() - listed[kind].keys()}
    assert {t for _, t, _ in expected} == {ADDED, RELISTED, DELETED_FINAL_STATE_UNKNOWN}
    last_seq = (await js.stream_info(subjects.stream_name(subjects.EVENTS_STREAM, prefix))).state.last_seq

    second = Running(config)
    await second.synced()
    await second.stop()
    published = [m.event for m in await bus_events(js, prefix) if m.seq > last_seq]
    assert {(e.kind, e.type, e.uid) for e in published} == expected
    assert len(published) == len(expected)
    assert second.counters()["gone"].get("Pod", 0) >= 1
    for event in published:
        if event.type == DELETED_FINAL_STATE_UNKNOWN:  # the tombstone carries the last known state
            assert event.object == before[event.kind][event.uid].object


async def _bus_matches_api(nc: Client, js: JetStreamContext, prefix: str, sim: SimProcess) -> bool:
    alive = await _alive_on_bus(nc, js, prefix)
    listed = await _listed(sim)
    return all({u: e.resource_version for u, e in alive[k].items()} == listed[k] for k in subjects.KINDS)


async def test_api_failing_every_list_and_watch_is_waited_out_and_caught_up(
        sim: SimProcess, js: JetStreamContext, config: IngestConfig, prefix: str, namespace: str) -> None:
    """With every list and watch answered 500 for a while, ingest backs off, then resumes with nothing lost."""
    config = dataclasses.replace(config, watch_timeout=1.0)  # watches end every second and must be reopened
    ingest = Running(config)
    await ingest.synced()
    since = await current_rv(sim)
    async with ApiRecorder(sim.url, since) as recorder:
        await api(sim, "PUT", "/sim/faults", {"rules": ["*:watch:1.0:500", "*:list:1.0:500"], "seed": 1})
        try:
            await eventually(lambda: _failed_everywhere(ingest), what="every kind's watch to fail")
            pods = await create_pods(sim, namespace, 10)
            for pod in pods[:5]:
                await label(sim, f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}", "2")
            on_bus = {m.event.uid for m in await bus_events(js, prefix, "Pod")}
            assert not on_bus & {p["metadata"]["uid"] for p in pods}  # the API is "down" for ingest
            faults = await api(sim, "GET", "/sim/faults")
            assert faults["rules"][0]["injected"] >= len(subjects.KINDS), faults  # watches are resumed, not relisted
        finally:
            await api(sim, "DELETE", "/sim/faults")
        await wait_caught_up(js, prefix, recorder)
    await ingest.stop()
    events = await bus_events(js, prefix)
    assert len(events) == len({m.msg_id for m in events})


async def _failed_everywhere(ingest: Running) -> bool:
    counters = ingest.counters()
    return all(counters["api_reconnects"].get(kind, 0) >= 2 for kind in subjects.KINDS)


@pytest.fixture
async def restartable_nats(tmp_path: Path) -> AsyncIterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path / "restartable")
    await server.start()
    yield server
    await server.stop()


async def test_nats_restart_loses_nothing(
        sim: SimProcess, restartable_nats: EmbeddedNats, config: IngestConfig, prefix: str, namespace: str) -> None:
    """Events watched while NATS is down are published once it is back: none lost, none twice, each
    object's events in order."""
    config = dataclasses.replace(config, nats_url=restartable_nats.url)
    nc = await nats.connect(restartable_nats.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    js = nc.jetstream()
    try:
        ingest = Running(config)
        await ingest.synced()
        since = await current_rv(sim)
        async with ApiRecorder(sim.url, since) as recorder:
            pods = await create_pods(sim, namespace, 10, stem="before")
            await wait_caught_up(js, prefix, recorder)

            await restartable_nats.stop()
            await create_pods(sim, namespace, 15, stem="during")
            for pod in pods[:5]:
                await label(sim, f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}", "2")

            async def resending() -> bool:  # acks timed out and the in-order resends are failing too
                retries: int = ingest.counters()["publish_retries"].get("Pod", 0)
                return retries >= 2
            await eventually(resending, what="ingest to resend unacked events")

            restarted = EmbeddedNats(restartable_nats.store_dir, port=restartable_nats.port)
            await restarted.start()
            try:
                await wait_caught_up(js, prefix, recorder, per_object=True, timeout=30)
                await ingest.stop()
                events = await bus_events(js, prefix)
            finally:
                await restarted.stop()
        assert len(events) == len({m.msg_id for m in events})
        assert ingest.counters()["nats_reconnects"] >= 1
    finally:
        await nc.close()

