"""A dependency that is down at start, or a port already taken, gives one line saying which and how to fix it,
and exit 2."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from runtime.natsserver import EmbeddedNats, free_port
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
