"""Fixtures for the store's contract suite: every test runs on SQLite and on PostgreSQL.

PostgreSQL is the server on 127.0.0.1:5432 (override the admin URL with KUBUS_TEST_PG_URL); the
suite creates a database with a random name for the session and drops it at the end. An
unreachable server makes the PostgreSQL tests error, never skip.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
import sqlalchemy as sa

from store.engine import Store, open_store, upgrade
from store.tables import metadata
from tests.store.builders import FakeClock

PG_ADMIN_URL = os.environ.get("KUBUS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN_URL, timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped afterwards."""
    name = f"kubus_test_{secrets.token_hex(6)}"
    try:
        asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"cannot create a test database on PostgreSQL via {PG_ADMIN_URL} ({exc}); the store tests "
                    f"run on PostgreSQL too: start it on 127.0.0.1:5432 or set KUBUS_TEST_PG_URL", pytrace=False)
    yield str(sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False))
    # FORCE: a test that failed before disposing its engine must not keep the database alive
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


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
async def store(backend: str, db_url: str, tmp_path: Path, clock: FakeClock) -> AsyncIterator[Store]:
    """An empty, migrated store (SQLite: a new file; PostgreSQL: the session database, emptied)."""
    if backend == "postgresql":
        await upgrade(db_url, str(tmp_path))
    opened = await open_store(db_url, str(tmp_path), clock=clock)
    try:
        if backend == "postgresql":
            async with opened.engine.begin() as conn:
                names = ", ".join(t.name for t in metadata.sorted_tables)
                await conn.execute(sa.text(f"TRUNCATE {names} RESTART IDENTITY"))
        yield opened
    finally:
        await opened.close()
