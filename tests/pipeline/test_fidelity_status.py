"""Fidelity to upstream's status counts end to end (issue 13, part 5): terminating pods and minReadySeconds, seen
through the API only, as a user with kubectl would see them, against the whole pipeline.

Each test mirrors upstream tests of kube-controller-manager and asserts what its controllers produce:

- test/integration/replicaset TestDeletingAndFailedPods and pkg/controller/controller_utils_test.go
  TestCountTerminatingPods: a pod being deleted is not active (replaced, not counted in status.replicas) and is
  counted in status.terminatingReplicas, which upstream (1.35: DeploymentReplicaSetTerminatingReplicas is beta and
  on by default, in kube-apiserver's status strategy as in the controller) reports always, 0 included.
- pkg/controller/daemon podsShouldBeOnNode and TestGetNodesToDaemonPods: a terminating daemon pod still holds its
  node (replaced only once gone, unless surging); a deleted terminal one does not.
- test/integration/replicaset TestReadyAndAvailableReplicas (and the availability checks of kubernetes#132121), and
  pkg/controller/daemon's updateDaemonSetStatus: a Ready pod is available only
  minReadySeconds after its Ready transition (IsPodAvailable: lastTransitionTime + minReadySeconds <= now), and the
  controllers look again by themselves (updatePod's requeue after minReadySeconds + 1 s, syncReplicaSet's
  FindMinNextPodAvailabilityCheck, updateDaemonSetStatus's requeue after minReadySeconds): nothing else changes, and
  the count still gets there.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline import test_replicaset as shared
from tests.pipeline.harness import Pipeline
from tests.simulation import Kubectl, target_node

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

# the ReplicaSet module's fixtures (a pipeline per module, a namespace per test, no dead services)
pipeline, kubectl, namespace, services = shared.pipeline, shared.kubectl, shared.namespace, shared.services
apply, until, converged, settled = shared.apply, shared.until, shared.converged, shared.settled
names, summaries = shared.names, shared.summaries

FINALIZER = "example.com/hold"
MIN_READY_SECONDS = 5
# how late, past the latest moment upstream's requeues bring the count (the Ready transition's second, rounded
# down in lastTransitionTime, plus minReadySeconds + 1 s), the pipeline may write it: a requeue's sync, its
# commit, the executor's PUT and the watch, on a machine other suites share
LATENESS = 3.0


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def ready_since(pod: dict[str, Any]) -> datetime:
    condition = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert condition["status"] == "True", pod["status"]
    return parse_time(condition["lastTransitionTime"])


def test_a_terminating_pod_is_replaced_and_counted_apart(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                                         tmp_path: Path) -> None:
    """A ReplicaSet of 2 whose pod, held by a finalizer, is deleted by hand: the pod stays, terminating (and owned);
    the ReplicaSet creates one replacement (a terminating pod is not active), status.replicas counts the 2 active
    pods only and status.terminatingReplicas the held one; once the finalizer goes, so does the pod, and
    terminatingReplicas is 0 again (reported, as upstream's calculateStatus always reports it with the gate on)."""
    apply(kubectl, tmp_path, shared.replicaset("web", namespace, 2))
    first = converged(pipeline, namespace, "web", 2, ceiling=2)
    settled(pipeline, namespace, "web")
    rs = kubectl.json("get", "rs", "web", "-n", namespace)
    assert rs["status"] == {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 2,
                            "terminatingReplicas": 0, "observedGeneration": 1}
    victim = sorted(names(first))[0]
    # a long graceful shutdown keeps it terminating for the test (once its containers stop, the kubelet reports a
    # pod a finalizer holds terminal, and it is no longer counted), the finalizer keeps it after a force delete
    kubectl("patch", "pod", victim, "-n", namespace, "--type=merge",
            "-p", json.dumps({"metadata": {"finalizers": [FINALIZER],
                                           "annotations": {"sim.kubus.io/termination-seconds": "3600"}}}))

    kubectl("delete", "pod", victim, "-n", namespace, "--wait=false")

    def replaced() -> list[dict[str, Any]] | None:
        """Every pod, once 2 are active and Ready (never more than 2) and the status counts the held one."""
        pods = pipeline.pods(namespace)
        active = [p for p in pods if shared.is_active(p)]
        if len(active) > 2:  # fails at once (until retries on assertions)
            pytest.fail(f"{len(active)} active pods, more than 2: {sorted(names(active))}")
        status = kubectl.json("get", "rs", "web", "-n", namespace)["status"]
        done = len(active) == 2 and all(shared.is_ready(p) for p in active) and status.get("terminatingReplicas") == 1
        return pods if done else None

    pods = until(pipeline, replaced, "a Ready replacement and terminatingReplicas 1")
    settled(pipeline, namespace, "web")
    held = next(p for p in pods if p["metadata"]["name"] == victim)
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"] == [FINALIZER]
    assert held["metadata"]["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                                    "uid": rs["metadata"]["uid"], "controller": True,
                                                    "blockOwnerDeletion": True}]
    assert held["status"]["phase"] == "Running"
    (replacement,) = names(pods) - names(first)
    assert names(pods) == names(first) | {replacement}
    status = kubectl.json("get", "rs", "web", "-n", namespace)["status"]
    assert status == {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 2,
                      "terminatingReplicas": 1, "observedGeneration": 1}
    decided = summaries(pipeline, namespace, "web")
    assert [s["creates"] for s in decided if s.get("creates")] == [2, 1]
    assert not [s for s in decided if s.get("deletes")], "nothing deleted by the controller"

    kubectl("patch", "pod", victim, "-n", namespace, "--type=json",
            "-p", json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]))
    kubectl("delete", "pod", victim, "-n", namespace, "--grace-period=0", "--force", "--wait=false")
    until(pipeline, lambda: victim not in names(pipeline.pods(namespace)), "the held pod to go")
    until(pipeline, lambda: kubectl.json("get", "rs", "web", "-n", namespace)["status"].get(
        "terminatingReplicas") == 0, "terminatingReplicas 0")
    settled(pipeline, namespace, "web")
    status = kubectl.json("get", "rs", "web", "-n", namespace)["status"]
    assert status == {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 2,
                      "terminatingReplicas": 0, "observedGeneration": 1}
    assert names(pipeline.pods(namespace)) == names(first) - {victim} | {replacement}


