"""Running `kubus sim` as a separate process for black-box tests, and waiting on conditions."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import queue
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

T = TypeVar("T")


async def until(what: str, check: Callable[[], object], timeout: float = 30.0) -> None:
    """`wait_for` inside a coroutine: polls `check` between turns of the event loop (what it waits for runs there
    meanwhile); fails the test at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, f"not within {timeout:g} s: {what}"
        await asyncio.sleep(0.005)  # polling the condition, up to the deadline


def wait_for(condition: Callable[[], T], timeout: float = 15.0, interval: float = 0.05,
             what: str = "condition") -> T:
    """Polls `condition` until it returns something truthy; fails the test at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = condition()
        except AssertionError as exc:  # a condition may assert to explain what it saw
            last = exc
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last saw: {last!r}")
        time.sleep(interval)


class SimProcess:
    """A `kubus sim` subprocess with its kubeconfig."""

    def __init__(self, workdir: Path, *args: str):
        self.kubeconfig = workdir / "kubeconfig"
        self.log_path = workdir / "sim.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        cmd = [sys.executable, "-m", "kubus", "sim", "--kubeconfig", str(self.kubeconfig), "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: self.kubeconfig.exists() or self._died(), timeout=30, what="the sim to start")
        except BaseException:
            # nobody will stop() a sim whose start failed: left running, it loads the machine the next tests run on
            self.proc.kill()
            self.proc.wait()
            self._log.close()
            raise
        if self.proc.poll() is not None:
            raise RuntimeError(f"kubus sim exited with {self.proc.returncode}: {self.log_path.read_text()}")
        config = yaml.safe_load(self.kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        self.url: str = cluster["server"]
        # with --authz: HTTPS under the sim's own CA, and the admin's bearer token
        self.token: str | None = config["users"][0]["user"].get("token")
        self.ssl: ssl.SSLContext | None = None
        if "certificate-authority-data" in cluster:
            self.ssl = ssl.create_default_context(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())

    def _died(self) -> bool:
        return self.proc.poll() is not None

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json", *, token: str | None = None,
                anonymous: bool = False) -> tuple[int, Any]:
        """A request as the kubeconfig's user (the admin, with --authz), as ``token``'s owner, or with no
        credentials at all when ``anonymous``."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        bearer = None if anonymous else (token or self.token)
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.ssl) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


KUBECTL_MISSING = ("kubectl is not on PATH; put one there (`kubus controlplane build` prints the bin directory "
                   "that holds kubectl v1.36) or run .ci/run, which does")


def kubectl_binary() -> str:
    found = shutil.which("kubectl")
    if not found:
        pytest.fail(KUBECTL_MISSING, pytrace=False)
    return found


class Kubectl:
    def __init__(self, kubeconfig: Path, binary: str | None = None):
        self.binary = binary or kubectl_binary()
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent)}

    def __call__(self, *args: str, input: str | None = None, check: bool = True,
                 timeout: float = 30) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([self.binary, *args], input=input, capture_output=True, text=True,
                                env=self.env, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                                 f"stdout: {result.stdout}\nstderr: {result.stderr}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json").stdout)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([self.binary, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=self.env)


class LineReader:
    """Reads a subprocess's stdout on a thread, so a test can wait for a line with a deadline."""

    def __init__(self, stream: Any):
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: Any) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def read_available(self) -> list[str]:
        """Every line read so far (those arrived since the last call are added without waiting)."""
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                return self.lines
            if line is None:
                self._queue.put(None)  # the end stays visible to `expect`
                return self.lines
            self.lines.append(line)

    def expect(self, predicate: Callable[[str], bool], timeout: float = 15.0, what: str = "a line") -> str:
        """The first unread line for which `predicate` holds; fails the test at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; read: {self.lines!r}")
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"the stream ended while waiting for {what}; read: {self.lines!r}")
            self.lines.append(line)
            if predicate(line):
                return line


def table_rows(output: str) -> list[dict[str, str]]:
    """kubectl's column output as dicts keyed by header, cut at the header's column starts."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0]
    # a column starts where a word follows the line start or a gap of two or more spaces
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 2:i] == "  ")]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    rows = []
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def target_node(pod: dict[str, Any]) -> str:
    """GetTargetNodeName: spec.nodeName, else the node the DaemonSet pinned the pod to."""
    if pod["spec"].get("nodeName"):
        return str(pod["spec"]["nodeName"])
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    return str(terms[0]["matchFields"][0]["values"][0])
