"""The audit suite runs on SQLite and PostgreSQL, with the store suite's fixtures (tests/store/conftest.py),
and a scripted history (tests/audit/scenario.py) written into the store."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kubus import audit_command
from kubus.cli import build_parser
from store.engine import Store
from tests.audit.scenario import Scenario, build
from tests.store.builders import FakeClock
from tests.store.conftest import backend, clock, db_url, lease_clock, pg_url, store

__all__ = ["backend", "clock", "db_url", "history", "kubus_audit", "lease_clock", "pg_url", "store"]


@pytest.fixture
async def history(store: Store, clock: FakeClock) -> Scenario:
    """The store with the scenario's history in it."""
    return await build(store, clock)


Audit = Callable[..., tuple[int, str, str]]
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)  # what "--since 1h" counts back from


@pytest.fixture
def kubus_audit(history: Scenario, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Audit:
    """Runs `kubus audit ARGS` against the scenario's database; (exit code, stdout, stderr)."""
    def run(*argv: str, now: datetime = NOW) -> tuple[int, str, str]:
        args = build_parser().parse_args(["audit", *argv, "--db-url", db_url, "--data-dir", str(tmp_path)])
        code = audit_command.run(args, now=lambda: now)
        out, err = capsys.readouterr()
        return code, out, err
    return run