def daemonset(name: str, ns: str, *, max_surge: int = 0, min_ready_seconds: int = 0) -> dict[str, Any]:
    """A DaemonSet on every node; RollingUpdate with maxSurge `max_surge` (maxUnavailable 0 when surging)."""
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": max_surge,
                                                                      "maxUnavailable": 0 if max_surge else 1}},
        "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [{"name": "agent", "image": "busybox:1"}]}}}
    if min_ready_seconds:
        spec["minReadySeconds"] = min_ready_seconds
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def get_ds(p: Pipeline, ns: str, name: str) -> dict[str, Any]:
    code, body = p.sim.request("GET", f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}")
    assert code == 200, body
    return dict(body)


def daemon_pods(p: Pipeline, ns: str, name: str) -> dict[str, list[dict[str, Any]]]:
    """node -> the DaemonSet's pods there (terminating ones included), oldest first."""
    nodes: dict[str, list[dict[str, Any]]] = {}
    for pod in sorted(p.pods(ns), key=lambda q: (q["metadata"]["creationTimestamp"], q["metadata"]["name"])):
        if pod["metadata"]["labels"].get("app") == name:
            nodes.setdefault(target_node(pod), []).append(pod)
    return nodes


def daemon_settled(p: Pipeline, ns: str, name: str) -> dict[str, list[dict[str, Any]]] | None:
    """One Ready pod on each of the 4 nodes, none terminating, and the status saying so."""
    nodes = daemon_pods(p, ns, name)
    status = get_ds(p, ns, name).get("status") or {}
    done = (sorted(nodes) == NODES and all(len(on) == 1 and shared.is_active(on[0]) and shared.is_ready(on[0])
                                           for on in nodes.values()) and status == SETTLED)
    return nodes if done else None


