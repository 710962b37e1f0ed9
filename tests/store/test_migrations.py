"""Migrations: the hand-written revisions build exactly the schema store/tables.py queries."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection

from store import migrating
from store.audit_views import VIEWS, view_metadata
from store.engine import SchemaMismatch, Store, current, open_store, upgrade
from store.tables import metadata

TABLES = {"ingest_checkpoints", "consumer_positions", "expectations", "pod_backoff", "decisions", "outbox",
          "action_results", "observed_events", "reconciler_ticks", "action_targets", "partition_leases",
          "reconciler_members", "stream_identities", "stream_resets", "shadow_acts", "would_do_actions"}


async def table_names(store: Store) -> set[str]:
    async with store.engine.connect() as conn:
        return set(await conn.run_sync(lambda c: sa.inspect(c).get_table_names()))


async def test_migrations_create_every_table(store: Store, db_url: str, tmp_path: Path) -> None:
    """After open (SQLite) or `upgrade` (PostgreSQL) every table exists and the revision is head."""
    assert await table_names(store) == TABLES | {"alembic_version"}
    assert set(metadata.tables) == TABLES
    assert await current(db_url, str(tmp_path)) == migrating.head() == "0008"


async def test_upgrade_twice_is_a_noop(store: Store, db_url: str, tmp_path: Path) -> None:
    """Upgrading an up-to-date database changes nothing and keeps the data."""
    await store.save_checkpoint("pods", "42")
    assert await upgrade(db_url, str(tmp_path)) == "0008"
    assert await upgrade(db_url, str(tmp_path)) == "0008"
    assert await store.checkpoint("pods") == "42"
    assert await table_names(store) == TABLES | {"alembic_version"}


async def test_migrated_schema_matches_the_tables_module(store: Store) -> None:
    """The hand-written migration and store/tables.py agree: columns, types, indexes, constraints."""
    def diff(conn: Connection) -> list[object]:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, metadata))

    async with store.engine.connect() as conn:
        assert await conn.run_sync(diff) == []


async def test_migrated_views_have_the_columns_store_audit_views_queries(store: Store) -> None:
    """The views the migrations create (with SQL of their own) have exactly the columns, in order, of the tables
    store/audit_views.py describes them with for the queries in store/audit.py."""
    def columns(conn: Connection) -> dict[str, list[str]]:
        inspector = sa.inspect(conn)
        return {name: [c["name"] for c in inspector.get_columns(name)] for name in inspector.get_view_names()}

    async with store.engine.connect() as conn:
        assert await conn.run_sync(columns) == {
            name: [c.name for c in view_metadata.tables[name].columns] for name in VIEWS}


async def test_downgrade_then_open(store: Store, backend: str, db_url: str, tmp_path: Path) -> None:
    """From an empty schema: SQLite is migrated on open; PostgreSQL refuses until `kubus db upgrade`."""
    await migrating.downgrade(store.engine, "base")
    assert await table_names(store) == {"alembic_version"}
    if backend == "sqlite":
        reopened = await open_store(db_url, str(tmp_path))
        await reopened.close()
    else:
        with pytest.raises(SchemaMismatch, match=r"has no kubus schema; run `kubus db upgrade`"):
            await open_store(db_url, str(tmp_path))
        await upgrade(db_url, str(tmp_path))
    assert await table_names(store) == TABLES | {"alembic_version"}
