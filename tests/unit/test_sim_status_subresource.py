"""A ReplicaSet's or DaemonSet's /status PUT in the sim is kube-apiserver's.

pkg/registry/apps/{replicaset,daemonset}/strategy.go: the status strategies' PrepareForUpdate keeps
only the stored spec; neither calls metav1.ResetObjectMetaForStatus, so the body's labels,
annotations, ownerReferences and finalizers are stored. rest.BeforeUpdate restores generation,
creationTimestamp and the deletion fields and takes the stored uid when none is sent; a uid that is
sent is a storage precondition, a resourceVersion the optimistic-concurrency check (409 Conflict).
ValidateReplicaSetStatusUpdate / ValidateDaemonSetStatusUpdate check the metadata and the status,
never the spec, and a DaemonSet's collisionCount may not go down.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

Client = TestClient[Any, Any]
APPS = "/apis/apps/v1/namespaces/default"
KINDS = {"ReplicaSet": "replicasets", "DaemonSet": "daemonsets"}


@pytest.fixture
def client(sim_client: Client) -> Client:
    return sim_client


def workload(kind: str, name: str = "web") -> dict[str, Any]:
    labels = {"app": name}
    spec: dict[str, Any] = {"selector": {"matchLabels": labels},
                            "template": {"metadata": {"labels": labels},
                                         "spec": {"containers": [{"name": "app", "image": "busybox:1"}]}}}
    if kind == "ReplicaSet":
        spec["replicas"] = 2
    return {"apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": name, "labels": {"tier": "web"}, "annotations": {"note": "a"},
                         "finalizers": ["example.com/keep"]},
            "spec": spec}


def counts(kind: str) -> dict[str, Any]:
    if kind == "ReplicaSet":
        return {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 1, "availableReplicas": 1,
                "observedGeneration": 1}
    return {"currentNumberScheduled": 1, "numberMisscheduled": 0, "desiredNumberScheduled": 1, "numberReady": 1,
            "observedGeneration": 1, "numberAvailable": 1}


async def call(client: Client, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    response = await client.request(method, path, data=None if body is None else json.dumps(body),
                                    headers={"Content-Type": "application/json"})
    return response.status, await response.json()


async def created(client: Client, kind: str) -> dict[str, Any]:
    code, obj = await call(client, "POST", f"{APPS}/{KINDS[kind]}", workload(kind))
    assert code == 201, obj
    return obj


def status_path(kind: str, name: str = "web") -> str:
    return f"{APPS}/{KINDS[kind]}/{name}/status"


BOTH = pytest.mark.parametrize("kind", list(KINDS))


@BOTH
async def test_the_spec_sent_is_ignored_and_the_status_stored(client: Client, kind: str) -> None:
    """PrepareForUpdate: the stored spec; no new generation; the status is the body's."""
    obj = await created(client, kind)
    body = copy.deepcopy(obj)
    body["spec"]["minReadySeconds"] = 30
    body["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    body["status"] = counts(kind)
    code, written = await call(client, "PUT", status_path(kind), body)
    assert code == 200, written
    assert written["spec"] == obj["spec"]
    assert written["metadata"]["generation"] == obj["metadata"]["generation"] == 1
    assert written["status"].items() >= counts(kind).items()
    assert int(written["metadata"]["resourceVersion"]) > int(obj["metadata"]["resourceVersion"])


@BOTH
async def test_a_body_of_metadata_and_status_alone_is_accepted(client: Client, kind: str) -> None:
    """No spec at all (what the executor sends): the stored spec stays, the metadata sent is kept."""
    obj = await created(client, kind)
    body = {"apiVersion": "apps/v1", "kind": kind, "metadata": obj["metadata"], "status": counts(kind)}
    code, written = await call(client, "PUT", status_path(kind), body)
    assert code == 200, written
    assert written["spec"] == obj["spec"]
    assert {k: written["metadata"][k] for k in ("labels", "finalizers", "uid", "creationTimestamp")} == \
        {k: obj["metadata"][k] for k in ("labels", "finalizers", "uid", "creationTimestamp")}
    assert written["metadata"]["annotations"] == obj["metadata"]["annotations"]


@BOTH
async def test_the_metadata_sent_is_stored_as_no_reset_for_status_is_made(client: Client, kind: str) -> None:
    """Labels, annotations, finalizers of the body replace the stored ones, as kube-apiserver does for the
    apps kinds; a body without them clears them."""
    obj = await created(client, kind)
    body = copy.deepcopy(obj)
    body["metadata"]["labels"] = {"tier": "cache"}
    body["metadata"]["annotations"] = {"note": "b"}
    body["status"] = counts(kind)
    code, written = await call(client, "PUT", status_path(kind), body)
    assert code == 200, written
    assert written["metadata"]["labels"] == {"tier": "cache"}
    assert written["metadata"]["annotations"]["note"] == "b"

    bare = {"metadata": {"name": "web", "resourceVersion": written["metadata"]["resourceVersion"]},
            "status": counts(kind)}
    code, stripped = await call(client, "PUT", status_path(kind), bare)
    assert code == 200, stripped
    assert "labels" not in stripped["metadata"] and "finalizers" not in stripped["metadata"]
    assert stripped["metadata"]["uid"] == obj["metadata"]["uid"]  # BeforeUpdate: the stored uid


@BOTH
async def test_system_fields_sent_are_restored(client: Client, kind: str) -> None:
    """rest.BeforeUpdate: generation and creationTimestamp are the stored ones, whatever is sent."""
    obj = await created(client, kind)
    body = copy.deepcopy(obj)
    body["metadata"]["generation"] = 7
    body["metadata"]["creationTimestamp"] = "2001-01-01T00:00:00Z"
    body["status"] = counts(kind)
    code, written = await call(client, "PUT", status_path(kind), body)
    assert code == 200, written
    assert written["metadata"]["generation"] == 1
    assert written["metadata"]["creationTimestamp"] == obj["metadata"]["creationTimestamp"]


@BOTH
async def test_a_stale_resource_version_is_a_conflict(client: Client, kind: str) -> None:
    """Optimistic concurrency: the resourceVersion sent must be the stored one."""
    obj = await created(client, kind)
    first = {**copy.deepcopy(obj), "status": counts(kind)}
    code, written = await call(client, "PUT", status_path(kind), first)
    assert code == 200, written
    stale = {**copy.deepcopy(obj), "status": {**counts(kind), "observedGeneration": 0}}
    code, refused = await call(client, "PUT", status_path(kind), stale)
    assert (code, refused["reason"]) == (409, "Conflict"), refused
    assert "the object has been modified" in refused["message"]
    code, now = await call(client, "GET", f"{APPS}/{KINDS[kind]}/web")
    assert code == 200 and now["status"]["observedGeneration"] == 1


@BOTH
async def test_another_uid_is_a_failed_precondition(client: Client, kind: str) -> None:
    """A uid in the body is a storage precondition (defaultUpdatedObjectInfo.Preconditions)."""
    obj = await created(client, kind)
    body = {**copy.deepcopy(obj), "status": counts(kind)}
    body["metadata"]["uid"] = "someone-else"
    del body["metadata"]["resourceVersion"]
    code, refused = await call(client, "PUT", status_path(kind), body)
    assert (code, refused["reason"]) == (409, "Conflict"), refused
    assert "Precondition failed: UID in precondition: someone-else" in refused["message"]


@BOTH
async def test_an_empty_status_is_stored_zeroed(client: Client, kind: str) -> None:
    """The status strategy keeps no stored status: a body without one writes the zero status, whose
    counts without omitempty still show."""
    obj = await created(client, kind)
    code, written = await call(client, "PUT", status_path(kind), {**copy.deepcopy(obj), "status": counts(kind)})
    assert code == 200, written
    code, zeroed = await call(client, "PUT", status_path(kind), {"metadata": written["metadata"]})
    assert code == 200, zeroed
    assert zeroed["status"] == obj["status"]


@pytest.mark.parametrize(("status", "field", "detail"), [
    pytest.param({"replicas": -1}, "status.replicas", "Invalid value: -1: must be greater than or equal to 0",
                 id="negative-replicas"),
    pytest.param({"replicas": 1, "readyReplicas": 2, "availableReplicas": 1}, "status.readyReplicas",
                 "Invalid value: 2: cannot be greater than status.replicas", id="more-ready-than-replicas"),
    pytest.param({"replicas": 2, "readyReplicas": 1, "availableReplicas": 2}, "status.availableReplicas",
                 "Invalid value: 2: cannot be greater than readyReplicas", id="more-available-than-ready"),
])
async def test_a_replicaset_status_is_validated(client: Client, status: dict[str, Any], field: str,
                                                detail: str) -> None:
    """ValidateReplicaSetStatus: counts non-negative, none above replicas, available not above ready."""
    obj = await created(client, "ReplicaSet")
    code, refused = await call(client, "PUT", status_path("ReplicaSet"), {**obj, "status": status})
    assert (code, refused["reason"]) == (422, "Invalid"), refused
    assert f"{field}: {detail}" in refused["message"]


@pytest.mark.parametrize("collision", [
    pytest.param({"collisionCount": 1}, id="lowered"),
    pytest.param({}, id="dropped"),
])
async def test_a_daemonset_collision_count_cannot_go_down(client: Client, collision: dict[str, Any]) -> None:
    """ValidateDaemonSetStatusUpdate: IsDecremented, where a missing count is a lower one."""
    obj = await created(client, "DaemonSet")
    code, raised = await call(client, "PUT", status_path("DaemonSet"),
                              {**obj, "status": {**obj["status"], "collisionCount": 2}})
    assert code == 200 and raised["status"]["collisionCount"] == 2, raised
    code, refused = await call(client, "PUT", status_path("DaemonSet"),
                               {**raised, "status": {**counts("DaemonSet"), **collision}})
    assert (code, refused["reason"]) == (422, "Invalid"), refused
    shown = collision.get("collisionCount", 0)
    assert f"status.collisionCount: Invalid value: {shown}: cannot be decremented" in refused["message"]


async def test_a_daemonset_status_write_keeps_the_template_generation(client: Client) -> None:
    """The deprecated.daemonset.template.generation annotation is the internal spec.templateGeneration:
    the stored one, even when the body leaves it out."""
    obj = await created(client, "DaemonSet")
    key = "deprecated.daemonset.template.generation"
    assert obj["metadata"]["annotations"][key] == "1"
    body = copy.deepcopy(obj)
    del body["metadata"]["annotations"][key]
    body["status"] = counts("DaemonSet")
    code, written = await call(client, "PUT", status_path("DaemonSet"), body)
    assert code == 200, written
    assert written["metadata"]["annotations"] == {"note": "a", key: "1"}


async def test_a_status_patch_stores_the_metadata_it_changes(client: Client) -> None:
    """A PATCH of /status runs the same strategy: a label it sets is stored, the spec it sets is not."""
    obj = await created(client, "ReplicaSet")
    patch = {"metadata": {"labels": {"patched": "yes"}}, "spec": {"replicas": 9}, "status": {"replicas": 2}}
    response = await client.patch(status_path("ReplicaSet"), data=json.dumps(patch),
                                  headers={"Content-Type": "application/merge-patch+json"})
    written = await response.json()
    assert response.status == 200, written
    assert written["metadata"]["labels"] == {"tier": "web", "patched": "yes"}
    assert written["spec"] == obj["spec"] and written["status"]["replicas"] == 2
