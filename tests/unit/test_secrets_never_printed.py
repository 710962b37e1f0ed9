"""No password reaches stdout or stderr: a failing service, `kubus status` (text and JSON), `kubus db` with a URL
it cannot parse, and `kubus db --help` (which suggests PGPASSWORD / PGPASSFILE, not USER:PASSWORD)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from messages import subjects
from runtime.bus import NatsUnavailable, connect, connected
from runtime.natsserver import EmbeddedNats
from runtime.ports import free_port

SECRET = "s3cr3t-pw"


def kubus(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kubus", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_failing_ingest_does_not_print_the_nats_password(tmp_path: Path, log_format: str) -> None:
    url = f"nats://u:{SECRET}@127.0.0.1:{free_port()}"
    done = kubus("ingest", "--nats-url", url, "--data-dir", str(tmp_path), "--metrics-port", "0",
                 "--log-level", "debug", "--log-format", log_format)
    assert done.returncode != 0
    assert SECRET not in done.stdout + done.stderr
    assert "cannot reach NATS at nats://127.0.0.1:" in done.stderr, done.stderr  # the server, not who asked


async def test_nats_unavailable_names_the_server_not_the_token() -> None:
    url = f"nats://{SECRET}@127.0.0.1:{free_port()},nats://u:{SECRET}@127.0.0.1:{free_port()}"
    with pytest.raises(NatsUnavailable) as refused:
        await connect(url, "test", timeout=10)
    assert SECRET not in str(refused.value)
    assert "nats://127.0.0.1:" in str(refused.value)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    done = kubus("db", "upgrade", "--data-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    return tmp_path


@pytest.mark.parametrize("reachable", [False, True], ids=["nats-down", "nats-up"])
async def test_status_does_not_print_the_nats_password(data_dir: Path, nats_server: EmbeddedNats,
                                                       reachable: bool) -> None:
    port = nats_server.port if reachable else free_port()
    if reachable:  # kubus's streams there, so that the text shows the URL it reached
        async with connected(nats_server.url, "setup", prefix=subjects.PREFIX, partitions=subjects.DEFAULT_PARTITIONS):
            pass
    url = f"nats://u:{SECRET}@127.0.0.1:{port}"
    text = kubus("status", "--data-dir", str(data_dir), "--nats-url", url)
    as_json = kubus("status", "--data-dir", str(data_dir), "--nats-url", url, "--json")
    for done in (text, as_json):
        assert done.returncode == 0, done.stderr
        assert SECRET not in done.stdout + done.stderr
    assert json.loads(as_json.stdout)["nats"]["url"] == f"nats://u:***@127.0.0.1:{port}"
    assert f"127.0.0.1:{port}" in text.stdout  # the server is named (its user hidden where the URL is shown)


@pytest.mark.parametrize("url", [f"postgresql://kubus:{SECRET}@db:notaport/kubus", f"kubus:{SECRET}@db/kubus",
                                 f"postgresql://kubus:{SECRET}@db/kubus?sslmode=bogus"])
def test_a_database_url_that_does_not_parse_is_not_printed(tmp_path: Path, url: str) -> None:
    done = kubus("db", "current", "--db-url", url, "--data-dir", str(tmp_path))
    assert done.returncode == 2  # bad input: did not start (runtime/exitcodes.py)
    assert SECRET not in done.stdout + done.stderr
    assert done.stderr.startswith("kubus db current: "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [["db", "upgrade"], ["reconcile"], ["status"]])
def test_help_keeps_passwords_off_the_command_line(command: list[str]) -> None:
    done = kubus(*command, "--help")
    assert done.returncode == 0
    helptext = " ".join(done.stdout.split())
    assert "PASSWORD@" not in helptext
    assert "PGPASSWORD" in helptext and "PGPASSFILE" in helptext
    assert "sslmode" in helptext
