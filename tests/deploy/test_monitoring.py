"""deploy/monitoring/: the Grafana dashboard and the alert rules use only metrics kubus serves (issue 24), and the
PrometheusRule is the plain rules file's rules."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runtime.ports import free_port
from tests.pipeline.test_up import get
from tests.simulation import Kubectl, wait_for

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
# PromQL's words that are not metric names: functions are told by the "(" after them
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values)
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)  # grouping labels
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    names = set()
    expr = re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?", "", expr)  # numbers
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        word, rest = match.group(), expr[match.end():].lstrip()
        if rest.startswith("(") or word in KEYWORDS:
            continue
        names.add(word)
    return names


def test_metric_names_are_read_from_promql() -> None:
    assert metric_names('histogram_quantile(0.99, sum by (name, le) (rate(workqueue_work_duration_seconds_bucket'
                        '{name="daemonset"}[5m])))') == {"workqueue_work_duration_seconds_bucket"}
    assert metric_names("max(kubus_partitions) - sum(kubus_reconciler_partitions_held) > 0") == {
        "kubus_partitions", "kubus_reconciler_partitions_held"}
    assert metric_names("x / clamp_min(y, 1e-9) > 0.1") == {"x", "y"}


def rules() -> list[dict[str, str]]:
    return [rule for group in yaml.safe_load((MONITORING / "rules.yaml").read_text())["groups"]
            for rule in group["rules"]]


def expressions() -> dict[str, str]:
    """Every PromQL expression of the dashboard and the rules, by where it is."""
    found = {f"rule {rule['alert']}": rule["expr"] for rule in rules()}
    for panel in json.loads((MONITORING / "dashboard.json").read_text())["panels"]:
        for target in panel["targets"]:
            found[f"panel {panel['title']!r} {target['refId']}"] = target["expr"]
    return found


def test_the_prometheusrule_is_the_rules_file() -> None:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((MONITORING / "rules.yaml").read_text())


def test_the_rules_cover_what_an_operator_is_woken_for() -> None:
    used = {name for rule in rules() for name in metric_names(rule["expr"])}
    for metric in ("kubus_outbox_oldest_pending_seconds", "kubus_stream_lag_messages", "kubus_dead_lettered_total",
                   "kubus_reconciler_partitions_held", "kubus_actions_total", "kubus_ingest_watching",
                   "controller_runtime_reconcile_errors_total", "kubus_stream_fullness_ratio"):
        assert metric in used, metric


def served(exposition: str) -> set[str]:
    """The metric names a /metrics page declares (a histogram's and a counter's series names too)."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            if kind == "counter" and not name.endswith("_total"):
                names.add(f"{name}_total")
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


@pytest.mark.slow
def test_every_metric_the_dashboard_and_the_rules_use_is_served(tmp_path: Path) -> None:
    """`kubus up --sim` (the one process that runs ingest, the reconciler and the executor) with a ReplicaSet
    made: its /metrics serves every metric deploy/monitoring reads."""
    port = free_port()
    kubeconfig = tmp_path / "kubeconfig"
    log = open(tmp_path / "up.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "kubus", "up", "--sim", "--nodes", "2", "--kubelet-delay", "0.05",
                             "--kubeconfig", str(kubeconfig), "--data-dir", str(tmp_path / "data"),
                             "--metrics-bind-address", f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: get(f"{base}/readyz")[0] == 200, timeout=60, what="/readyz to pass")
        kubectl = Kubectl(kubeconfig)
        labels = {"app": "web"}
        kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))
        created = 'kubus_actions_total{action="create_pods",outcome="succeeded"} 2.0'
        wait_for(lambda: created in get(f"{base}/metrics")[1], timeout=30, what="the ReplicaSet's pods created")
        status, exposition = get(f"{base}/metrics")
        assert status == 200
        names = served(exposition)
        missing = {where: sorted(metric_names(expr) - names) for where, expr in expressions().items()
                   if metric_names(expr) - names}
        assert missing == {}
        # the controllers' key queues, named as kube-controller-manager names them
        for name in ("daemonset", "replicaset"):
            assert f'workqueue_adds_total{{name="{name}"}}' in exposition
        assert 'workqueue_depth{name="reconciler"}' not in exposition  # the NATS intake is kubus_reconciler_*
        # ingest's API requests as the executor's: one metric, by host
        assert re.search(r'rest_client_requests_total\{code="200",host="127\.0\.0\.1:\d+",method="GET"\}', exposition)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
