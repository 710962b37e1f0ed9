"""Alembic environment for kubus, async.

`store.migrating` hands over a connection of kubus's own engine (config.attributes["connection"]);
without one (a bare `alembic` invocation with sqlalchemy.url set) an async engine is made here
from the URL, with the store's URL mapping and SQLite pragmas.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from store.tables import metadata

config = context.config


def run_migrations(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata)
    with context.begin_transaction():
        context.run_migrations()


async def run_on_own_engine(url: str) -> None:
    from store.engine import create_engine
    from store.urls import resolve

    engine = create_engine(resolve(url, "."))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(run_migrations)
    finally:
        await engine.dispose()


def main() -> None:
    url = config.get_main_option("sqlalchemy.url")
    if context.is_offline_mode():
        # `--sql`: print the DDL for a DBA to apply instead of running it
        context.configure(url=url, target_metadata=metadata, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
    elif url:
        asyncio.run(run_on_own_engine(url))
    else:
        raise RuntimeError("kubus migrations need a connection or sqlalchemy.url; use `kubus db upgrade`")


main()
