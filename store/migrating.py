"""Alembic, driven from code: no alembic.ini, the migrations/ package as the script location.

The migrations run on a connection of kubus's own engine (alembic's "connection sharing" recipe),
so they see the same URL mapping and SQLite pragmas as the store, and run inside a loop that is
already going.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

import migrations

SCRIPT_LOCATION = Path(migrations.__file__).parent

# Any constant will do: it only has to be the same in every kubus process, so two services
# starting at once against one PostgreSQL migrate one after the other.
_PG_LOCK = 0x6B75627573  # "kubus"


def config(connection: Connection | None = None, url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    cfg.set_main_option("path_separator", "os")
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))  # ConfigParser interpolates %
    cfg.attributes["connection"] = connection
    return cfg


def head() -> str:
    """The newest revision this kubus knows."""
    rev = ScriptDirectory.from_config(config()).get_current_head()
    assert rev is not None, "migrations/versions holds no revision"
    return rev


async def current(engine: AsyncEngine) -> str | None:
    """The database's revision; None if it was never migrated."""
    async with engine.connect() as conn:
        return await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_revision())


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    await _run(engine, lambda c: command.upgrade(config(c), revision))


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    await _run(engine, lambda c: command.downgrade(config(c), revision))


async def _run(engine: AsyncEngine, step: Callable[[Connection], None]) -> None:
    async with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            # take the write lock up front: a second process waits (busy_timeout), then finds
            # the schema at head and does nothing
            await conn.execution_options(kubus_sqlite_begin="IMMEDIATE")
        async with conn.begin():
            if engine.dialect.name == "postgresql":
                await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
            await conn.run_sync(step)
