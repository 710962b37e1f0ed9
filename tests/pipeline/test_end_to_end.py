"""The event pipeline end to end, as deployed: nats-server, `kubus sim`, `kubus ingest`,
`kubus reconcile` and `kubus execute` as separate processes, with a ReplicaSet of N pods in a
namespace of its own. Every test ends with exactly N pods: none missing, none duplicated, whatever
was killed or failed on the way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipeline.harness import Pipeline
from tests.simulation import wait_for

PODS = 24

pytestmark = pytest.mark.slow


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    p = Pipeline(tmp_path)
    yield p
    p.stop()


def converged(p: Pipeline, namespace: str, count: int) -> None:
    """Exactly `count` pods, every one created with a recorded succeeded result, and the SQL trail."""
    pods = p.wait_for_pods(namespace, count)
    keys = {pod["metadata"]["annotations"]["kubus.io/idempotency-key"] for pod in pods}
    assert len(keys) == count, "two pods carry the same idempotency key"

    def results_recorded() -> bool:
        p.supervise()
        rows = p.sql("select key from action_results where outcome = 'succeeded' and action = 'create_pods'")
        return keys <= {r[0] for r in rows}

    wait_for(results_recorded, timeout=30, what="a succeeded result for every pod")
    created = p.sql("select t.key from action_targets t join outbox o on o.key = t.action_key "
                    "join decisions d on d.id = o.decision_id where t.action = 'create_pods' "
                    "and d.controller_key = ?", f"ReplicaSet/{namespace}/web")
    assert keys <= {k for (k,) in created}, "every pod was decided in a recorded decision"
    assert len(p.pods(namespace)) == count


def test_pods_appear_with_decisions_actions_and_results_in_sql(pipeline: Pipeline) -> None:
    """A ReplicaSet of N pods gets exactly N; decisions, outbox rows and results are queryable."""
    pipeline.start_all()
    pipeline.ask_for_pods("demo", PODS)
    converged(pipeline, "demo", PODS)
    sent = pipeline.sql("select count(*) from outbox o join decisions d on d.id = o.decision_id "
                        "where o.state = 'sent' and d.controller_key = 'ReplicaSet/demo/web'")
    assert sent[0][0] >= 1
    events = pipeline.sql("select count(*) from observed_events where kind = 'Pod' and namespace = 'demo'")
    assert events[0][0] >= PODS


@pytest.mark.parametrize("service, failpoint", [
    pytest.param("reconcile", "reconciler.after-commit", id="reconciler-between-decision-and-publish"),
    pytest.param("reconcile", "relay.after-publish", id="reconciler-after-publish"),
    pytest.param("execute", "executor.after-apply", id="executor-after-api-call-before-ack"),
    pytest.param("ingest", "ingest.after-publish", id="ingest-mid-batch"),
])
def test_kill_9_mid_batch_loses_and_duplicates_nothing(pipeline: Pipeline, service: str, failpoint: str) -> None:
    """A service killed with SIGKILL at the worst moment and restarted still yields exactly N pods."""
    pipeline.start_all({service: failpoint})
    pipeline.ask_for_pods("crash", PODS)
    wait_for(lambda: pipeline.procs[service].poll() is not None, timeout=30,
             what=f"{service} to hit {failpoint}")
    assert pipeline.procs[service].returncode == -9
    converged(pipeline, "crash", PODS)
    assert pipeline.restarts[service] >= 1


def test_nats_restart_mid_batch(pipeline: Pipeline) -> None:
    """NATS restarted while pods are being created: the services reconnect and finish the job."""
    pipeline.start_all()
    pipeline.ask_for_pods("nats", PODS)
    wait_for(lambda: len(pipeline.pods("nats")) > 0, timeout=30, what="the first pods")
    pipeline.stop_nats()
    pipeline.start_nats()
    converged(pipeline, "nats", PODS)


def test_api_faults_on_a_fifth_of_pod_creates(pipeline: Pipeline) -> None:
    """With 429, 500 and timeouts injected on 20% of pod creates, still exactly N pods."""
    code, body = pipeline.sim.request("PUT", "/sim/faults", {
        "rules": ["pods:create:0.07:429", "pods:create:0.07:500", "pods:create:0.06:timeout-applied"],
        "seed": 3, "timeoutSeconds": 0.5})
    assert code == 200, body
    pipeline.start_all()
    pipeline.ask_for_pods("faults", PODS)
    converged(pipeline, "faults", PODS)
    code, body = pipeline.sim.request("GET", "/sim/faults")
    assert sum(rule["injected"] for rule in body["rules"]) > 0, "no fault was injected"
