"""Upstream's test/integration/daemonset/daemonset_test.go, case by case, against the whole pipeline (issue 13,
part 5): the same cluster history, the same outcome seen through the API.

Upstream runs the DaemonSet controller and kube-scheduler against a kube-apiserver with no kubelet and no nodes:
each test creates its nodes (with the conditions and taints it wants) and plays the kubelet itself, setting the
pods it finds bound Running and Ready (validateDaemonSetPodsAndMarkReady). So does this module: its `kubus sim`
starts with no node and no kubelet (`--nodes 0 --no-kubelet`), each test creates its own nodes (named after its
namespace, deleted when it ends) and marks the bound pods Ready through /status. Templates carry
terminationGracePeriodSeconds 0, as upstream's newDaemonSet, so a deleted pod goes at once with no kubelet.

Each test names the upstream test it mirrors; upstream's forEachStrategy (OnDelete, and RollingUpdate with
maxUnavailable 1) is a parametrisation. Already mirrored in tests/pipeline/test_fidelity_daemonset.py:
TestLaunchWithHashCollision and TestDSCUpdatesPodLabelAfterDedupCurHistories (and
TestUpdateStatusDespitePodCreationFailure with every create refused; here with the first two admitted, as upstream's).
"""

from __future__ import annotations

import copy
import itertools
import re
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.pipeline import test_replicaset as shared
from tests.pipeline.harness import Pipeline
from tests.simulation import target_node

pytestmark = [pytest.mark.slow]

services, until = shared.services, shared.until
DEADLINE = 60.0  # upstream's polls give 60 s; other suites may share the machine's two cores
HASH = "controller-revision-hash"
LABELS = {"name": "test"}  # upstream's testLabels()
STRATEGIES: dict[str, dict[str, Any]] = {
    "OnDelete": {"type": "OnDelete"},  # newOnDeleteStrategy
    "RollingUpdate": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},  # newRollbackStrategy
}
_namespaces = itertools.count()


# --- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """The pipeline on a cluster with no node and no kubelet (the later --nodes wins over the harness's 4), once
    the reconciler's store exists and the executor consumes actions."""
    p = Pipeline(tmp_path_factory.mktemp("integration"), "--nodes", "0", "--no-kubelet")

    def up() -> bool:
        p.supervise()  # a service that died starting on the fresh SQLite file ("database is locked")
        try:
            p.sql("select count(*) from observed_events")
        except sqlite3.OperationalError:  # no database, or no schema, yet
            return False
        return " consuming " in (p.workdir / "execute.log").read_text() and \
            " watching " in (p.workdir / "ingest.log").read_text()

    try:
        p.start_all()
        until(p, up, "the services to start", timeout=DEADLINE)
        yield p
    finally:
        p.stop()


def api(p: Pipeline, method: str, path: str, body: Any = None, expect: tuple[int, ...] = (200,)) -> Any:
    kind = "application/merge-patch+json" if method == "PATCH" else "application/json"
    code, answer = p.sim.request(method, path, body, kind)
    assert code in expect, (method, path, code, answer)
    return answer


@pytest.fixture
def namespace(pipeline: Pipeline, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test; when the test ends every pod's finalizers are dropped (as upstream's
    cleanupDaemonSets does) and the namespace deleted."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).removeprefix("test-")[:40].strip("-")
    name = f"{stem}-{next(_namespaces)}"
    api(pipeline, "POST", "/api/v1/namespaces", {"metadata": {"name": name}}, expect=(201,))
    yield name
    for pod in pipeline.pods(name):
        if pod["metadata"].get("finalizers"):
            api(pipeline, "PATCH", f"/api/v1/namespaces/{name}/pods/{pod['metadata']['name']}",
                {"metadata": {"finalizers": None}}, expect=(200, 404))
    api(pipeline, "DELETE", f"/api/v1/namespaces/{name}")


