"""DaemonSet rollouts end to end on 20 nodes, as deployed (nats-server, `kubus sim --nodes 20`, ingest,
reconcile and execute as processes), driven with kubectl, with the store's SQL as the audit trail.

While a rollout runs, every test samples the pods through the API (a poll that ends on a condition
with a deadline) and fails at the first sample that breaks the strategy's promise: no more than
``maxUnavailable`` nodes without an available pod and never two pods on a node (``maxSurge`` 0), or no
node without an available pod, at most ``maxSurge`` nodes with two pods, and an old pod deleted only
once the new one beside it is available (``maxUnavailable`` 0). Then it checks exact outcomes: one pod
of the right image on each node, the DaemonSet's status, the ControllerRevisions, and what the
decisions, outbox and results in SQL show.

Upstream's rounding (pkg/controller/daemon/util/daemonset_util.go): SurgeCount and UnavailableCount
both call GetScaledValueFromIntOrPercent(..., numberToSchedule, true), so for a DaemonSet *both*
percentages round up (unlike a Deployment's maxUnavailable); 25% of 20 nodes is exactly 5 either way.

One pipeline serves the module (each test has its own namespace); the tests that take the reconciler
down (the takeover and the crash) say so to the autouse ``services`` check.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kube import codec
from kube.apps import DaemonSet
from reconciler.core.daemonset import history
from tests.cluster import RealCluster
from tests.pipeline import test_replicaset as shared
from tests.pipeline.harness import Pipeline
from tests.pipeline.test_replicaset import Services
from tests.simulation import Kubectl, target_node

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

# the ReplicaSet module's fixtures (a namespace per test, no dead services), over this module's pipeline
kubectl, namespace, services = shared.kubectl, shared.namespace, shared.services
apply, until = shared.apply, shared.until

NODE_COUNT = 20
SIM_NODES = frozenset(f"node-{i:02d}" for i in range(NODE_COUNT))  # the sim pads the names to equal width
# the nodes of the cluster the module's pipeline runs on (the `pipeline` fixture sets it: the sim's, or the real
# control plane's 20 kwok nodes; pytest runs a module's tests of one kind together, so it is the current one's)
NODES = SIM_NODES
HASH_LABEL = "controller-revision-hash"
TERMINATION = "sim.kubus.io/termination-seconds"
OLD, NEW = "busybox:1", "busybox:2"
DEADLINE = 90.0  # generous: other suites may share the machine's two cores

# upstream's AddOrUpdateDaemonPodTolerations (pkg/controller/daemon/util/daemonset_util.go), in its order
DAEMON_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]

# What kube-controller-manager's getPatch (pkg/controller/daemon/update.go) writes as the data of the
# revision of DaemonSet `legacy` below, as kube-apiserver v1.32 defaults and stores its template:
# json.Marshal of the typed DaemonSet, unmarshalled into map[string]interface{}, "$patch": "replace"
# added to the template, marshalled again: compact, keys sorted at every level ("$patch" first), `<`,
# `>` and `&` escaped as \u003c, \u003e, \u0026, and the template's zero creationTimestamp as null.
LEGACY_DATA = (
    b'{"spec":{"template":{"$patch":"replace","metadata":{"annotations":{"note":"a\\u003cb \\u0026\\u0026 '
    b'c\\u003ed"},"creationTimestamp":null,"labels":{"app":"legacy"}},"spec":{"containers":[{"image":'
    b'"busybox:1","imagePullPolicy":"IfNotPresent","name":"agent","resources":{},"terminationMessagePath":'
    b'"/dev/termination-log","terminationMessagePolicy":"File"}],"dnsPolicy":"ClusterFirst","restartPolicy":'
    b'"Always","schedulerName":"default-scheduler","securityContext":{},"terminationGracePeriodSeconds":30}}}}'
)
# history.HashControllerRevision (pkg/controller/history/controller_history.go) of that data with a nil
# probe: FNV-32 (hash/fnv New32, FNV-1) of the bytes is 3998778550, whose decimal digits
# rand.SafeEncodeString maps into "bcdfghjklmnpqrstvwxz2456789" by code point
LEGACY_SUM32 = 3998778550
LEGACY_HASH = "7ffdccd994"


# --- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, cluster: RealCluster | None) -> Iterator[Pipeline]:
    """A pipeline over 20 simulated nodes (the later --nodes wins over the harness's 4), once it is up:
    the reconciler has recorded all 20 nodes ingest published, and the executor consumes actions."""
    global NODES
    NODES = frozenset(cluster.nodes) if cluster else SIM_NODES
    assert len(NODES) == NODE_COUNT, sorted(NODES)
    p = Pipeline(tmp_path_factory.mktemp("daemonset-rollout"), "--nodes", str(NODE_COUNT),
                 "--termination-seconds", "0.2", cluster=cluster)

    def up() -> bool:
        p.supervise()  # a service that lost the race for the fresh SQLite file is restarted, as in test_replicaset
        try:
            nodes = p.sql("select count(distinct name) from observed_events where kind = 'Node'")[0][0]
        except sqlite3.OperationalError:  # no database, or no schema, yet
            return False
        return nodes == NODE_COUNT and " consuming " in (p.workdir / "execute.log").read_text()

    try:
        code, body = p.sim.request("GET", "/api/v1/nodes")
        assert code == 200 and {n["metadata"]["name"] for n in body["items"]} == NODES, body
        p.start_all()
        until(p, up, f"the services to start and the reconciler to record {NODE_COUNT} nodes", timeout=DEADLINE)
        yield p
    finally:
        p.stop()


# --- manifests ----------------------------------------------------------------------------------------
def rolling_update(max_unavailable: int | str, max_surge: int | str) -> dict[str, Any]:
    return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": max_unavailable, "maxSurge": max_surge}}


def daemonset(name: str, ns: str, *, strategy: dict[str, Any], image: str = OLD, min_ready_seconds: int = 0,
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    template_meta: dict[str, Any] = {"labels": {"app": name}}
    if annotations:
        template_meta["annotations"] = annotations
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": name}}, "updateStrategy": strategy,
                            "template": {"metadata": template_meta,
                                         "spec": {"containers": [{"name": "agent", "image": image}]}}}
    if min_ready_seconds:
        spec["minReadySeconds"] = min_ready_seconds
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def create(k: Kubectl, tmp_path: Path, obj: dict[str, Any]) -> str:
    """`kubectl create -f` (not apply: no last-applied annotation, and generateName works)."""
    path = tmp_path / f"create-{obj['kind']}-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(obj))
    return k("create", "-f", str(path)).stdout


# --- reading the cluster ------------------------------------------------------------------------------
def get_ds(p: Pipeline, ns: str, name: str) -> dict[str, Any]:
    code, body = p.sim.request("GET", f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}")
    assert code == 200, body
    return dict(body)


def revisions(p: Pipeline, ns: str) -> list[dict[str, Any]]:
    code, body = p.sim.request("GET", f"/apis/apps/v1/namespaces/{ns}/controllerrevisions")
    assert code == 200, body
    return sorted(body["items"], key=lambda r: r["revision"])



def image_of(pod: dict[str, Any]) -> str:
    return str(pod["spec"]["containers"][0]["image"])


def terminating(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def ready_since(pod: dict[str, Any]) -> datetime | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c["type"] == "Ready" and c["status"] == "True":
            return parse_time(c["lastTransitionTime"])
    return None


def available(pod: dict[str, Any], min_ready_seconds: int, now: datetime) -> bool:
    """podutil.IsPodAvailable for a pod that is not being deleted (rollingUpdate ignores those)."""
    since = ready_since(pod)
    return not terminating(pod) and since is not None and since + timedelta(seconds=min_ready_seconds) <= now


def by_node(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    nodes: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        nodes.setdefault(target_node(pod), []).append(pod)
    return nodes


def uids(pods: list[dict[str, Any]]) -> dict[str, str]:
    """node -> pod uid."""
    return {target_node(p): p["metadata"]["uid"] for p in pods}


def describe(pods: list[dict[str, Any]]) -> str:
    return "; ".join(sorted(f"{target_node(p)}:{p['metadata']['name']}:{image_of(p)}"
                            f"{':ready' if ready_since(p) else ''}{':terminating' if terminating(p) else ''}"
                            for p in pods))


def settled(p: Pipeline, ns: str, name: str, image: str) -> list[dict[str, Any]]:
    """Exactly one pod on each of the 20 nodes, none terminating, all Ready and of `image`, and a status
    for the current generation saying so. Raises AssertionError saying what is missing (`until` retries
    on it and shows the last one at its deadline)."""
    ds = get_ds(p, ns, name)
    pods = p.pods(ns)
    status = ds.get("status") or {}
    done = (len(pods) == NODE_COUNT and {target_node(q) for q in pods} == NODES
            and not any(terminating(q) for q in pods) and all(ready_since(q) for q in pods)
            and all(image_of(q) == image for q in pods)
            and status.get("observedGeneration") == ds["metadata"]["generation"]
            and status.get("desiredNumberScheduled") == NODE_COUNT
            and status.get("currentNumberScheduled") == NODE_COUNT
            and status.get("numberReady") == NODE_COUNT and status.get("numberAvailable") == NODE_COUNT
            and status.get("updatedNumberScheduled") == NODE_COUNT
            and status.get("numberMisscheduled") == 0 and not status.get("numberUnavailable"))
    assert done, (f"not settled on {image}: generation {ds['metadata']['generation']}, status {status}, "
                  f"{len(pods)} pods: {describe(pods)}")
    return pods


# --- the audit trail ----------------------------------------------------------------------------------
def ds_key(ns: str, name: str) -> str:
    return f"DaemonSet/{ns}/{name}"


def summaries(p: Pipeline, ns: str, name: str) -> list[dict[str, Any]]:
    rows = p.sql("select summary from decisions where controller_key = ? order by id", ds_key(ns, name))
    return [json.loads(s) for (s,) in rows]


def actions_settled(p: Pipeline, ns: str, name: str, timeout: float = DEADLINE, supervise: bool = False) -> None:
    """Waits until every action the controller decided for the DaemonSet was sent and has a result."""
    def nothing_open() -> bool:
        # one result per effect: each pod of a CreatePods has its own (action_targets names them)
        open_ = p.sql("select t.key, o.state from action_targets t join outbox o on o.key = t.action_key "
                      "join decisions d on d.id = o.decision_id "
                      "where d.controller_key = ? and (o.state != 'sent' or not exists "
                      "(select 1 from action_results r where r.key = t.key))", ds_key(ns, name))
        assert not open_, f"actions without a result: {open_}"
        return True

    until(p, nothing_open, f"every action of {ns}/{name} to have a result", timeout, supervise)


def results(p: Pipeline, ns: str, name: str, action: str) -> list[tuple[str, str, str | None, str | None]]:
    """(result key, outcome, object uid, the deciding sync's revision hash) of every `action` result."""
    rows = p.sql("select r.key, r.outcome, r.object_uid, d.summary from action_results r join decisions d "
                 "on d.id = r.decision_id where d.controller_key = ? and r.action = ? order by r.key",
                 ds_key(ns, name), action)
    return [(k, o, u, json.loads(s).get("hash")) for k, o, u, s in rows]


def history_lines(k: Kubectl, ns: str, name: str) -> list[str]:
    """The REVISION column of `kubectl rollout history`."""
    out = k("rollout", "history", f"ds/{name}", "-n", ns).stdout
    return [line.split()[0] for line in out.splitlines()[2:] if line.strip()]


# --- sampling the rollout ----------------------------------------------------------------------------
class NoSurge:
    """maxSurge 0: never two pods of the DaemonSet on a node (terminating ones included: the manage loop
    creates only once the old pod is gone), never more than `max_unavailable` nodes without an available pod.

    Violations fail the test at once with pytest.fail (`until` retries on AssertionError)."""

    def __init__(self, max_unavailable: int, min_ready_seconds: int = 0) -> None:
        self.max_unavailable = max_unavailable
        self.min_ready_seconds = min_ready_seconds
        self.samples = 0
        self.peak_unavailable = 0
        self.mixed = 0  # samples with pods of both images: the rollout was seen in progress

    def __call__(self, pods: list[dict[str, Any]], now: datetime) -> None:
        self.samples += 1
        nodes = by_node(pods)
        doubled = {n: on for n, on in nodes.items() if len(on) > 1}
        if doubled:
            pytest.fail(f"sample {self.samples}: nodes with two pods of the DaemonSet (maxSurge 0): "
                        f"{ {n: describe(on) for n, on in doubled.items()} }")
        lacking = sorted(n for n in NODES if not any(available(q, self.min_ready_seconds, now)
                                                     for q in nodes.get(n, [])))
        if len(lacking) > self.max_unavailable:
            pytest.fail(f"sample {self.samples}: {len(lacking)} nodes without an available pod, more than "
                        f"maxUnavailable {self.max_unavailable}: {lacking}\n{describe(pods)}")
        self.peak_unavailable = max(self.peak_unavailable, len(lacking))
        if {OLD, NEW} <= {image_of(q) for q in pods}:
            self.mixed += 1


class Surge:
    """maxSurge `max_surge`, maxUnavailable 0: every node always has an available pod; at most `max_surge`
    nodes have two pods that are not being deleted (rollingUpdate's numSurge leaves terminating pods out),
    never three; a new pod is never deleted; and each old pod is deleted only once the new pod beside it
    has been Ready for minReadySeconds (compared at the deletion: deletionTimestamp - grace period)."""

    def __init__(self, max_surge: int, min_ready_seconds: int) -> None:
        self.max_surge = max_surge
        self.min_ready_seconds = min_ready_seconds
        self.samples = 0
        self.peak_surge = 0
        self.deletions_seen: dict[str, str] = {}  # node -> the old pod seen being deleted there

    def __call__(self, pods: list[dict[str, Any]], now: datetime) -> None:
        self.samples += 1
        nodes = by_node(pods)
        live = {n: [q for q in on if not terminating(q)] for n, on in nodes.items()}
        crowded = {n: describe(on) for n, on in live.items() if len(on) > 2}
        if crowded:
            pytest.fail(f"sample {self.samples}: more than two live pods on a node: {crowded}")
        surging = sorted(n for n, on in live.items() if len(on) == 2)
        if len(surging) > self.max_surge:
            pytest.fail(f"sample {self.samples}: {len(surging)} nodes with two live pods, more than maxSurge "
                        f"{self.max_surge}: {surging}\n{describe(pods)}")
        self.peak_surge = max(self.peak_surge, len(surging))
        lacking = sorted(n for n in NODES if not any(available(q, self.min_ready_seconds, now)
                                                     for q in nodes.get(n, [])))
        if lacking:
            pytest.fail(f"sample {self.samples}: nodes without an available pod (maxUnavailable 0): {lacking}\n"
                        f"{describe(pods)}")
        for pod in pods:
            if not terminating(pod):
                continue
            node, meta = target_node(pod), pod["metadata"]
            if image_of(pod) == NEW:
                pytest.fail(f"sample {self.samples}: new pod {meta['name']} on {node} is being deleted")
            deleted_at = parse_time(meta["deletionTimestamp"]) - timedelta(seconds=meta["deletionGracePeriodSeconds"])
            beside = [q for q in live.get(node, []) if image_of(q) == NEW]
            since = ready_since(beside[0]) if len(beside) == 1 else None
            if since is None or since + timedelta(seconds=self.min_ready_seconds) > deleted_at:
                pytest.fail(f"sample {self.samples}: old pod {meta['name']} on {node} deleted at {deleted_at} "
                            f"before the new pod beside it was available (Ready since {since}, minReadySeconds "
                            f"{self.min_ready_seconds}): {describe(nodes[node])}")
            self.deletions_seen[node] = meta["name"]


def watch(p: Pipeline, ns: str, invariant: Callable[[list[dict[str, Any]], datetime], None],
          condition: Callable[[list[dict[str, Any]]], Any], what: str, timeout: float = DEADLINE,
          supervise: bool = False) -> Any:
    """Samples the namespace's pods until `condition` (given each sample) returns something truthy,
    checking `invariant` on every sample."""
    def look() -> Any:
        pods = p.pods(ns)
        invariant(pods, datetime.now(UTC))
        return condition(pods)

    return until(p, look, what, timeout=timeout, supervise=supervise)


def roll(p: Pipeline, ns: str, name: str, image: str,
         invariant: Callable[[list[dict[str, Any]], datetime], None], supervise: bool = False) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = watch(p, ns, invariant, lambda pods: settled(p, ns, name, image),
                                         f"{ns}/{name} to run {image} on all {NODE_COUNT} nodes", supervise=supervise)
    return result


def start_rollout(p: Pipeline, k: Kubectl, tmp_path: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Applies the DaemonSet and waits until it runs OLD on every node (the first revision)."""
    apply(k, tmp_path, manifest)
    name, ns = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    pods: list[dict[str, Any]] = until(p, lambda: settled(p, ns, name, OLD), f"{ns}/{name} on every node",
                                       timeout=DEADLINE)
    assert len(revisions(p, ns)) == 1
    return pods


def rollout_status(k: Kubectl, ns: str, name: str) -> str:
    return k("rollout", "status", f"ds/{name}", "-n", ns, "--timeout=60s", timeout=90).stdout


# --- the scenarios ----------------------------------------------------------------------------------
@pytest.mark.real
def test_max_unavailable_2_never_more_than_2_nodes_down(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                                        tmp_path: Path) -> None:
    """RollingUpdate maxUnavailable 2 (maxSurge 0) over 20 nodes, after `kubectl set image`: no sample
    ever shows more than 2 nodes without an available pod or a node with two pods; every pod is replaced
    by one of the new image; each rolling step deletes at most 2; `kubectl rollout status` completes."""
    old = start_rollout(pipeline, kubectl, tmp_path, daemonset("agent", namespace, strategy=rolling_update(2, 0)))
    before = uids(old)
    watcher = NoSurge(max_unavailable=2)
    kubectl("set", "image", "ds/agent", f"agent={NEW}", "-n", namespace)
    after = roll(pipeline, namespace, "agent", NEW, watcher)
    assert watcher.mixed > 0 and watcher.peak_unavailable >= 1, "the rollout was never seen in progress"

    assert "successfully rolled out" in rollout_status(kubectl, namespace, "agent")
    actions_settled(pipeline, namespace, "agent")
    now = uids(after)
    assert set(now) == NODES and not set(now.values()) & set(before.values()), "every pod was replaced"
    ds = get_ds(pipeline, namespace, "agent")
    assert ds["status"]["updatedNumberScheduled"] == NODE_COUNT and ds["status"]["observedGeneration"] == 2
    revs = revisions(pipeline, namespace)
    assert [r["revision"] for r in revs] == [1, 2]
    assert {p["metadata"]["labels"][HASH_LABEL] for p in after} == {revs[1]["metadata"]["labels"][HASH_LABEL]}
    decided = summaries(pipeline, namespace, "agent")
    assert max(len(s.get("deletes") or []) for s in decided) == 2, "a rolling step deletes up to maxUnavailable"
    # every old pod deleted, and no other. Not "each in one decision": upstream's DaemonSet expectations
    # (ControllerExpectations, no UID tracking) count a pod's deletion twice, at its deletionTimestamp and at its
    # DELETED (updatePod calls deletePod), and kubus's do the same; when a kubelet removes a deleted pod at once
    # (kwok on the real control plane), one pod's two events can satisfy a step's 2 expected deletions before the
    # other pod's deletion is seen, and the next step deletes that pod again (docs/sim-vs-real.md, 6)
    deleted = [name for s in decided for name in s.get("deletes") or []]
    assert set(deleted) == {p["metadata"]["name"] for p in old}, Counter(deleted)
    assert sum(len(s.get("creates") or []) for s in decided) == 2 * NODE_COUNT


@pytest.fixture
def terminating_pods(pipeline: Pipeline, namespace: str) -> Iterator[None]:
    with pipeline.terminating_pods(namespace):
        yield


@pytest.mark.real
def test_max_surge_25_percent_starts_new_pods_beside_old_ones(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                                              tmp_path: Path, terminating_pods: None) -> None:
    """RollingUpdate maxSurge "25%" (ceil(25% of 20) = 5), maxUnavailable 0, minReadySeconds 2: the new
    pods start beside the old ones on at most 5 nodes at a time (and the first wave surges on exactly 5),
    an old pod is deleted only once the new one beside it is available, no node is ever without an
    available pod, and the rollout ends with 20 new pods. Old pods take 1 s to terminate, so every
    deletion is seen by the sampler (on the real control plane, whose kwok removes a deleted pod at once, a
    finalizer TerminatingPods lets go of 1 s after the deletion: docs/sim-vs-real.md)."""
    manifest = daemonset("surge", namespace, strategy=rolling_update(0, "25%"), min_ready_seconds=2,
                         annotations={TERMINATION: "1"})
    if pipeline.hold_finalizers():
        manifest["spec"]["template"]["metadata"]["finalizers"] = pipeline.hold_finalizers()
    old = start_rollout(pipeline, kubectl, tmp_path, manifest)
    before = uids(old)
    watcher = Surge(max_surge=5, min_ready_seconds=2)
    kubectl("set", "image", "ds/surge", f"agent={NEW}", "-n", namespace)
    after = roll(pipeline, namespace, "surge", NEW, watcher)

    # the first wave: 5 new pods started together, each needing >= 1 s (2 s, less the second-truncated
    # Ready time) before it is available, so the sampler sees all five beside their old pods at once
    assert watcher.peak_surge == 5, f"at most {watcher.peak_surge} nodes were seen surging at once"
    assert set(watcher.deletions_seen) == NODES, f"old pods seen being deleted on {sorted(watcher.deletions_seen)}"
    assert set(watcher.deletions_seen.values()) == {p["metadata"]["name"] for p in old}
    assert "successfully rolled out" in rollout_status(kubectl, namespace, "surge")
    actions_settled(pipeline, namespace, "surge")
    now = uids(after)
    assert set(now) == NODES and not set(now.values()) & set(before.values())
    ds = get_ds(pipeline, namespace, "surge")
    assert ds["status"]["updatedNumberScheduled"] == NODE_COUNT and ds["status"]["numberAvailable"] == NODE_COUNT
    new_hash = revisions(pipeline, namespace)[-1]["metadata"]["labels"][HASH_LABEL]
    decided = [s for s in summaries(pipeline, namespace, "surge") if s.get("hash") == new_hash]
    surged = [node for s in decided for node in s.get("creates") or []]
    assert sorted(surged) == sorted(NODES), "one new pod per node, none created twice"
    assert max(len(s.get("creates") or []) for s in decided) == 5
    # the deleted pods are the old ones seen being deleted; one may be decided twice (docs/sim-vs-real.md, 6:
    # upstream's DaemonSet expectations count every update of a terminating pod as a deletion, as kubus's do)
    deleted = [d for s in decided for d in s.get("deletes") or []]
    assert set(deleted) == set(watcher.deletions_seen.values()), Counter(deleted)


@pytest.mark.real
def test_on_delete_replaces_only_the_pods_deleted_by_hand(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                                          tmp_path: Path) -> None:
    """OnDelete: `kubectl set image` changes no running pod (once the reconciler has synced the new
    generation); deleting 3 pods by hand gets those 3 nodes a pod of the new image, the other 17 keep
    theirs, and the status counts 3 updated pods."""
    before = uids(start_rollout(pipeline, kubectl, tmp_path,
                                daemonset("manual", namespace, strategy={"type": "OnDelete"})))
    kubectl("set", "image", "ds/manual", f"agent={NEW}", "-n", namespace)

    def synced() -> bool:
        status = get_ds(pipeline, namespace, "manual").get("status") or {}
        return status.get("observedGeneration") == 2 and len(revisions(pipeline, namespace)) == 2

    until(pipeline, synced, "the reconciler to sync generation 2", timeout=DEADLINE)
    actions_settled(pipeline, namespace, "manual")
    pods = pipeline.pods(namespace)
    assert uids(pods) == before and {image_of(p) for p in pods} == {OLD}
    assert not any(terminating(p) for p in pods)
    status = get_ds(pipeline, namespace, "manual")["status"]
    assert status.get("updatedNumberScheduled", 0) == 0 and status["numberAvailable"] == NODE_COUNT
    new_hash = revisions(pipeline, namespace)[-1]["metadata"]["labels"][HASH_LABEL]
    assert not [s for s in summaries(pipeline, namespace, "manual")
                if s.get("hash") == new_hash and (s.get("creates") or s.get("deletes"))]

    chosen = sorted(pods, key=lambda p: p["metadata"]["name"])[:3]
    replaced = {target_node(p) for p in chosen}
    kubectl("delete", "pod", *[p["metadata"]["name"] for p in chosen], "-n", namespace, "--timeout=60s",
            timeout=90)

    def replaced_three() -> list[dict[str, Any]] | None:
        current = pipeline.pods(namespace)
        ds = get_ds(pipeline, namespace, "manual")
        status = ds.get("status") or {}
        ok = (len(current) == NODE_COUNT and {target_node(q) for q in current} == NODES
              and all(ready_since(q) and not terminating(q) for q in current)
              and {target_node(q) for q in current if image_of(q) == NEW} == replaced
              and status.get("updatedNumberScheduled") == 3 and status.get("numberAvailable") == NODE_COUNT)
        return current if ok else None

    after = until(pipeline, replaced_three, "the 3 deleted pods replaced by new-image pods", timeout=DEADLINE)
    actions_settled(pipeline, namespace, "manual")
    now = uids(after)
    assert {n: u for n, u in now.items() if n not in replaced} == {n: u for n, u in before.items() if n not in replaced}
    assert all(now[n] != before[n] for n in replaced)
    assert sorted(target_node(p) for p in after if p["metadata"]["labels"][HASH_LABEL] == new_hash) == sorted(replaced)
    assert {image_of(p) for p in after if target_node(p) not in replaced} == {OLD}
    decided = summaries(pipeline, namespace, "manual")
    assert not [s for s in decided if s.get("deletes")], "OnDelete: the controller deletes nothing"
    assert sorted(n for s in decided if s.get("hash") == new_hash for n in s.get("creates") or []) == sorted(replaced)


@pytest.mark.real
def test_rollout_undo_goes_back_to_the_first_template(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                                      tmp_path: Path) -> None:
    """After an update, `kubectl rollout undo`: the DaemonSet's template is the first one again, every pod
    runs it with the first revision's hash, and that revision (the same object) is renumbered 3, as
    upstream's constructHistory does; `kubectl rollout history` lists revisions 2 and 3."""
    start_rollout(pipeline, kubectl, tmp_path, daemonset("undo", namespace, strategy=rolling_update("25%", 0)))
    first = revisions(pipeline, namespace)[0]
    first_template = get_ds(pipeline, namespace, "undo")["spec"]["template"]
    kubectl("set", "image", "ds/undo", f"agent={NEW}", "-n", namespace)
    roll(pipeline, namespace, "undo", NEW, NoSurge(max_unavailable=5))
    assert history_lines(kubectl, namespace, "undo") == ["1", "2"]
    second = revisions(pipeline, namespace)[1]

    assert "rolled back" in kubectl("rollout", "undo", "ds/undo", "-n", namespace).stdout
    after = roll(pipeline, namespace, "undo", OLD, NoSurge(max_unavailable=5))
    actions_settled(pipeline, namespace, "undo")
    ds = get_ds(pipeline, namespace, "undo")
    assert ds["spec"]["template"] == first_template and ds["metadata"]["generation"] == 3
    assert ds["status"]["observedGeneration"] == 3 and ds["status"]["updatedNumberScheduled"] == NODE_COUNT
    revs = revisions(pipeline, namespace)
    assert [(r["metadata"]["name"], r["metadata"]["uid"], r["revision"]) for r in revs] == [
        (second["metadata"]["name"], second["metadata"]["uid"], 2),
        (first["metadata"]["name"], first["metadata"]["uid"], 3)]
    assert {p["metadata"]["labels"][HASH_LABEL] for p in after} == {first["metadata"]["labels"][HASH_LABEL]}
    assert history_lines(kubectl, namespace, "undo") == ["2", "3"]
    third = kubectl("rollout", "history", "ds/undo", "-n", namespace, "--revision=3").stdout
    assert re.search(rf"Image:\s+{re.escape(OLD)}\n", third), third
    created = {n for s in summaries(pipeline, namespace, "undo") for n in s.get("revisions_created") or []}
    assert created == {first["metadata"]["name"], second["metadata"]["name"]}, "the undo renumbers, creates none"


def fnv1_32(data: bytes) -> int:
    """hash/fnv New32 (FNV-1), written out here independently of reconciler.core.daemonset.history."""
    h = 0x811C9DC5
    for byte in data:
        h = (h * 0x01000193) & 0xFFFFFFFF
        h ^= byte
    return h


def test_takeover_of_revisions_and_pods_kube_controller_manager_left(pipeline: Pipeline, kubectl: Kubectl,
                                                                    namespace: str, tmp_path: Path,
                                                                    services: Services) -> None:
    """With the reconciler down, the DaemonSet `legacy`, its ControllerRevision and one pod per node are
    created exactly as kube-controller-manager leaves them: the revision's data is getPatch's bytes
    (checked against a literal), named <ds>-<HashControllerRevision>, owned by the DaemonSet; each pod
    carries its hash and the DaemonSet as controller, pinned to its node by node affinity and with the
    daemon tolerations. Once kubus's reconciler is back it takes over without deleting or creating a
    pod, touching the revision or creating another; it only writes the status."""
    services.restarts_allowed = True
    pipeline.kill("reconcile")

    create(kubectl, tmp_path, daemonset("legacy", namespace, strategy=rolling_update(1, 0),
                                        annotations={"note": "a<b && c>d"}))
    ds = get_ds(pipeline, namespace, "legacy")
    data = history.revision_data(codec.decode(json.dumps(ds), DaemonSet))
    assert data == LEGACY_DATA, data
    assert fnv1_32(LEGACY_DATA) == LEGACY_SUM32
    assert "".join("bcdfghjklmnpqrstvwxz2456789"[ord(c) % 27] for c in str(LEGACY_SUM32)) == LEGACY_HASH
    assert history.revision_hash(data, None) == LEGACY_HASH

    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "legacy", "uid": ds["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    create(kubectl, tmp_path, {
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": f"legacy-{LEGACY_HASH}", "namespace": namespace,
                     "labels": {"app": "legacy", HASH_LABEL: LEGACY_HASH}, "ownerReferences": [owner]},
        "data": json.loads(LEGACY_DATA), "revision": 1})
    template = ds["spec"]["template"]

    def upstream_pod(node: str) -> dict[str, Any]:
        """syncNodes' pod: CreatePodTemplate + GetPodFromTemplate + ReplaceDaemonSetPodNodeNameNodeAffinity."""
        spec = json.loads(json.dumps(template["spec"]))
        spec["tolerations"] = DAEMON_TOLERATIONS
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "legacy-", "namespace": namespace,
                             "labels": {**template["metadata"]["labels"], HASH_LABEL: LEGACY_HASH},
                             "annotations": dict(template["metadata"]["annotations"]),
                             "ownerReferences": [owner]},
                "spec": spec}

    create(kubectl, tmp_path, {"apiVersion": "v1", "kind": "List",
                               "items": [upstream_pod(n) for n in sorted(NODES)]})

    def running() -> list[dict[str, Any]] | None:
        current = pipeline.pods(namespace)
        ok = (len(current) == NODE_COUNT and {q["spec"].get("nodeName") for q in current} == NODES
              and all(ready_since(q) for q in current))
        return current if ok else None

    legacy_pods = until(pipeline, running, "the legacy pods to run on every node", timeout=DEADLINE)
    (revision,) = revisions(pipeline, namespace)
    assert revision["data"] == json.loads(LEGACY_DATA)

    pipeline.restarts["reconcile"] += 1
    pipeline.start("reconcile")

    def taken_over() -> dict[str, Any] | None:
        current = get_ds(pipeline, namespace, "legacy")
        status = current.get("status") or {}
        ok = (status.get("observedGeneration") == 1 and status.get("numberAvailable") == NODE_COUNT
              and status.get("updatedNumberScheduled") == NODE_COUNT)
        return current if ok else None

    status = until(pipeline, taken_over, "kubus to sync the legacy DaemonSet", timeout=DEADLINE)["status"]
    actions_settled(pipeline, namespace, "legacy")
    assert {k: status.get(k, 0) for k in ("desiredNumberScheduled", "currentNumberScheduled", "numberReady",
                                          "numberAvailable", "updatedNumberScheduled", "numberMisscheduled",
                                          "numberUnavailable")} == {
        "desiredNumberScheduled": 20, "currentNumberScheduled": 20, "numberReady": 20, "numberAvailable": 20,
        "updatedNumberScheduled": 20, "numberMisscheduled": 0, "numberUnavailable": 0}

    pods = pipeline.pods(namespace)
    assert {(p["metadata"]["uid"], p["metadata"]["resourceVersion"]) for p in pods} == {
        (p["metadata"]["uid"], p["metadata"]["resourceVersion"]) for p in legacy_pods}, "no pod touched"
    assert revisions(pipeline, namespace) == [revision], "the revision untouched, and no other"
    decided = summaries(pipeline, namespace, "legacy")
    assert decided and {s.get("hash") for s in decided} == {LEGACY_HASH}
    assert not [s for s in decided if s.get("creates") or s.get("deletes") or s.get("revisions_created")
                or s.get("revisions_deleted") or s.get("waiting_for_history")]
    done = {a for (a,) in pipeline.sql("select distinct r.action from action_results r join decisions d on "
                                       "d.id = r.decision_id where d.controller_key = ?", ds_key(namespace, "legacy"))}
    assert done == {"update_status"}, done


