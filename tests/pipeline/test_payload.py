"""Nothing is too big for NATS's max_payload (issue 15), end to end as deployed: nats-server (max_payload
64 KiB, so that "too big" is cheap to make), `kubus sim`, ingest, reconcile and execute as processes.

- a ReplicaSet of 500 pods with a template 3 KB larger than a bare one: its creates travel cut into
  several actions, and it converges;
- a 1.2 MiB pod reaches the reconciler (compressed on the bus), live and after a restart (its bootstrap
  reads it from KUBUS_STATE): the ReplicaSet that selects it adopts it and creates no replacement;
- an incompressible pod too large even compressed is quarantined, naming it, and the events after it flow;
- a ReplicaSet whose one pod is larger than max_payload: its create travels compressed (an action that
  cannot be published even so is dead-lettered: tests/pipeline/test_payload_relay.py).
"""

from __future__ import annotations

import base64
import hashlib
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from tests.pipeline.harness import Pipeline
from tests.simulation import wait_for

pytestmark = [pytest.mark.slow]

MAX_PAYLOAD = 64 * 1024
IMAGE = "registry.k8s.io/pause:3.9"


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = Pipeline(tmp_path_factory.mktemp("payload"), "--termination-seconds", "0.2", max_payload=MAX_PAYLOAD)

    def up() -> bool:
        p.supervise()
        try:
            nodes = p.sql("select count(distinct name) from observed_events where kind = 'Node'")[0][0]
        except sqlite3.OperationalError:
            return False
        return nodes == 4 and " consuming " in (p.workdir / "execute.log").read_text()

    try:
        p.start_all()
        wait_for(up, timeout=60, interval=0.2, what="the services to start")
        yield p
    finally:
        p.stop()


def namespace(p: Pipeline, name: str) -> str:
    code, body = p.sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert code == 201, body
    return name


def replicaset(p: Pipeline, ns: str, name: str, replicas: int, *, app: str,
               annotations: dict[str, str] | None = None, env: list[dict[str, str]] | None = None) -> None:
    container: dict[str, Any] = {"name": "main", "image": IMAGE, **({"env": env} if env else {})}
    code, body = p.sim.request("POST", f"/apis/apps/v1/namespaces/{ns}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}}, "template": {
            "metadata": {"labels": {"app": app}, **({"annotations": annotations} if annotations else {})},
            "spec": {"containers": [container]}}}})
    assert code == 201, body


def scale(p: Pipeline, ns: str, name: str, replicas: int) -> None:
    code, body = p.sim.request("PATCH", f"/apis/apps/v1/namespaces/{ns}/replicasets/{name}",
                               {"spec": {"replicas": replicas}}, content_type="application/merge-patch+json")
    assert code == 200, body


