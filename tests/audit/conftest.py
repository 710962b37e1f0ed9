"""The audit suite runs on SQLite and PostgreSQL, with the store suite's fixtures (tests/store/conftest.py),
and a scripted history (tests/audit/scenario.py) written into the store."""

from __future__ import annotations

import pytest

from store.engine import Store
from tests.audit.scenario import Scenario, build
from tests.store.builders import FakeClock
from tests.store.conftest import backend, clock, db_url, lease_clock, pg_url, store

__all__ = ["backend", "clock", "db_url", "history", "lease_clock", "pg_url", "store"]


@pytest.fixture
async def history(store: Store, clock: FakeClock) -> Scenario:
    """The store with the scenario's history in it."""
    return await build(store, clock)
