"""Two ingest replicas, one cut off from NATS for longer than the duplicate window while pods are deleted (issue 15).

The pipeline runs as deployed (`kubus ingest`, `kubus reconcile`, `kubus execute`, `kubus sim`, nats-server), and a
second ingest replica runs in the test, reaching NATS and the API through proxies the test can pause. The replica
loses NATS (its publishes wait in its socket), takes two pods' updates from its watch, and then loses the API (it
sees no more events); the pods are deleted, the deployed ingest publishes the deletions and the ReplicaSet replaces
them. NATS comes back: the replica publishes the old updates it held. Waiting out JetStream's 120 s duplicate window
is not needed to see what happens after it: the replica's messages carry ids of their own, which the window does
not know, as it would not know the real ones by then.

Before issue 15 the old updates were stored after the deletions: KUBUS_STATE and the reconciler's cache held pods
that no longer exist, and the ReplicaSet stayed short of its count. Now ingest publishes with the subject's
expected last sequence and the deletion stands."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from nats.js import JetStreamContext

from ingest.config import IngestConfig
from ingest.relisting import read_stream
from ingest.service import Ingest
from ingest.watching import KindWatcher
from messages import subjects
from messages.codec import decode_observed, encode
from messages.observed import DELETED, ObservedEvent
from reconciler.bootstrapping import bootstrap
from reconciler.core.cache import Cache
from runtime.bus import Bus, connect, ensure_streams
from tests.ingest.harness import eventually
from tests.pipeline.harness import Pipeline
from tests.proxy import Proxy

LATE = "ingest-late"


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    p = Pipeline(tmp_path, "--termination-seconds", "0.2")
    yield p
    p.stop()


@pytest.fixture
async def bus(pipeline: Pipeline) -> AsyncIterator[Bus]:
    nc = await connect(pipeline.nats_url, "test")
    yield await ensure_streams(nc, prefix=pipeline.prefix, partitions=4)
    await nc.close()


async def history(js: JetStreamContext, stream: str, subject_filter: str) -> dict[str, list[ObservedEvent]]:
    """uid -> its events in `stream`, in stream order."""
    found: dict[str, list[ObservedEvent]] = {}
    async for msg in read_stream(js, stream, subject_filter):
        event = decode_observed(msg.data)
        found.setdefault(event.uid, []).append(event)
    return found


async def request(pipeline: Pipeline, method: str, path: str, body: Any = None,
                  content_type: str = "application/json") -> Any:
    code, answer = await asyncio.to_thread(pipeline.sim.request, method, path, body, content_type)
    assert code in (200, 201), f"{method} {path} -> {code}: {answer}"
    return answer


async def pods_of(pipeline: Pipeline, namespace: str) -> list[dict[str, Any]]:
    return list((await request(pipeline, "GET", f"/api/v1/namespaces/{namespace}/pods"))["items"])


async def count_of(pipeline: Pipeline, namespace: str, count: int) -> None:
    """Waits until the ReplicaSet has exactly `count` pods, never more."""
    async def exactly() -> bool:
        assert not pipeline.supervise(), "a service died"
        pods = [p for p in await pods_of(pipeline, namespace) if not p["metadata"].get("deletionTimestamp")]
        assert len(pods) <= count, f"{len(pods)} pods, more than the {count} asked for"
        return len(pods) == count
    try:
        await eventually(exactly, 60, what=f"{count} pods in {namespace}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{pipeline.logs()}") from None


async def scale(pipeline: Pipeline, namespace: str, replicas: int) -> None:
    await request(pipeline, "PATCH", f"/apis/apps/v1/namespaces/{namespace}/replicasets/web",
                  {"spec": {"replicas": replicas}}, "application/merge-patch+json")


@pytest.fixture
def late_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """The late replica's messages carry ids the duplicate window does not know (as after 120 s)."""
    original = KindWatcher._publish

    async def publish(self: KindWatcher, event: ObservedEvent, position: str | None) -> None:
        if self._instance != LATE:
            await original(self, event, position)
            return
        subject = subjects.event_subject(self._bus.partition_of(event.namespace), self.kind, event.uid,
                                         self._bus.prefix)
        await self.publisher.publish(subject, f"{event.msg_id}/after-the-window", event.type, encode(event),
                                     position, event.resource_version)
    monkeypatch.setattr(KindWatcher, "_publish", publish)