def big_pod(ns: str, name: str, labels: dict[str, str], size: int, *, compressible: bool) -> dict[str, Any]:
    """A pod of about `size` bytes of JSON, in environment variables (annotations are capped at 256 KiB):
    configuration text that compresses as such text does, or random bytes in base64 that do not."""
    env = []
    per = 4096
    for i in range(size // per):
        if compressible:
            value = "".join(f"option_{j % 40}=enabled;threshold={j % 7};" for j in range(per // 32))[:per]
        else:
            value = base64.b64encode(b"".join(hashlib.sha256(f"{name}/{i}/{j}".encode()).digest()
                                              for j in range(per // 43)))[:per].decode()
        env.append({"name": f"SETTING_{i}", "value": value})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"containers": [{"name": "main", "image": IMAGE, "env": env}]}}


def create(p: Pipeline, pod: dict[str, Any]) -> None:
    code, body = p.sim.request("POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)
    assert code == 201, str(body)[:500]


def owners(pod: dict[str, Any]) -> list[str]:
    return [ref["name"] for ref in pod["metadata"].get("ownerReferences", [])]


def test_a_replicaset_of_500_pods_with_a_larger_template_converges(pipeline: Pipeline) -> None:
    ns = namespace(pipeline, "five-hundred")
    replicaset(pipeline, ns, "web", 500, app="web", annotations={"example.com/padding": "p" * 3000})
    pods = pipeline.wait_for_pods(ns, 500, timeout=240)
    assert all(owners(pod) == ["web"] for pod in pods)
    creates = pipeline.sql("select o.key from outbox o join decisions d on d.id = o.decision_id "
                           "where d.controller_key = ? and o.key like '%/create%'", f"ReplicaSet/{ns}/web")
    assert len(creates) > 1  # cut: 500 such pods are about 1.9 MB, the server takes 64 KiB
    assert pipeline.sql("select count(*) from action_results where reason = 'TooLarge'")[0][0] == 0


def test_a_pod_larger_than_max_payload_reaches_the_reconciler_live_and_after_a_restart(
        pipeline: Pipeline) -> None:
    ns = namespace(pipeline, "large-pod")
    pod = big_pod(ns, "huge", {"app": "huge"}, int(1.2 * 1024 * 1024), compressible=True)
    create(pipeline, pod)
    # seen by the reconciler first: the pod's and the ReplicaSet's watches are independent (upstream's informers
    # too), and a ReplicaSet seen before its orphan creates a pod of its own and then deletes one of the two
    wait_for(lambda: pipeline.sql("select count(*) from observed_events where kind = 'Pod' and namespace = ? "
                                  "and name = 'huge'", ns)[0][0], timeout=60, interval=0.2,
             what="the 1.2 MiB pod in the reconciler's audit trail")
    replicaset(pipeline, ns, "huge", 1, app="huge")  # selects the orphan: adopts it, creates nothing

    def adopted() -> list[dict[str, Any]] | None:
        pods = pipeline.pods(ns)
        return pods if [owners(p) for p in pods] == [["huge"]] else None

    [seen] = wait_for(adopted, timeout=60, interval=0.2, what="the 1.2 MiB pod adopted")
    assert seen["metadata"]["name"] == "huge"
    pipeline.kill("reconcile")
    pipeline.restarts["reconcile"] += 1
    pipeline.start("reconcile")  # bootstraps its cache from KUBUS_STATE, where the pod is compressed
    scale(pipeline, ns, "huge", 2)
    pods = pipeline.wait_for_pods(ns, 2, timeout=60)  # one more: the restarted reconciler counts the huge one
    assert "huge" in {p["metadata"]["name"] for p in pods} and all(owners(p) == ["huge"] for p in pods)
    problems = pipeline.sql("select count(*) from action_results where reason = 'TooLarge'")[0][0]
    assert problems == 0


def test_an_object_too_large_even_compressed_is_quarantined_and_the_rest_flows(pipeline: Pipeline) -> None:
    ns = namespace(pipeline, "incompressible")
    create(pipeline, big_pod(ns, "noise", {"app": "noise"}, 200 * 1024, compressible=False))
    replicaset(pipeline, ns, "after", 2, app="after")
    pipeline.wait_for_pods(ns, 3, timeout=60)  # the ReplicaSet's two, created after the quarantine

    def quarantined() -> list[tuple[Any, ...]]:
        return pipeline.sql("select name from observed_events where kind = 'Pod' and event_type = 'QUARANTINED' "
                            "and namespace = ?", ns)

    # each of its events (created, scheduled, running) is quarantined, and only its
    assert set(wait_for(quarantined, timeout=30, what="the quarantined event")) == {("noise",)}
    log = (pipeline.workdir / "ingest.log").read_text()
    assert f"Pod {ns}/noise" in log and "too large for NATS" in log


def test_a_pod_larger_than_max_payload_is_created_its_action_compressed(pipeline: Pipeline) -> None:
    """A template of ~100 KB of configuration: the ReplicaSet's events travel compressed, and so does the
    CreatePods of its one pod (the relay compresses a row over max_payload that cannot be cut)."""
    ns = namespace(pipeline, "large-template")
    value = "".join(f"option_{j % 40}=enabled;threshold={j % 7};" for j in range(3200))
    replicaset(pipeline, ns, "giant", 1, app="giant", env=[{"name": "CONFIG", "value": value}])
    [pod] = pipeline.wait_for_pods(ns, 1, timeout=60)
    assert owners(pod) == ["giant"] and pod["spec"]["containers"][0]["env"][0]["value"] == value
    assert pipeline.sql("select count(*) from action_results where reason = 'TooLarge'")[0][0] == 0
