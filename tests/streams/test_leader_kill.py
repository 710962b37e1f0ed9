"""The whole pipeline on a 3-node JetStream cluster with R3 streams (nats-server x3, `kubus sim`, ingest,
reconcile and execute as processes, --nats-url the three seed URLs): a server is killed with SIGKILL in
the middle of a DaemonSet rollout, and the rollout still ends with exactly one pod per node of the new
revision, every action with a result, and no service restarted.

The server killed is the stream leader of KUBUS_ACTIONS (the executors' work queue), of KUBUS_EVENTS (the
event history the reconciler consumes), or a follower of KUBUS_ACTIONS. It is started again at the end of
each test and must catch up (the next test starts from a healthy cluster)."""

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