def test_reconciler_killed_mid_rollout(pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path,
                                       services: Services) -> None:
    """A rolling update (maxUnavailable 2) on 20 nodes; the reconciler is SIGKILLed once some but not all
    nodes run the new pod, restarted with a failpoint that SIGKILLs it again right after its first
    commit (before publishing), then restarted by a supervisor. The rollout finishes with exactly one
    new pod per node, no sample ever shows two pods on a node or more than 2 nodes down, and the audit
    trail shows exactly 20 creates of the new revision, each old pod deleted once."""
    services.restarts_allowed = True
    old = start_rollout(pipeline, kubectl, tmp_path, daemonset("crash", namespace, strategy=rolling_update(2, 0)))
    watcher = NoSurge(max_unavailable=2)
    kubectl("set", "image", "ds/crash", f"agent={NEW}", "-n", namespace)

    def some_updated(pods: list[dict[str, Any]]) -> int | None:
        count = sum(1 for q in pods if image_of(q) == NEW and ready_since(q) and not terminating(q))
        return count if count >= 4 else None

    watch(pipeline, namespace, watcher, some_updated, "4 nodes to run the new pod")
    pipeline.kill("reconcile")
    at_kill = sum(1 for q in pipeline.pods(namespace) if image_of(q) == NEW)
    assert 4 <= at_kill < NODE_COUNT, f"{at_kill} new pods when the reconciler was killed"

    pipeline.restarts["reconcile"] += 1
    pipeline.start("reconcile", failpoint="reconciler.after-commit")
    watch(pipeline, namespace, watcher, lambda pods: pipeline.procs["reconcile"].poll() is not None,
          "the restarted reconciler to hit its failpoint")
    assert pipeline.procs["reconcile"].returncode == -9

    after = roll(pipeline, namespace, "crash", NEW, watcher, supervise=True)
    actions_settled(pipeline, namespace, "crash", supervise=True)
    assert pipeline.restarts["reconcile"] >= 2 and pipeline.procs["reconcile"].poll() is None
    assert "successfully rolled out" in rollout_status(kubectl, namespace, "crash")

    new_hash = revisions(pipeline, namespace)[-1]["metadata"]["labels"][HASH_LABEL]
    assert [r["revision"] for r in revisions(pipeline, namespace)] == [1, 2]
    assert {p["metadata"]["labels"][HASH_LABEL] for p in after} == {new_hash}
    decided = summaries(pipeline, namespace, "crash")
    created_on = Counter(n for s in decided if s.get("hash") == new_hash for n in s.get("creates") or [])
    assert created_on == Counter(dict.fromkeys(NODES, 1)), f"creates of the new revision per node: {created_on}"
    deleted = Counter(d for s in decided for d in s.get("deletes") or [])
    assert deleted == Counter(p["metadata"]["name"] for p in old), f"deletes decided: {deleted}"
    creates = [r for r in results(pipeline, namespace, "crash", "create_pods") if r[3] == new_hash]
    assert len(creates) == NODE_COUNT and {o for _, o, _, _ in creates} == {"succeeded"}, creates
    assert {u for _, _, u, _ in creates} == {p["metadata"]["uid"] for p in after}
    deletes = results(pipeline, namespace, "crash", "delete_pod")
    assert len(deletes) == NODE_COUNT and {o for _, o, _, _ in deletes} == {"succeeded"}, deletes
    sent = pipeline.sql("select o.state, count(*) from outbox o join decisions d on d.id = o.decision_id "
                        "where d.controller_key = ? group by o.state", ds_key(namespace, "crash"))
    assert [state for state, _ in sent] == ["sent"], sent