NODES = [f"node-{i}" for i in range(4)]
# the status of a DaemonSet with a Ready pod on each of the 4 nodes (numberUnavailable 0 is omitted: omitempty)
SETTLED = {"currentNumberScheduled": 4, "desiredNumberScheduled": 4, "numberAvailable": 4, "numberMisscheduled": 0,
           "numberReady": 4, "observedGeneration": 1, "updatedNumberScheduled": 4}


def decided_with(p: Pipeline, ns: str, name: str, pod: dict[str, Any]) -> bool:
    """The reconciler has made a decision for DaemonSet `name` with this very version of `pod` in its cache."""
    meta = pod["metadata"]
    rows = p.sql("select stream_seq from observed_events where uid = ? and resource_version = ?",
                 meta["uid"], meta["resourceVersion"])
    return bool(rows) and bool(p.sql("select 1 from decisions where controller_key = ? and stream_seq >= ?",
                                     f"DaemonSet/{ns}/{name}", rows[0][0]))


def actions_settled(p: Pipeline, key: str) -> bool:
    """Every action decided for controller `key` was sent and has a result (test_replicaset's `settled`, any kind)."""
    open_ = p.sql("select o.key, o.state from outbox o join decisions d on d.id = o.decision_id "
                  "where d.controller_key = ? and (o.state != 'sent' or not exists "
                  "(select 1 from action_results r where r.action_key = o.key))", key)
    return not open_


def test_a_terminating_daemon_pod_is_replaced_only_once_gone_unless_surging(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """podsShouldBeOnNode: a node whose only daemon pod is terminating still "has" a pod (nodeToDaemonPods lists
    it), so without surge nothing is created there until the pod is gone; with maxSurge a node needs a pod that is
    not being deleted, so one is created beside it at once. Both DaemonSets' status counts the terminating pod
    (updateDaemonSetStatus looks at a node's oldest pod, deleted or not, unless it is also terminal)."""
    apply(kubectl, tmp_path, daemonset("plain", namespace), daemonset("surge", namespace, max_surge=1))
    before = {name: until(pipeline, partial(daemon_settled, pipeline, namespace, name), f"{name} on every node")
              for name in ("plain", "surge")}
    held = {name: before[name]["node-1"][0] for name in before}
    for pod in held.values():  # terminating for the test's length (a long graceful shutdown), then held
        kubectl("patch", "pod", pod["metadata"]["name"], "-n", namespace, "--type=merge",
                "-p", json.dumps({"metadata": {"finalizers": [FINALIZER],
                                               "annotations": {"sim.kubus.io/termination-seconds": "3600"}}}))
        kubectl("delete", "pod", pod["metadata"]["name"], "-n", namespace, "--wait=false")

    def surged() -> dict[str, Any] | None:
        """surge's new pod on node-1, once Ready beside the held one (terminating)."""
        on = {p["metadata"]["uid"]: p for p in daemon_pods(pipeline, namespace, "surge")["node-1"]}
        old = on.pop(held["surge"]["metadata"]["uid"], None)
        if old is None or not old["metadata"].get("deletionTimestamp") or len(on) != 1:
            return None
        (new,) = on.values()
        return new if shared.is_ready(new) else None

    beside = until(pipeline, surged, "surge's new pod beside its terminating one")
    assert shared.is_active(beside)
    terminating = daemon_pods(pipeline, namespace, "plain")["node-1"]
    assert [p["metadata"]["uid"] for p in terminating] == [held["plain"]["metadata"]["uid"]]
    until(pipeline, lambda: decided_with(pipeline, namespace, "plain", terminating[0]),
          "a decision of plain's with its pod terminating")
    for name in ("plain", "surge"):
        until(pipeline, partial(actions_settled, pipeline, f"DaemonSet/{namespace}/{name}"),
              f"every action of {name} to have a result")
        assert get_ds(pipeline, namespace, name)["status"] == SETTLED, f"{name}'s status counts the terminating pod"
    plain = daemon_pods(pipeline, namespace, "plain")
    assert {n: [p["metadata"]["uid"] for p in on] for n, on in plain.items()} == \
        {n: [p["metadata"]["uid"] for p in on] for n, on in before["plain"].items()}, "plain created or deleted a pod"

    for pod in held.values():
        kubectl("patch", "pod", pod["metadata"]["name"], "-n", namespace, "--type=json",
                "-p", json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]))
        kubectl("delete", "pod", pod["metadata"]["name"], "-n", namespace, "--grace-period=0", "--force",
                "--wait=false")
    after = {name: until(pipeline, partial(daemon_settled, pipeline, namespace, name), f"{name} on every node again")
             for name in ("plain", "surge")}
    assert after["surge"]["node-1"][0]["metadata"]["uid"] == beside["metadata"]["uid"]
    replaced = after["plain"]["node-1"][0]
    assert replaced["metadata"]["uid"] != held["plain"]["metadata"]["uid"]
    gone = pipeline.sql("select stream_seq from observed_events where uid = ? and event_type = 'DELETED'",
                        held["plain"]["metadata"]["uid"])
    creates = pipeline.sql("select stream_seq, json_extract(summary, '$.creates') from decisions "
                           "where controller_key = ? and json_array_length(json_extract(summary, '$.creates')) > 0 "
                           "order by id", f"DaemonSet/{namespace}/plain")
    assert [json.loads(c) for _, c in creates] == [NODES, ["node-1"]], creates
    assert gone and creates[-1][0] >= gone[0][0], "plain created its new pod before it saw the old one go"
    for name in ("plain", "surge"):
        assert {n: on[0]["metadata"]["uid"] for n, on in after[name].items() if n != "node-1"} == \
            {n: on[0]["metadata"]["uid"] for n, on in before[name].items() if n != "node-1"}


