"""Fixtures for the store's contract suite: every test runs on SQLite and on PostgreSQL.

PostgreSQL is the run's server (the `pg_admin_url` fixture, tests/postgres.py); the suite creates a
database with a random name for the session and drops it at the end. A server that does not answer
makes the PostgreSQL tests error, never skip.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from store.engine import Store, open_store, upgrade
from store.leases import LeaseClock
from store.tables import metadata
from tests.postgres import fresh_database
from tests.store.builders import FakeClock


@pytest.fixture(scope="session")
def pg_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped afterwards."""
    with fresh_database(pg_admin_url) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'kubus.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def lease_clock() -> LeaseClock:
    """What the store measures leases against: PostgreSQL's clock, as in production. A module whose tests
    move a FakeClock through lease expiries overrides it with "local" (its keepers' clock, on PostgreSQL too)."""
    return "database"


@pytest.fixture
async def store(backend: str, db_url: str, tmp_path: Path, clock: FakeClock,
                lease_clock: LeaseClock) -> AsyncIterator[Store]:
    """An empty, migrated store (SQLite: a new file; PostgreSQL: the session database, emptied)."""
    if backend == "postgresql":
        await upgrade(db_url, str(tmp_path))
    opened = await open_store(db_url, str(tmp_path), clock=clock, lease_clock=lease_clock)
    try:
        if backend == "postgresql":
            async with opened.engine.begin() as conn:
                names = ", ".join(t.name for t in metadata.sorted_tables)
                await conn.execute(sa.text(f"TRUNCATE {names} RESTART IDENTITY"))
        yield opened
    finally:
        await opened.close()
