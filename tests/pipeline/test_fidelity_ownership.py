"""Fidelity to upstream's claim rules end to end (issue 13, part 5): who a ReplicaSet (or DaemonSet) releases, adopts
or leaves alone, seen through the API only, as a user with kubectl would see it, against the whole pipeline.

Each test mirrors an upstream test of kube-controller-manager and asserts what its controller produces:

- test/integration/replicaset TestPodOrphaningAndAdoptionWhenLabelsChange (with TestUpdateLabelToRemoveControllerRef
  and TestUpdateLabelToBeAdopted): a pod relabelled out of the selector is released and replaced; relabelled back it
  is adopted again and the excess deleted.
- test/integration/replicaset TestAdoption and TestGeneralPodAdoption, pkg/controller/controller_ref_manager_test.go
  TestClaimPods: an orphan carrying a non-controller ownerReference is adopted, the strategic merge of the adoption
  patch (ownerRefControllerPatch) putting the patch's reference first; one already naming the ReplicaSet as a
  non-controller owner gets that very reference turned into the controller reference; a pod another controller
  (of any kind) controls is neither adopted, counted nor deleted.
- TestDoNotAdoptOrCreateIfBeingDeleted and TestReplicaSetsAppsV1DefaultGCPolicy: a ReplicaSet being deleted adopts
  and creates nothing. TestOverlappingRSs: ReplicaSets with one selector each keep their own pods.
- The same orphaning and adoption for a DaemonSet's pod, and two ReplicaSets (or DaemonSets) racing for one orphan:
  upstream's claim adopts before any status is written, so no status ever counts a pod whose adoption failed. kubus
  wrote one (the status of the sync that planned the adoption); fixed in reconciler/core (issue 13, part 5).

kube-controller-manager's garbage collector deletes a pod whose owners are all gone, and the sim's collector knows
owners by uid alone: so each foreign owner here is a live object, a ControllerRevision whose uid the `v1/Foo` and
`batch/v1 Job` references carry (kube-controller-manager's collector leaves such a pod too: it cannot map `v1/Foo`,
and the Job stands for one that exists).
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline import test_replicaset as shared
from tests.pipeline.harness import Pipeline
from tests.simulation import Kubectl, LineReader, target_node

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

# the ReplicaSet module's fixtures (a pipeline per module, a namespace per test, no dead services)
pipeline, kubectl, namespace, services = shared.pipeline, shared.kubectl, shared.namespace, shared.services
apply, until, converged, settled = shared.apply, shared.until, shared.converged, shared.settled
names, summaries, observed = shared.names, shared.summaries, shared.observed
DELETION_COST = shared.DELETION_COST


def rs_ref(rs: dict[str, Any]) -> dict[str, Any]:
    """The controller reference upstream's ReplicaSet controller writes (NewControllerRef)."""
    meta = rs["metadata"]
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def holder(k: Kubectl, tmp_path: Path, ns: str, name: str) -> str:
    """A live object (a ControllerRevision no DaemonSet selects) whose uid foreign owner references carry."""
    apply(k, tmp_path, {"apiVersion": "apps/v1", "kind": "ControllerRevision",
                        "metadata": {"name": name, "namespace": ns, "labels": {"role": "holder"}},
                        "revision": 1, "data": {}})
    return str(k.json("get", "controllerrevision", name, "-n", ns)["metadata"]["uid"])


