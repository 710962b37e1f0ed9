"""What the README's test command needs on a fresh machine: PostgreSQL (the tests start their own when none
answers, tests/postgres.py) and kubectl (its absence fails each kubectl-driven module once, saying what to
install, tests/conftest.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
import sqlalchemy as sa

from tests import postgres
from tests.simulation import KUBECTL_MISSING

ROOT = Path(__file__).parent.parent


async def _setting(url: str, name: str) -> str:
    conn = await asyncpg.connect(url, timeout=10)
    try:
        return str(await conn.fetchval(f"SHOW {name}"))
    finally:
        await conn.close()


def test_forced_embedded_postgresql_serves_a_kubus_process_and_is_removed(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    """KUBUS_TEST_PG=embedded starts a server of the run's own even where another is named; a kubus process
    migrates a database on it through its URL; leaving stops it and deletes its data."""
    monkeypatch.setenv(postgres.MODE_VARIABLE, postgres.EMBEDDED)
    monkeypatch.setenv(postgres.URL_VARIABLE, "postgresql://postgres@127.0.0.1:1/ignored")
    with postgres.server() as admin_url:
        admin = sa.make_url(admin_url)
        assert (admin.host, admin.database) == ("127.0.0.1", "postgres") and admin.port not in (1, 5432)
        data_directory = Path(asyncio.run(_setting(admin_url, "data_directory")))
        assert data_directory.is_dir()
        with postgres.fresh_database(admin_url) as db_url:
            result = subprocess.run([sys.executable, "-m", "kubus", "db", "upgrade", "--db-url", db_url,
                                     "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, result.stderr
            assert result.stdout.startswith("kubus db upgrade: schema at revision "), result.stdout
    assert not data_directory.exists()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", admin.port or 0), timeout=5):
        pass


def test_the_url_variable_names_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(postgres.MODE_VARIABLE, raising=False)
    monkeypatch.setenv(postgres.URL_VARIABLE, "postgresql://kubus@db.example:6543/admin")
    with postgres.server() as url:
        assert url == "postgresql://kubus@db.example:6543/admin"


def test_an_unknown_mode_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(postgres.MODE_VARIABLE, "local")
    with pytest.raises(pytest.fail.Exception) as info, postgres.server():
        pass
    assert str(info.value) == "KUBUS_TEST_PG='local': the only value is 'embedded' (or unset)"


def test_without_kubectl_each_kubectl_module_fails_once_saying_what_to_install(tmp_path: Path) -> None:
    """No tracebacks, no setup error per test: one failure per module, with the line that says how to get kubectl,
    and the run fails."""
    modules = ["tests/e2e/test_kubectl.py", "tests/pipeline/test_daemonset.py"]
    result = subprocess.run([sys.executable, "-m", "pytest", *modules, "-p", "no:cacheprovider", "-q"],
                            cwd=ROOT, env={**os.environ, "PATH": str(tmp_path)},  # an empty directory: no kubectl
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line.split(" - ")[0] for line in result.stdout.splitlines() if line.startswith("FAILED ")]
    assert failed == [f"FAILED {module}::kubectl" for module in modules], result.stdout
    # The failures section, not the summary: pytest shortens summary lines to the terminal's width except where
    # it sees CI set (the CI machine), so counting the whole output gave 2 here and 4 there.
    failures = result.stdout.split("short test summary info")[0]
    assert failures.count(KUBECTL_MISSING) == len(modules), result.stdout
    assert "Traceback" not in result.stdout and "ERROR" not in result.stdout, result.stdout


def test_ci_runs_the_readmes_test_command_word_for_word() -> None:
    """CI runs what a newcomer runs: `.ci/run` holds the README's test command verbatim, and that command builds
    (or finds) the real control plane before pytest, so tests/controlplane never meet a machine without it."""
    readme = (ROOT / "README.md").read_text().split("Test it (the whole suite, as CI runs it):", 1)[1]
    command = readme.split("```sh\n", 1)[1].split("\n```", 1)[0].strip()
    assert "\n" not in command, command
    assert "kubus controlplane build" in command.split("&& .venv/bin/python -m pytest")[0], command
    assert command in (ROOT / ".ci" / "run").read_text().splitlines(), ".ci/run does not run the README's command"
