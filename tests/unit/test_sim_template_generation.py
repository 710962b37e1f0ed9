"""apps/v1 DaemonSets carry `deprecated.daemonset.template.generation`, as kube-apiserver writes it: 1 on
create, one more each time the pod template changes (the daemonset strategy's templateGeneration, which
the v1 conversion keeps in this annotation); other spec changes leave it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sim.cluster import SimCluster, SimConfig
from sim.nodes import generate
from tests.unit.test_sim_unvalidated import DAEMONSETS, daemonset

ANNOTATION = "deprecated.daemonset.template.generation"


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    cluster = SimCluster(SimConfig(nodes=generate(1), seed=1))
    cluster._seed()
    async with TestClient(TestServer(cluster.app())) as test_client:
        yield test_client


async def call(client: TestClient[Any, Any], method: str, path: str, body: Any,
               content_type: str = "application/json") -> dict[str, Any]:
    response = await client.request(method, path, data=json.dumps(body), headers={"Content-Type": content_type})
    assert response.status < 300, await response.text()
    got: dict[str, Any] = await response.json()
    return got


async def test_template_generation_follows_template_changes(client: TestClient[Any, Any]) -> None:
    created = await call(client, "POST", DAEMONSETS, daemonset("agent"))
    assert created["metadata"]["annotations"][ANNOTATION] == "1"
    merge = "application/merge-patch+json"
    path = f"{DAEMONSETS}/agent"
    relabelled = await call(client, "PATCH", path, {"spec": {"template": {"metadata": {"labels": {"v": "2"}}}}},
                            merge)
    assert (relabelled["metadata"]["annotations"][ANNOTATION], relabelled["metadata"]["generation"]) == ("2", 2)
    other = await call(client, "PATCH", path, {"spec": {"revisionHistoryLimit": 3}}, merge)
    assert (other["metadata"]["annotations"][ANNOTATION], other["metadata"]["generation"]) == ("2", 3)
