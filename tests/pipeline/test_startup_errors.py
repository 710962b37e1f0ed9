"""A dependency that is down at start, or a port already taken, gives one line saying which and how to fix it,
and exit 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.natsserver import EmbeddedNats
from runtime.ports import free_port
from tests.simulation import wait_for


def kubus(*args: str, metrics_port: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kubus", *args, "--metrics-port", str(metrics_port)],
                          capture_output=True, text=True, timeout=60)


def test_nats_down_at_start(tmp_path: Path) -> None:
    """`kubus reconcile` with no NATS behind --nats-url names the URL and the fix."""
    url = f"nats://127.0.0.1:{free_port()}"
    result = kubus("reconcile", "--nats-url", url, "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith(f"kubus reconcile: cannot reach NATS at {url}"), result.stderr
    assert "omit --nats-url to run an embedded one" in result.stderr
    assert "Traceback" not in result.stderr


async def test_database_down_at_start(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    """`kubus reconcile` with a PostgreSQL URL nothing answers names the database and the flag."""
    port = free_port()
    result = kubus("reconcile", "--nats-url", nats_server.url, "--data-dir", str(tmp_path),
                   "--db-url", f"postgresql://kubus@127.0.0.1:{port}/kubus")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"kubus reconcile: cannot connect to PostgreSQL at 127.0.0.1:{port}/kubus"), lines
    assert "--db-url" in lines[-1]
    assert "Traceback" not in result.stderr


def test_metrics_port_in_use(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    """`kubus reconcile` whose --metrics-port another process holds names the port and the flag (it was a
    traceback from aiohttp's bind)."""
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = kubus("reconcile", "--nats-url", nats_server.url, "--data-dir", str(tmp_path), metrics_port=port)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == (f"kubus reconcile: cannot serve /metrics, /healthz and /readyz on 127.0.0.1:{port}: "
                         "address already in use (choose another with --metrics-bind-address HOST:PORT or "
                         "--metrics-port PORT, env KUBUS_METRICS_BIND_ADDRESS or KUBUS_METRICS_PORT; 0 serves none)"
                         ), lines
    assert "Traceback" not in result.stderr


def test_a_second_kubus_on_a_data_directory_in_use(tmp_path: Path) -> None:
    """Two kubus with the embedded nats-server on one data directory would run two nats-servers on one store (and
    `kubus up --sim` would move state aside from under the first): the second exits 2, naming the first's pid."""
    data = tmp_path / "data"
    first = subprocess.Popen([sys.executable, "-m", "kubus", "reconcile", "--data-dir", str(data), "--metrics-port",
                              "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: first.poll() is not None or b"Server is ready" in _read(data / "nats" / "nats-server.log"),
                 timeout=60, what="the first kubus's embedded nats-server")
        assert first.poll() is None, first.communicate()[1]
        result = kubus("reconcile", "--data-dir", str(data))
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines()[-1] == (
            f"kubus reconcile: another kubus (pid {first.pid}) is running on data directory {data}, its embedded "
            "nats-server's streams and its database: stop it, or give this one another --data-dir (or "
            "KUBUS_DATA_DIR)"), result.stderr
        assert first.poll() is None  # and the first runs on
    finally:
        first.terminate()
        assert first.wait(timeout=30) == 0


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


# --- every command's start-up failures against the README's exit-status table (issue 21, item 5) ----------------
#
# 2: a dependency missing at start, or bad start-up input; one line on stderr naming what is wrong. Each case is
# (argv after `kubus`, the text its last stderr line holds); `{tmp}` is the test's directory, `{nats}` a NATS URL
# that answers, `{nonats}` and `{nodb}` ones nothing answers at.

NOT_YAML = "clusters: [unclosed\n"
NO_CONTEXT = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\ncurrent-context: ''\n"

STARTUP_FAILURES = [
    pytest.param(["ingest", "--kubeconfig", "{tmp}/missing"], "cannot use the kubeconfig at {tmp}/missing",
                 id="ingest-missing-kubeconfig"),
    pytest.param(["execute", "--kubeconfig", "{tmp}/missing"], "cannot use the kubeconfig at {tmp}/missing",
                 id="execute-missing-kubeconfig"),
    pytest.param(["up", "--kubeconfig", "{tmp}/missing"], "cannot use the kubeconfig at {tmp}/missing",
                 id="up-missing-kubeconfig"),
    pytest.param(["ingest", "--kubeconfig", "{tmp}/garbage"], "cannot use the kubeconfig at {tmp}/garbage",
                 id="ingest-invalid-kubeconfig"),
    pytest.param(["execute", "--kubeconfig", "{tmp}/empty", "--context", "nope"], "with context 'nope'",
                 id="execute-unknown-context"),
    pytest.param(["reconcile", "--lease-ttl", "0"], "--lease-ttl", id="reconcile-bad-flag"),
    pytest.param(["reconcile", "--data-dir", "{tmp}/garbage/data"], "cannot create data directory",
                 id="reconcile-data-dir-not-creatable"),
    pytest.param(["reconcile", "--nats-url", "{nonats}"], "cannot reach NATS at {nonats}", id="reconcile-no-nats"),
    pytest.param(["sim", "--nodes-file", "{tmp}/missing"], "{tmp}/missing", id="sim-missing-nodes-file"),
    pytest.param(["sim", "--port", "{taken}"], "address already in use", id="sim-port-taken"),
    pytest.param(["status", "--data-dir", "{tmp}/nothing"], "no kubus database in {tmp}/nothing",
                 id="status-no-database"),
    pytest.param(["status", "--db-url", "{nodb}"], "cannot connect to PostgreSQL", id="status-database-down"),
    pytest.param(["db", "upgrade", "--db-url", "{nodb}"], "cannot connect to PostgreSQL", id="db-upgrade-down"),
    pytest.param(["db", "current", "--db-url", "{nodb}"], "cannot connect to PostgreSQL", id="db-current-down"),
    pytest.param(["db", "prune", "--older-than", "7d", "--db-url", "{nodb}"], "cannot connect to PostgreSQL",
                 id="db-prune-down"),
    pytest.param(["streams", "ensure"], "no --nats-url", id="streams-ensure-no-url"),
    pytest.param(["streams", "ensure", "--nats-url", "{nonats}"], "cannot reach NATS at {nonats}",
                 id="streams-ensure-no-nats"),
    pytest.param(["audit", "timeline", "ds/agent", "--db-url", "{nodb}"], "cannot connect to PostgreSQL",
                 id="audit-timeline-database-down"),
    pytest.param(["audit", "timeline", "ds/agent", "--data-dir", "{tmp}/nothing"], "no kubus database at",
                 id="audit-timeline-no-database"),
    pytest.param(["replay", "--db-url", "{nodb}", "--nats-url", "{nats}"], "cannot connect to PostgreSQL",
                 id="replay-database-down"),
    pytest.param(["events", "export", "--db-url", "{nodb}", "--nats-url", "{nats}"], "cannot connect to PostgreSQL",
                 id="events-export-database-down"),
    pytest.param(["events", "import", "{tmp}/missing", "--data-dir", "{tmp}/d", "--nats-url", "{nats}"],
                 "{tmp}/missing", id="events-import-missing-file"),
    pytest.param(["audit", "failures", "--db-url", "{nodb}"], "cannot connect to PostgreSQL",
                 id="audit-database-down"),
]
SERVICES = {"ingest", "reconcile", "execute", "up"}


@pytest.mark.parametrize(("argv", "said"), STARTUP_FAILURES)
async def test_start_up_failures_exit_2_with_one_line(nats_server: EmbeddedNats, tmp_path: Path, argv: list[str],
                                                      said: str) -> None:
    (tmp_path / "garbage").write_text(NOT_YAML)
    (tmp_path / "empty").write_text(NO_CONTEXT)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        values = {"tmp": str(tmp_path), "nats": nats_server.url, "nonats": f"nats://127.0.0.1:{free_port()}",
                  "nodb": f"postgresql://kubus@127.0.0.1:{free_port()}/kubus", "taken": str(taken.getsockname()[1])}
        args = [arg.format(**values) for arg in argv]
        if args[0] in SERVICES:
            if "--nats-url" not in args and "--data-dir" not in args:
                args += ["--nats-url", nats_server.url]
            if "--data-dir" not in args:
                args += ["--data-dir", str(tmp_path / "data")]
            args += ["--metrics-port", "0"]
        result = subprocess.run([sys.executable, "-m", "kubus", *args], capture_output=True, text=True, timeout=90,
                                env={k: v for k, v in os.environ.items() if not k.startswith("KUBUS_")})
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert lines, result.stdout
    assert said.format(**values) in lines[-1], lines
    assert "Traceback" not in result.stderr, result.stderr
