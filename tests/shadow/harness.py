"""Shadow mode end to end: an acting controller and a shadow kubus beside it, on one cluster.

The acting controller is a parameter (:class:`Acting`): a normal, acting `kubus up` on `kubus sim`
(:class:`KubusActing`), under a --prefix and a data directory of its own, or the real kube-controller-manager
with its own DaemonSet and ReplicaSet controllers (`UpstreamActing` in tests/shadow/test_shadow.py; see
docs/shadow.md, "Testing against kube-controller-manager").

The shadow (:class:`Shadow`) is `kubus up --shadow` against the same kubeconfig, with its own embedded NATS
and SQLite in its data directory; a `mutation` (tests/shadow/mutations.py) changes one rule of its controllers
in its process only, for the tests that the report catches a changed rule."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

from runtime.ports import free_port
from tests.simulation import wait_for

WINDOW = "3s"  # the shadow's comparison window in these tests: the acting kubus answers within it on a sim


class Acting(Protocol):
    """The controller that acts on the cluster, beside which the shadow runs."""

    name: str

    def start(self, kubeconfig: Path) -> None: ...

    def stop(self) -> None: ...

    def logs(self) -> str: ...


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


class _Process:
    def __init__(self, workdir: Path, name: str):
        self.workdir = workdir
        self.name = name
        self.data_dir = workdir / name
        self.log_path = workdir / f"{name}.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self, argv: list[str]) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_for(lambda: self._ready(), timeout=60, what=f"{self.name} to be ready")

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.logs()}")
        return _get(f"http://127.0.0.1:{self.port}/readyz")[0] == 200

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metric(self, name: str, **labels: str) -> float:
        status, text = _get(f"http://127.0.0.1:{self.port}/metrics")
        assert status == 200, text
        return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
                   if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()))


class KubusActing(_Process):
    """A normal kubus (ingest, reconciler, executor in one `kubus up`) acting on the cluster."""

    def __init__(self, workdir: Path):
        super().__init__(workdir, "acting")

    def start(self, kubeconfig: Path) -> None:
        self._start([sys.executable, "-m", "kubus", "up", "--kubeconfig", str(kubeconfig), "--data-dir",
                     str(self.data_dir), "--prefix", "acting", "--metrics-port", str(self.port)])


class Shadow(_Process):
    """`kubus up --shadow` beside the acting controller; with `mutation`, one rule changed in its process."""

    def __init__(self, workdir: Path, mutation: str | None = None):
        super().__init__(workdir, "shadow")
        self.mutation = mutation

    def start(self, kubeconfig: Path) -> None:
        argv = ["up", "--shadow", "--shadow-window", WINDOW, "--kubeconfig", str(kubeconfig), "--data-dir",
                str(self.data_dir), "--prefix", "shadow", "--metrics-port", str(self.port)]
        if self.mutation is None:
            self._start([sys.executable, "-m", "kubus", *argv])
        else:
            code = (f"import sys; from tests.shadow import mutations; mutations.apply({self.mutation!r}); "
                    "from kubus.cli import main; sys.exit(main(sys.argv[1:]))")
            self._start([sys.executable, "-c", code, *argv])

    def report(self, *args: str) -> tuple[int, dict[str, Any]]:
        """`kubus shadow report -o json` on the shadow's store: its exit code and the report."""
        result = subprocess.run([sys.executable, "-m", "kubus", "shadow", "report", "-o", "json", "--data-dir",
                                 str(self.data_dir), "--prefix", "shadow", *args], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode in (0, 3), result.stderr  # agreement, or a divergence
        return result.returncode, json.loads(result.stdout)

    def text_report(self, *args: str) -> str:
        result = subprocess.run([sys.executable, "-m", "kubus", "shadow", "report", "--data-dir", str(self.data_dir),
                                 "--prefix", "shadow", *args], capture_output=True, text=True, timeout=60)
        assert result.returncode in (0, 3), result.stderr  # agreement, or a divergence
        return result.stdout

    def settled(self) -> dict[str, Any]:
        """The report once every window has closed: the shadow has decided on everything the acting controller
        did, and a window's worth of quiet has passed after the last act."""
        def closed() -> dict[str, Any] | None:
            _, report = self.report()
            return report if report["open_windows"] == 0 and report["objects"] else None

        return wait_for(closed, timeout=60, interval=0.5, what="the shadow's windows to close")
