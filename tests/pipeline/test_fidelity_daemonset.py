"""Fidelity of the DaemonSet controller's history and error paths end to end (issue 13, part 5), seen through the API
only, as a user with kubectl would see it, against the whole pipeline.

Each test mirrors a test of upstream's test/integration/daemonset:

- TestUpdateStatusDespitePodCreationFailure: pod creates refused by the API server (a ResourceQuota's 403) still
  leave a status that says how many pods the DaemonSet wants, and FailedCreate Warnings; once the refusals stop the
  pods come.
- TestLaunchWithHashCollision: a ControllerRevision squatting on the name the next revision would take (other data)
  makes the controller bump status.collisionCount and roll out under the next name.
- TestDSCUpdatesPodLabelAfterDedupCurHistories: a second revision with the current template's data (a higher
  revision number, another hash) is the one kept (dedupCurHistories keeps the highest number) at the next sync
  (the revision's add does not wake its DaemonSet: upstream's test adds a node, this one annotates the DaemonSet):
  the other is deleted and every pod relabelled to the kept revision's hash.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kube import codec as kube_codec
from kube.apps import DaemonSet
from reconciler.core.daemonset.history import UNIQUE_LABEL_KEY, revision_data, revision_hash, revision_name
from tests.pipeline import test_replicaset as shared
from tests.pipeline.harness import Pipeline
from tests.pipeline.test_executor_failures import api
from tests.simulation import Kubectl, target_node

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

# the ReplicaSet module's fixtures (a pipeline per module, a namespace per test, no dead services)
pipeline, kubectl, namespace, services = shared.pipeline, shared.kubectl, shared.namespace, shared.services
apply, until = shared.apply, shared.until
NODES = {"node-0", "node-1", "node-2", "node-3"}


def daemonset(name: str, ns: str, image: str = "agent:1") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 4}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "agent", "image": image}]}}}}


def events_of(k: Kubectl, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    """The events `kubectl get events` shows for DaemonSet `name` with `reason`."""
    return [e for e in k.json("get", "events", "-n", ns)["items"]
            if e["involvedObject"]["kind"] == "DaemonSet" and e["involvedObject"]["name"] == name
            and e["reason"] == reason]


def get_ds(k: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return dict(k.json("get", "ds", name, "-n", ns))


def revisions(k: Kubectl, ns: str) -> dict[str, dict[str, Any]]:
    return {r["metadata"]["name"]: r for r in k.json("get", "controllerrevisions", "-n", ns)["items"]}


def active_pods(p: Pipeline, ns: str) -> list[dict[str, Any]]:
    return [pod for pod in p.pods(ns) if shared.is_active(pod)]


def one_ready_pod_per_node(p: Pipeline, ns: str, image: str) -> list[dict[str, Any]] | None:
    pods = active_pods(p, ns)
    ok = (sorted(target_node(pod) for pod in pods) == sorted(NODES) and all(shared.is_ready(pod) for pod in pods)
          and all(pod["spec"]["containers"][0]["image"] == image for pod in pods))
    return pods if ok else None


def test_a_daemonset_reports_its_status_while_the_api_refuses_its_pods(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path,
        faults: Callable[..., None]) -> None:
    """Every pod create answered 403 (exceeded quota): the status still says 4 pods are wanted and none scheduled,
    with FailedCreate Warnings naming the quota (upstream's syncDaemonSet writes the status after a failed manage,
    as updateDaemonSetStatus runs whatever manage returned); the refusals lifted, the 4 pods come."""
    faults("pods:create:1.0:403")
    apply(kubectl, tmp_path, daemonset("quota", namespace))

    def refused() -> dict[str, Any] | None:
        status = get_ds(kubectl, namespace, "quota").get("status") or {}
        warnings = events_of(kubectl, namespace, "quota", "FailedCreate")
        wanted = status.get("desiredNumberScheduled") == 4 and status.get("observedGeneration") == 1
        return status if wanted and warnings else None

    status = until(pipeline, refused, "a status wanting 4 pods and FailedCreate warnings")
    assert status.get("currentNumberScheduled", 0) == 0 and status.get("numberReady", 0) == 0
    warning = events_of(kubectl, namespace, "quota", "FailedCreate")[0]
    assert warning["type"] == "Warning" and "exceeded quota" in warning["message"], warning
    assert active_pods(pipeline, namespace) == []

    api(pipeline, "DELETE", "/sim/faults")
    until(pipeline, lambda: one_ready_pod_per_node(pipeline, namespace, "agent:1"), "a Ready pod on each node", 60)
    until(pipeline, lambda: (get_ds(kubectl, namespace, "quota").get("status") or {}).get("numberAvailable") == 4,
          "numberAvailable 4")


def test_a_revision_name_taken_by_other_data_bumps_the_collision_count(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """A ControllerRevision the DaemonSet owns already holds the name the updated template's revision would take,
    with other data: the controller sees the collision, bumps status.collisionCount to 1 and creates the revision
    under the hash with that count; the pods roll to the new template and the squatter is left alone."""
    apply(kubectl, tmp_path, daemonset("collide", namespace))
    until(pipeline, lambda: one_ready_pod_per_node(pipeline, namespace, "agent:1"), "a Ready pod on each node", 60)
    live = get_ds(kubectl, namespace, "collide")
    assert "collisionCount" not in live.get("status", {})

    updated = dict(live, spec=dict(live["spec"]))
    updated["spec"]["template"]["spec"]["containers"][0]["image"] = "agent:2"
    data = revision_data(kube_codec.decode_builtin(updated, DaemonSet))
    taken = revision_name("collide", revision_hash(data, None))
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "collide", "uid": live["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    squatter = {"apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": taken, "namespace": namespace, "ownerReferences": [owner],
                             "labels": {"app": "collide", UNIQUE_LABEL_KEY: "squatter"}},
                "revision": 1, "data": {"spec": {"template": {"$patch": "replace", "metadata": {"labels": {}},
                                                              "spec": {"containers": [{"name": "x", "image": "x"}]}}}}}
    apply(kubectl, tmp_path, squatter)

    kubectl("set", "image", "ds/collide", "agent=agent:2", "-n", namespace)
    until(pipeline, lambda: one_ready_pod_per_node(pipeline, namespace, "agent:2"), "the pods rolled to agent:2", 60)
    assert get_ds(kubectl, namespace, "collide")["status"]["collisionCount"] == 1
    current = revision_name("collide", revision_hash(data, 1))
    held = revisions(kubectl, namespace)
    assert current in held and held[taken]["metadata"]["labels"][UNIQUE_LABEL_KEY] == "squatter", sorted(held)
    pod_hashes = {pod["metadata"]["labels"][UNIQUE_LABEL_KEY] for pod in active_pods(pipeline, namespace)}
    assert pod_hashes == {held[current]["metadata"]["labels"][UNIQUE_LABEL_KEY]}


def test_a_duplicate_current_revision_is_kept_and_the_pods_relabelled_to_it(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """A second revision with the current template's data and a higher revision number: dedupCurHistories keeps the
    highest-numbered one, relabels every pod to its hash (no pod is restarted) and deletes the other."""
    apply(kubectl, tmp_path, daemonset("dedup", namespace))
    pods = until(pipeline, lambda: one_ready_pod_per_node(pipeline, namespace, "agent:1"), "a Ready pod on each node",
                 60)
    (original,) = revisions(kubectl, namespace).values()
    live = get_ds(kubectl, namespace, "dedup")
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dedup", "uid": live["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    # upstream's test copies the revision's data with a Go client, bytes and all (a RawExtension); kubectl apply
    # would re-encode it with its keys sorted, which is other data to Match's bytes.Equal: post it as read
    path = f"/apis/apps/v1/namespaces/{namespace}/controllerrevisions"
    with urllib.request.urlopen(f"{pipeline.sim.url}{path}/{original['metadata']['name']}", timeout=10) as resp:
        stored = json.loads(resp.read())
    duplicate = {"apiVersion": "apps/v1", "kind": "ControllerRevision",
                 "metadata": {"name": "dedup-duplicate", "namespace": namespace, "ownerReferences": [owner],
                              "labels": {"app": "dedup", UNIQUE_LABEL_KEY: "duplicate"}},
                 "revision": original["revision"] + 1, "data": stored["data"]}
    request = urllib.request.Request(f"{pipeline.sim.url}{path}", method="POST",
                                     data=json.dumps(duplicate, separators=(",", ":")).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 201
    # addHistory does not enqueue the DaemonSet for a revision it owns (upstream's neither): something else must
    # wake it, as upstream's test adds a node; an update of the DaemonSet does (updateDaemonset enqueues it)
    kubectl("annotate", "ds", "dedup", "-n", namespace, "kubus.io/test-wake=1")

    seen: dict[str, Any] = {}

    def deduplicated() -> list[dict[str, Any]] | None:
        left = revisions(kubectl, namespace)
        current = active_pods(pipeline, namespace)
        seen.update(revisions=sorted(left), hashes=sorted(p["metadata"]["labels"].get(UNIQUE_LABEL_KEY, "")
                                                          for p in current))
        relabelled = all(pod["metadata"]["labels"].get(UNIQUE_LABEL_KEY) == "duplicate" for pod in current)
        return current if sorted(left) == ["dedup-duplicate"] and relabelled and len(current) == 4 else None

    try:
        relabelled = until(pipeline, deduplicated, "the original revision deleted and the pods relabelled", 60)
    except AssertionError as exc:
        decisions = pipeline.sql("select summary from decisions where controller_key = ? order by id",
                                 f"DaemonSet/{namespace}/dedup")
        raise AssertionError(f"last seen {seen}; decisions {decisions[-3:]}\n{exc}") from None
    assert {p["metadata"]["uid"] for p in relabelled} == {p["metadata"]["uid"] for p in pods}
    status = get_ds(kubectl, namespace, "dedup")["status"]
    assert status.get("updatedNumberScheduled") == 4 and "collisionCount" not in status, status
