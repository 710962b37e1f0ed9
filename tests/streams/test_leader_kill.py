"""The whole pipeline on a 3-node JetStream cluster with R3 streams (nats-server x3, `kubus sim`, ingest,
reconcile and execute as processes, --nats-url the three seed URLs): a server is killed with SIGKILL in
the middle of a DaemonSet rollout, and the rollout still ends with exactly one pod per node of the new
revision, every action with a result, and no service restarted.

The server killed is the stream leader of KUBUS_ACTIONS (the executors' work queue), of KUBUS_EVENTS (the
event history the reconciler consumes), or a follower of KUBUS_ACTIONS. It is started again at the end of
each test and must catch up (the next test starts from a healthy cluster).

Then the whole cluster is stopped and started again (same store directories) in the middle of a rollout,
with a ReplicaSet scaled while no server runs; and a ReplicaSet is scaled up and down while the leaders of
KUBUS_ACTIONS, KUBUS_EVENTS and KUBUS_RESULTS are killed one after the other. Each ends with one pod per node
and revision, the ReplicaSet at its count (never over it on the way), and the services never restarted."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from messages import subjects
from tests.natscluster import NatsCluster
from tests.pipeline.harness import Pipeline
from tests.simulation import target_node, wait_for

pytestmark = pytest.mark.slow

NODES = frozenset(f"node-{i}" for i in range(4))  # the harness's sim has 4 nodes
HASH_LABEL = "controller-revision-hash"
OLD, NEW = "busybox:1", "busybox:2"
MIN_READY_SECONDS = 2  # paces the rollout (a node at a time, each 2 s), so the kill lands in its middle
DEADLINE = 45.0  # a leader's re-election takes up to ~10 s; other suites may share the two cores


@pytest.fixture(scope="module")
def pipeline(cluster: NatsCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """One pipeline on the cluster for the module (a namespace per test), once the reconciler has recorded the
    4 nodes and the executor consumes."""
    p = Pipeline(tmp_path_factory.mktemp("leader-kill"), "--termination-seconds", "0.2", nats_url=cluster.seeds,
                 service_args=["--stream-replicas", "3"])

    def up() -> bool:
        p.supervise()  # three services opening a fresh SQLite file at once: one may find it locked
        try:
            nodes = p.sql("select count(distinct name) from observed_events where kind = 'Node'")[0][0]
        except sqlite3.OperationalError:  # no database, or no schema, yet
            return False
        return bool(nodes == len(NODES) and " consuming " in (p.workdir / "execute.log").read_text())

    try:
        p.start_all()
        until(p, cluster, up, "the services to start", timeout=60)
        yield p  # from here on nothing restarts a service: the tests check that none died
    finally:
        p.stop()


def until(p: Pipeline, cluster: NatsCluster, condition: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    """wait_for, with the services' and the servers' logs on a timeout."""
    try:
        return wait_for(condition, timeout=timeout, interval=0.1, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{p.logs()}\n{cluster.logs()}") from None


# --- the DaemonSet ------------------------------------------------------------------------------------
def create_daemonset(p: Pipeline, ns: str, name: str) -> None:
    code, body = p.sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    assert code == 201, body
    code, body = p.sim.request("POST", f"/apis/apps/v1/namespaces/{ns}/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, "minReadySeconds": MIN_READY_SECONDS,
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "agent", "image": OLD}]}}}})
    assert code == 201, body


def set_image(p: Pipeline, ns: str, name: str, image: str) -> None:
    code, body = p.sim.request("PATCH", f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}",
                               {"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": image}]}}}},
                               content_type="application/strategic-merge-patch+json")
    assert code == 200, body


def current_hash(p: Pipeline, ns: str) -> str | None:
    code, body = p.sim.request("GET", f"/apis/apps/v1/namespaces/{ns}/controllerrevisions")
    assert code == 200, body
    revisions = sorted(body["items"], key=lambda r: r["revision"])
    return str(revisions[-1]["metadata"]["labels"][HASH_LABEL]) if revisions else None


def live_pods(p: Pipeline, ns: str) -> list[dict[str, Any]]:
    """Every pod of the namespace, checked: never two pods of one revision on a node (terminating ones too)."""
    pods = p.pods(ns)
    per_node_and_revision = Counter((target_node(q), q["metadata"]["labels"].get(HASH_LABEL)) for q in pods)
    doubled = [key for key, n in per_node_and_revision.items() if n > 1]
    if doubled:  # pytest.fail: wait_for retries on an AssertionError, and this must end the test at once
        pytest.fail(f"two pods of one revision on a node: {doubled}")
    return pods


def settled(p: Pipeline, ns: str, name: str, image: str) -> list[dict[str, Any]] | None:
    """Exactly one pod on each node, of `image` and the newest revision, Ready and not terminating, and the
    DaemonSet's status saying so for its current generation."""
    code, ds = p.sim.request("GET", f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}")
    assert code == 200, ds
    pods, status, newest = live_pods(p, ns), ds.get("status") or {}, current_hash(p, ns)
    done = (sorted(target_node(q) for q in pods) == sorted(NODES)
            and all(q["spec"]["containers"][0]["image"] == image and q["metadata"]["labels"].get(HASH_LABEL) == newest
                    and not q["metadata"].get("deletionTimestamp") and q["status"].get("phase") == "Running"
                    for q in pods)
            and status.get("observedGeneration") == ds["metadata"]["generation"]
            and status.get("updatedNumberScheduled") == len(NODES) and status.get("numberAvailable") == len(NODES))
    return pods if done else None


