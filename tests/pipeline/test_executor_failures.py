"""API errors on pod creates, end to end: nats-server, `kubus sim`, `kubus ingest`, `kubus reconcile` and
`kubus execute` as separate processes. A create the API answers with a final error (a 500 without
Retry-After, as client-go's rest client sees it) surfaces within seconds, as upstream's: a Warning
FailedCreate event on the ReplicaSet, counted up while the retries keep failing, the ReplicaFailure
condition with the API's message, and the controller's retries with backoff; once the API accepts
creates again the ReplicaSet converges and the condition goes.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from tests.pipeline.harness import Pipeline
from tests.simulation import wait_for

pytestmark = [pytest.mark.slow]

T = TypeVar("T")

INTERNAL_ERROR = "Internal error occurred: injected fault"  # what the sim's 500 says
_namespaces = itertools.count()


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """The pipeline, once the reconciler has recorded the sim's 4 nodes and the executor consumes."""
    p = Pipeline(tmp_path_factory.mktemp("executor-failures"))

    def up() -> bool:
        p.supervise()  # three services opening a fresh SQLite file at once may find it locked
        try:
            nodes = p.sql("select count(distinct name) from observed_events where kind = 'Node'")[0][0]
        except sqlite3.OperationalError:
            return False
        return nodes == 4 and " consuming " in (p.workdir / "execute.log").read_text()

    try:
        p.start_all()
        until(p, up, "the services to start", timeout=60)
        yield p
    finally:
        p.stop()


@pytest.fixture
def namespace(pipeline: Pipeline, request: pytest.FixtureRequest) -> str:
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).removeprefix("test-")[:40].strip("-")
    name = f"{stem}-{next(_namespaces)}"
    api(pipeline, "POST", "/api/v1/namespaces", {"metadata": {"name": name}}, expect=201)
    return name


def api(p: Pipeline, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
    code, got = p.sim.request(method, path, body)
    assert code == expect, (method, path, code, got)
    return got


def until(p: Pipeline, condition: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    """wait_for, with the services' logs when the deadline passes."""
    try:
        result = wait_for(condition, timeout=timeout, interval=0.1, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{p.logs()}") from None
    assert result is not None
    return result


def replicaset(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}}


def get_rs(p: Pipeline, namespace: str, name: str) -> dict[str, Any]:
    rs: dict[str, Any] = api(p, "GET", f"/apis/apps/v1/namespaces/{namespace}/replicasets/{name}")
    return rs


def replica_failure(p: Pipeline, namespace: str, name: str) -> dict[str, Any] | None:
    conditions = (get_rs(p, namespace, name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "ReplicaFailure"), None)


def events(p: Pipeline, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    items = api(p, "GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if e["involvedObject"]["kind"] == "ReplicaSet"
            and e["involvedObject"]["name"] == name and e["reason"] == reason]


def create_results(p: Pipeline, namespace: str, name: str) -> list[tuple[str, str, int, int]]:
    """(action key, outcome, code, attempts) of every pod create result of the ReplicaSet."""
    rows = p.sql("select r.action_key, r.outcome, r.code, r.attempts from action_results r join decisions d "
                 "on d.id = r.decision_id where d.controller_key = ? and r.action = 'create_pods' order by r.key",
                 f"ReplicaSet/{namespace}/{name}")
    return [(k, o, c, a) for k, o, c, a in rows]


def ready_pods(p: Pipeline, namespace: str) -> list[dict[str, Any]]:
    return [pod for pod in p.pods(namespace)
            if any(c["type"] == "Ready" and c["status"] == "True"
                   for c in (pod.get("status") or {}).get("conditions") or [])]


def test_a_persistent_500_on_pod_creates_surfaces_within_seconds(pipeline: Pipeline, namespace: str,
                                                                 faults: Callable[..., None]) -> None:
    """Every pod create answered 500: ReplicaFailure (reason FailedCreate, the API's message) and one
    Warning FailedCreate event counted up by the retries, each create action a single call that fails
    at once (no redelivery); the creates succeed once the faults are cleared, and the condition goes."""
    faults("pods:create:1.0:500")
    api(pipeline, "POST", f"/apis/apps/v1/namespaces/{namespace}/replicasets", replicaset("web", namespace, 3),
        expect=201)

    condition = until(pipeline, lambda: replica_failure(pipeline, namespace, "web"), "ReplicaFailure", timeout=10)
    assert (condition["status"], condition["reason"], condition["message"]) == ("True", "FailedCreate",
                                                                                INTERNAL_ERROR)

    def counted() -> list[dict[str, Any]] | None:
        found = events(pipeline, namespace, "web", "FailedCreate")
        return found if found and found[0]["count"] >= 2 else None

    [event] = until(pipeline, counted, "the FailedCreate event counted by a retry", timeout=10)
    assert (event["type"], event["message"]) == ("Warning", f"Error creating: {INTERNAL_ERROR}")
    assert event["source"] == {"component": "replicaset-controller"}
    assert event["firstTimestamp"] <= event["lastTimestamp"]

    def retried() -> list[tuple[str, str, int, int]] | None:
        results = create_results(pipeline, namespace, "web")
        return results if len({k for k, o, *_ in results if o == "failed"}) >= 2 else None

    results = until(pipeline, retried, "the controller's retry recorded (2 failed create actions)", timeout=10)
    failed = [r for r in results if r[1] == "failed"]
    assert {(o, c, a) for _, o, c, a in failed} == {("failed", 500, 1)}  # one call each, never redelivered
    assert {(o, c) for _, o, c, _ in results} <= {("failed", 500), ("skipped", None)}, results  # no call: no code
    assert len(failed) == len({k for k, *_ in failed})  # slow start: one failing create per action
    assert pipeline.pods(namespace) == []

    api(pipeline, "DELETE", "/sim/faults")

    def converged() -> bool:
        status = get_rs(pipeline, namespace, "web").get("status") or {}
        return (len(ready_pods(pipeline, namespace)) == 3 and status.get("readyReplicas") == 3
                and replica_failure(pipeline, namespace, "web") is None)

    until(pipeline, converged, "3 Ready pods and no ReplicaFailure", timeout=60)
    assert len(pipeline.pods(namespace)) == 3
    assert all(proc.poll() is None for proc in pipeline.procs.values()) and not any(pipeline.restarts.values())