def test_a_failed_daemon_pod_held_by_a_finalizer_is_replaced_at_once(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """pkg/controller/daemon TestGetNodesToDaemonPods ("exclude deleted terminal pods"): a daemon pod that failed is
    deleted by the DaemonSet (FailedDaemonPod); held by a finalizer it stays, deleted and terminal, and manage,
    rollingUpdate and the status all leave such a pod out (getNodesToDaemonPods(includeDeletedTerminal=false)): a
    new pod is created on its node at once, and the status counts only the new one."""
    apply(kubectl, tmp_path, daemonset("agent", namespace))
    before = until(pipeline, lambda: daemon_settled(pipeline, namespace, "agent"), "agent on every node")
    held = before["node-2"][0]
    name = held["metadata"]["name"]
    kubectl("patch", "pod", name, "-n", namespace, "--type=merge",
            "-p", json.dumps({"metadata": {"finalizers": [FINALIZER]}}))
    code, body = pipeline.sim.request("POST", f"/sim/pods/{namespace}/{name}/fail")
    assert code == 200, body

    def replaced() -> tuple[dict[str, Any], dict[str, Any]] | None:
        """(the held pod, the new one) on node-2, once the new one is Ready and the status counts it."""
        on = {p["metadata"]["uid"]: p for p in daemon_pods(pipeline, namespace, "agent").get("node-2", [])}
        old = on.pop(held["metadata"]["uid"], None)
        status = get_ds(pipeline, namespace, "agent").get("status") or {}
        if old is None or len(on) != 1 or status != SETTLED:
            return None
        (new,) = on.values()
        return (old, new) if shared.is_ready(new) else None

    old, new = until(pipeline, replaced, "a new Ready pod beside the failed one held by its finalizer")
    assert old["status"]["phase"] == "Failed" and old["metadata"]["deletionTimestamp"]
    assert old["metadata"]["finalizers"] == [FINALIZER]
    assert shared.is_active(new) and new["metadata"]["labels"] == before["node-0"][0]["metadata"]["labels"]
    until(pipeline, lambda: [e["message"] for e in kubectl.json("get", "events", "-n", namespace)["items"]
                             if e["reason"] == "FailedDaemonPod"]
          == [f"Found failed daemon pod {namespace}/{name} on node node-2, will try to kill it"],
          "one FailedDaemonPod event")
    assert {n: {p["metadata"]["uid"] for p in on} for n, on in daemon_pods(pipeline, namespace, "agent").items()} == \
        {**{n: {on[0]["metadata"]["uid"]} for n, on in before.items()},
         "node-2": {held["metadata"]["uid"], new["metadata"]["uid"]}}

    kubectl("patch", "pod", name, "-n", namespace, "--type=json",
            "-p", json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]))
    after = until(pipeline, lambda: daemon_settled(pipeline, namespace, "agent"), "one pod on every node again")
    assert after["node-2"][0]["metadata"]["uid"] == new["metadata"]["uid"]