def actions_without_result(p: Pipeline, ns: str, name: str) -> list[tuple[Any, ...]]:
    return p.sql("select t.key, o.state from action_targets t join outbox o on o.key = t.action_key "
                 "join decisions d on d.id = o.decision_id where d.controller_key = ? and (o.state != 'sent' "
                 "or not exists (select 1 from action_results r where r.key = t.key))", f"DaemonSet/{ns}/{name}")


# --- the tests ----------------------------------------------------------------------------------------
def actions_leader(cluster: NatsCluster, p: Pipeline) -> str:
    leader = cluster.stream_leader(subjects.stream_name(subjects.ACTIONS_STREAM, p.prefix))
    assert leader is not None
    return leader


def events_leader(cluster: NatsCluster, p: Pipeline) -> str:
    leader = cluster.stream_leader(subjects.stream_name(subjects.EVENTS_STREAM, p.prefix))
    assert leader is not None
    return leader


def actions_follower(cluster: NatsCluster, p: Pipeline) -> str:
    found = cluster.stream_cluster(subjects.stream_name(subjects.ACTIONS_STREAM, p.prefix))
    assert found is not None
    return str(found["replicas"][0]["name"])


@pytest.mark.parametrize("victim", [
    pytest.param(actions_leader, id="leader-of-KUBUS_ACTIONS"),
    pytest.param(events_leader, id="leader-of-KUBUS_EVENTS"),
    pytest.param(actions_follower, id="follower-of-KUBUS_ACTIONS"),
])
def test_a_nats_server_killed_mid_rollout(cluster: NatsCluster, pipeline: Pipeline,
                                          victim: Callable[[NatsCluster, Pipeline], str],
                                          request: pytest.FixtureRequest) -> None:
    """A DaemonSet (maxUnavailable 1, minReadySeconds 2) on 4 nodes is rolled to a new image; once the first new
    pod exists, the server is killed. No sample shows two pods of one revision on a node, and the rollout ends
    with one new pod per node, the status saying so, every action with a result, and every service alive."""
    ns, name = f"kill-{request.node.callspec.id.lower().replace('_', '-')}", "agent"
    for stream in (subjects.ACTIONS_STREAM, subjects.EVENTS_STREAM):  # every stream is R3 on the cluster
        found = cluster.stream_cluster(subjects.stream_name(stream, pipeline.prefix))
        assert found is not None and len(found["replicas"]) == 2, (stream, found)
    create_daemonset(pipeline, ns, name)
    until(pipeline, cluster, lambda: settled(pipeline, ns, name, OLD), "one old pod per node")

    set_image(pipeline, ns, name, NEW)

    def first_new_pod() -> bool:
        newest = current_hash(pipeline, ns)
        return any(q["metadata"]["labels"].get(HASH_LABEL) == newest and q["spec"]["containers"][0]["image"] == NEW
                   for q in live_pods(pipeline, ns))

    until(pipeline, cluster, first_new_pod, "the first pod of the new revision")
    server = victim(cluster, pipeline)
    cluster.kill(server)
    updated = sum(q["spec"]["containers"][0]["image"] == NEW for q in pipeline.pods(ns))
    assert updated < len(NODES), f"the rollout was over ({updated} new pods) when {server} was killed"

    after = until(pipeline, cluster, lambda: settled(pipeline, ns, name, NEW),
                  f"one pod of the new revision per node after {server} was killed")
    assert len(after) == len(NODES)
    until(pipeline, cluster, lambda: not actions_without_result(pipeline, ns, name),
          "every action of the rollout to have a result")
    dead = {s: proc.returncode for s, proc in pipeline.procs.items() if proc.poll() is not None}
    assert not dead, f"services died: {dead}\n{pipeline.logs()}"

    cluster.start(server)  # it catches up: /healthz on every server is green again


