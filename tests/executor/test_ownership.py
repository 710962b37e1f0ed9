"""Defence in depth (executor/ownership.py): an action on KUBUS_ACTIONS whose objects do not belong to its
controller is refused before any write, its effects reported failed with reason NotOwned (so the reconciler
records it), and the message moved to KUBUS_DEAD. Published as raw JSON on the subject, as `nats pub` would,
against the sim through a real NATS."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from messages import subjects
from messages.actions import FAILED, IDEMPOTENCY_ANNOTATION, SKIPPED, SUCCEEDED
from runtime.bus import Bus
from tests.executor.builders import envelope
from tests.executor.conftest import Running, pods_in, results_for
from tests.poison.conftest import dead_letters
from tests.simulation import SimProcess

Start = Callable[..., AbstractAsyncContextManager[Running]]


def replicaset(sim: SimProcess, namespace: str, name: str = "web") -> dict[str, Any]:
    code, body = sim.request("POST", f"/apis/apps/v1/namespaces/{namespace}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}}}})
    assert code == 201, body
    return dict(body)


def owner_ref(kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


def pod_body(name: str, key: str, namespace: str, refs: list[dict[str, Any]], labels: dict[str, str],
             **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", **extra, "metadata": {
        "name": name, "namespace": namespace, "labels": labels, "ownerReferences": refs,
        "annotations": {IDEMPOTENCY_ANNOTATION: key}},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}}


async def nats_pub(bus: Bus, partition_of: str, action: dict[str, Any]) -> None:
    """What `nats pub kubus.actions.<partition> '<json>'` does: a core NATS publish the stream stores."""
    subject = subjects.action_subject(bus.partition_of(partition_of), bus.prefix)
    await bus.nc.publish(subject, json.dumps(action).encode())
    await bus.nc.flush()


def create_pods(action_namespace: str, controller: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"msg": "create_pods", "v": 1, **envelope(key, controller), "namespace": action_namespace,
            "pods": [{"key": key, "pod": body}]}


async def test_a_privileged_pod_in_kube_system_for_another_owner_is_refused(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    rs = replicaset(sim, namespace)
    code, body = sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": "kube-system"}})
    assert code in (201, 409), body
    evil = pod_body("evil", "evil/0", "kube-system", [owner_ref("DaemonSet", "kube-proxy", "some-uid")],
                    {"app": "web"})
    evil["spec"] = {"hostPID": True, "containers": [{"name": "x", "image": "busybox",
                                                     "securityContext": {"privileged": True},
                                                     "volumeMounts": [{"name": "root", "mountPath": "/host"}]}],
                    "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}
    async with executor(check_ownership=True) as running:
        await nats_pub(bus, "kube-system", create_pods("kube-system", f"ReplicaSet/{namespace}/web", "evil/0", evil))
        [result] = await results_for(bus, 1, (running,))
    assert (result.outcome, result.reason) == (FAILED, "NotOwned"), result
    assert "namespace 'kube-system' is not its controller" in result.message
    assert result.controller == f"ReplicaSet/{namespace}/web" and result.key == "evil/0"
    assert [p["metadata"]["name"] for p in pods_in(sim, "kube-system")] == []
    [dead] = await dead_letters(bus)
    assert dead.headers is not None and dead.headers["Kubus-Dead-Reason"] == "NotOwned"
    assert rs["metadata"]["uid"]


@pytest.mark.parametrize("case", ["foreign-owner", "stale-uid", "labels-outside-selector", "not-a-pod",
                                  "no-owner", "other-namespace-in-body"])
async def test_a_pod_not_of_the_actions_controller_is_refused(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, case: str) -> None:
    uid = replicaset(sim, namespace)["metadata"]["uid"]
    refs, labels, extra, body_ns = [owner_ref("ReplicaSet", "web", uid)], {"app": "web"}, {}, namespace
    if case == "foreign-owner":
        refs = [owner_ref("ReplicaSet", "other", uid)]
    elif case == "stale-uid":
        refs = [owner_ref("ReplicaSet", "web", "0000-not-it")]
    elif case == "labels-outside-selector":
        labels = {"app": "db"}
    elif case == "not-a-pod":
        extra = {"kind": "Secret"}
    elif case == "no-owner":
        refs = []
    else:
        body_ns = "default"
    body = {**pod_body("p", f"{case}/0", body_ns, refs, labels), **extra}
    async with executor(check_ownership=True) as running:
        await nats_pub(bus, namespace, create_pods(namespace, f"ReplicaSet/{namespace}/web", f"{case}/0", body))
        [result] = await results_for(bus, 1, (running,))
    assert (result.outcome, result.reason) == (FAILED, "NotOwned"), result
    assert pods_in(sim, namespace) == []
    assert pods_in(sim, "default") == [] or all(p["metadata"]["name"] != "p" for p in pods_in(sim, "default"))


async def test_a_pod_of_the_actions_controller_is_created(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    uid = replicaset(sim, namespace)["metadata"]["uid"]
    bodies = [pod_body(f"web-{i}", f"ok/{i}", namespace, [owner_ref("ReplicaSet", "web", uid)], {"app": "web"})
              for i in range(3)]
    action = {"msg": "create_pods", "v": 1, **envelope("ok", f"ReplicaSet/{namespace}/web"), "namespace": namespace,
              "pods": [{"key": f"ok/{i}", "pod": b} for i, b in enumerate(bodies)]}
    async with executor(check_ownership=True) as running:
        await nats_pub(bus, namespace, action)
        results = await results_for(bus, 3, (running,))
    assert {r.outcome for r in results} == {SUCCEEDED}, results
    assert sorted(p["metadata"]["name"] for p in pods_in(sim, namespace)) == ["web-0", "web-1", "web-2"]


async def test_a_controller_revision_for_another_owner_is_refused(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    uid = replicaset(sim, namespace)["metadata"]["uid"]
    revision = {"apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": 1, "data": {},
                "metadata": {"name": "web-1", "labels": {"app": "web"},
                             "ownerReferences": [owner_ref("DaemonSet", "someone-else", uid)]}}
    action = {"msg": "create_controller_revision", "v": 1, **envelope("rev", f"DaemonSet/{namespace}/web"),
              "namespace": namespace, "revision": revision}
    async with executor(check_ownership=True) as running:
        await nats_pub(bus, namespace, action)
        [result] = await results_for(bus, 1, (running,))
    assert (result.outcome, result.reason) == (FAILED, "NotOwned"), result
    assert "not the action's DaemonSet/" in result.message
    code, body = sim.request("GET", f"/apis/apps/v1/namespaces/{namespace}/controllerrevisions")
    assert code == 200 and body["items"] == [], body


# --- deletes and patches: the object they touch must be the action's controller's (or adopted by it first) -----
def existing_pod(sim: SimProcess, namespace: str, name: str, refs: list[dict[str, Any]],
                 labels: dict[str, str]) -> dict[str, Any]:
    code, body = sim.request("POST", f"/api/v1/namespaces/{namespace}/pods",
                             pod_body(name, f"seed/{name}", namespace, refs, labels))
    assert code == 201, body
    return dict(body)


def delete_pod(controller: str, key: str, target: dict[str, Any], **extra: Any) -> dict[str, Any]:
    meta = target["metadata"]
    return {"msg": "delete_pod", "v": 1, **envelope(key, controller), "namespace": meta["namespace"],
            "name": meta["name"], "uid": meta["uid"], **extra}


def adoption(kind: str, name: str, owner_uid: str, pod_uid: str) -> dict[str, Any]:
    patch = {"metadata": {"ownerReferences": [owner_ref(kind, name, owner_uid)], "uid": pod_uid}}
    return {"owner_check": {"kind": kind, "name": name, "uid": owner_uid}, "patch_type": "strategic",
            "patch": patch}


@pytest.mark.parametrize("case", ["another-controllers", "an-orphan-not-adopted", "adopting-outside-the-selector"])
async def test_a_delete_of_a_pod_not_of_the_actions_controller_is_refused(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, case: str) -> None:
    uid = replicaset(sim, namespace)["metadata"]["uid"]
    other = replicaset(sim, namespace, "other")["metadata"]["uid"]
    refs, labels, extra = [owner_ref("ReplicaSet", "other", other)], {"app": "web"}, {}
    if case in ("an-orphan-not-adopted", "adopting-outside-the-selector"):
        refs = []
    if case == "adopting-outside-the-selector":
        labels = {"app": "db"}
    target = existing_pod(sim, namespace, "victim", refs, labels)
    if case.startswith("adopting"):
        extra = {"adopt_first": adoption("ReplicaSet", "web", uid, target["metadata"]["uid"])}
    action = delete_pod(f"ReplicaSet/{namespace}/web", f"{case}/delete", target, **extra)
    async with executor(check_ownership=True) as running:
        await nats_pub(bus, namespace, action)
        [result] = await results_for(bus, 1, (running,))
    assert (result.outcome, result.reason) == (FAILED, "NotOwned"), result
    assert "victim" in result.message, result.message
    [pod] = pods_in(sim, namespace)  # untouched: not deleted, not adopted
    assert pod["metadata"].get("ownerReferences", []) == refs and not pod["metadata"].get("deletionTimestamp")


async def test_a_patch_adopting_a_pod_outside_the_selector_is_refused(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    uid = replicaset(sim, namespace)["metadata"]["uid"]
    target = existing_pod(sim, namespace, "stray", [], {"app": "db"})
    adopt = adoption("ReplicaSet", "web", uid, target["metadata"]["uid"])
    action = {"msg": "patch_pod", "v": 1, **envelope("adopt", f"ReplicaSet/{namespace}/web"), "namespace": namespace,
              "name": "stray", "uid": target["metadata"]["uid"], "patch_type": "strategic",
              "patch": adopt["patch"], "owner_check": adopt["owner_check"]}
    async with executor(check_ownership=True) as running:
        await nats_pub(bus, namespace, action)
        [result] = await results_for(bus, 1, (running,))
    assert (result.outcome, result.reason) == (FAILED, "NotOwned"), result
    assert "do not match" in result.message
    [pod] = pods_in(sim, namespace)
    assert pod["metadata"].get("ownerReferences", []) == []


@pytest.mark.parametrize("case", ["owned", "an-orphan-adopted-first", "gone"])
async def test_a_delete_of_the_actions_controllers_pod_is_applied(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, case: str) -> None:
    uid = replicaset(sim, namespace)["metadata"]["uid"]
    refs = [] if case == "an-orphan-adopted-first" else [owner_ref("ReplicaSet", "web", uid)]
    target = existing_pod(sim, namespace, "mine", refs, {"app": "web"})
    extra = {}
    if case == "an-orphan-adopted-first":
        extra = {"adopt_first": adoption("ReplicaSet", "web", uid, target["metadata"]["uid"])}
    if case == "gone":
        code, body = sim.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/mine")
        assert code == 200, body
    action = delete_pod(f"ReplicaSet/{namespace}/web", f"{case}/delete", target, **extra)
    async with executor(check_ownership=True) as running:
        await nats_pub(bus, namespace, action)
        [result] = await results_for(bus, 1, (running,))
    assert result.outcome == SUCCEEDED, result
    # deleted: gone, or terminating (graceful deletion, the sim's kubelet has yet to stop it)
    assert all(p["metadata"].get("deletionTimestamp") for p in pods_in(sim, namespace)), pods_in(sim, namespace)


async def test_a_delete_that_would_adopt_anothers_pod_first_applies_nothing(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    """Left to the API, as upstream's claim: the adoption is refused (one controller only), so is the delete."""
    uid = replicaset(sim, namespace)["metadata"]["uid"]
    other = replicaset(sim, namespace, "other")["metadata"]["uid"]
    refs = [owner_ref("ReplicaSet", "other", other)]
    target = existing_pod(sim, namespace, "theirs", refs, {"app": "web"})
    action = delete_pod(f"ReplicaSet/{namespace}/web", "theirs/delete", target,
                        adopt_first=adoption("ReplicaSet", "web", uid, target["metadata"]["uid"]))
    async with executor(check_ownership=True) as running:
        await nats_pub(bus, namespace, action)
        [result] = await results_for(bus, 1, (running,))
    assert (result.outcome, result.reason) == (SKIPPED, "NotAdopted"), result
    [pod] = pods_in(sim, namespace)
    assert pod["metadata"]["ownerReferences"] == refs and not pod["metadata"].get("deletionTimestamp")