class Samples:
    """A workload's status read again and again, each reading with the wall-clock interval it was taken in."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float, dict[str, Any]]] = []

    def take(self, read: Any) -> dict[str, Any]:
        before = time.time()
        status: dict[str, Any] = read()
        self.seen.append((before, time.time(), status))
        return status


def assert_available_on_time(samples: Samples, pods: list[dict[str, Any]], field: str) -> None:
    """Every sample counts as available at most the pods whose Ready time + minReadySeconds had passed by its end,
    and at least those for which even upstream's latest requeue (Ready second + minReadySeconds + 1 s, the Ready
    transition being up to a second after its rounded-down lastTransitionTime) was LATENESS ago at its start."""
    ready = [ready_since(p).timestamp() for p in pods]
    for before, after, status in samples.seen:
        at_most = sum(1 for r in ready if r + MIN_READY_SECONDS <= after)
        at_least = sum(1 for r in ready if r + MIN_READY_SECONDS + 2 + LATENESS <= before)
        got = status.get(field, 0)
        assert at_least <= got <= at_most, (
            f"{field} {got} at {datetime.fromtimestamp(before, UTC)}..{datetime.fromtimestamp(after, UTC)}, "
            f"pods Ready since {[datetime.fromtimestamp(r, UTC).isoformat() for r in ready]}, minReadySeconds "
            f"{MIN_READY_SECONDS}: between {at_least} and {at_most} expected")


def test_replicaset_available_replicas_wait_for_min_ready_seconds(pipeline: Pipeline, kubectl: Kubectl,
                                                                  namespace: str, tmp_path: Path) -> None:
    """A ReplicaSet of 2 with minReadySeconds 5: readyReplicas 2 as the pods turn Ready, availableReplicas 0 until 5 s
    after their Ready transition, then 2, with nothing changing meanwhile (the pods are the same versions)."""
    manifest = shared.replicaset("web", namespace, 2)
    manifest["spec"]["minReadySeconds"] = MIN_READY_SECONDS
    apply(kubectl, tmp_path, manifest)
    samples = Samples()

    def read() -> dict[str, Any]:
        rs = shared.get_rs(pipeline, namespace, "web")
        assert rs is not None
        return dict(rs.get("status") or {})

    until(pipeline, lambda: samples.take(read).get("readyReplicas") == 2, "readyReplicas 2")
    pods = pipeline.pods(namespace)
    assert len(pods) == 2 and all(shared.is_ready(p) for p in pods)
    deadline = max(ready_since(p) for p in pods) + timedelta(seconds=MIN_READY_SECONDS + 2 + LATENESS)
    until(pipeline, lambda: samples.take(read).get("availableReplicas") == 2, "availableReplicas 2",
          timeout=max((deadline - datetime.now(UTC)).total_seconds(), 0) + 1)
    assert_available_on_time(samples, pods, "availableReplicas")
    assert any(s.get("readyReplicas") == 2 and s.get("availableReplicas", 0) == 0 for *_, s in samples.seen), \
        "never seen Ready but not yet available"
    assert {(p["metadata"]["name"], p["metadata"]["resourceVersion"]) for p in pipeline.pods(namespace)} == \
        {(p["metadata"]["name"], p["metadata"]["resourceVersion"]) for p in pods}, "a pod changed meanwhile"
    status = read()
    assert (status["replicas"], status["readyReplicas"], status["availableReplicas"]) == (2, 2, 2)


def test_daemonset_number_available_waits_for_min_ready_seconds(pipeline: Pipeline, kubectl: Kubectl,
                                                                namespace: str, tmp_path: Path) -> None:
    """A DaemonSet with minReadySeconds 5 on the 4 nodes: numberReady 4 as its pods turn Ready, numberAvailable 0
    (numberUnavailable 4) until 5 s after their Ready transition, then 4 (0), with nothing changing meanwhile."""
    apply(kubectl, tmp_path, daemonset("agent", namespace, min_ready_seconds=MIN_READY_SECONDS))
    samples = Samples()

    def read() -> dict[str, Any]:
        return dict(get_ds(pipeline, namespace, "agent").get("status") or {})

    until(pipeline, lambda: samples.take(read).get("numberReady") == 4, "numberReady 4")
    pods = pipeline.pods(namespace)
    assert len(pods) == 4 and all(shared.is_ready(p) for p in pods)
    deadline = max(ready_since(p) for p in pods) + timedelta(seconds=MIN_READY_SECONDS + 2 + LATENESS)
    until(pipeline, lambda: samples.take(read).get("numberAvailable") == 4, "numberAvailable 4",
          timeout=max((deadline - datetime.now(UTC)).total_seconds(), 0) + 1)
    assert_available_on_time(samples, pods, "numberAvailable")
    for *_, status in samples.seen:
        assert status.get("numberUnavailable", 0) == status.get("desiredNumberScheduled", 0) - status.get(
            "numberAvailable", 0), status
    assert any(s.get("numberReady") == 4 and s.get("numberAvailable", 0) == 0 for *_, s in samples.seen), \
        "never seen Ready but not yet available"
    assert {(p["metadata"]["name"], p["metadata"]["resourceVersion"]) for p in pipeline.pods(namespace)} == \
        {(p["metadata"]["name"], p["metadata"]["resourceVersion"]) for p in pods}, "a pod changed meanwhile"
    status = read()
    assert (status["desiredNumberScheduled"], status["currentNumberScheduled"], status["numberReady"],
            status["numberAvailable"], status["updatedNumberScheduled"]) == (4, 4, 4, 4, 4)
    assert status.get("numberUnavailable", 0) == 0


def test_fully_labeled_replicas_count_pods_with_every_template_label(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """test/integration/replicaset TestFullyLabeledReplicas (and TestControllerUpdateReplicas): the template's labels
    grow beyond the selector; the pods made before do not have them: fullyLabeledReplicas 0 for the new generation,
    nothing recreated; one pod labelled with them: 1."""
    apply(kubectl, tmp_path, shared.replicaset("web", namespace, 2))
    pods = converged(pipeline, namespace, "web", 2, ceiling=2)
    settled(pipeline, namespace, "web")
    kubectl("patch", "rs", "web", "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": {"template": {"metadata": {"labels": {"extra": "value"}}}}}))
    # fullyLabeledReplicas 0 is not shown: the field is omitempty (terminatingReplicas, a pointer, is shown)
    want = {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "terminatingReplicas": 0,
            "observedGeneration": 2}
    until(pipeline, lambda: kubectl.json("get", "rs", "web", "-n", namespace)["status"] == want,
          "fullyLabeledReplicas 0 for generation 2")
    labelled = sorted(names(pods))[0]
    kubectl("label", "pod", labelled, "-n", namespace, "extra=value")
    want = {**want, "fullyLabeledReplicas": 1}
    until(pipeline, lambda: kubectl.json("get", "rs", "web", "-n", namespace)["status"] == want,
          "fullyLabeledReplicas 1")
    settled(pipeline, namespace, "web")
    assert names(pipeline.pods(namespace)) == names(pods)
    assert [s["creates"] for s in summaries(pipeline, namespace, "web") if s.get("creates")] == [2]