class Nodes:
    """The nodes a test creates (named after its namespace), deleted when it ends; the next test starts once the
    reconciler has seen them go, so no DaemonSet of the next test is placed on them."""

    def __init__(self, p: Pipeline, prefix: str):
        self.p, self.prefix = p, prefix
        self.created: list[str] = []

    def add(self, suffix: str, *, labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
            conditions: list[dict[str, str]] | None = None, unschedulable: bool = False,
            allocatable: dict[str, str] | None = None) -> str:
        """upstream's newNode: Ready unless `conditions` say otherwise, allocatable pods 100."""
        name = f"{self.prefix}-{suffix}"
        resources = {"pods": "100", **(allocatable or {})}
        spec: dict[str, Any] = {"taints": taints} if taints else {}
        if unschedulable:
            spec["unschedulable"] = True
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": dict(labels or {})},
                "spec": spec,
                "status": {"conditions": conditions or [{"type": "Ready", "status": "True"}],
                           "allocatable": resources, "capacity": resources}}
        api(self.p, "POST", "/api/v1/nodes", node, expect=(201,))
        self.created.append(name)
        return name

    def gone(self) -> bool:
        rows = self.p.sql("select name, event_type from observed_events where kind = 'Node' and stream_seq in "
                          "(select max(stream_seq) from observed_events where kind = 'Node' group by name)")
        last = dict(rows)
        left = [n for n in self.created if last.get(n, "DELETED") != "DELETED"]
        assert not left, f"the reconciler still sees nodes {left}"
        return True

    def delete_all(self) -> None:
        for name in self.created:
            api(self.p, "DELETE", f"/api/v1/nodes/{name}", expect=(200, 404))
        until(self.p, self.gone, "the reconciler to see the test's nodes deleted", timeout=DEADLINE)


@pytest.fixture
def nodes(pipeline: Pipeline, namespace: str) -> Iterator[Nodes]:
    made = Nodes(pipeline, namespace)
    yield made
    made.delete_all()


# --- manifests ----------------------------------------------------------------------------------------
def new_daemonset(ns: str, strategy: dict[str, Any], name: str = "foo") -> dict[str, Any]:
    """upstream's newDaemonSet: revisionHistoryLimit 2, selector name=test, one container, grace period 0."""
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"revisionHistoryLimit": 2, "selector": {"matchLabels": dict(LABELS)},
                     "updateStrategy": copy.deepcopy(strategy),
                     "template": {"metadata": {"labels": dict(LABELS)},
                                  "spec": {"containers": [{"name": "foo", "image": "bar"}],
                                           "terminationGracePeriodSeconds": 0}}}}


def create_ds(p: Pipeline, ds: dict[str, Any]) -> dict[str, Any]:
    ns = ds["metadata"]["namespace"]
    return dict(api(p, "POST", f"/apis/apps/v1/namespaces/{ns}/daemonsets", ds, expect=(201,)))


