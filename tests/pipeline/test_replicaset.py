"""The ReplicaSet controller end to end, as deployed: nats-server, `kubus sim`, `kubus ingest`,
`kubus reconcile` and `kubus execute` as separate processes, driven with kubectl the way a user
would, with the store's SQL as the audit trail.

One pipeline serves the whole module (each test has its own namespace); every test waits on
conditions with deadlines and ends by checking exact outcomes: how many pods, which ones, who owns
them, what the ReplicaSet's status says, and what the decisions, outbox and results in SQL show.
"""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.cluster import RealCluster
from tests.pipeline.harness import Pipeline
from tests.simulation import Kubectl, table_rows, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

T = TypeVar("T")

IDEMPOTENCY_KEY = "kubus.io/idempotency-key"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
FAIL_AFTER = "sim.kubus.io/fail-after-seconds"
IMAGE = "nginx:1.27"
NAME_SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"  # what generateName appends (utilrand's alphabet)

_namespaces = itertools.count()


# --- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, cluster: RealCluster | None) -> Iterator[Pipeline]:
    """The pipeline, shared by the module's tests (each works in its own namespace), once it is up:
    the reconciler has recorded the nodes ingest published, and the executor consumes actions. On the sim
    (4 nodes) or, for the tests marked `real`, on the session's real control plane (20 kwok nodes)."""
    p = Pipeline(tmp_path_factory.mktemp("replicaset"), "--termination-seconds", "0.2", cluster=cluster)

    def up() -> bool:
        # as a process supervisor would, restart a service that died starting: three services opening
        # a fresh SQLite file at once may find it locked ("database is locked"), as test_end_to_end's
        # wait_for_pods also tolerates
        p.supervise()
        try:
            nodes = p.sql("select count(distinct name) from observed_events where kind = 'Node'")[0][0]
        except sqlite3.OperationalError:  # no database, or no schema, yet
            return False
        wanted = len(cluster.nodes) if cluster else 4
        return nodes == wanted and " consuming " in (p.workdir / "execute.log").read_text()

    try:
        p.start_all()
        until(p, up, "the services to start", timeout=60)
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def kubectl(pipeline: Pipeline) -> Kubectl:
    return Kubectl(pipeline.sim.kubeconfig)


@pytest.fixture
def namespace(kubectl: Kubectl, pipeline: Pipeline, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test (on the sim left in place: the sim goes with the module). On the
    real control plane: once its `default` ServiceAccount exists (the ServiceAccount admission plugin refuses pods
    before; kube-controller-manager makes it), and deleted when the test ends, since the control plane is the
    session's and the next module's pipeline would take over what is left."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).removeprefix("test-")[:40].strip("-")
    name = f"{stem}-{next(_namespaces)}"
    kubectl("create", "namespace", name)
    if pipeline.real is None:
        yield name
        return

    def has_service_account() -> bool:
        code, _ = pipeline.sim.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")
        return code == 200

    wait_for(has_service_account, timeout=60, interval=0.1, what=f"the default ServiceAccount of {name}")
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


class Services:
    """What the autouse check below allows: a test that kills a service on purpose says so."""

    def __init__(self) -> None:
        self.restarts_allowed = False


@pytest.fixture(autouse=True)
def services(pipeline: Pipeline) -> Iterator[Services]:
    """No service may die or be restarted during a test (unless the test kills it on purpose)."""
    pipeline.supervise()  # one a failed earlier test left dead is restarted: that failure stays its own
    before = dict(pipeline.restarts)
    allowed = Services()
    yield allowed
    if not allowed.restarts_allowed:
        dead = {s: proc.returncode for s, proc in pipeline.procs.items() if proc.poll() is not None}
        assert not dead and pipeline.restarts == before, \
            f"services died: {dead}, restarts {before} -> {pipeline.restarts}\n{pipeline.logs()}"


# --- manifests and kubectl ------------------------------------------------------------------------
def replicaset(name: str, namespace: str, replicas: int, *, app: str | None = None, image: str = IMAGE,
               annotations: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {"app": app or name}
    template_meta: dict[str, Any] = {"labels": labels}
    if annotations:
        template_meta["annotations"] = annotations
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": template_meta,
                                  "spec": {"containers": [{"name": "main", "image": image}]}}}}


