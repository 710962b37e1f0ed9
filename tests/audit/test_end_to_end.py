"""The audit trail of a live pipeline: a ReplicaSet scaled up and down on the sim, then `kubus audit pod`
on one of the pods it deleted names the decision that deleted it, its reason, and the confirming event."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.cluster import RealCluster
from tests.pipeline.harness import Pipeline
from tests.simulation import wait_for

pytestmark = [pytest.mark.slow]

T = TypeVar("T")
NS = "audited"


@pytest.fixture
def pipeline(tmp_path: Path, cluster: RealCluster | None) -> Iterator[Pipeline]:
    p = Pipeline(tmp_path, "--termination-seconds", "0.2", cluster=cluster)
    try:
        p.start_all()

        def up() -> bool:
            p.supervise()  # three services opening a fresh SQLite file at once may find it locked
            try:
                nodes = p.sql("select count(distinct name) from observed_events where kind = 'Node'")[0][0]
            except sqlite3.OperationalError:
                return False
            return bool(nodes == p.expected_nodes() and " consuming " in (p.workdir / "execute.log").read_text())

        until(p, up, "the services to start", timeout=60)
        yield p
    finally:
        p.stop()


def until(p: Pipeline, condition: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    try:
        result = wait_for(condition, timeout=timeout, interval=0.1, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{p.logs()}") from None
    assert result is not None
    return result


def replicaset(replicas: int) -> dict[str, Any]:
    labels = {"app": "web"}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}}


def kubus_audit(p: Pipeline, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kubus", "audit", *argv, "--data-dir", str(p.workdir / "data")],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.real
def test_audit_pod_names_the_decision_that_deleted_it(pipeline: Pipeline) -> None:
    p = pipeline
    p.create_namespace(NS)
    assert p.sim.request("POST", f"/apis/apps/v1/namespaces/{NS}/replicasets", replicaset(3))[0] == 201
    until(p, lambda: len(p.pods(NS)) == 3, "3 pods")
    code, body = p.sim.request("PATCH", f"/apis/apps/v1/namespaces/{NS}/replicasets/web", {"spec": {"replicas": 1}},
                               content_type="application/merge-patch+json")
    assert code == 200, body

    def confirmed_deletes() -> list[tuple[Any, ...]] | None:
        rows = p.sql("select target_name, decision_id from audit_actions where action = 'delete_pod' "
                     "and controller_key = ? and confirmed_by = 'DELETED'", f"ReplicaSet/{NS}/web")
        return rows if len(rows) == 2 else None

    (deleted, decision_id), _ = until(p, confirmed_deletes, "two deletions confirmed by their watch events")

    result = kubus_audit(p, "pod", f"{NS}/{deleted}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"Pod {NS}/{deleted}"
    assert lines[1].startswith(f"  created by ReplicaSet/{NS}/web (decision ")
    assert lines[1].endswith("too few replicas: creating 3")
    assert lines[2].startswith(f"  deleted by ReplicaSet/{NS}/web (decision {decision_id} at ")
    assert lines[2].endswith("too many replicas: deleting 2")
    assert "DELETED #" in result.stdout

    doc = json.loads(kubus_audit(p, "pod", f"{NS}/{deleted}", "--json").stdout)
    [deleting] = [d for d in doc["decisions"] if d["decision_id"] == decision_id]
    assert deleted in deleting["summary"]["deleting"]
    # the event that queued the sync last: the scale-down, or a pod of web changing after it
    assert deleting["trigger_seq"] is not None and deleting["trigger_kind"] in ("ReplicaSet", "Pod")

    unknown = kubus_audit(p, "pod", f"{NS}/web-nope")
    assert (unknown.returncode, unknown.stdout) == (3, "")
    assert unknown.stderr.startswith(f"kubus audit pod: no pod {NS}/web-nope in the audit trail")