@contextlib.asynccontextmanager
async def late_replica(pipeline: Pipeline, tmp_path: Path) -> AsyncIterator[tuple[Ingest, Proxy, Proxy]]:
    """The second ingest replica, in the test, behind a NATS proxy and an API proxy."""
    nats_target = urlsplit(pipeline.nats_url)
    api_target = urlsplit(pipeline.sim.url)
    async with Proxy(nats_target.hostname or "", nats_target.port or 4222) as nats_proxy, \
            Proxy(api_target.hostname or "", api_target.port or 80) as api_proxy:
        kubeconfig = tmp_path / "late-kubeconfig"
        kubeconfig.write_text(pipeline.sim.kubeconfig.read_text().replace(pipeline.sim.url, api_proxy.url("http")))
        ingest = Ingest(IngestConfig(
            nats_url=nats_proxy.url("nats"), prefix=pipeline.prefix, partitions=4, kubeconfig=str(kubeconfig),
            instance=LATE, checkpoints="memory", ack_timeout=1.0, backoff_initial=0.05, backoff_max=0.5,
            stop_timeout=2.0))
        task = asyncio.create_task(ingest.run())
        try:
            yield ingest, nats_proxy, api_proxy
        finally:
            nats_proxy.resume()
            api_proxy.resume()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.mark.usefixtures("late_ids")
async def test_a_replica_cut_off_past_the_duplicate_window_brings_no_deleted_pod_back(
        pipeline: Pipeline, bus: Bus, tmp_path: Path) -> None:
    namespace = "order"
    pipeline.start_all()
    pipeline.ask_for_pods(namespace, 3)
    await count_of(pipeline, namespace, 3)
    js = bus.js
    async with late_replica(pipeline, tmp_path) as (late, nats_proxy, api_proxy):
        async def late_synced() -> bool:
            return late.synced() and not any(late.counters()["unacked"].values())
        await eventually(late_synced, 30, what="the late replica to list and watch")

        doomed = (await pods_of(pipeline, namespace))[:2]

        async def relabel(step: str) -> int:
            rvs = []
            for pod in doomed:
                patched = await request(pipeline, "PATCH",
                                        f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
                                        {"metadata": {"labels": {"step": step}}}, "application/merge-patch+json")
                rvs.append(int(patched["metadata"]["resourceVersion"]))
            return max(rvs)

        # both replicas publish an update of each pod, so that the late one knows where their subjects are
        warm = await relabel("warm")

        async def late_caught_up() -> bool:
            counters = late.counters()
            return int(counters["last_resource_version"].get("Pod", "0")) >= warm and not counters["unacked"]["Pod"]
        await eventually(late_caught_up, 30, what="the late replica to settle the first updates")

        nats_proxy.pause()  # the replica's publishes from here on wait in its socket
        await relabel("late")

        async def holding() -> bool:
            # the replica took an update from its watch and could not send it: it resends it, in order, until NATS
            # takes it (the other update waits behind it, in its watch's queue or still in the API's answer)
            return late.counters()["unacked"].get("Pod", 0) >= 1
        await eventually(holding, 30, what="the late replica to hold an update")
        api_proxy.pause()  # it sees no more events: not the deletions below

        for pod in doomed:
            await request(pipeline, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
                          {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
        gone = {pod["metadata"]["uid"] for pod in doomed}
        events_stream = bus.stream(subjects.EVENTS_STREAM)

        async def deletions_published() -> bool:
            found = await history(js, events_stream, f"{bus.prefix}.events.*.Pod.*")
            return all(found.get(uid) and found[uid][-1].type == DELETED for uid in gone)
        await eventually(deletions_published, 30, what="the deployed ingest to publish the deletions")
        await count_of(pipeline, namespace, 3)  # replaced

        nats_proxy.resume()  # the replica publishes what it held

        async def late_drained() -> bool:
            return late.counters()["unacked"].get("Pod", 1) == 0
        await eventually(late_drained, 30, what="the late replica to settle what it held")
        superseded = late.counters()["superseded"].get("Pod", 0)

    found = await history(js, events_stream, f"{bus.prefix}.events.*.Pod.*")
    assert {uid: found[uid][-1].type for uid in gone} == dict.fromkeys(gone, DELETED)

    async def state_has_tombstones() -> bool:
        state = await history(js, bus.stream(subjects.STATE_STREAM), f"{bus.prefix}.state.*.Pod.*")
        return {uid: [e.type for e in state.get(uid, [])] for uid in gone} == {uid: [DELETED] for uid in gone}
    await eventually(state_has_tombstones, 30, what="KUBUS_STATE to keep the deletions")

    cache = Cache()  # what a reconciler starting now folds
    await bootstrap(bus, cache, lambda subject: True)
    assert not gone & {pod.metadata.uid for pod in cache.all("Pod")}

    # the ReplicaSet has its count: the running reconciler sees exactly the pods there are, and so does a new one
    await scale(pipeline, namespace, 4)
    await count_of(pipeline, namespace, 4)
    pipeline.kill("reconcile")
    pipeline.start("reconcile")
    await scale(pipeline, namespace, 5)
    await count_of(pipeline, namespace, 5)
    assert superseded >= 1  # the late replica's update was refused, not stored