# --- ReplicaSets --------------------------------------------------------------------------------------
def create_replicaset(p: Pipeline, ns: str, replicas: int) -> None:
    """A ReplicaSet `web` in the existing namespace `ns`."""
    labels = {"app": "web"}
    code, body = p.sim.request("POST", f"/apis/apps/v1/namespaces/{ns}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels}, "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
    assert code == 201, body


def scale(p: Pipeline, ns: str, replicas: int) -> None:
    code, body = p.sim.request("PATCH", f"/apis/apps/v1/namespaces/{ns}/replicasets/web",
                               {"spec": {"replicas": replicas}}, content_type="application/merge-patch+json")
    assert code == 200, body


def rs_settled(p: Pipeline, ns: str, replicas: int, ceiling: int) -> bool:
    """Exactly `replicas` pods of the ReplicaSet, none terminating, all Running, and its status saying so for
    its generation. Fails the test at once when more than `ceiling` pods are active (an over-creation)."""
    code, rs = p.sim.request("GET", f"/apis/apps/v1/namespaces/{ns}/replicasets/web")
    assert code == 200, rs
    pods = [q for q in p.pods(ns) if (q["metadata"].get("labels") or {}).get("app") == "web"]
    active = [q for q in pods if not q["metadata"].get("deletionTimestamp")]
    if len(active) > ceiling:
        pytest.fail(f"{ns}/web has {len(active)} active pods, more than {ceiling}")
    status = rs.get("status") or {}
    return (len(pods) == len(active) == replicas and all(q["status"].get("phase") == "Running" for q in active)
            and status.get("observedGeneration") == rs["metadata"]["generation"]
            and status.get("replicas") == replicas and status.get("availableReplicas", 0) == replicas)


def rs_actions_without_result(p: Pipeline, ns: str) -> list[tuple[Any, ...]]:
    return p.sql("select t.key, o.state from action_targets t join outbox o on o.key = t.action_key "
                 "join decisions d on d.id = o.decision_id where d.controller_key = ? and (o.state != 'sent' "
                 "or not exists (select 1 from action_results r where r.key = t.key))", f"ReplicaSet/{ns}/web")


def no_service_died(p: Pipeline) -> None:
    dead = {s: proc.returncode for s, proc in p.procs.items() if proc.poll() is not None}
    assert not dead, f"services died: {dead}\n{p.logs()}"


def results_leader(cluster: NatsCluster, p: Pipeline) -> str:
    leader = cluster.stream_leader(subjects.stream_name(subjects.RESULTS_STREAM, p.prefix))
    assert leader is not None
    return leader


def test_the_whole_cluster_restarted_mid_rollout(cluster: NatsCluster, pipeline: Pipeline) -> None:
    """All three servers stopped in the middle of a DaemonSet rollout, a ReplicaSet scaled from 2 to 4 while none
    runs (the API takes it: ingest must publish it once the cluster is back), then all three started again on their
    store directories and ports. The services reconnect on their own: the rollout ends with one new pod per node,
    the ReplicaSet at 4 (never more), every action with a result, and no service restarted."""
    ns, name, web = "whole-cluster-restart", "agent", "whole-cluster-restart-web"  # settled() counts every pod of ns
    create_daemonset(pipeline, ns, name)
    code, body = pipeline.sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": web}})
    assert code == 201, body
    create_replicaset(pipeline, web, 2)
    until(pipeline, cluster, lambda: settled(pipeline, ns, name, OLD) and rs_settled(pipeline, web, 2, ceiling=2),
          "one old pod per node and 2 replicas")

    set_image(pipeline, ns, name, NEW)
    until(pipeline, cluster, lambda: any(q["spec"]["containers"][0]["image"] == NEW for q in live_pods(pipeline, ns)),
          "the first pod of the new revision")
    cluster.stop()
    assert not list(cluster.running())
    updated = sum(q["spec"]["containers"][0]["image"] == NEW for q in pipeline.pods(ns))
    assert updated < len(NODES), f"the rollout was over ({updated} new pods) when the cluster stopped"
    scale(pipeline, web, 4)

    cluster.start()  # every server on its own store directory: the streams come back with their messages
    until(pipeline, cluster, lambda: settled(pipeline, ns, name, NEW) and rs_settled(pipeline, web, 4, ceiling=4),
          "one new pod per node and 4 replicas after the whole cluster restarted", timeout=90)
    until(pipeline, cluster, lambda: not actions_without_result(pipeline, ns, name)
          and not rs_actions_without_result(pipeline, web), "every action to have a result")
    no_service_died(pipeline)


@pytest.mark.parametrize("steps", [pytest.param(((2, None), (7, actions_leader), (1, events_leader),
                                                 (5, results_leader)), id="up-down-up")])
def test_replicasets_scale_while_stream_leaders_are_killed(
        cluster: NatsCluster, pipeline: Pipeline,
        steps: tuple[tuple[int, Callable[[NatsCluster, Pipeline], str] | None], ...]) -> None:
    """A ReplicaSet scaled 2 -> 7 -> 1 -> 5; right after each scale is accepted by the API the leader of one stream
    (KUBUS_ACTIONS, KUBUS_EVENTS, KUBUS_RESULTS) is killed with SIGKILL, and started again once the count is met.
    Each step ends at exactly its count with the status saying so, never more active pods than the larger of the
    two counts on the way, every action with a result, and no service restarted."""
    ns = "scale-under-leader-kills"
    code, body = pipeline.sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    assert code == 201, body
    previous = steps[0][0]
    create_replicaset(pipeline, ns, previous)
    until(pipeline, cluster, lambda: rs_settled(pipeline, ns, previous, ceiling=previous), f"{previous} replicas")
    for replicas, victim in steps[1:]:
        assert victim is not None
        server = victim(cluster, pipeline)
        scale(pipeline, ns, replicas)
        cluster.kill(server)
        ceiling = max(previous, replicas)
        until(pipeline, cluster, lambda r=replicas, c=ceiling: rs_settled(pipeline, ns, r, ceiling=c),  # type: ignore[misc]
              f"{replicas} replicas after {server}, the leader found by {victim.__name__}, was killed")
        cluster.start(server)
        previous = replicas
    until(pipeline, cluster, lambda: not rs_actions_without_result(pipeline, ns), "every action to have a result")
    no_service_died(pipeline)