def pod(name: str, ns: str, labels: dict[str, str], *, owners: list[dict[str, Any]] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    body = shared.bare_pod(name, ns, labels, annotations)
    if owners is not None:
        body["metadata"]["ownerReferences"] = owners
    return body


def get_pod(k: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return dict(k.json("get", "pod", name, "-n", ns))


def status_of(k: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return dict(k.json("get", "rs", name, "-n", ns)["status"])


def test_a_pod_relabelled_out_is_released_and_relabelled_back_is_adopted_again(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """TestPodOrphaningAndAdoptionWhenLabelsChange: a ReplicaSet of 1; its pod relabelled out of the selector loses
    its controller reference (ownerReferences gone) and keeps running while a replacement is created; relabelled
    back it is adopted again (the reference is back) and, the ReplicaSet now at 2, the excess pod is deleted: the
    replacement, as the moved pod carries a higher pod-deletion-cost."""
    apply(kubectl, tmp_path, shared.replicaset("web", namespace, 1))
    (first,) = converged(pipeline, namespace, "web", 1, ceiling=1)
    settled(pipeline, namespace, "web")
    rs = kubectl.json("get", "rs", "web", "-n", namespace)
    moved = first["metadata"]["name"]
    kubectl("annotate", "pod", moved, "-n", namespace, f"{DELETION_COST}=100")

    # orphaning
    kubectl("label", "pod", moved, "-n", namespace, "app=elsewhere", "--overwrite")
    until(pipeline, lambda: "ownerReferences" not in get_pod(kubectl, namespace, moved)["metadata"],
          "the relabelled pod to be released")
    (replacement,) = converged(pipeline, namespace, "web", 1, ceiling=1)
    settled(pipeline, namespace, "web")
    released = get_pod(kubectl, namespace, moved)
    assert released["metadata"]["labels"] == {"app": "elsewhere"}
    assert released["status"]["phase"] == "Running" and "deletionTimestamp" not in released["metadata"]
    assert replacement["metadata"]["name"] != moved
    assert replacement["metadata"]["ownerReferences"] == [rs_ref(rs)]
    assert names(pipeline.pods(namespace)) == {moved, replacement["metadata"]["name"]}

    # adoption, then the excess goes
    kubectl("label", "pod", moved, "-n", namespace, "app=web", "--overwrite")
    until(pipeline, lambda: len(pipeline.pods(namespace)) == 1, "the excess pod to be deleted")
    (kept,) = converged(pipeline, namespace, "web", 1, ceiling=2)
    settled(pipeline, namespace, "web")
    assert kept["metadata"]["name"] == moved
    assert kept["metadata"]["ownerReferences"] == [rs_ref(rs)]
    assert kept["metadata"]["uid"] == first["metadata"]["uid"], "the same pod, never deleted"
    assert names(pipeline.pods(namespace)) == {moved}
    status = status_of(kubectl, namespace, "web")
    assert (status["replicas"], status["fullyLabeledReplicas"], status["readyReplicas"],
            status["availableReplicas"]) == (1, 1, 1, 1)

    decided = summaries(pipeline, namespace, "web")
    assert {tuple(s["release"]) for s in decided if s.get("release")} == {(moved,)}
    adoptions = [s for s in decided if s.get("adopt")]
    assert adoptions and {tuple(s["adopt"]) for s in adoptions} == {(moved,)}
    assert [s["deletes"] for s in decided if s.get("deletes")] == [[replacement["metadata"]["name"]]]
    assert adoptions[0].get("deletes") == [replacement["metadata"]["name"]], "adopted and trimmed in one sync"
    assert sum(s.get("creates", 0) for s in decided) == 2


def test_an_orphan_owned_by_another_kind_is_adopted_with_both_references(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """TestGeneralPodAdoption's first case (a pod whose only reference names another kind, controller false): a
    ReplicaSet of 1 adopts the orphan instead of creating a pod, and the strategic merge of its adoption patch
    leaves both references, the ReplicaSet's first (the patch's item, which is not in the live list, goes first:
    apimachinery's normalizeElementOrder), the foreign one as it was. Relabelled out of the selector, it is released
    and keeps the foreign reference alone."""
    uid = holder(kubectl, tmp_path, namespace, "foo")
    foo = {"apiVersion": "v1", "kind": "Foo", "name": "foo", "uid": uid, "controller": False}
    apply(kubectl, tmp_path, pod("stray", namespace, {"app": "web"}, owners=[foo]))
    stray = get_pod(kubectl, namespace, "stray")
    assert stray["metadata"]["ownerReferences"] == [foo]
    until(pipeline, lambda: observed(pipeline, stray), "the reconciler to hold the orphan")

    apply(kubectl, tmp_path, shared.replicaset("web", namespace, 1))
    (adopted,) = converged(pipeline, namespace, "web", 1, ceiling=1)
    settled(pipeline, namespace, "web")
    rs = kubectl.json("get", "rs", "web", "-n", namespace)
    assert adopted["metadata"]["name"] == "stray"
    assert adopted["metadata"]["ownerReferences"] == [rs_ref(rs), foo]
    assert names(pipeline.pods(namespace)) == {"stray"}
    decided = summaries(pipeline, namespace, "web")
    assert sum(s.get("creates", 0) for s in decided) == 0
    assert {tuple(s["adopt"]) for s in decided if s.get("adopt")} == {("stray",)}

    # released (relabelled out of the selector), it keeps the foreign reference: the release patch deletes only
    # the ReplicaSet's ($patch: delete by uid)
    kubectl("label", "pod", "stray", "-n", namespace, "app=elsewhere", "--overwrite")
    until(pipeline, lambda: get_pod(kubectl, namespace, "stray")["metadata"]["ownerReferences"] == [foo],
          "the relabelled pod to be released")
    (replacement,) = converged(pipeline, namespace, "web", 1, ceiling=1)
    settled(pipeline, namespace, "web")
    assert replacement["metadata"]["ownerReferences"] == [rs_ref(rs)]
    assert names(pipeline.pods(namespace)) == {"stray", replacement["metadata"]["name"]}


def test_a_non_controller_reference_to_the_replicaset_becomes_its_controller_reference(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """TestAdoption's "pod refers rs as an owner, not a controller": such a pod is an orphan; adopted, the patch's
    reference merges into the existing one (the merge key is the uid), so the pod ends with one reference, the
    controller reference, blockOwnerDeletion set. A Ready pod (pod-deletion-cost 1000) relabelled to match a
    converged ReplicaSet of 1: it is adopted and the ReplicaSet's own pod deleted."""
    apply(kubectl, tmp_path, shared.replicaset("web", namespace, 1))
    (own,) = converged(pipeline, namespace, "web", 1, ceiling=1)
    settled(pipeline, namespace, "web")
    rs = kubectl.json("get", "rs", "web", "-n", namespace)
    as_owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": rs["metadata"]["uid"]}
    apply(kubectl, tmp_path, pod("stray", namespace, {"app": "elsewhere"}, owners=[as_owner],
                                 annotations={DELETION_COST: "1000"}))
    until(pipeline, lambda: shared.is_ready(get_pod(kubectl, namespace, "stray")), "the stray pod to be Ready")

    kubectl("label", "pod", "stray", "-n", namespace, "app=web", "--overwrite")
    until(pipeline, lambda: names(pipeline.pods(namespace)) == {"stray"}, "the ReplicaSet's own pod to be deleted")
    (adopted,) = converged(pipeline, namespace, "web", 1, ceiling=2)
    settled(pipeline, namespace, "web")
    assert adopted["metadata"]["name"] == "stray"
    assert adopted["metadata"]["ownerReferences"] == [rs_ref(rs)]
    decided = summaries(pipeline, namespace, "web")
    assert [s["deletes"] for s in decided if s.get("deletes")] == [[own["metadata"]["name"]]]


def decided_with(p: Pipeline, ns: str, name: str, obj: dict[str, Any]) -> bool:
    """The reconciler has made a decision for ReplicaSet `name` with this very version of `obj` in its cache."""
    meta = obj["metadata"]
    rows = p.sql("select stream_seq from observed_events where uid = ? and resource_version = ?",
                 meta["uid"], meta["resourceVersion"])
    return bool(rows) and bool(p.sql("select 1 from decisions where controller_key = ? and stream_seq >= ?",
                                     shared.key_of(ns, name), rows[0][0]))


def test_a_pod_another_kind_controls_is_never_adopted_counted_or_deleted(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """ClaimPods ignores a pod whose controller reference names anything else (here a Job), even one that also names
    the ReplicaSet as a plain owner (TestAdoption's "pod refers other rs as the controller, refers the rs as an
    owner"): a ReplicaSet of 2 selecting such pods creates 2 pods of its own, counts only those, and scaled to 0
    deletes only those; the Job's pods keep their references, untouched, and run on."""
    uid = holder(kubectl, tmp_path, namespace, "batch")
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "batch", "uid": uid, "controller": True,
           "blockOwnerDeletion": True}
    apply(kubectl, tmp_path, pod("held", namespace, {"app": "web"}, owners=[job]))
    until(pipeline, lambda: shared.is_ready(get_pod(kubectl, namespace, "held")), "the Job's pod to be Ready")
    held = get_pod(kubectl, namespace, "held")
    until(pipeline, lambda: observed(pipeline, held), "the reconciler to hold the Job's pod")

    apply(kubectl, tmp_path, shared.replicaset("web", namespace, 2))
    own = converged(pipeline, namespace, "web", 2, ceiling=2)
    settled(pipeline, namespace, "web")
    assert "held" not in names(own)
    assert names(pipeline.pods(namespace)) == names(own) | {"held"}
    rs = kubectl.json("get", "rs", "web", "-n", namespace)
    as_owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": rs["metadata"]["uid"]}
    apply(kubectl, tmp_path, pod("shared", namespace, {"app": "web"}, owners=[job, as_owner]))
    until(pipeline, lambda: shared.is_ready(get_pod(kubectl, namespace, "shared")), "the shared pod to be Ready")
    both = get_pod(kubectl, namespace, "shared")
    until(pipeline, lambda: observed(pipeline, both), "the reconciler to hold the shared pod Ready")
    # the pod's events wake no ReplicaSet (its controller is the Job's), so a sync is asked for: updateRS syncs
    kubectl("annotate", "rs", "web", "-n", namespace, "example.com/poke=1")
    poked = kubectl.json("get", "rs", "web", "-n", namespace)
    until(pipeline, lambda: decided_with(pipeline, namespace, "web", poked), "a sync after the shared pod is held")
    settled(pipeline, namespace, "web")
    assert converged(pipeline, namespace, "web", 2, ceiling=2) == own
    assert names(pipeline.pods(namespace)) == names(own) | {"held", "shared"}
    status = status_of(kubectl, namespace, "web")
    assert (status["replicas"], status["fullyLabeledReplicas"], status["readyReplicas"],
            status["availableReplicas"]) == (2, 2, 2, 2)

    kubectl("scale", "rs/web", "-n", namespace, "--replicas=0")
    until(pipeline, lambda: names(pipeline.pods(namespace)) == {"held", "shared"}, "the ReplicaSet's pods to be gone")
    until(pipeline, lambda: status_of(kubectl, namespace, "web") == {"replicas": 0, "terminatingReplicas": 0,
                                                                    "observedGeneration": 2},
          "the status to count no pod")
    settled(pipeline, namespace, "web")
    after = get_pod(kubectl, namespace, "held")
    assert after["metadata"]["uid"] == held["metadata"]["uid"]
    assert after["metadata"]["ownerReferences"] == [job]
    assert after["metadata"]["labels"] == {"app": "web"}
    assert after["status"]["phase"] == "Running" and "deletionTimestamp" not in after["metadata"]
    after = get_pod(kubectl, namespace, "shared")
    assert after["metadata"]["uid"] == both["metadata"]["uid"]
    assert after["metadata"]["ownerReferences"] == [job, as_owner]
    assert after["status"]["phase"] == "Running" and "deletionTimestamp" not in after["metadata"]
    decided = summaries(pipeline, namespace, "web")
    assert not [s for s in decided if s.get("adopt") or s.get("release")]
    assert [sorted(s["deletes"]) for s in decided if s.get("deletes")] == [sorted(names(own))]
    patches = pipeline.sql("select r.outcome from action_results r join decisions d on d.id = r.decision_id "
                           "where d.controller_key = ? and r.action = 'patch_pod'", shared.key_of(namespace, "web"))
    assert patches == [], json.dumps(patches)


def test_a_replicaset_being_deleted_neither_adopts_nor_replaces(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """TestDoNotAdoptOrCreateIfBeingDeleted (and TestReplicaSetsAppsV1DefaultGCPolicy's finalizer): a ReplicaSet of 2
    held by a finalizer and deleted keeps its pods (the collector waits for it to go) but manages nothing: a matching
    orphan is not adopted, a pod deleted by hand is not replaced; its status still counts what is left. Once the
    finalizer goes, so does the ReplicaSet, and the collector deletes its pod but not the orphan."""
    manifest = shared.replicaset("web", namespace, 2)
    manifest["metadata"]["finalizers"] = ["example.com/hold"]
    apply(kubectl, tmp_path, manifest)
    own = converged(pipeline, namespace, "web", 2, ceiling=2)
    settled(pipeline, namespace, "web")
    kubectl("delete", "rs", "web", "-n", namespace, "--wait=false")
    deleting = kubectl.json("get", "rs", "web", "-n", namespace)
    assert deleting["metadata"]["deletionTimestamp"] and deleting["metadata"]["finalizers"] == ["example.com/hold"]
    until(pipeline, lambda: decided_with(pipeline, namespace, "web", deleting), "a decision seeing it deleted")
    before = len(summaries(pipeline, namespace, "web"))

    apply(kubectl, tmp_path, pod("stray", namespace, {"app": "web"}))
    gone, kept = sorted(names(own))
    kubectl("delete", "pod", gone, "-n", namespace, "--wait=true", "--timeout=20s")
    until(pipeline, lambda: shared.is_ready(get_pod(kubectl, namespace, "stray")), "the orphan to be Ready")
    stray = get_pod(kubectl, namespace, "stray")
    until(pipeline, lambda: decided_with(pipeline, namespace, "web", stray), "a decision seeing the Ready orphan")
    until(pipeline, lambda: status_of(kubectl, namespace, "web") == {
        "replicas": 1, "fullyLabeledReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
        "terminatingReplicas": 0, "observedGeneration": 1}, "the status to count the one pod left")
    settled(pipeline, namespace, "web")
    assert names(pipeline.pods(namespace)) == {kept, "stray"}
    assert "ownerReferences" not in get_pod(kubectl, namespace, "stray")["metadata"]
    later = summaries(pipeline, namespace, "web")[before:]
    assert not [s for s in later if s.get("adopt") or s.get("creates") or s.get("deletes") or s.get("release")], later

    kubectl("patch", "rs", "web", "-n", namespace, "--type=json",
            "-p", json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]))
    until(pipeline, lambda: names(pipeline.pods(namespace)) == {"stray"}, "the collector to delete its pod")
    assert "ownerReferences" not in get_pod(kubectl, namespace, "stray")["metadata"]
    assert shared.get_rs(pipeline, namespace, "web") is None


def test_replicasets_with_identical_selectors_each_keep_their_own(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """test/integration/replicaset TestOverlappingRSs: ReplicaSets of 1 and of 2 with the same selector, the second
    created once the first is stable: 3 pods, each controlled by the ReplicaSet that created it, and each status
    counting only its own."""
    apply(kubectl, tmp_path, shared.replicaset("rs-1", namespace, 1, app="web"))
    one = converged(pipeline, namespace, "rs-1", 1, ceiling=1)
    apply(kubectl, tmp_path, shared.replicaset("rs-2", namespace, 2, app="web"))
    two = converged(pipeline, namespace, "rs-2", 2, ceiling=2)
    for name in ("rs-1", "rs-2"):
        settled(pipeline, namespace, name)
    assert converged(pipeline, namespace, "rs-1", 1, ceiling=1) == one
    assert len(pipeline.pods(namespace)) == 3 and names(pipeline.pods(namespace)) == names(one) | names(two)
    for name, mine in (("rs-1", one), ("rs-2", two)):
        rs = kubectl.json("get", "rs", name, "-n", namespace)
        assert all(p["metadata"]["ownerReferences"] == [rs_ref(rs)] for p in mine)
        assert rs["status"]["replicas"] == rs["spec"]["replicas"] == len(mine)
        decided = summaries(pipeline, namespace, name)
        assert not [s for s in decided if s.get("adopt") or s.get("release") or s.get("deletes")]


def daemon_pods(p: Pipeline, ns: str, selector: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """node -> the pods there whose labels include `selector`, oldest first."""
    nodes: dict[str, list[dict[str, Any]]] = {}
    for item in sorted(p.pods(ns), key=lambda q: (q["metadata"]["creationTimestamp"], q["metadata"]["name"])):
        if selector.items() <= item["metadata"]["labels"].items():
            nodes.setdefault(target_node(item), []).append(item)
    return nodes


def test_a_daemon_pod_relabelled_out_is_released_and_relabelled_back_is_adopted_again(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """TestPodOrphaningAndAdoptionWhenLabelsChange, for a DaemonSet: its pod on node-1 relabelled out of the selector
    is released (ownerReferences gone, the pod runs on) and a new pod is created on node-1; relabelled back it is
    adopted again, node-1 then has two daemon pods, and podsShouldBeOnNode keeps the first by
    podByCreationTimestampAndPhase (the older creationTimestamp, on a tie the smaller name: the moved pod, unless the
    two were created within one second), deleting the other."""
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": namespace},
          "spec": {"selector": {"matchLabels": {"app": "agent"}},
                   "template": {"metadata": {"labels": {"app": "agent"}},
                                "spec": {"containers": [{"name": "agent", "image": "busybox:1"}]}}}}
    apply(kubectl, tmp_path, ds)

    def settled_on_every_node() -> dict[str, list[dict[str, Any]]] | None:
        nodes = daemon_pods(pipeline, namespace, {"app": "agent"})
        status = kubectl.json("get", "ds", "agent", "-n", namespace).get("status", {})
        done = (sorted(nodes) == [f"node-{i}" for i in range(4)]
                and all(len(on) == 1 and shared.is_ready(on[0]) and shared.is_active(on[0]) for on in nodes.values())
                and (status.get("numberAvailable"), status.get("updatedNumberScheduled"), status.get("numberReady"),
                     status.get("currentNumberScheduled")) == (4, 4, 4, 4))
        return nodes if done else None

    first = until(pipeline, settled_on_every_node, "a pod on every node")
    owner = kubectl.json("get", "ds", "agent", "-n", namespace)
    ds_ref = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": owner["metadata"]["uid"],
              "controller": True, "blockOwnerDeletion": True}
    moved = first["node-1"][0]["metadata"]["name"]

    kubectl("label", "pod", moved, "-n", namespace, "app=elsewhere", "--overwrite")
    until(pipeline, lambda: "ownerReferences" not in get_pod(kubectl, namespace, moved)["metadata"],
          "the relabelled pod to be released")
    second = until(pipeline, settled_on_every_node, "a new pod on node-1")
    replacement = second["node-1"][0]
    assert replacement["metadata"]["name"] != moved and replacement["metadata"]["ownerReferences"] == [ds_ref]
    released = get_pod(kubectl, namespace, moved)
    assert released["status"]["phase"] == "Running" and "deletionTimestamp" not in released["metadata"]

    # podByCreationTimestampAndPhase: both are scheduled, so the older creationTimestamp, then the smaller name
    keep, drop = sorted([first["node-1"][0], replacement],
                        key=lambda q: (q["metadata"]["creationTimestamp"], q["metadata"]["name"]))
    kubectl("label", "pod", moved, "-n", namespace, "app=agent", "--overwrite")
    until(pipeline, lambda: drop["metadata"]["name"] not in names(pipeline.pods(namespace)),
          "the newer pod on node-1 to be deleted")
    third = until(pipeline, settled_on_every_node, "one pod on every node again")
    assert third["node-1"][0]["metadata"]["uid"] == keep["metadata"]["uid"]
    assert third["node-1"][0]["metadata"]["ownerReferences"] == [ds_ref]
    others = {n: on[0]["metadata"]["uid"] for n, on in first.items() if n != "node-1"}
    assert {n: on[0]["metadata"]["uid"] for n, on in third.items() if n != "node-1"} == others
    assert len(pipeline.pods(namespace)) == 4 and drop["metadata"]["name"] not in names(pipeline.pods(namespace))


STATUS_FORMAT = "jsonpath={.object.metadata.name} {.object.status.replicas} {.object.status.readyReplicas}{\"\\n\"}"


class StatusVersions:
    """Every version of every ReplicaSet of a namespace, from `kubectl get rs -w --output-watch-events`."""

    def __init__(self, k: Kubectl, ns: str):
        self.proc = k.popen("get", "rs", "-n", ns, "-w", "--output-watch-events", "-o", STATUS_FORMAT)
        self.reader = LineReader(self.proc.stdout)

    def replicas(self, name: str) -> list[tuple[int, int]]:
        """(status.replicas, status.readyReplicas) of each version of ReplicaSet `name` seen, oldest first."""
        seen = []
        for line in self.reader.read_available():
            got, replicas, ready = [*line.split(" "), "", "", ""][:3]
            if got == name:
                seen.append((int(replicas or 0), int(ready or 0)))
        return seen

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def test_an_orphan_two_replicasets_select_goes_to_one_and_the_other_makes_its_own(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """Two ReplicaSets of 1 with the same selector, created together over an orphan they both select: both try to adopt
    it, the API lets one controller reference in (ValidateOwnerReferences refuses a second), and the loser creates a
    pod of its own. Each ends with exactly one pod, its status counting it. Upstream's claimPods adopts before
    anything counts the pod, and a failed claim ends the sync before updateReplicaSetStatus: so no version of the
    loser's status ever counts the orphan (its status.replicas goes 0, then 1 with its own pod, never back), and no
    ReplicaFailure is written."""
    apply(kubectl, tmp_path, pod("stray", namespace, {"app": "web"}))
    until(pipeline, lambda: shared.is_ready(get_pod(kubectl, namespace, "stray")), "the orphan to be Ready")
    until(pipeline, lambda: observed(pipeline, get_pod(kubectl, namespace, "stray")), "the reconciler to hold it")
    versions = StatusVersions(kubectl, namespace)
    try:
        apply(kubectl, tmp_path, shared.replicaset("rs-1", namespace, 1, app="web"),
              shared.replicaset("rs-2", namespace, 1, app="web"))
        for name in ("rs-1", "rs-2"):
            converged(pipeline, namespace, name, 1, ceiling=1)
            settled(pipeline, namespace, name)
        mine = {name: converged(pipeline, namespace, name, 1, ceiling=1) for name in ("rs-1", "rs-2")}
        (winner,) = [name for name, pods in mine.items() if names(pods) == {"stray"}]
        (loser,) = {"rs-1", "rs-2"} - {winner}
        until(pipeline, lambda: versions.replicas(loser)[-1:] == [(1, 1)], "the watch to show the loser's last status")
        seen = {name: versions.replicas(name) for name in ("rs-1", "rs-2")}
    finally:
        versions.stop()
    assert len(pipeline.pods(namespace)) == 2 and names(pipeline.pods(namespace)) == {"stray"} | names(mine[loser])
    for name in ("rs-1", "rs-2"):
        rs = kubectl.json("get", "rs", name, "-n", namespace)
        assert all(p["metadata"]["ownerReferences"] == [rs_ref(rs)] for p in mine[name])
        assert rs["status"] == {"replicas": 1, "fullyLabeledReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
                                "terminatingReplicas": 0, "observedGeneration": 1}, (name, rs["status"])
    counts = [replicas for replicas, _ in seen[loser]]
    assert counts == sorted(counts), f"{loser}'s status counted a pod it never had: {seen[loser]}"
    assert sum(s.get("creates", 0) for s in summaries(pipeline, namespace, winner)) == 0
    assert sum(s.get("creates", 0) for s in summaries(pipeline, namespace, loser)) == 1
    assert not [s for n in ("rs-1", "rs-2") for s in summaries(pipeline, namespace, n) if s.get("deletes")]


DS_STATUS_FORMAT = ("jsonpath={.object.metadata.name} {.object.status.currentNumberScheduled} "
                    "{.object.status.numberReady}{\"\\n\"}")


def test_an_orphan_two_daemonsets_select_goes_to_one_and_the_other_makes_its_own(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """The DaemonSet version of the race above: two OnDelete DaemonSets for node-0 selecting an orphan running there.
    One adopts it; the other's claim fails, and upstream's updateDaemonSetStatus, which claims again, writes no status
    then: no version of the loser's status ever counts the orphan (currentNumberScheduled goes 0, then 1 with its own
    pod, never back). Each ends with one pod on node-0, its status counting it."""
    stray = pod("stray", namespace, {"role": "agent"})
    stray["spec"]["nodeName"] = "node-0"
    apply(kubectl, tmp_path, stray)
    until(pipeline, lambda: shared.is_ready(get_pod(kubectl, namespace, "stray")), "the orphan to be Ready")
    until(pipeline, lambda: observed(pipeline, get_pod(kubectl, namespace, "stray")), "the reconciler to hold it")

    def daemonset(name: str) -> dict[str, Any]:
        return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
                "spec": {"selector": {"matchLabels": {"role": "agent"}}, "updateStrategy": {"type": "OnDelete"},
                         "template": {"metadata": {"labels": {"role": "agent", "ds": name}},
                                      "spec": {"nodeSelector": {"kubernetes.io/hostname": "node-0"},
                                               "containers": [{"name": "agent", "image": f"{name}:1"}]}}}}

    def own(name: str) -> list[dict[str, Any]]:
        uid = kubectl.json("get", "ds", name, "-n", namespace)["metadata"]["uid"]
        return [p for p in pipeline.pods(namespace) if shared.controller_uid(p) == uid]

    def settled_with_one(name: str) -> list[dict[str, Any]] | None:
        mine = own(name)
        status = kubectl.json("get", "ds", name, "-n", namespace).get("status", {})
        done = (len(mine) == 1 and shared.is_ready(mine[0]) and (
            status.get("desiredNumberScheduled"), status.get("currentNumberScheduled"), status.get("numberReady"),
            status.get("numberAvailable")) == (1, 1, 1, 1))
        return mine if done else None

    proc = kubectl.popen("get", "ds", "-n", namespace, "-w", "--output-watch-events", "-o", DS_STATUS_FORMAT)
    reader = LineReader(proc.stdout)
    try:
        apply(kubectl, tmp_path, daemonset("one"), daemonset("two"))
        mine = {name: until(pipeline, partial(settled_with_one, name), f"{name} with one pod")
                for name in ("one", "two")}
        (winner,) = [name for name, pods in mine.items() if names(pods) == {"stray"}]
        (loser,) = {"one", "two"} - {winner}

        def loser_versions() -> list[int]:
            return [int(current or 0) for got, current, _ in
                    ([*line.split(" "), "", "", ""][:3] for line in reader.read_available()) if got == loser]

        until(pipeline, lambda: loser_versions()[-1:] == [1], "the watch to show the loser's last status")
        counts = loser_versions()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert counts == sorted(counts), f"{loser}'s status counted a pod it never had: {counts}"
    assert names(pipeline.pods(namespace)) == {"stray"} | names(mine[loser])
