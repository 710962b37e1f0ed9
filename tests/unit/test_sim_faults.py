"""sim.faults: the rules it parses, and the 403 (quota) and 422 (invalid) refusals through the HTTP API.

The sim's aiohttp application in process, with no kubelet, scheduler or garbage collector running;
rules are set through `PUT /sim/faults` as a test or `kubus sim --fault` would set them.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from sim.faults import FAULTS, FaultRule

Client = TestClient[Any, Any]
PODS = "/api/v1/namespaces/default/pods"
REPLICASETS = "/apis/apps/v1/namespaces/default/replicasets"
DAEMONSETS = "/apis/apps/v1/namespaces/default/daemonsets"
QUOTA = "exceeded quota: compute-resources, requested: {0}=1, used: {0}=10, limited: {0}=10"


@pytest.fixture
def client(sim_client: Client) -> Client:
    return sim_client


async def call(client: Client, method: str, path: str, body: Any = None,
               content_type: str = "application/json") -> tuple[int, Any]:
    data = None if body is None else json.dumps(body)
    response = await client.request(method, path, data=data, headers={"Content-Type": content_type})
    return response.status, await response.json()


async def inject(client: Client, *rules: str) -> None:
    code, body = await call(client, "PUT", "/sim/faults", {"rules": list(rules), "seed": 1})
    assert code == 200, body


def pod(name: str | None = "web-1", generate_name: str | None = None) -> dict[str, Any]:
    meta = {k: v for k, v in (("name", name), ("generateName", generate_name)) if v}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "web", "image": "nginx"}]}}


def template(app: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": app, "image": "nginx"}]}}


def replicaset(name: str = "web") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template("web")}}


def daemonset(name: str = "agent") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template("agent")}}


def status(code: int, reason: str, message: str, details: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code, "details": details}


# --- parsing --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", FAULTS)
def test_every_fault_parses(fault: str) -> None:
    """Each fault FAULTS lists is a rule kubus sim accepts."""
    rule = FaultRule.parse(f"pods:create:0.5:{fault}")
    assert (rule.resource, rule.verb, rule.fraction, rule.fault) == ("pods", "create", 0.5, fault)


def test_the_new_faults_are_listed() -> None:
    """403 and 422 join the refusals answered before the request is applied."""
    assert {"403", "422"} <= set(FAULTS)


@pytest.mark.parametrize(("text", "error"), [
    pytest.param("pods:create:0.5:404", "fault must be one of 429, 500, 409, 403, 422, timeout, timeout-applied",
                 id="unknown-fault"),
    pytest.param("pods:create:1.5:403", "fraction must be between 0 and 1", id="fraction-above-one"),
    pytest.param("pods:create:403", "expected RESOURCE:VERB:FRACTION:FAULT", id="missing-part"),
])
def test_bad_rules_are_refused(text: str, error: str) -> None:
    """A malformed rule names what is wrong with it."""
    with pytest.raises(ValueError, match=re.escape(error)):
        FaultRule.parse(text)


# --- 403: a ResourceQuota refusal ---------------------------------------------------------------


async def test_403_refuses_a_pod_create_as_quota_admission_does(client: Client) -> None:
    """The Status names the pod, the quota and the pod count; nothing is stored; the rule counts it."""
    await inject(client, "pods:create:1.0:403")

    code, body = await call(client, "POST", PODS, pod("web-1"))

    assert (code, body) == (403, status(403, "Forbidden", 'pods "web-1" is forbidden: ' + QUOTA.format("pods"),
                                        {"name": "web-1", "kind": "pods"}))
    assert (await call(client, "GET", f"{PODS}/web-1"))[0] == 404
    code, faults = await call(client, "GET", "/sim/faults")
    assert faults == {"rules": [{"rule": "pods:create:1.0:403", "injected": 1}]}


async def test_403_names_the_generated_name_of_a_generate_name_create(client: Client) -> None:
    """Quota admission runs after the registry made the name, so the message shows it, not the prefix."""
    await inject(client, "pods:create:1.0:403")

    code, body = await call(client, "POST", PODS, pod(None, generate_name="web-"))

    assert (code, body["reason"]) == (403, "Forbidden"), body
    name = body["details"]["name"]
    assert re.fullmatch(r"web-[bcdfghjklmnpqrstvwxz2456789]{5}", name), name
    assert body["message"] == f'pods "{name}" is forbidden: ' + QUOTA.format("pods")
    code, listed = await call(client, "GET", PODS)
    assert (code, listed["items"]) == (200, [])


async def test_403_on_an_apps_kind_counts_its_objects(client: Client) -> None:
    """Other resources are counted as quota counts them, `count/<resource>.<group>`, and the group is named."""
    await inject(client, "replicasets:create:1.0:403")

    code, body = await call(client, "POST", REPLICASETS, replicaset("web"))

    message = 'replicasets.apps "web" is forbidden: ' + QUOTA.format("count/replicasets.apps")
    assert (code, body) == (403, status(403, "Forbidden", message,
                                        {"name": "web", "group": "apps", "kind": "replicasets"}))
    assert (await call(client, "GET", f"{REPLICASETS}/web"))[0] == 404


async def test_403_on_an_update_leaves_the_object_unchanged(client: Client) -> None:
    """A refused PUT names the object of its URL and writes nothing."""
    code, stored = await call(client, "POST", PODS, pod("web-1"))
    assert code == 201, stored
    await inject(client, "pods:update:1.0:403")

    changed = {**stored, "metadata": {**stored["metadata"], "labels": {"app": "web"}}}
    code, body = await call(client, "PUT", f"{PODS}/web-1", changed)

    assert (code, body["message"]) == (403, 'pods "web-1" is forbidden: ' + QUOTA.format("pods"))
    assert await call(client, "GET", f"{PODS}/web-1") == (200, stored)


# --- 422: a validation refusal -------------------------------------------------------------------


async def test_422_refuses_a_pod_create_with_a_field_cause(client: Client) -> None:
    """An Invalid Status as validation answers it: the kind in details, a cause naming a field."""
    await inject(client, "pods:create:1.0:422")

    code, body = await call(client, "POST", PODS, pod("web-1"))

    assert (code, body) == (422, status(422, "Invalid",
                                        'Pod "web-1" is invalid: metadata.name: Invalid value: "web-1": injected fault',
                                        {"name": "web-1", "kind": "Pod", "causes": [
                                            {"reason": "FieldValueInvalid", "field": "metadata.name",
                                             "message": 'Invalid value: "web-1": injected fault'}]}))
    assert (await call(client, "GET", f"{PODS}/web-1"))[0] == 404


async def test_422_on_a_patch_of_an_apps_kind_leaves_it_unchanged(client: Client) -> None:
    """The qualified kind in the message, the group in details, and the patch is not applied."""
    code, stored = await call(client, "POST", DAEMONSETS, daemonset("agent"))
    assert code == 201, stored
    await inject(client, "daemonsets:patch:1.0:422")

    code, body = await call(client, "PATCH", f"{DAEMONSETS}/agent", {"spec": {"minReadySeconds": 5}},
                            "application/merge-patch+json")

    assert (code, body["reason"], body["message"]) == (
        422, "Invalid", 'DaemonSet.apps "agent" is invalid: metadata.name: Invalid value: "agent": injected fault')
    assert body["details"] == {"name": "agent", "group": "apps", "kind": "DaemonSet", "causes": [
        {"reason": "FieldValueInvalid", "field": "metadata.name", "message": 'Invalid value: "agent": injected fault'}]}
    assert await call(client, "GET", f"{DAEMONSETS}/agent") == (200, stored)


@pytest.mark.parametrize(("rule", "code"), [pytest.param("pods:create:1.0:403", 403, id="403"),
                                            pytest.param("pods:create:1.0:422", 422, id="422")])
async def test_a_fault_on_one_verb_spares_the_others(client: Client, rule: str, code: int) -> None:
    """A create fault leaves a delete of the same resource alone, and DELETE /sim/faults clears it."""
    created, stored = await call(client, "POST", PODS, pod("web-1"))
    assert created == 201, stored
    await inject(client, rule)
    assert (await call(client, "POST", PODS, pod("web-2")))[0] == code

    assert (await call(client, "DELETE", f"{PODS}/web-1"))[0] == 200
    assert (await call(client, "DELETE", "/sim/faults"))[0] == 200
    assert (await call(client, "POST", PODS, pod("web-2")))[0] == 201


@pytest.mark.parametrize(("fault", "code", "retry_after"), [("429", 429, "1"), ("500", 500, None), ("403", 403, None)])
async def test_retry_after_is_sent_when_the_status_asks_for_a_wait(client: Client, fault: str, code: int,
                                                                   retry_after: str | None) -> None:
    """As kube-apiserver's responsewriters: the header exactly when details.retryAfterSeconds > 0."""
    await inject(client, f"pods:create:1:{fault}")
    response = await client.post(PODS, data=json.dumps(pod()), headers={"Content-Type": "application/json"})
    body = await response.json()
    assert response.status == code, body
    assert response.headers.get("Retry-After") == retry_after
    assert body.get("details", {}).get("retryAfterSeconds") == (int(retry_after) if retry_after else None)
