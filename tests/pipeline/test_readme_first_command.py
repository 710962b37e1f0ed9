"""The README's first command, run as a new user runs it: twice in a row in the same directory, then the DaemonSet
section's `kubus up --sim --nodes 50` there too (issue 21, item 1). Every `kubus up --sim` is a new cluster: the
second run found the first one's streams in ./.kubus and exited 2 ("the streams ... belong to cluster ...").

The commands are read from README.md, so that this test breaks when the README changes them. Only
KUBUS_METRICS_PORT is added (through the environment, leaving the command line as written): the machine's 8080
may be another test's."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from runtime.ports import free_port
from tests.simulation import Kubectl, wait_for

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parent.parent.parent / "README.md"


def readme_first_command() -> list[str]:
    """`kubus up ...` of the README's first code block (after `.venv/bin/`), as argv after `kubus`."""
    block = re.search(r"```sh\n(.*?)```", README.read_text(), re.S)
    assert block, "README.md has no sh block"
    (command,) = [part.strip() for part in block.group(1).split("&&") if "bin/kubus up" in part]
    argv = shlex.split(command)
    assert argv[0].endswith("bin/kubus"), argv
    return argv[1:]


def readme_daemonset_command() -> list[str]:
    """The `kubus up --sim ...` the README's DaemonSet section says to start."""
    section = README.read_text().split("## Try the DaemonSet controller", 1)[1]
    found = re.search(r"`kubus (up --sim[^`]*)`", section)
    assert found, "the DaemonSet section names no `kubus up --sim ...`"
    return shlex.split(found.group(1))


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


class Up:
    """`kubus up ...` started in `cwd` as a user starts it, stopped with SIGINT (Ctrl-C)."""

    def __init__(self, cwd: Path, argv: list[str], run: int):
        self.port = free_port()
        self.log_path = cwd / f"up-{run}.log"
        self.cwd = cwd
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "kubus", *argv], cwd=cwd, stdout=log,
                                         stderr=subprocess.STDOUT,
                                         env={**os.environ, "KUBUS_METRICS_PORT": str(self.port)})

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_ready(self) -> None:
        wait_for(lambda: self.proc.poll() is not None or get(f"http://127.0.0.1:{self.port}/readyz") == 200,
                 timeout=90, what="kubus up's /readyz to pass")
        assert self.proc.poll() is None, f"kubus up exited with {self.proc.returncode}:\n{self.log()}"

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        assert self.proc.wait(timeout=60) == 0, self.log()
        assert "Traceback" not in self.log(), self.log()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def apply_replicaset(kubectl: Kubectl, name: str, replicas: int) -> None:
    labels = {"app": name}
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels}, "spec": {"containers": [{"name": name, "image": "nginx"}]}}}}))
    wait_for(lambda: len(kubectl.json("get", "pods", "-l", f"app={name}")["items"]) == replicas, timeout=60,
             what=f"the ReplicaSet {name}'s {replicas} pods")


def audit(data_dir: Path, *question: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kubus", "audit", *question, "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=60)


def test_the_first_command_twice_then_the_daemonset_sections(tmp_path: Path) -> None:
    first, daemonsets = readme_first_command(), readme_daemonset_command()
    assert first[:2] == ["up", "--sim"] and "./kubeconfig" in first, first
    assert daemonsets[:2] == ["up", "--sim"] and "50" in daemonsets, daemonsets
    kubectl = Kubectl(tmp_path / "kubeconfig")
    data = tmp_path / ".kubus"  # the default --data-dir, which the README's commands leave as it is

    for run, (argv, app, nodes) in enumerate([(first, "web", 3), (first, "again", 3), (daemonsets, "fifty", 50)]):
        up = Up(tmp_path, argv, run)
        try:
            up.wait_ready()
            assert len(kubectl.json("get", "nodes")["items"]) == nodes
            apply_replicaset(kubectl, app, 2)
            if run:
                # the previous sim's state was moved aside, said in one line, and is still there to audit
                said = [line for line in up.log().splitlines() if "moved aside" in line]
                assert len(said) == 1, up.log()
            up.interrupt()
        finally:
            up.kill()

    previous = sorted((data / "previous").iterdir())
    assert len(previous) == 2, previous  # the first run's state, then the second's
    for old, app in zip(previous, ["web", "again"], strict=True):
        assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f-]{36}", old.name), old.name  # when, and whose cluster
        answer = audit(old, "controller", f"default/{app}", "-o", "wide")  # reasons in full
        assert answer.returncode == 0, answer.stderr
        assert "too few replicas: creating 2" in answer.stdout, answer.stdout
    # the live state is the last run's alone: no earlier cluster's decisions mixed in
    answer = audit(data, "controller", "default/web")
    assert answer.returncode == 3, answer.stdout + answer.stderr  # not in the trail
    assert audit(data, "controller", "default/fifty").returncode == 0
