"""`kubus up --sim`, the README's first command: one process that runs everything, with its
embedded nats-server and SQLite, serving /metrics, /healthz and /readyz."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from runtime.ports import free_port
from tests.simulation import Kubectl, wait_for

pytestmark = pytest.mark.slow


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


@pytest.mark.parametrize("authz", [pytest.param([], id="open"), pytest.param(["--authz", "rbac"], id="rbac")])
def test_up_sim_converges_and_reports(tmp_path: Path, authz: list[str]) -> None:
    """Everything in one process: kubectl sees the nodes, a ReplicaSet's pods appear, /readyz passes
    and /metrics counts what happened; SIGTERM stops it cleanly. With `--authz rbac` the sim
    authenticates and authorizes, and the pipeline works through the admin's kubeconfig it wrote."""
    port = free_port()
    kubeconfig = tmp_path / "kubeconfig"
    log = open(tmp_path / "up.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "kubus", "up", "--sim", "--nodes", "3", "--kubelet-delay", "0.05",
                             "--kubeconfig", str(kubeconfig), "--data-dir", str(tmp_path / "data"),
                             "--metrics-port", str(port), *authz], stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: get(f"{base}/readyz")[0] == 200, timeout=60, what="/readyz to pass")
        kubectl = Kubectl(kubeconfig)
        assert len(kubectl.json("get", "nodes")["items"]) == 3
        if authz:
            assert "Username    kubernetes-admin" in kubectl("auth", "whoami").stdout
            anonymous = kubectl("get", "nodes", "--token", "nobody", check=False)
            assert "You must be logged in to the server" in anonymous.stderr, anonymous.stderr
        kubectl("create", "namespace", "demo")
        labels = {"app": "web"}
        kubectl("apply", "-n", "demo", "-f", "-", input=json.dumps({
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
            "spec": {"replicas": 4, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))
        wait_for(lambda: len(kubectl.json("get", "pods", "-n", "demo")["items"]) == 4, timeout=30,
                 what="the ReplicaSet's 4 pods")
        status, metrics = get(f"{base}/metrics")
        assert status == 200
        for needle in ('kubus_ingest_events_total{kind="Pod",type="ADDED"}',
                       'controller_runtime_reconcile_total{controller="replicaset",result="success"}',
                       'kubus_actions_total{action="create_pods",outcome="succeeded"} 4.0'):
            assert needle in metrics, needle
        assert get(f"{base}/healthz")[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    assert "Traceback" not in (tmp_path / "up.log").read_text()


def test_ctrl_c_stops_up_without_a_warning(tmp_path: Path) -> None:
    """A terminal's Ctrl-C sends SIGINT to the whole foreground process group. The embedded nats-server was in it,
    went first, and every stop of the README's first command logged `nats: unexpected EOF`, `disconnected;
    reconnecting` and `Connection refused` at WARNING (issue 21, 7); the server runs in a group of its own now,
    and kubus closes its connections (quietly) before it stops the server."""
    port = free_port()
    log_path = tmp_path / "up.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "kubus", "up", "--sim", "--nodes", "1",
                             "--kubeconfig", str(tmp_path / "kubeconfig"), "--data-dir", str(tmp_path / "data"),
                             "--metrics-port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # its own group, as a shell runs a foreground job
    try:
        wait_for(lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 200, timeout=60, what="/readyz to pass")
        before = log_path.stat().st_size
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    after = log_path.read_bytes()[before:].decode()
    assert "stopped" in after, after
    assert [line for line in after.splitlines() if " WARNING " in line or " ERROR " in line] == [], after
