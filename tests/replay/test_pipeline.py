"""Replay end to end: a pipeline run on the sim (nats-server, `kubus sim`, ingest, reconcile and execute as
processes) records a DaemonSet rolling update whose new pods fail, a ReplicaSet scaled up and down, and a
reconciler killed with SIGKILL and restarted in the middle; `kubus events export` writes the history to a
file; `kubus replay --diff` over the file decides exactly what the live reconciler decided, restart
included. Then a test double changes one line of the DaemonSet's rolling-update logic, and the replay's
first divergence is the first decision that line touches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replay import fileformat
from replay.engine import Engine
from tests.cluster import RealCluster
from tests.pipeline.harness import Pipeline
from tests.simulation import wait_for

pytestmark = [pytest.mark.slow]

NAMESPACE = "replay"
FAIL_AFTER = "sim.kubus.io/fail-after-seconds"


@dataclasses.dataclass
class Recording:
    pipeline: Pipeline
    file: Path
    decisions: list[tuple[int, str, str]]  # (id, controller_key, correlation_id), in commit order


def _until(p: Pipeline, condition: Any, what: str, timeout: float = 45.0) -> Any:
    def check() -> Any:
        p.supervise()
        return condition()

    try:
        return wait_for(check, timeout=timeout, interval=0.1, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{p.logs()}") from None


def _sql(p: Pipeline, query: str, *params: Any) -> list[tuple[Any, ...]]:
    try:
        return p.sql(query, *params)
    except sqlite3.OperationalError:  # no database or schema yet, or locked for a moment
        return []


def _create(p: Pipeline, path: str, body: dict[str, Any]) -> None:
    code, answer = p.sim.request("POST", path, body)
    assert code == 201, answer


def _patch(p: Pipeline, path: str, body: dict[str, Any]) -> None:
    code, answer = p.sim.request("PATCH", path, body, content_type="application/merge-patch+json")
    assert code == 200, answer


def _pods(p: Pipeline, app: str) -> list[dict[str, Any]]:
    return [pod for pod in p.pods(NAMESPACE) if (pod["metadata"].get("labels") or {}).get("app") == app]


def _running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Running"
            and not pod["metadata"].get("deletionTimestamp")]


def _kubus(p: Pipeline, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kubus", *args], capture_output=True, text=True, timeout=120)


def _source(p: Pipeline) -> list[str]:
    return ["--nats-url", p.nats_url, "--prefix", p.prefix, "--data-dir", str(p.workdir / "data")]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory, cluster: RealCluster | None) -> Iterator[Recording]:
    """On the sim (4 nodes) or the real control plane (20 kwok nodes; FailingPods fails the new pods there)."""
    workdir = tmp_path_factory.mktemp("replay")
    p = Pipeline(workdir, "--termination-seconds", "0.2", cluster=cluster)
    nodes = p.expected_nodes()
    failing = contextlib.ExitStack()
    try:
        p.start_all()
        _until(p, lambda: _sql(p, "select count(distinct name) from observed_events where kind = 'Node'")
               == [(nodes,)] and " consuming " in (p.workdir / "execute.log").read_text(), "the services to start")
        p.create_namespace(NAMESPACE)
        _create(p, f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets", {
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"containers": [{"name": "agent", "image": "busybox:1"}]}}}})
        _create(p, f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}}})
        _until(p, lambda: len(_running(_pods(p, "agent"))) == nodes and len(_running(_pods(p, "web"))) == 4,
               f"{nodes} agent and 4 web pods running")
        failing.enter_context(p.failing_pods(NAMESPACE))
        # the rolling update: the new pods fail a second after they start, so the DaemonSet deletes and
        # recreates them (with its failed-pod backoff) while the rollout waits for them to be available
        _patch(p, f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/agent", {"spec": {"template": {
            "metadata": {"annotations": {FAIL_AFTER: "1"}},
            "spec": {"containers": [{"name": "agent", "image": "busybox:2"}]}}}})
        _patch(p, f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets/web", {"spec": {"replicas": 2}})

        def failed_pods_deleted() -> int:
            """Pods the DaemonSet deleted so far (old ones of the rollout, failed new ones)."""
            rows = _sql(p, "select summary from decisions where controller_key = ?", f"DaemonSet/{NAMESPACE}/agent")
            return sum(len(json.loads(summary).get("deletes") or ()) for (summary,) in rows)

        _until(p, lambda: failed_pods_deleted() >= 2, "the DaemonSet to delete pods of the rolling update")
        p.kill("reconcile")  # SIGKILL in the middle of it; the supervisor below restarts it
        p.supervise()
        _until(p, lambda: _sql(p, "select count(*) from reconciler_ticks where kind = 'start'") == [(2,)]
               and failed_pods_deleted() >= 6, "the restarted reconciler to go on with the rollout")
        _patch(p, f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets/web", {"spec": {"replicas": 3}})
        _until(p, lambda: len(_running(_pods(p, "web"))) == 3, "web back at 3 pods")
        assert p.terminate("reconcile") == 0
        failing.close()
        file = workdir / "history.jsonl"
        exported = _kubus(p, "events", "export", *_source(p), "--output", str(file))
        assert exported.returncode == 0, exported.stderr
        decisions = [(int(i), str(k), str(c)) for i, k, c in
                     p.sql("select id, controller_key, correlation_id from decisions order by id")]
        yield Recording(p, file, decisions)
    finally:
        failing.close()
        p.stop()


def _load(path: Path) -> Iterator[Any]:
    _, bundles = fileformat.read_file(str(path))
    return bundles


@pytest.mark.real
def test_the_replay_decides_exactly_what_the_reconciler_decided(recording: Recording) -> None:
    result = _kubus(recording.pipeline, "replay", "--from-file", str(recording.file), "--diff", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])["summary"]
    assert summary["divergence"] is None
    assert summary["starts"] == 2, "the SIGKILLed reconciler's restart is in the history"
    assert summary["compared"] == summary["decisions"] == len(recording.decisions)
    lines = recording.file.read_bytes().splitlines()
    assert json.loads(lines[0])["kubus_events"] == fileformat.FORMAT
    assert json.loads(lines[-1])["line"] == "end"
    # the same replay from the store and JetStream, without the file
    live = _kubus(recording.pipeline, "replay", *_source(recording.pipeline), "--diff")
    assert live.returncode == 0, live.stdout + live.stderr
    assert "no divergence" in live.stdout


@pytest.mark.real
def test_a_changed_line_of_the_rolling_update_diverges_at_the_first_decision_it_touches(
        recording: Recording, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test double: maxUnavailable one higher in updatedDesiredNodeCounts' budgets (rollout_budgets, which
    the sync also asks alone when no pod is left to replace). The first decision it changes is the first sync
    that ran a rolling-update step (the step's budget is in its summary)."""
    import reconciler.core.daemonset.rollout as rollout
    import reconciler.core.daemonset.sync as ds_sync

    budgets = rollout.rollout_budgets

    first_rollout = None
    for bundle in _load(recording.file):
        for decision in bundle.decisions or ():
            if isinstance(decision.summary.get("rollout"), dict):
                first_rollout = decision
                break
        if first_rollout is not None:
            break
    assert first_rollout is not None, "no rolling-update step was recorded"
    def bumped(ds: Any, desired: int) -> tuple[int, int]:
        max_surge, max_unavailable = budgets(ds, desired)
        return max_surge, max_unavailable + 1

    monkeypatch.setattr(rollout, "rollout_budgets", bumped)
    monkeypatch.setattr(ds_sync, "rollout_budgets", bumped)
    engine = Engine(compare=True)
    engine.run(_load(recording.file))
    divergence = engine.divergence
    assert divergence is not None
    assert (divergence.correlation_id, divergence.controller_key) == (
        first_rollout.correlation_id, f"DaemonSet/{NAMESPACE}/agent")
    # the step's budget is in both summaries; what the comparison reports first depends on the step: where the
    # budget bound (a loaded run), the replay deleted one pod more, and the actions differ before the summary
    assert (divergence.recorded["summary"]["rollout"]["max_unavailable"],
            divergence.replayed["summary"]["rollout"]["max_unavailable"]) == (1, 2), divergence.what
    assert divergence.what.startswith(("summary.rollout.max_unavailable: recorded 1, replayed 2", "actions")), \
        divergence.what


@pytest.mark.real
def test_explain_shows_each_node_and_the_ranking(recording: Recording) -> None:
    result = _kubus(recording.pipeline, "replay", "--from-file", str(recording.file), "--controller",
                    f"{NAMESPACE}/agent", "--explain")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "node-0" in out and "shouldRun" in out and "shouldContinueRunning" in out
    assert "delete " in out and "(failed)" in out, out[-3000:]
    result = _kubus(recording.pipeline, "replay", "--from-file", str(recording.file), "--controller",
                    f"{NAMESPACE}/web", "--explain")
    assert result.returncode == 0, result.stderr
    assert "too many replicas: deleting 2" in result.stdout
    assert "ranking (upstream's ActivePodsWithRanks" in result.stdout
    assert result.stdout.count("DELETE") >= 2
