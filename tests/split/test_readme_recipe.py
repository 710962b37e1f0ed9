"""The README's by-hand split recipe ("Run it split"), run as written on one host (issue 21, item 2): every line of
its code block, read from README.md so that this test breaks when the README changes, each long-running command a
process of its own in one directory, as a user's shells would be. Before, every `kubus reconcile` and `kubus
execute` exited 2 on `0.0.0.0:8080: address already in use` (ingest held it), and nothing said how to start the
NATS the recipe names.

What is swapped, and only that: the database URL for a fresh database of the run's PostgreSQL, and every port the
block names (NATS's, each service's metrics port) for a free one, consistently, since this machine's 4222 and 8080
may be someone else's."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

import pytest

from runtime.ports import free_port
from tests import postgres
from tests.simulation import Kubectl, wait_for

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parent.parent.parent / "README.md"
VENV_BIN = Path(sys.executable).parent  # what `. .venv/bin/activate` puts first on PATH


def recipe() -> str:
    section = README.read_text().split("The same by hand", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README.md's by-hand recipe has no sh block"
    return block.group(1)


def localised(block: str, db_url: str) -> str:
    """The block with the database URL and every port it names swapped for this run's."""
    ports = set(re.findall(r"(?:-p |--metrics-port |127\.0\.0\.1:)(\d+)\b", block))
    chosen: set[int] = set()
    for port in ports:
        while (new := free_port()) in chosen or str(new) in ports:  # each its own
            pass
        chosen.add(new)
        block = re.sub(rf"(?<!\d){port}(?!\d)", str(new), block)
    block, n = re.subn(r"KUBUS_DB_URL=\S+", f"KUBUS_DB_URL={db_url}", block)
    assert n == 1, block
    return block


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


class Shells:
    """The user's shells: one environment (after the block's `activate` and `export`), one process per long-running
    command, each logging to a file of its own."""

    def __init__(self, cwd: Path):
        self.cwd = cwd
        self.env = dict(os.environ)
        self.env.pop("KUBECONFIG", None)
        self.procs: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []

    def argv(self, line: str) -> list[str]:
        words = shlex.split(line)
        found = shutil.which(words[0], path=self.env["PATH"])
        assert found, f"{words[0]} is not on the PATH the recipe set up: {line}"
        return [found, *words[1:]]

    def run(self, line: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.argv(line), cwd=self.cwd, env=self.env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        return done

    def start(self, line: str) -> subprocess.Popen[bytes]:
        log = open(self.cwd / f"{len(self.procs)}-{shlex.split(line)[0]}.log", "wb")  # noqa: SIM115 - closed in stop
        proc = subprocess.Popen(self.argv(line), cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((line, proc, log))
        words = shlex.split(line)
        if words[0] == "nats-server":
            port = int(words[words.index("-p") + 1])
            self.wait(line, proc, lambda: answers(port), "nats-server to listen")
        elif words[:2] == ["kubus", "sim"]:
            kubeconfig = self.cwd / words[words.index("--kubeconfig") + 1]
            self.wait(line, proc, kubeconfig.exists, "the sim's kubeconfig")
        elif "--metrics-port" in words:
            port = int(words[words.index("--metrics-port") + 1])
            self.wait(line, proc, lambda: healthy(port), f"{line} to serve /healthz")
        return proc

    def wait(self, line: str, proc: subprocess.Popen[bytes], ready: object, what: str) -> None:
        assert callable(ready)
        wait_for(lambda: proc.poll() is not None or ready(), timeout=90, what=what)
        self.assert_running(line, proc)

    def assert_running(self, line: str, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is not None:
            raise AssertionError(f"`{line}` exited with {proc.returncode}:\n{self.log_of(proc)}")

    def log_of(self, proc: subprocess.Popen[bytes]) -> str:
        (log,) = [log for _, p, log in self.procs if p is proc]
        log.flush()
        return Path(log.name).read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for _, proc, _ in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc, log in reversed(self.procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def test_the_split_recipe_runs_as_written_on_one_host(tmp_path: Path, pg_admin_url: str) -> None:
    with postgres.fresh_database(pg_admin_url, "kubus_recipe") as db_url:
        block = localised(recipe(), db_url)
        shells = Shells(tmp_path)
        status: subprocess.CompletedProcess[str] | None = None
        try:
            for line in (raw.strip() for raw in block.splitlines()):
                if not line or line.startswith("#"):
                    continue
                if line == ". .venv/bin/activate":
                    shells.env["PATH"] = f"{VENV_BIN}{os.pathsep}{shells.env['PATH']}"
                elif line.startswith("export "):
                    for assignment in shlex.split(line)[1:]:
                        name, _, value = assignment.partition("=")
                        shells.env[name] = value
                elif line == "kubus status":
                    status = shells.run(line)
                else:  # a long-running command, after the ones it waits for (`a && b`)
                    *first, last = (part.strip() for part in line.split("&&"))
                    for command in first:
                        shells.run(command)
                    shells.start(last)
            kubectl = Kubectl(tmp_path / shells.env["KUBECONFIG"])
            labels = {"app": "web"}
            kubectl("apply", "-f", "-", input=json.dumps({
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
                "spec": {"replicas": 3, "selector": {"matchLabels": labels}, "template": {
                    "metadata": {"labels": labels}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))
            try:
                wait_for(lambda: kubectl.json("get", "rs", "web")["status"].get("readyReplicas") == 3, timeout=90,
                         what="the ReplicaSet web's 3 pods ready")
            except AssertionError:
                logs = "\n".join(f"--- {line} (exit {proc.poll()})\n{shells.log_of(proc)}"
                                  for line, proc, _ in shells.procs)
                raise AssertionError(f"the ReplicaSet did not converge; the processes' logs:\n{logs}") from None
            for line, proc, _ in shells.procs:  # nobody died on the way (a taken port, a missing NATS)
                shells.assert_running(line, proc)
            # the recipe's `kubus status`, once more now that the reconcilers have their partitions
            status = shells.run("kubus status")
        finally:
            shells.stop()
    assert status is not None, "the recipe ends with no `kubus status`"
    assert "MEMBERS (3 live" in status.stdout, status.stdout
    for instance in ("reconciler-a", "reconciler-b", "reconciler-c"):
        assert re.search(rf"^{instance}\s+live\s", status.stdout, re.M), status.stdout
