"""`POST /sim/unvalidated`: objects the API refuses today, stored as an older apiserver stored them.

The sim's aiohttp application in process (no kubelet, scheduler or garbage collector running): the
admin endpoint next to the normal create, what it stores, the watch event it emits, and its errors.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sim.cluster import SimCluster, SimConfig
from sim.nodes import generate

DAEMONSETS = "/apis/apps/v1/namespaces/default/daemonsets"


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    cluster = SimCluster(SimConfig(nodes=generate(2), seed=1))
    cluster._seed()  # the system namespaces and the nodes, as start() does
    async with TestClient(TestServer(cluster.app())) as test_client:
        yield test_client


def daemonset(name: str = "bad", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [{"name": "agent", "image": "busybox:1"}]}}}
    body.update(spec)
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "default"},
            "spec": body}


async def post(client: TestClient[Any, Any], path: str, body: Any) -> tuple[int, Any]:
    response = await client.post(path, data=json.dumps(body), headers={"Content-Type": "application/json"})
    return response.status, await response.json()


BAD_SPECS: dict[str, dict[str, Any]] = {
    "empty selector": {"selector": {}},
    "selector not matching the template": {"selector": {"matchLabels": {"app": "other"}}},
    "maxUnavailable abc": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "abc"}}},
    "maxUnavailable 150%": {"updateStrategy": {"type": "RollingUpdate",
                                               "rollingUpdate": {"maxUnavailable": "150%"}}},
    "both budgets zero": {"updateStrategy": {"type": "RollingUpdate",
                                             "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}},
}


@pytest.mark.parametrize("spec", BAD_SPECS.values(), ids=BAD_SPECS.keys())
async def test_what_the_api_refuses_is_stored_as_a_normal_create_would_store_it(
        client: TestClient[Any, Any], spec: dict[str, Any]) -> None:
    code, refused = await post(client, DAEMONSETS, daemonset(**spec))
    assert code == 422 and refused["reason"] == "Invalid", refused

    code, stored = await post(client, "/sim/unvalidated", daemonset(**spec))
    assert code == 201, stored
    meta = stored["metadata"]
    assert meta["name"] == "bad" and meta["namespace"] == "default"
    assert meta["uid"] and meta["resourceVersion"].isdigit() and meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1
    assert stored["status"] == {"currentNumberScheduled": 0, "numberMisscheduled": 0,
                                "desiredNumberScheduled": 0, "numberReady": 0}
    for key, value in spec.items():  # the bad part is kept as it was sent
        if key == "updateStrategy":
            assert stored["spec"][key]["rollingUpdate"].items() >= value["rollingUpdate"].items()
        else:
            assert stored["spec"][key] == value
    assert stored["spec"]["revisionHistoryLimit"] == 10  # kube-apiserver's defaults are applied

    response = await client.get(f"{DAEMONSETS}/bad")
    assert response.status == 200 and await response.json() == stored


async def test_watchers_see_an_ordinary_added_event(client: TestClient[Any, Any]) -> None:
    response = await client.get(DAEMONSETS)
    since = (await response.json())["metadata"]["resourceVersion"]
    code, stored = await post(client, "/sim/unvalidated", daemonset(selector={}))
    assert code == 201, stored

    watch = await client.get(DAEMONSETS, params={"watch": "true", "resourceVersion": since, "timeoutSeconds": "1"})
    frame = json.loads(await watch.content.readline())
    assert frame == {"type": "ADDED", "object": stored}
    watch.close()


async def test_a_toleration_with_an_unknown_operator_and_a_generated_name(client: TestClient[Any, Any]) -> None:
    body = daemonset(template={"metadata": {"labels": {"app": "bad"}},
                               "spec": {"containers": [{"name": "agent", "image": "busybox:1"}],
                                        "tolerations": [{"key": "k", "operator": "Sometimes", "value": "v"}]}})
    code, refused = await post(client, DAEMONSETS, body)
    assert code == 422 and "spec.template.spec.tolerations[0].operator" in refused["message"], refused

    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "bad-"
    code, stored = await post(client, "/sim/unvalidated", body)
    assert code == 201, stored
    assert stored["metadata"]["name"].startswith("bad-") and len(stored["metadata"]["name"]) == 9
    assert stored["spec"]["template"]["spec"]["tolerations"] == [{"key": "k", "operator": "Sometimes", "value": "v"}]


async def test_later_writes_go_through_the_normal_paths(client: TestClient[Any, Any]) -> None:
    """A status write is not validated against the spec; a spec update is, and is refused."""
    code, stored = await post(client, "/sim/unvalidated", daemonset(selector={}))
    assert code == 201, stored

    status = {**stored, "status": {**stored["status"], "observedGeneration": 1}}
    response = await client.put(f"{DAEMONSETS}/bad/status", data=json.dumps(status),
                                headers={"Content-Type": "application/json"})
    assert response.status == 200, await response.text()
    written = await response.json()
    assert written["status"]["observedGeneration"] == 1

    written["spec"]["minReadySeconds"] = 5
    response = await client.put(f"{DAEMONSETS}/bad", data=json.dumps(written),
                                headers={"Content-Type": "application/json"})
    assert response.status == 422, await response.text()
    assert "empty selector is invalid for daemonset" in (await response.json())["message"]


async def test_unknown_fields_are_dropped_with_a_warning(client: TestClient[Any, Any]) -> None:
    body = daemonset(selector={}, bogus=True)
    response = await client.post("/sim/unvalidated", data=json.dumps(body),
                                 headers={"Content-Type": "application/json"})
    assert response.status == 201, await response.text()
    assert "bogus" not in (await response.json())["spec"]
    assert response.headers.getall("Warning") == ['299 - "unknown field \\"spec.bogus\\""']


@pytest.mark.parametrize(("body", "code", "reason"), [
    ([1, 2], 400, "BadRequest"),
    ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"}},
     400, "BadRequest"),
    ({"apiVersion": "v1", "kind": "DaemonSet", "metadata": {"name": "d", "namespace": "default"}}, 400, "BadRequest"),
    ({**daemonset(), "metadata": {"name": "bad"}}, 400, "BadRequest"),
    ({**daemonset(), "metadata": {"name": "bad", "namespace": "nowhere"}}, 404, "NotFound"),
    ({**daemonset(), "metadata": {"namespace": "default"}}, 422, "Invalid"),
    ({**daemonset(), "metadata": {"name": "bad", "namespace": "default", "resourceVersion": "5"}}, 400, "BadRequest"),
], ids=["not an object", "a kind not served", "a wrong apiVersion", "no namespace", "a missing namespace",
        "no name", "a resourceVersion"])
async def test_what_a_create_refuses_whatever_the_validation(client: TestClient[Any, Any], body: Any, code: int,
                                                             reason: str) -> None:
    got, status = await post(client, "/sim/unvalidated", body)
    assert (got, status["kind"], status["reason"]) == (code, "Status", reason), status


async def test_a_taken_name_is_already_exists(client: TestClient[Any, Any]) -> None:
    assert (await post(client, "/sim/unvalidated", daemonset(selector={})))[0] == 201
    code, status = await post(client, "/sim/unvalidated", daemonset(selector={}))
    assert (code, status["reason"]) == (409, "AlreadyExists"), status