def bare_pod(name: str, namespace: str, labels: dict[str, str],
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": IMAGE}]}}


def apply(kubectl: Kubectl, tmp_path: Path, *objects: dict[str, Any]) -> list[str]:
    """`kubectl apply -f FILE` of the objects as one YAML stream; returns kubectl's lines."""
    path = tmp_path / f"manifest-{next(_namespaces)}.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return kubectl("apply", "-f", str(path)).stdout.strip().splitlines()


def events_of(kubectl: Kubectl, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    """The events `kubectl get events` shows for ReplicaSet `name` with `reason`."""
    return [e for e in kubectl.json("get", "events", "-n", namespace)["items"]
            if e["involvedObject"]["kind"] == "ReplicaSet" and e["involvedObject"]["name"] == name
            and e["reason"] == reason]


# --- reading the cluster and the store -----------------------------------------------------------
def until(p: Pipeline, condition: Callable[[], T | None], what: str, timeout: float = 30.0,
          supervise: bool = False) -> T:
    """wait_for, with the services' logs on a timeout (and, if asked, a supervisor restarting them)."""
    def check() -> T | None:
        if supervise:
            p.supervise()
        return condition()

    try:
        result = wait_for(check, timeout=timeout, interval=0.1, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{p.logs()}") from None
    assert result is not None  # wait_for returns only what is truthy
    return result


def get_rs(p: Pipeline, namespace: str, name: str) -> dict[str, Any] | None:
    code, body = p.sim.request("GET", f"/apis/apps/v1/namespaces/{namespace}/replicasets/{name}")
    assert code in (200, 404), body
    return body if code == 200 else None


def controller_uid(pod: dict[str, Any]) -> str | None:
    refs = pod["metadata"].get("ownerReferences") or []
    return next((r["uid"] for r in refs if r.get("controller")), None)


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions") or [])


def is_active(pod: dict[str, Any]) -> bool:
    """FilterActivePods: not terminated, not being deleted."""
    return (pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            and not pod["metadata"].get("deletionTimestamp"))


def owned(p: Pipeline, namespace: str, uid: str) -> list[dict[str, Any]]:
    return [pod for pod in p.pods(namespace) if controller_uid(pod) == uid]


def names(pods: list[dict[str, Any]]) -> set[str]:
    return {pod["metadata"]["name"] for pod in pods}


def converged(p: Pipeline, namespace: str, name: str, replicas: int, *, ceiling: int | None = None,
              timeout: float = 30.0, supervise: bool = False,
              extra: Callable[[list[dict[str, Any]]], bool] = lambda active: True) -> list[dict[str, Any]]:
    """Waits until ReplicaSet `name` has exactly `replicas` active pods, all Ready, none terminating,
    and a status that says so for its current generation; returns those pods. The test fails at once
    if a look finds more active pods than `ceiling` (the controller must never overshoot)."""
    def done() -> list[dict[str, Any]] | None:
        rs = get_rs(p, namespace, name)
        assert rs is not None, f"ReplicaSet {namespace}/{name} is gone"
        pods = owned(p, namespace, rs["metadata"]["uid"])
        active = [pod for pod in pods if is_active(pod)]
        if ceiling is not None and len(active) > ceiling:  # fails at once (wait_for retries on assertions)
            pytest.fail(f"{namespace}/{name} has {len(active)} active pods, more than {ceiling}: "
                        f"{sorted(names(active))}\n{p.logs()}")
        terminating = [pod for pod in pods if pod["metadata"].get("deletionTimestamp")]
        status = rs.get("status") or {}
        ok = (len(active) == replicas and not terminating and all(is_ready(pod) for pod in active)
              and status.get("observedGeneration") == rs["metadata"]["generation"]
              and status.get("replicas", 0) == replicas and status.get("readyReplicas", 0) == replicas
              and status.get("availableReplicas", 0) == replicas and extra(active))
        return active if ok else None

    return until(p, done, f"{namespace}/{name} to converge on {replicas} Ready pods", timeout, supervise)


def key_of(namespace: str, name: str) -> str:
    return f"ReplicaSet/{namespace}/{name}"


def settled(p: Pipeline, namespace: str, name: str, timeout: float = 30.0, supervise: bool = False) -> None:
    """Waits until every action the controller decided was sent and has a result recorded."""
    def nothing_open() -> bool:
        open_ = p.sql("select o.key, o.state from outbox o join decisions d on d.id = o.decision_id "
                      "where d.controller_key = ? and (o.state != 'sent' or not exists "
                      "(select 1 from action_results r where r.action_key = o.key))", key_of(namespace, name))
        assert not open_, f"actions without a result: {open_}"
        return True

    until(p, nothing_open, f"every action of {namespace}/{name} to have a result", timeout, supervise)


def succeeded_creates(p: Pipeline, namespace: str, name: str) -> list[tuple[str, str]]:
    """(idempotency key, pod uid) of every pod create the executors reported succeeded."""
    rows = p.sql("select r.key, r.object_uid from action_results r join decisions d on d.id = r.decision_id "
                 "where d.controller_key = ? and r.action = 'create_pods' and r.outcome = 'succeeded'",
                 key_of(namespace, name))
    return [(k, u) for k, u in rows]


def summaries(p: Pipeline, namespace: str, name: str) -> list[dict[str, Any]]:
    rows = p.sql("select summary from decisions where controller_key = ? order by id", key_of(namespace, name))
    return [json.loads(s) for (s,) in rows]


def observed(p: Pipeline, pod: dict[str, Any]) -> bool:
    """The reconciler has committed this very version of the object (so its cache holds it)."""
    meta = pod["metadata"]
    return bool(p.sql("select 1 from observed_events where uid = ? and resource_version = ?",
                      meta["uid"], meta["resourceVersion"]))


def deletion_recorded(p: Pipeline, namespace: str, name: str, uid: str) -> bool:
    """The reconciler has seen the ReplicaSet go and made its last decision about it."""
    gone = p.sql("select 1 from observed_events where uid = ? and event_type = 'DELETED'", uid)
    last = summaries(p, namespace, name)[-1:]
    return bool(gone) and bool(last) and last[0].get("reason", "").startswith("deleted")


def replica_failure(p: Pipeline, namespace: str, name: str) -> dict[str, Any] | None:
    rs = get_rs(p, namespace, name)
    assert rs is not None, f"ReplicaSet {namespace}/{name} is gone"
    return next((c for c in (rs.get("status") or {}).get("conditions") or [] if c["type"] == "ReplicaFailure"), None)


def failed_create_actions(p: Pipeline, namespace: str, name: str) -> dict[str, list[tuple[str, int | None]]]:
    """The controller's create actions that have a failed result: action key -> (outcome, code) of each pod."""
    rows = p.sql("select r.action_key, r.outcome, r.code from action_results r join decisions d "
                 "on d.id = r.decision_id where d.controller_key = ? and r.action = 'create_pods'",
                 key_of(namespace, name))
    actions: dict[str, list[tuple[str, int | None]]] = {}
    for action_key, outcome, code in rows:
        actions.setdefault(action_key, []).append((outcome, code))
    return {k: v for k, v in actions.items() if any(o == "failed" for o, _ in v)}


def status_writes(p: Pipeline, namespace: str, name: str) -> list[tuple[int, list[str]]]:
    """(decision id, condition types) of every status the controller decided to write, in order."""
    rows = p.sql("select id, summary from decisions where controller_key = ? order by id", key_of(namespace, name))
    return [(i, [c["type"] for c in (s.get("status") or {}).get("conditions") or []])
            for i, s in ((i, json.loads(raw)) for i, raw in rows) if s.get("status_written")]


def assert_failure_kept(p: Pipeline, namespace: str, name: str) -> None:
    """Once written, ReplicaFailure stays in every status written while the creates keep failing (upstream
    reports each sync's manageReplicas error, and every sync's creates fail)."""
    writes = status_writes(p, namespace, name)
    first = next(n for n, (_, types) in enumerate(writes) if "ReplicaFailure" in types)
    dropped = [i for i, types in writes[first:] if "ReplicaFailure" not in types]
    assert not dropped, (f"decisions {dropped} wrote a status without ReplicaFailure while no pod could be "
                         f"created; every status write (decision id, conditions): {writes}")


# --- the scenarios ----------------------------------------------------------------------------------
@pytest.mark.real
def test_apply_creates_exactly_the_replicas(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                            tmp_path: Path) -> None:
    """`kubectl apply -f` of a ReplicaSet of 3: exactly 3 pods it controls, named from generateName,
    a status kubectl shows as 3/3/3 for the current generation, and a SuccessfulCreate for each pod."""
    assert apply(kubectl, tmp_path, replicaset("web", namespace, 3)) == ["replicaset.apps/web created"]
    converged(pipeline, namespace, "web", 3, ceiling=3)
    settled(pipeline, namespace, "web")

    rs = kubectl.json("get", "rs", "web", "-n", namespace)
    uid = rs["metadata"]["uid"]
    pods = pipeline.pods(namespace)
    assert len(pods) == 3
    for pod in pods:
        meta = pod["metadata"]
        assert meta["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                            "uid": uid, "controller": True, "blockOwnerDeletion": True}]
        assert meta["generateName"] == "web-"
        assert re.fullmatch(f"web-{NAME_SUFFIX}", meta["name"]), meta["name"]
        assert meta["labels"] == {"app": "web"}
        assert pod["status"]["phase"] == "Running" and is_ready(pod)

    rows = table_rows(kubectl("get", "rs", "-n", namespace).stdout)
    assert [{k: r[k] for k in ("NAME", "DESIRED", "CURRENT", "READY")} for r in rows] == [
        {"NAME": "web", "DESIRED": "3", "CURRENT": "3", "READY": "3"}]
    assert rs["metadata"]["generation"] == 1
    status = rs["status"]
    assert status["observedGeneration"] == rs["metadata"]["generation"]
    assert (status["replicas"], status["fullyLabeledReplicas"], status["readyReplicas"],
            status["availableReplicas"]) == (3, 3, 3, 3)
    assert "conditions" not in status

    want = {f"Created pod: {n}" for n in names(pods)}

    def one_event_per_pod() -> list[dict[str, Any]] | None:
        events = events_of(kubectl, namespace, "web", "SuccessfulCreate")
        return events if {e["message"] for e in events} == want else None

    created = until(pipeline, one_event_per_pod, "a SuccessfulCreate event per pod")
    assert len(created) == 3 and {e["type"] for e in created} == {"Normal"}
    assert {e["source"]["component"] for e in created} == {"replicaset-controller"}
    assert {u for _, u in succeeded_creates(pipeline, namespace, "web")} == {p["metadata"]["uid"] for p in pods}


@pytest.mark.real
def test_scale_up_then_down_deletes_the_cheapest_pods(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                                      tmp_path: Path) -> None:
    """`kubectl scale` to 7 then to 2: with pod-deletion-cost annotations on 5 of the 7 pods, the
    scale-down deletes the 3 negative-cost pods (cheapest first), then the 2 without a cost, and
    keeps the 2 expensive ones."""
    apply(kubectl, tmp_path, replicaset("web", namespace, 3))
    converged(pipeline, namespace, "web", 3, ceiling=3)
    assert kubectl("scale", "rs/web", "-n", namespace, "--replicas=7").stdout.strip() == "replicaset.apps/web scaled"
    seven = converged(pipeline, namespace, "web", 7, ceiling=7)
    settled(pipeline, namespace, "web")
    assert len(pipeline.pods(namespace)) == 7

    ordered = sorted(names(seven))
    costs = {ordered[0]: "-1", ordered[1]: "-100", ordered[2]: "-50", ordered[3]: "200", ordered[4]: "100"}
    for pod, cost in costs.items():
        kubectl("annotate", "pod", pod, "-n", namespace, f"{DELETION_COST}={cost}")
    cheap = [ordered[1], ordered[2], ordered[0]]  # by cost: -100, -50, -1
    free = set(ordered[5:])  # no annotation: cost 0
    keep = {ordered[3], ordered[4]}
    # the scale-down must be decided on the annotated pods: wait until the reconciler holds them
    current = {pod["metadata"]["name"]: pod for pod in pipeline.pods(namespace)}
    until(pipeline, lambda: all(observed(pipeline, current[n]) for n in costs), "the annotations to be observed")

    kubectl("scale", "rs/web", "-n", namespace, "--replicas=2")
    two = converged(pipeline, namespace, "web", 2, ceiling=7)
    settled(pipeline, namespace, "web")
    assert names(two) == keep
    until(pipeline, lambda: len(pipeline.pods(namespace)) == 2, "the deleted pods to be gone")
    assert names(pipeline.pods(namespace)) == keep

    scale_downs = [s for s in summaries(pipeline, namespace, "web") if s.get("deletes")]
    assert len(scale_downs) == 1, scale_downs
    deletes = scale_downs[0]["deletes"]
    assert deletes[:3] == cheap and set(deletes[3:]) == free and len(deletes) == 5
    want = {f"Deleted pod: {n}" for n in deletes}
    until(pipeline, lambda: {e["message"] for e in events_of(kubectl, namespace, "web", "SuccessfulDelete")} == want,
          "a SuccessfulDelete event for each deleted pod")
    assert len(succeeded_creates(pipeline, namespace, "web")) == 7


@pytest.mark.real
def test_adopts_an_orphan_created_before_it(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                            tmp_path: Path) -> None:
    """A bare pod with matching labels exists before the ReplicaSet of 3: it is adopted (a controller
    ownerReference appears on it) and only 2 pods are created."""
    apply(kubectl, tmp_path, bare_pod("stray", namespace, {"app": "web"}))
    stray = kubectl.json("get", "pod", "stray", "-n", namespace)
    until(pipeline, lambda: observed(pipeline, stray), "the reconciler to hold the orphan")

    apply(kubectl, tmp_path, replicaset("web", namespace, 3))
    active = converged(pipeline, namespace, "web", 3, ceiling=3)
    settled(pipeline, namespace, "web")

    rs = kubectl.json("get", "rs", "web", "-n", namespace)
    assert "stray" in names(active)
    refs = kubectl.json("get", "pod", "stray", "-n", namespace)["metadata"]["ownerReferences"]
    assert refs == [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": rs["metadata"]["uid"],
                     "controller": True, "blockOwnerDeletion": True}]
    pods = pipeline.pods(namespace)
    assert len(pods) == 3 and names(pods) == names(active)
    assert len(succeeded_creates(pipeline, namespace, "web")) == 2
    assert sum(s.get("creates", 0) for s in summaries(pipeline, namespace, "web")) == 2
    # until the watch shows the patch, a later sync may send the same adoption again (as upstream's may)
    adoptions = [s["adopt"] for s in summaries(pipeline, namespace, "web") if s.get("adopt")]
    assert adoptions and all(a == ["stray"] for a in adoptions), adoptions


def test_adopts_an_orphan_that_appears_later(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                             tmp_path: Path) -> None:
    """A Running, Ready bare pod (deletion cost 1000) relabelled to match a converged ReplicaSet of 3
    is adopted, and the ReplicaSet, now with 4, deletes one of its own cheaper pods, creating none."""
    apply(kubectl, tmp_path, replicaset("web", namespace, 3))
    mine = names(converged(pipeline, namespace, "web", 3, ceiling=3))
    settled(pipeline, namespace, "web")
    apply(kubectl, tmp_path, bare_pod("stray", namespace, {"app": "elsewhere"}, {DELETION_COST: "1000"}))
    until(pipeline, lambda: is_ready(kubectl.json("get", "pod", "stray", "-n", namespace)), "the orphan to be Ready")

    kubectl("label", "pod", "stray", "-n", namespace, "app=web", "--overwrite")
    until(pipeline, lambda: controller_uid(kubectl.json("get", "pod", "stray", "-n", namespace)), "the adoption")
    active = converged(pipeline, namespace, "web", 3, ceiling=4)
    settled(pipeline, namespace, "web")
    until(pipeline, lambda: len(pipeline.pods(namespace)) == 3, "the trimmed pod to be gone")

    rs = kubectl.json("get", "rs", "web", "-n", namespace)
    assert "stray" in names(active)
    assert controller_uid(kubectl.json("get", "pod", "stray", "-n", namespace)) == rs["metadata"]["uid"]
    pods = pipeline.pods(namespace)
    assert names(pods) == names(active) and len(pods) == 3
    (gone,) = mine - names(pods)
    decided = summaries(pipeline, namespace, "web")
    adoptions = [s["adopt"] for s in decided if s.get("adopt")]
    assert adoptions and all(a == ["stray"] for a in adoptions), adoptions
    assert [s["deletes"] for s in decided if s.get("deletes")] == [[gone]]
    assert next(s for s in decided if s.get("adopt"))["deletes"] == [gone], "adopted and trimmed in one sync"
    assert len(succeeded_creates(pipeline, namespace, "web")) == 3


@pytest.mark.real
def test_relabelled_pod_is_released_and_replaced(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                                 tmp_path: Path) -> None:
    """`kubectl label --overwrite` moving a pod out of the selector: the ReplicaSet releases it (its
    ownerReference is removed, the pod keeps running) and creates one replacement."""
    apply(kubectl, tmp_path, replicaset("web", namespace, 3))
    first = converged(pipeline, namespace, "web", 3, ceiling=3)
    settled(pipeline, namespace, "web")
    victim = sorted(names(first))[0]

    kubectl("label", "pod", victim, "-n", namespace, "app=moved", "--overwrite")
    until(pipeline, lambda: not kubectl.json("get", "pod", victim, "-n", namespace)["metadata"].get(
        "ownerReferences"), "the relabelled pod to be released")
    active = converged(pipeline, namespace, "web", 3, ceiling=3)
    settled(pipeline, namespace, "web")

    assert victim not in names(active)
    assert len(names(active) - names(first)) == 1
    released = kubectl.json("get", "pod", victim, "-n", namespace)
    assert released["metadata"]["labels"] == {"app": "moved"}
    assert "ownerReferences" not in released["metadata"]
    assert released["status"]["phase"] == "Running" and not released["metadata"].get("deletionTimestamp")
    assert names(pipeline.pods(namespace)) == names(active) | {victim}
    releases = [s["release"] for s in summaries(pipeline, namespace, "web") if s.get("release")]
    assert releases and all(r == [victim] for r in releases), releases  # repeated until the watch shows it
    assert len(succeeded_creates(pipeline, namespace, "web")) == 4


def test_failed_pods_are_replaced_and_not_counted(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                                  tmp_path: Path) -> None:
    """Pods whose template makes the kubelet fail them after 1 s are replaced as they fail (never more
    than 3 active); once the template no longer fails them the ReplicaSet settles on 3 Running pods,
    the failed ones stay (the controller does not delete them) and status.replicas does not count them."""
    apply(kubectl, tmp_path, replicaset("flaky", namespace, 3, annotations={FAIL_AFTER: "1"}))
    rs = until(pipeline, lambda: get_rs(pipeline, namespace, "flaky"), "the ReplicaSet")
    uid = rs["metadata"]["uid"]

    def failed_twice_over() -> bool:
        pods = owned(pipeline, namespace, uid)
        active = [pod for pod in pods if is_active(pod)]
        if len(active) > 3:
            pytest.fail(f"{len(active)} active pods, more than 3: {sorted(names(active))}")
        return len([pod for pod in pods if pod["status"].get("phase") == "Failed"]) >= 6

    until(pipeline, failed_twice_over, "6 pods to have failed")
    kubectl("patch", "rs", "flaky", "-n", namespace, "--type=json",
            "-p", json.dumps([{"op": "remove", "path": "/spec/template/metadata/annotations"}]))
    active = converged(pipeline, namespace, "flaky", 3, ceiling=3,
                       extra=lambda active: all(FAIL_AFTER not in (p["metadata"].get("annotations") or {})
                                                for p in active))
    settled(pipeline, namespace, "flaky")

    pods = pipeline.pods(namespace)
    failed = [pod for pod in pods if pod["status"]["phase"] == "Failed"]
    assert len(failed) >= 6 and len(pods) == len(failed) + 3
    assert {pod["status"]["phase"] for pod in pods} == {"Failed", "Running"}
    assert all(controller_uid(pod) == uid for pod in pods), "every pod, failed ones too, stays owned"
    assert names(pods) - names(failed) == names(active)
    status = kubectl.json("get", "rs", "flaky", "-n", namespace)["status"]
    assert (status["replicas"], status["readyReplicas"], status["availableReplicas"]) == (3, 3, 3)
    assert table_rows(kubectl("get", "rs", "flaky", "-n", namespace).stdout)[0]["CURRENT"] == "3"
    # every pod ever created is still there (failed pods are kept), and none was deleted
    assert len(succeeded_creates(pipeline, namespace, "flaky")) == len(pods)
    assert not [s for s in summaries(pipeline, namespace, "flaky") if s.get("deletes")]


@pytest.mark.real
def test_delete_cascades_in_the_background(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                           tmp_path: Path) -> None:
    """`kubectl delete rs`: the ReplicaSet goes at once, the garbage collector removes its pods, the
    reconciler drops its state and decides nothing more for it.

    Pods the controller creates in the window where the Pod watch has shown the garbage collector's
    deletions but the ReplicaSet watch has not yet shown the ReplicaSet gone (two watches, no order
    between them, as upstream's two informers) belong to the deleted owner and are collected too."""
    apply(kubectl, tmp_path, replicaset("web", namespace, 3))
    converged(pipeline, namespace, "web", 3, ceiling=3)
    settled(pipeline, namespace, "web")
    uid = kubectl.json("get", "rs", "web", "-n", namespace)["metadata"]["uid"]

    assert kubectl("delete", "rs", "web", "-n", namespace).stdout.strip() == 'replicaset.apps "web" deleted'
    assert get_rs(pipeline, namespace, "web") is None
    until(pipeline, lambda: deletion_recorded(pipeline, namespace, "web", uid), "the reconciler to see it go")
    settled(pipeline, namespace, "web")
    until(pipeline, lambda: pipeline.pods(namespace) == [], "the garbage collector to remove the pods")

    assert "No resources found" in kubectl("get", "rs,pods", "-n", namespace).stderr
    decided = summaries(pipeline, namespace, "web")
    assert decided[-1] == {"reason": "deleted: expectations dropped"}, decided[-1]
    assert pipeline.sql("select * from expectations where controller_key = ?", key_of(namespace, "web")) == []
    assert decided[0]["creates"] == 3
    created = {u for _, u in succeeded_creates(pipeline, namespace, "web")}

    def deletions_recorded() -> bool:
        # the API already shows no pods; the watch events of their deletion reach the store a little later
        return created <= {u for (u,) in pipeline.sql(
            "select uid from observed_events where kind = 'Pod' and namespace = ? and event_type = 'DELETED'",
            namespace)}

    until(pipeline, deletions_recorded, "every pod it created recorded as deleted in the audit trail")


@pytest.mark.real
def test_delete_with_orphan_cascade_keeps_the_pods(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                                   tmp_path: Path) -> None:
    """`kubectl delete rs --cascade=orphan`: the pods stay, Running, without ownerReferences (the
    orphan finalizer's work), and the controller neither adopts them back nor creates any."""
    apply(kubectl, tmp_path, replicaset("web", namespace, 3))
    first = names(converged(pipeline, namespace, "web", 3, ceiling=3))
    settled(pipeline, namespace, "web")
    uid = kubectl.json("get", "rs", "web", "-n", namespace)["metadata"]["uid"]

    kubectl("delete", "rs", "web", "-n", namespace, "--cascade=orphan", "--timeout=20s")
    assert get_rs(pipeline, namespace, "web") is None
    until(pipeline, lambda: deletion_recorded(pipeline, namespace, "web", uid), "the reconciler to see it go")
    settled(pipeline, namespace, "web")

    pods = pipeline.pods(namespace)
    assert names(pods) == first
    for pod in pods:
        assert "ownerReferences" not in pod["metadata"], pod["metadata"]
        assert pod["status"]["phase"] == "Running" and not pod["metadata"].get("deletionTimestamp")
    decided = summaries(pipeline, namespace, "web")
    assert sum(s.get("creates", 0) for s in decided) == 3
    assert not [s for s in decided if s.get("deletes")]
    assert len(succeeded_creates(pipeline, namespace, "web")) == 3
    # a sync that saw the pods orphaned before it saw the ReplicaSet being deleted may decide to adopt
    # them back; the executor's owner check (upstream's canAdopt) must refuse every such patch
    adoptions = pipeline.sql("select r.outcome from action_results r join decisions d on d.id = r.decision_id "
                             "where d.controller_key = ? and r.action = 'patch_pod'", key_of(namespace, "web"))
    assert ("succeeded",) not in adoptions, adoptions


def test_same_name_in_two_namespaces(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                     tmp_path: Path) -> None:
    """Two ReplicaSets `web` (2 and 4 replicas) in two namespaces converge independently, and scaling
    one changes nothing in the other."""
    other = f"{namespace}-b"
    kubectl("create", "namespace", other)
    apply(kubectl, tmp_path, replicaset("web", namespace, 2), replicaset("web", other, 4))
    a = converged(pipeline, namespace, "web", 2, ceiling=2)
    b = converged(pipeline, other, "web", 4, ceiling=4)
    settled(pipeline, namespace, "web")
    settled(pipeline, other, "web")

    uid_a = kubectl.json("get", "rs", "web", "-n", namespace)["metadata"]["uid"]
    uid_b = kubectl.json("get", "rs", "web", "-n", other)["metadata"]["uid"]
    assert uid_a != uid_b
    assert {controller_uid(p) for p in pipeline.pods(namespace)} == {uid_a} and len(pipeline.pods(namespace)) == 2
    assert {controller_uid(p) for p in pipeline.pods(other)} == {uid_b} and len(pipeline.pods(other)) == 4
    assert len(succeeded_creates(pipeline, namespace, "web")) == 2
    assert len(succeeded_creates(pipeline, other, "web")) == 4
    decisions_b = len(summaries(pipeline, other, "web"))

    kubectl("scale", "rs/web", "-n", namespace, "--replicas=5")
    converged(pipeline, namespace, "web", 5, ceiling=5)
    settled(pipeline, namespace, "web")
    assert names(pipeline.pods(other)) == names(b) and len(names(a)) == 2
    assert len(succeeded_creates(pipeline, other, "web")) == 4
    assert not [s for s in summaries(pipeline, other, "web")[decisions_b:] if s.get("creates") or s.get("deletes")]
    assert table_rows(kubectl("get", "rs", "web", "-n", other).stdout)[0]["READY"] == "4"


def test_reconciler_killed_after_commit_while_scaling_to_40(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                                            tmp_path: Path, services: Services) -> None:
    """Scaling to 40 while the reconciler is down, then starting it with a failpoint that SIGKILLs it
    right after it commits its decision (before publishing the actions); once a supervisor restarts
    it: exactly 40 pods, and never more than 40 were created."""
    services.restarts_allowed = True
    apply(kubectl, tmp_path, replicaset("big", namespace, 2))
    converged(pipeline, namespace, "big", 2, ceiling=2)
    settled(pipeline, namespace, "big")

    pipeline.kill("reconcile")
    kubectl("scale", "rs/big", "-n", namespace, "--replicas=40")
    pipeline.restarts["reconcile"] += 1
    pipeline.start("reconcile", failpoint="reconciler.after-commit")
    until(pipeline, lambda: pipeline.procs["reconcile"].poll() is not None, "the reconciler to hit its failpoint")
    assert pipeline.procs["reconcile"].returncode == -9
    committed = [s for s in summaries(pipeline, namespace, "big") if s.get("creates")]
    assert [s["creates"] for s in committed] == [2, 38], "the decision to create 38 was committed before the kill"

    active = converged(pipeline, namespace, "big", 40, ceiling=40, timeout=60, supervise=True)
    settled(pipeline, namespace, "big", supervise=True)
    assert pipeline.restarts["reconcile"] >= 2 and pipeline.procs["reconcile"].poll() is None

    pods = pipeline.pods(namespace)
    assert len(pods) == 40 and names(pods) == names(active)
    assert len({p["metadata"]["annotations"][IDEMPOTENCY_KEY] for p in pods}) == 40
    created = succeeded_creates(pipeline, namespace, "big")
    assert len(created) == 40 and {u for _, u in created} == {p["metadata"]["uid"] for p in pods}
    decided = summaries(pipeline, namespace, "big")
    assert sum(s.get("creates", 0) for s in decided) == 40
    assert not [s for s in decided if s.get("deletes")], "no pod beyond 40 was ever there to delete"
    # every pod the API ever had in the namespace, as observed through the watch: exactly these 40
    until(pipeline, lambda: all(observed(pipeline, p) for p in pods), "the reconciler to observe all 40")
    ever = pipeline.sql("select count(distinct uid) from observed_events where kind = 'Pod' and namespace = ?",
                        namespace)
    assert ever == [(40,)]


def test_scale_up_is_audited_in_sql(pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """After `kubectl scale` from 2 to 5, SQL shows the ReplicaSet decision that created 3 pods
    (triggered by the ReplicaSet's MODIFIED event), its create action sent through the outbox,
    and one succeeded create_pods result per pod, naming the pod that carries its key."""
    apply(kubectl, tmp_path, replicaset("web", namespace, 2))
    converged(pipeline, namespace, "web", 2, ceiling=2)
    settled(pipeline, namespace, "web")
    before = names(pipeline.pods(namespace))
    kubectl("scale", "rs/web", "-n", namespace, "--replicas=5")
    converged(pipeline, namespace, "web", 5, ceiling=5)
    settled(pipeline, namespace, "web")
    rs = kubectl.json("get", "rs", "web", "-n", namespace)
    new = [p for p in pipeline.pods(namespace) if p["metadata"]["name"] not in before]
    assert len(new) == 3

    key = key_of(namespace, "web")
    kinds = pipeline.sql("select distinct controller_kind from decisions where controller_key = ?", key)
    assert kinds == [("ReplicaSet",)]
    rows = pipeline.sql("select id, correlation_id, trigger, summary from decisions where controller_key = ? "
                        "and controller_kind = 'ReplicaSet' order by id", key)
    scale_ups = [(i, c, t, json.loads(s)) for i, c, t, s in rows if json.loads(s).get("creates")]
    assert [s["creates"] for *_, s in scale_ups] == [2, 3]
    decision_id, correlation, trigger, summary = scale_ups[1]
    assert summary["replicas"] == 5 and summary["active"] == 2 and summary["diff"] == -3
    assert re.fullmatch(f"ReplicaSet/{rs['metadata']['uid']}/[0-9]+/MODIFIED", trigger), trigger

    outbox = pipeline.sql("select key, state, subject from outbox where decision_id = ?", decision_id)
    create = [o for o in outbox if o[0] == f"{correlation}/create"]
    assert len(create) == 1 and create[0][1] == "sent", outbox
    assert create[0][2].startswith(f"{pipeline.prefix}.actions."), create
    results = pipeline.sql("select key, action, outcome, code, decision_id, object_uid from action_results "
                           "where action_key = ? order by key", f"{correlation}/create")
    assert [(k, a, o, c, d) for k, a, o, c, d, _ in results] == [
        (f"{correlation}/create/{i}", "create_pods", "succeeded", 201, decision_id) for i in range(3)]
    by_key = {p["metadata"]["annotations"][IDEMPOTENCY_KEY]: p["metadata"]["uid"] for p in new}
    assert {k: u for k, *_, u in results} == by_key


def test_the_batch_that_meets_a_rounds_expectations_ends_at_the_event_that_meets_them(
        pipeline: Pipeline, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    """The last of a round's 150 pods to show up (its ADDED) meets the ReplicaSet's expectations, and the batch
    that takes it ends there (reconciler/awaiting.py) although the earlier pods' updates keep coming: the next
    round would otherwise wait out the rest of the 50 ms window behind it. The ticks record where each batch
    ended, so the audit trail shows it."""
    apply(kubectl, tmp_path, replicaset("web", namespace, 150))
    converged(pipeline, namespace, "web", 150, ceiling=150, timeout=60)
    settled(pipeline, namespace, "web")
    [(met, added, updated_after)] = pipeline.sql(
        "select max(e.stream_seq), count(*), (select count(*) from observed_events later where later.namespace = ? "
        "and later.kind = 'Pod' and later.stream_seq > max(e.stream_seq)) from action_results r "
        "join observed_events e on e.uid = r.object_uid and e.event_type = 'ADDED' "
        "where r.action = 'create_pods' and r.action_key like ?", namespace, f"{key_of(namespace, 'web')}@%")
    assert added == 150
    assert updated_after > 0  # the round's earlier pods were still changing after it: the window had more to take
    ended = pipeline.sql("select last_seq from reconciler_ticks where kind = 'batch' and first_seq <= ? "
                         "and last_seq >= ?", met, met)
    assert ended == [(met,)], f"the batch taking sequence {met} ended at {ended}"


def test_pods_the_api_rejects_fail_create_then_recover(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                                       tmp_path: Path) -> None:
    """A template the API accepts for a ReplicaSet but rejects for a Pod (an image with trailing
    whitespace): a Warning FailedCreate "Error creating: ..." event, the ReplicaFailure condition with
    reason FailedCreate, kept while the creates keep failing, retries with backoff rather than a hot or
    crash loop, and a ReplicaSet beside it that converges regardless. Once the template is fixed the
    pods are created and the condition goes."""
    apply(kubectl, tmp_path, replicaset("good", namespace, 2), replicaset("broken", namespace, 3, image=f"{IMAGE} "))
    converged(pipeline, namespace, "good", 2, ceiling=2)
    settled(pipeline, namespace, "good")

    condition = until(pipeline, lambda: replica_failure(pipeline, namespace, "broken"), "the ReplicaFailure condition")
    assert condition["status"] == "True" and condition["reason"] == "FailedCreate"
    assert condition["message"].startswith('Pod "broken-') and condition["message"].endswith(
        'is invalid: spec.containers[0].image: Invalid value: "nginx:1.27 ": must not have leading or trailing '
        'whitespace'), condition
    until(pipeline, lambda: len(failed_create_actions(pipeline, namespace, "broken")) >= 4,
          "the controller to retry the failing creates (4 failed create actions)", timeout=20)
    assert_failure_kept(pipeline, namespace, "broken")

    warnings = until(pipeline, lambda: events_of(kubectl, namespace, "broken", "FailedCreate"), "a FailedCreate event")
    for event in warnings:
        assert event["type"] == "Warning"
        assert re.fullmatch(f'Error creating: Pod "broken-{NAME_SUFFIX}" is invalid: spec.containers\\[0\\].image: '
                            'Invalid value: "nginx:1.27 ": must not have leading or trailing whitespace',
                            event["message"]), event["message"]
    described = kubectl("describe", "rs", "broken", "-n", namespace).stdout
    assert re.search(r"ReplicaFailure\s+True\s+FailedCreate", described), described
    assert re.search(r"Warning\s+FailedCreate\s+.*Error creating: Pod ", described), described

    broken_uid = kubectl.json("get", "rs", "broken", "-n", namespace)["metadata"]["uid"]
    assert owned(pipeline, namespace, broken_uid) == []
    assert {p["metadata"]["labels"]["app"] for p in pipeline.pods(namespace)} == {"good"}
    # each create action makes one failing call (slow start: a batch of 1) and skips the rest
    failing = failed_create_actions(pipeline, namespace, "broken")
    for results in failing.values():
        assert results.count(("failed", 422)) == 1 and len(results) <= 3, failing
        assert set(results) <= {("failed", 422), ("skipped", None)}, failing
    assert len(failing) < 40, f"{len(failing)} create actions already: is there any backoff?"
    assert all(proc.poll() is None for proc in pipeline.procs.values())

    kubectl("patch", "rs", "broken", "-n", namespace, "--type=json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": IMAGE}]))
    converged(pipeline, namespace, "broken", 3, ceiling=3,
              extra=lambda active: replica_failure(pipeline, namespace, "broken") is None)
    settled(pipeline, namespace, "broken")
    rs = kubectl.json("get", "rs", "broken", "-n", namespace)
    assert "conditions" not in rs["status"] and rs["status"]["observedGeneration"] == 2
    assert len(owned(pipeline, namespace, broken_uid)) == 3
    assert len(succeeded_creates(pipeline, namespace, "broken")) == 3
    assert len(pipeline.pods(namespace)) == 5
    assert all(p["spec"]["containers"][0]["image"] == IMAGE for p in pipeline.pods(namespace))


def test_creates_refused_by_the_api_are_retried_until_it_accepts(pipeline: Pipeline, kubectl: Kubectl,
                                                                  namespace: str, tmp_path: Path) -> None:
    """The sim's fault injection refuses every pod create (409), and its events API fails (500) so the
    controller's events are slow to record: the controller keeps retrying the creates with backoff,
    reports ReplicaFailure, and once the faults are cleared converges and drops the condition.

    Upstream records events asynchronously: a failing events API changes nothing in what it decides."""
    code, body = pipeline.sim.request("PUT", "/sim/faults", {
        "rules": ["pods:create:1.0:409", "events:create:1.0:500"], "seed": 1})
    assert code == 200, body
    try:
        apply(kubectl, tmp_path, replicaset("web", namespace, 3))
        until(pipeline, lambda: len(failed_create_actions(pipeline, namespace, "web")) >= 2,
              "the controller to retry the refused creates (2 failed create actions)", timeout=15)
        condition = until(pipeline, lambda: replica_failure(pipeline, namespace, "web"), "ReplicaFailure")
        assert condition["reason"] == "FailedCreate" and condition["status"] == "True"
        assert condition["message"].endswith("injected conflict"), condition
        for results in failed_create_actions(pipeline, namespace, "web").values():
            assert results.count(("failed", 409)) == 1 and set(results) <= {("failed", 409), ("skipped", None)}
        assert_failure_kept(pipeline, namespace, "web")
        assert pipeline.pods(namespace) == []
    finally:
        code, body = pipeline.sim.request("DELETE", "/sim/faults")
        assert code == 200, body

    converged(pipeline, namespace, "web", 3, ceiling=3,
              extra=lambda active: replica_failure(pipeline, namespace, "web") is None)
    settled(pipeline, namespace, "web")
    assert len(pipeline.pods(namespace)) == 3
    assert len(succeeded_creates(pipeline, namespace, "web")) == 3
    assert "conditions" not in kubectl.json("get", "rs", "web", "-n", namespace)["status"]