def get_ds(p: Pipeline, ns: str, name: str = "foo") -> dict[str, Any]:
    return dict(api(p, "GET", f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}"))


def update_ds(p: Pipeline, ns: str, change: Callable[[dict[str, Any]], None], name: str = "foo") -> None:
    """upstream's updateDS: get, change, update, again on a conflict."""
    for _ in range(10):
        ds = get_ds(p, ns, name)
        change(ds)
        code, body = p.sim.request("PUT", f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}", ds)
        if code == 200:
            return
        assert code == 409, body
    raise AssertionError("the DaemonSet update conflicted 10 times")


# --- upstream's validations -----------------------------------------------------------------------
def is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def is_terminal(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def check_owner(pod: dict[str, Any]) -> None:
    refs = pod["metadata"].get("ownerReferences") or []
    assert len(refs) == 1, f"pod {pod['metadata']['name']} has {len(refs)} ownerReferences, expected only 1"
    assert refs[0]["kind"] == "DaemonSet" and refs[0].get("controller") is True, refs


def mark_ready(p: Pipeline, pod: dict[str, Any]) -> None:
    """What upstream's test does for a kubelet: the pod's status replaced by Running with Ready true."""
    body = copy.deepcopy(pod)
    body["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    code, answer = p.sim.request("PUT", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/"
                                        f"{pod['metadata']['name']}/status", body)
    assert code in (200, 404, 409), answer  # gone, or changed since read: the next round looks again


def pods_and_mark_ready(p: Pipeline, ns: str, number: int,
                        done: Callable[[list[dict[str, Any]]], bool] = lambda pods: True,
                        unschedulable: int = 0) -> list[dict[str, Any]]:
    """validateDaemonSetPodsAndMarkReady: every pod has the DaemonSet as its one controller; the bound ones that
    are not Ready are made so; done when `number` pods are not terminal (and they are `done`: a surging rollout
    deletes a node's old pod in one sync and surges onto the next node in a later one, upstream's too, so its
    count of pods dips to `number` between two nodes; upstream's 1 s poll rarely sees the dip, a faster one does).

    Upstream's is done as soon as the count is reached, even when a pod is not bound yet (or its mark was refused
    with a conflict): nothing marks that pod Ready afterwards, and the status its test waits for next never
    counts it. Its 1 s poll leaves the scheduler time to bind; a faster one lost that race (numberReady 1 of 3,
    two pods bound just after). So this one is done only once just `unschedulable` pods are unbound and every bound
    one was already Ready when read: the marks of an earlier round took."""
    def check() -> tuple[list[dict[str, Any]]] | None:  # in a tuple: wait_for takes [] for "not yet"
        live = []
        unbound = marked = 0
        for pod in p.pods(ns):
            check_owner(pod)
            if is_terminal(pod):
                continue
            live.append(pod)
            if not pod["spec"].get("nodeName"):
                unbound += 1
            elif not is_ready(pod):
                mark_ready(p, pod)
                marked += 1
        done_now = len(live) == number and unbound == unschedulable and not marked and done(live)
        return (live,) if done_now else None

    return until(p, check, f"{number} non-terminated daemon pods, {unschedulable} unbound, the rest Ready",
                 timeout=DEADLINE)[0]


def pods_active(p: Pipeline, ns: str, number: int) -> list[dict[str, Any]]:
    """validateDaemonSetPodsActive: exactly `number` pods Running or Pending."""
    def check() -> tuple[list[dict[str, Any]]] | None:
        pods = p.pods(ns)
        for pod in pods:
            check_owner(pod)
        active = [pod for pod in pods if pod.get("status", {}).get("phase") in ("Running", "Pending")]
        return (active,) if len(active) == number else None

    return until(p, check, f"{number} active daemon pods", timeout=DEADLINE)[0]


def status_is(p: Pipeline, ns: str, field: str, value: int, name: str = "foo") -> dict[str, Any]:
    """validateDaemonSetStatus (numberReady) and validateUpdatedNumberScheduled."""
    seen: dict[str, Any] = {}

    def check() -> tuple[dict[str, Any]] | None:
        status = seen["status"] = get_ds(p, ns, name).get("status") or {}
        return (status,) if status.get(field, 0) == value else None

    try:
        return until(p, check, f"status.{field} {value}", timeout=DEADLINE)[0]
    except AssertionError as exc:
        pods = [(pod["metadata"]["name"], target_node(pod), pod["metadata"]["labels"].get(HASH),
                 pod.get("status", {}).get("phase"), is_ready(pod)) for pod in p.pods(ns)]
        raise AssertionError(f"last status {seen.get('status')}, pods {pods}\n{exc}") from None


def zone_tolerations(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in pod["spec"].get("tolerations", []) if t.get("key", "").startswith("zone-")]


def nodes_of(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(target_node(pod) for pod in pods)


# --- the tests ------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_one_node_daemon_launches_pod(pipeline: Pipeline, namespace: str, nodes: Nodes, strategy: str) -> None:
    """TestOneNodeDaemonLaunchesPod: a DaemonSet, then one node: one pod there, controlled by the DaemonSet;
    Ready, numberReady 1."""
    create_ds(pipeline, new_daemonset(namespace, STRATEGIES[strategy]))
    node = nodes.add("single-node")
    assert nodes_of(pods_and_mark_ready(pipeline, namespace, 1)) == [node]
    status_is(pipeline, namespace, "numberReady", 1)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_simple_daemonset_launches_pods(pipeline: Pipeline, namespace: str, nodes: Nodes, strategy: str) -> None:
    """TestSimpleDaemonSetLaunchesPods: a DaemonSet, then 5 nodes: a pod on each, numberReady 5."""
    create_ds(pipeline, new_daemonset(namespace, STRATEGIES[strategy]))
    made = [nodes.add(f"node-{i}") for i in range(5)]
    assert nodes_of(pods_and_mark_ready(pipeline, namespace, 5)) == sorted(made)
    status_is(pipeline, namespace, "numberReady", 5)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize(("phase", "finalizer"), [("Succeeded", False), ("Failed", False), ("Succeeded", True)],
                         ids=["Succeeded", "Failed", "Succeeded-with-finalizer"])
def test_simple_daemonset_restarts_pods_on_terminal_phase(pipeline: Pipeline, namespace: str, nodes: Nodes,
                                                          strategy: str, phase: str, finalizer: bool) -> None:
    """TestSimpleDaemonSetRestartsPodsOnTerminalPhase: 3 nodes, 3 Ready pods; one pod's phase set Succeeded or
    Failed (the template's finalizer may hold it): a new pod replaces it on its node, 3 pods active, then Ready,
    numberReady 3."""
    ds = new_daemonset(namespace, STRATEGIES[strategy], name="restart-terminal-pod")
    if finalizer:
        ds["spec"]["template"]["metadata"]["finalizers"] = ["test.k8s.io/finalizer"]
    create_ds(pipeline, ds)
    made = [nodes.add(f"node-{i}") for i in range(3)]
    pods = pods_and_mark_ready(pipeline, namespace, 3)
    assert nodes_of(pods) == sorted(made)
    status_is(pipeline, namespace, "numberReady", 3, name="restart-terminal-pod")

    victim = pipeline.pods(namespace)[0]
    victim["status"]["phase"] = phase
    api(pipeline, "PUT", f"/api/v1/namespaces/{namespace}/pods/{victim['metadata']['name']}/status", victim)

    active = pods_active(pipeline, namespace, 3)
    assert nodes_of(active) == sorted(made)
    assert victim["metadata"]["uid"] not in {pod["metadata"]["uid"] for pod in active}
    pods_and_mark_ready(pipeline, namespace, 3)
    status_is(pipeline, namespace, "numberReady", 3, name="restart-terminal-pod")


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_daemonset_with_node_selector_launches_pods(pipeline: Pipeline, namespace: str, nodes: Nodes,
                                                    strategy: str) -> None:
    """TestDaemonSetWithNodeSelectorLaunchesPods: required node affinity with two terms (ORed), `zone In [test]` and
    the field `metadata.name In [node-1]`; of 6 nodes, node-2 and node-3 are labelled zone=test: pods on node-1,
    node-2 and node-3, numberReady 3."""
    ds = new_daemonset(namespace, STRATEGIES[strategy])
    ds["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["test"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [f"{namespace}-node-1"]}]}]}}}
    create_ds(pipeline, ds)
    made = [nodes.add(f"node-{i}", labels={"zone": "test"} if i in (2, 3) else None) for i in range(6)]
    assert nodes_of(pods_and_mark_ready(pipeline, namespace, 3)) == made[1:4]
    status_is(pipeline, namespace, "numberReady", 3)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_not_ready_node_daemon_does_launch_pod(pipeline: Pipeline, namespace: str, nodes: Nodes,
                                               strategy: str) -> None:
    """TestNotReadyNodeDaemonDoesLaunchPod: a node whose Ready condition is False (and no taint: upstream's
    apiserver runs without TaintNodesByCondition) still gets its pod; numberReady 1."""
    create_ds(pipeline, new_daemonset(namespace, STRATEGIES[strategy]))
    node = nodes.add("single-node", conditions=[{"type": "Ready", "status": "False"}])
    assert nodes_of(pods_and_mark_ready(pipeline, namespace, 1)) == [node]
    status_is(pipeline, namespace, "numberReady", 1)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_insufficient_capacity_node(pipeline: Pipeline, namespace: str, nodes: Nodes, strategy: str) -> None:
    """TestInsufficientCapacityNode: the controller creates a pod for a node the pod does not fit (it does not
    weigh resources), which the scheduler leaves Pending with PodScheduled False, reason Unschedulable; a node with
    room added, both nodes have a pod and one of them is Ready: numberReady 1.

    The pod requests 120M and 75m and the first node has 100M allocatable, as upstream's; the sim's scheduler
    counts pods, not memory, so that node also has room for no pod (allocatable pods 0): the same refusal."""
    ds = new_daemonset(namespace, STRATEGIES[strategy])
    ds["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"memory": "120M", "cpu": "75m"}}
    create_ds(pipeline, ds)
    limited = nodes.add("node-with-limited-memory", allocatable={"memory": "100M", "cpu": "200m", "pods": "0"})

    def unschedulable() -> dict[str, Any] | None:
        pods = pipeline.pods(namespace)
        assert len(pods) <= 1, nodes_of(pods)
        conditions = pods[0].get("status", {}).get("conditions", []) if pods else []
        refused = any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
                      for c in conditions)
        return pods[0] if refused else None

    pod = until(pipeline, unschedulable, "the pod for the limited node, unschedulable", timeout=DEADLINE)
    assert target_node(pod) == limited

    roomy = nodes.add("node-with-enough-memory", allocatable={"memory": "200M", "cpu": "2000m"})
    pods = pods_and_mark_ready(pipeline, namespace, 2, unschedulable=1)  # the limited node's pod stays Pending
    assert nodes_of(pods) == sorted([limited, roomy])
    status_is(pipeline, namespace, "numberReady", 1)
    assert [p["spec"].get("nodeName") for p in pipeline.pods(namespace) if is_ready(p)] == [roomy]


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_tainted_node(pipeline: Pipeline, namespace: str, nodes: Nodes, strategy: str) -> None:
    """TestTaintedNode: a node tainted key1=val1:NoSchedule gets no pod, an untainted one does (numberReady 1); the
    taint removed, the first node gets its pod too (numberReady 2)."""
    create_ds(pipeline, new_daemonset(namespace, STRATEGIES[strategy]))
    tainted = nodes.add("node-with-taint", taints=[{"key": "key1", "value": "val1", "effect": "NoSchedule"}])
    clean = nodes.add("node-without-taint")
    assert nodes_of(pods_and_mark_ready(pipeline, namespace, 1)) == [clean]
    status_is(pipeline, namespace, "numberReady", 1)

    node = api(pipeline, "GET", f"/api/v1/nodes/{tainted}")
    node["spec"]["taints"] = []
    api(pipeline, "PUT", f"/api/v1/nodes/{tainted}", node)
    assert nodes_of(pods_and_mark_ready(pipeline, namespace, 2)) == sorted([clean, tainted])
    status_is(pipeline, namespace, "numberReady", 2)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_unschedulable_node_daemon_does_launch_pod(pipeline: Pipeline, namespace: str, nodes: Nodes,
                                                   strategy: str) -> None:
    """TestUnschedulableNodeDaemonDoesLaunchPod: a hostNetwork DaemonSet; a cordoned node (unschedulable, with the
    node.kubernetes.io/unschedulable:NoSchedule taint) and a node NotReady with NetworkUnavailable (tainted
    node.kubernetes.io/network-unavailable:NoSchedule) both get a pod: daemon pods tolerate the first taint, and
    hostNetwork ones the second; numberReady 2."""
    ds = new_daemonset(namespace, STRATEGIES[strategy])
    ds["spec"]["template"]["spec"]["hostNetwork"] = True
    create_ds(pipeline, ds)
    cordoned = nodes.add("unschedulable-node", unschedulable=True,
                         taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])
    no_network = nodes.add("network-unavailable-node",
                           conditions=[{"type": "Ready", "status": "False"},
                                       {"type": "NetworkUnavailable", "status": "True"}],
                           taints=[{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}])
    assert nodes_of(pods_and_mark_ready(pipeline, namespace, 2)) == sorted([cordoned, no_network])
    status_is(pipeline, namespace, "numberReady", 2)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_update_status_despite_pod_creation_failure(pipeline: Pipeline, namespace: str, nodes: Nodes,
                                                    faults: Callable[..., None], strategy: str) -> None:
    """TestUpdateStatusDespitePodCreationFailure, as upstream's: its admission plugin (fakePodFailAdmission) admits
    the first 2 pods and refuses every later one; of 5 nodes, 2 get a pod, Ready, and the status says so
    (numberReady 2) although the other creates keep failing, with 5 pods wanted.

    The sim refuses by rule, not by count: 2 nodes join and get their pods, then every pod create is refused
    (a 403, as a ResourceQuota's) and 3 more nodes join. test_fidelity_daemonset.py has the case where every
    create is refused from the start."""
    create_ds(pipeline, new_daemonset(namespace, STRATEGIES[strategy]))
    made = [nodes.add(f"node-{i}") for i in range(2)]
    assert nodes_of(pods_active(pipeline, namespace, 2)) == made
    faults("pods:create:1.0:403")
    made += [nodes.add(f"node-{i}") for i in range(2, 5)]
    assert nodes_of(pods_and_mark_ready(pipeline, namespace, 2)) == made[:2]
    status_is(pipeline, namespace, "numberReady", 2)
    status = status_is(pipeline, namespace, "desiredNumberScheduled", 5)
    assert status.get("currentNumberScheduled") == 2, status
    assert nodes_of(pipeline.pods(namespace)) == made[:2]


def test_daemonset_rolling_update_with_tolerations(pipeline: Pipeline, namespace: str, nodes: Nodes) -> None:
    """TestDaemonSetRollingUpdateWithTolerations: RollingUpdate maxUnavailable 0, maxSurge 1, over 6 nodes tainted
    (NoSchedule) zone-y (0, 1), zone-z (2, 3) and zone-common (4, 5).

    - tolerating zone-y and zone-common: 4 pods (nodes 0, 1, 4, 5), numberReady 4, updatedNumberScheduled 4;
    - then zone-z and zone-common: 7 pods active before the new ones are Ready (2 new on the zone-z nodes, 1 surge
      on a zone-common node, the 4 old ones, those on zone-y too, kept until the new pods are available), then 4
      (nodes 2 to 5), all of the new template;
    - then zone-y, zone-z and zone-common: 7 active again (2 new on zone-y, 1 surge, 4 old), then 6;
    - then no toleration: no pod left, numberReady 0, updatedNumberScheduled 0."""
    ds = new_daemonset(namespace, {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    zones = ["zone-y", "zone-y", "zone-z", "zone-z", "zone-common", "zone-common"]
    made = [nodes.add(f"node-{i}", taints=[{"key": zone, "effect": "NoSchedule"}]) for i, zone in enumerate(zones)]

    def tolerating(*keys: str) -> list[dict[str, Any]]:
        return [{"key": key, "operator": "Exists"} for key in keys]

    def updated(expected: list[dict[str, Any]]) -> Callable[[list[dict[str, Any]]], bool]:
        return lambda pods: all(zone_tolerations(pod) == expected for pod in pods)

    def all_tolerate(expected: list[dict[str, Any]]) -> None:
        for pod in pipeline.pods(namespace):
            check_owner(pod)
            assert zone_tolerations(pod) == expected, (pod["metadata"]["name"], pod["spec"].get("tolerations"))

    def retolerate(expected: list[dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
        def change(obj: dict[str, Any]) -> None:
            obj["spec"]["template"]["spec"]["tolerations"] = expected
        return change

    expected = tolerating("zone-y", "zone-common")
    ds["spec"]["template"]["spec"]["tolerations"] = expected
    create_ds(pipeline, ds)
    assert nodes_of(pods_active(pipeline, namespace, 4)) == [made[0], made[1], made[4], made[5]]
    pods_and_mark_ready(pipeline, namespace, 4)
    status_is(pipeline, namespace, "numberReady", 4)
    status_is(pipeline, namespace, "updatedNumberScheduled", 4)
    all_tolerate(expected)

    expected = tolerating("zone-z", "zone-common")
    update_ds(pipeline, namespace, retolerate(expected))
    pods_active(pipeline, namespace, 7)
    assert nodes_of(pods_and_mark_ready(pipeline, namespace, 4, updated(expected))) == made[2:]
    status_is(pipeline, namespace, "numberReady", 4)
    status_is(pipeline, namespace, "updatedNumberScheduled", 4)
    all_tolerate(expected)

    expected = tolerating("zone-y", "zone-z", "zone-common")
    update_ds(pipeline, namespace, retolerate(expected))
    pods_active(pipeline, namespace, 7)
    assert nodes_of(pods_and_mark_ready(pipeline, namespace, 6, updated(expected))) == made
    status_is(pipeline, namespace, "numberReady", 6)
    status_is(pipeline, namespace, "updatedNumberScheduled", 6)
    all_tolerate(expected)

    def no_tolerations(obj: dict[str, Any]) -> None:
        obj["spec"]["template"]["spec"].pop("tolerations", None)

    update_ds(pipeline, namespace, no_tolerations)
    pods_active(pipeline, namespace, 0)
    status_is(pipeline, namespace, "numberReady", 0)
    status_is(pipeline, namespace, "updatedNumberScheduled", 0)
