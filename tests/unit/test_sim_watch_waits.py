"""A watch waiting for writes wakes for each write, for its timeout and for the server's stop (issue 25, round 6:
the wait is one future the store completes, not a task started and cancelled per wake)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sim.cluster import SimCluster, SimConfig
from sim.nodes import generate

PODS = "/api/v1/namespaces/default/pods"
WITHIN = 10.0  # a broken wake hangs: fail instead


@pytest.fixture
async def sim() -> AsyncIterator[tuple[SimCluster, TestClient[Any, Any]]]:
    cluster = SimCluster(SimConfig(nodes=generate(1), seed=1))
    cluster._seed()
    async with TestClient(TestServer(cluster.app())) as client:
        yield cluster, client


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"schedulerName": "none", "containers": [{"name": "c", "image": "i"}]}}


async def test_each_write_wakes_a_waiting_watch(sim: tuple[SimCluster, TestClient[Any, Any]]) -> None:
    cluster, client = sim
    watch = await client.get(PODS, params={"watch": "true", "resourceVersion": str(cluster.store.rv)})
    for i in range(3):
        response = await client.post(PODS, json=_pod(f"p{i}"))
        assert response.status == 201
        frame = json.loads(await asyncio.wait_for(watch.content.readline(), WITHIN))
        assert (frame["type"], frame["object"]) == ("ADDED", await response.json())
    watch.close()


async def test_a_waiting_watch_ends_at_its_timeout(sim: tuple[SimCluster, TestClient[Any, Any]]) -> None:
    cluster, client = sim
    watch = await client.get(PODS, params={"watch": "true", "resourceVersion": str(cluster.store.rv),
                                           "timeoutSeconds": "1"})
    assert await asyncio.wait_for(watch.content.read(), WITHIN) == b""


async def test_a_waiting_watch_ends_when_the_server_stops(sim: tuple[SimCluster, TestClient[Any, Any]]) -> None:
    cluster, client = sim
    watch = await client.get(PODS, params={"watch": "true", "resourceVersion": str(cluster.store.rv)})
    cluster.api.stopping.set()
    assert await asyncio.wait_for(watch.content.read(), WITHIN) == b""


async def test_a_watch_behind_the_store_reads_on_without_waiting(sim: tuple[SimCluster, TestClient[Any, Any]]) -> None:
    """Writes before the watch's first wait are sent at once, in order, after the initial events."""
    cluster, client = sim
    since = str(cluster.store.rv)
    created = []
    for i in range(3):
        response = await client.post(PODS, json=_pod(f"q{i}"))
        created.append(await response.json())
    watch = await client.get(PODS, params={"watch": "true", "resourceVersion": since})
    frames = [json.loads(await asyncio.wait_for(watch.content.readline(), WITHIN)) for _ in created]
    assert frames == [{"type": "ADDED", "object": obj} for obj in created]
    watch.close()


async def test_an_idle_store_keeps_no_more_than_a_bounded_count_of_finished_waits() -> None:
    """Watches whose waits end by their timeout (no write) leave their finished futures behind: the store drops them
    once they pile up, and still wakes the waits that are left at the next write."""
    from sim import store as store_module

    store = store_module.ObjectStore()
    for _ in range(10 * store_module._WAITS_KEPT):
        store.next_write().set_result(None)  # as a watch's timeout does
    assert len(store._next_write) <= store_module._WAITS_KEPT
    waiting = store.next_write()
    assert not waiting.done()
