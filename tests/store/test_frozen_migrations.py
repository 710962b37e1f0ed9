"""The migrations are frozen: each builds the database it built when it was written, whatever the live code has
become since. tests/store/frozen_migrations.json holds what they built before they stopped importing live code
(migrations/versions/0003 once took its views from store.audit_views and its backfill from
reconciler.core.audit_targets and messages.codec), on SQLite and on PostgreSQL:

- the schema after each revision (SQLite: the DDL text it keeps; PostgreSQL: columns, constraints, indexes,
  sequences and views, as its catalogs show them, which do not depend on its version's deparsing);
- the action_targets 0003 derives from outbox rows written before it (every action type, and payloads it
  cannot use), and what the audit views show of them, rows that pin down what the views' SQL does.

Every revision under migrations/versions imports nothing but alembic, SQLAlchemy and the standard library.
"""

from __future__ import annotations

import ast
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from store import migrating
from store.engine import Store

SNAPSHOT = Path(__file__).with_name("frozen_migrations.json")
VERSIONS = Path(migrating.SCRIPT_LOCATION) / "versions"
REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008")
ALLOWED_IMPORTS = {"__future__", "alembic", "sqlalchemy"}


# --- what a migrated database holds -----------------------------------------------------------------------
def _rows(conn: Connection, query: str) -> list[list[Any]]:
    return [list(row) for row in conn.execute(sa.text(query))]


def schema_of(conn: Connection) -> dict[str, Any]:
    """The schema, in a form that compares equal exactly when the database was built the same way."""
    version = _rows(conn, "SELECT version_num FROM alembic_version")
    if conn.dialect.name == "sqlite":
        return {"version": version, "objects": _rows(conn, (
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
            "ORDER BY type, name"))}
    return {
        "version": version,
        "columns": _rows(conn, (
            "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns "
            "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position")),
        "constraints": _rows(conn, (
            "SELECT c.relname, k.conname, k.contype::text, pg_get_constraintdef(k.oid) FROM pg_constraint k "
            "JOIN pg_class c ON c.oid = k.conrelid WHERE c.relnamespace = current_schema()::regnamespace "
            "ORDER BY c.relname, k.conname")),
        "indexes": _rows(conn, (
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "ORDER BY tablename, indexname")),
        "sequences": _rows(conn, (
            "SELECT sequence_name, data_type FROM information_schema.sequences "
            "WHERE sequence_schema = current_schema() ORDER BY sequence_name")),
        "views": _rows(conn, "SELECT viewname FROM pg_views WHERE schemaname = current_schema() ORDER BY viewname"),
    }


async def schemas(engine: AsyncEngine) -> dict[str, Any]:
    """The schema after each revision, upgrading one revision at a time from an empty database."""
    await migrating.downgrade(engine, "base")
    built = {}
    for revision in REVISIONS:
        await migrating.upgrade(engine, revision)
        async with engine.connect() as conn:
            built[revision] = await conn.run_sync(schema_of)
    return built


# --- 0003's backfill and the views, on rows written before it ---------------------------------------------
def _at(second: int) -> datetime:
    return datetime(2026, 11, 23, 5, 12, second, tzinfo=UTC)


_COMMON = {"decision_id": 1, "controller": "ReplicaSet/shop/web", "issued_at": "2026-11-23T05:12:00.000000Z"}
_OWNER = {"kind": "ReplicaSet", "namespace": "shop", "name": "web", "uid": "rs-uid", "apiVersion": "apps/v1"}

# outbox key -> the payload an older kubus wrote (every action type it knew, then payloads 0003 cannot use)
PAYLOADS: dict[str, Any] = {
    "a/create": {"msg": "create_pods", "v": 1, "key": "a/create", **_COMMON, "namespace": "shop", "pods": [
        {"key": "a/create/0", "pod": {"metadata": {"name": "web-bcdfg"}}},
        {"key": "a/create/1", "pod": {"metadata": {"generateName": "web-"}}},
        {"key": "a/create/2", "pod": ["not", "an", "object"]}], "owner": _OWNER, "component": "replicaset-controller"},
    "a/delete": {"msg": "delete_pod", "key": "a/delete", **_COMMON, "namespace": "shop", "name": "web-old",
                 "uid": "victim-uid", "adopt_first": None},  # no "v": schema version 0
    "a/patch": {"msg": "patch_pod", "v": 1, "key": "a/patch", **_COMMON, "namespace": "shop", "name": "stray",
                "uid": "stray-uid", "patch_type": "strategic", "patch": {"metadata": {"labels": {"a": "b"}}},
                "owner_check": {"kind": "ReplicaSet", "name": "web", "uid": "rs-uid"}},
    "a/revision": {"msg": "create_controller_revision", "v": 1, "key": "a/revision", **_COMMON, "namespace": "shop",
                   "revision": {"metadata": {"name": "agent-5d8f"}, "revision": 1}},
    "a/revision-patch": {"msg": "patch_controller_revision", "v": 1, "key": "a/revision-patch", **_COMMON,
                         "namespace": "shop", "name": "agent-5d8f", "uid": "cr-uid", "patch_type": "merge",
                         "patch": {"revision": 2}},
    "a/revision-delete": {"msg": "delete_controller_revision", "v": 1, "key": "a/revision-delete", **_COMMON,
                          "namespace": "shop", "name": "agent-1111", "uid": "cr-old-uid"},
    "a/status": {"msg": "update_status", "v": 1, "key": "a/status", **_COMMON, "kind": "ReplicaSet",
                 "namespace": "shop", "name": "web", "uid": "rs-uid", "status": {"replicas": 3},
                 "resource_version": "40", "status_fields": ["replicas"]},
    "a/bump": {"msg": "bump_collision_count", "v": 1, "key": "a/bump", **_COMMON, "namespace": "shop",
               "name": "agent", "uid": "ds-uid", "seen": 0},
    "a/event": {"msg": "record_event", "v": 1, "key": "a/event", **_COMMON, "namespace": "shop",
                "involved": {**_OWNER, "namespace": ""}, "type": "Warning", "reason": "SelectingAll",
                "message": "m", "component": "replicaset-controller"},
    "a/event-unreadable": {"msg": "record_event", "v": 1, "key": "a/event-unreadable", **_COMMON,
                           "namespace": "shop", "involved": {"name": 7}, "type": "Normal", "reason": "R",
                           "message": "m", "component": "c"},
    "a/annotate": {"msg": "set_annotation", "v": 1, "key": "a/annotate", **_COMMON, "kind": "Namespace",
                   "namespace": "", "name": "shop", "annotations": {"kubus.io/stand-in-pods": "2"}},
    "b/future-version": {"msg": "delete_pod", "v": 2, "key": "b/future-version", **_COMMON, "namespace": "shop",
                         "name": "p", "uid": "u"},
    "b/unknown-action": {"msg": "frobnicate", "v": 1, "key": "b/unknown-action", **_COMMON},
    "b/missing-field": {"msg": "delete_pod", "v": 1, "key": "b/missing-field", **_COMMON, "namespace": "shop",
                        "name": "p"},
    "b/wrong-type": {"msg": "bump_collision_count", "v": 1, "key": "b/wrong-type", **_COMMON, "namespace": "shop",
                     "name": "agent", "uid": "ds-uid", "seen": "0"},
    "b/pod-without-key": {"msg": "create_pods", "v": 1, "key": "b/pod-without-key", **_COMMON,
                          "namespace": "shop", "pods": [{"pod": {}}]},
    "b/bad-annotations": {"msg": "set_annotation", "v": 1, "key": "b/bad-annotations", **_COMMON,
                          "kind": "Namespace", "namespace": "", "name": "shop", "annotations": {"n": 2}},
    "b/not-an-object": [1, 2],
    "b/not-json": "{",
}

def _table(name: str, *columns: str, **typed: sa.types.TypeEngine[Any]) -> sa.TableClause:
    """A table as an older kubus wrote it: the columns named, typed where the driver needs to know."""
    return sa.table(name, *(sa.column(c) for c in columns), *(sa.column(c, t) for c, t in typed.items()))


_TIME = sa.DateTime(timezone=True)
_EVENTS = _table("observed_events", "stream_seq", "msg_id", "kind", "event_type", "namespace", "name", "uid",
                 "resource_version", observed_at=_TIME, recorded_at=_TIME)
_DECISIONS = _table("decisions", "id", "correlation_id", "controller_key", "controller_kind", "partition",
                    "stream_seq", "trigger", "duration_ms", "lease_epoch", decided_at=_TIME, summary=sa.JSON())
_OUTBOX = _table("outbox", "key", "decision_id", "subject", "state", "attempts", payload=sa.LargeBinary(),
                 created_at=_TIME, sent_at=_TIME)
_RESULTS = _table("action_results", "key", "action_key", "decision_id", "action", "outcome", "code", "reason",
                  "message", "object_uid", "executor", "attempts", finished_at=_TIME, recorded_at=_TIME)


def _event(seq: int, kind: str, event_type: str, name: str, uid: str, rv: str) -> dict[str, Any]:
    return {"stream_seq": seq, "msg_id": f"{kind}/{uid}/{rv}/{event_type}", "kind": kind, "event_type": event_type,
            "namespace": "shop", "name": name, "uid": uid, "resource_version": rv, "observed_at": _at(seq),
            "recorded_at": _at(seq)}


def _result(key: str, action: str, outcome: str, object_uid: str | None, second: int) -> dict[str, Any]:
    return {"key": key, "action_key": key.rsplit("/", 1)[0] if action == "create_pods" else key, "decision_id": 1,
            "action": action, "outcome": outcome, "code": 201 if outcome == "succeeded" else 500, "reason": "",
            "message": "", "object_uid": object_uid, "executor": "executor-a", "attempts": 1,
            "finished_at": _at(second), "recorded_at": _at(second)}


def _written_before_0003(conn: Connection) -> None:
    conn.execute(sa.insert(_EVENTS), [
        _event(1, "ReplicaSet", "ADDED", "web", "rs-uid", "10"),
        _event(2, "Pod", "ADDED", "web-bcdfg", "pod-uid", "20"),
        _event(3, "Pod", "MODIFIED", "web-bcdfg", "pod-uid", "21"),
        _event(4, "Pod", "DELETED", "web-old", "victim-uid", "22"),
    ])
    conn.execute(sa.insert(_DECISIONS), [{
        "id": 1, "correlation_id": "ReplicaSet/shop/web@1~1", "controller_key": "ReplicaSet/shop/web",
        "controller_kind": "ReplicaSet", "partition": 3, "stream_seq": 1, "trigger": "ReplicaSet/rs-uid/10/ADDED",
        "decided_at": _at(1), "duration_ms": 1.5, "lease_epoch": None,
        "summary": {"reason": "too few replicas: creating 3", "error": None}}])
    conn.execute(sa.insert(_OUTBOX), [
        {"key": key, "decision_id": 1, "subject": "kubus.actions.3",
         "payload": payload.encode() if isinstance(payload, str) else json.dumps(payload).encode(),
         "state": "sent", "attempts": 1, "created_at": _at(1), "sent_at": _at(2)}
        for key, payload in PAYLOADS.items()])
    conn.execute(sa.insert(_RESULTS), [
        _result("a/create/0", "create_pods", "succeeded", "pod-uid", 2),
        _result("a/create/1", "create_pods", "failed", None, 3),
        _result("a/delete", "delete_pod", "succeeded", None, 4),
        _result("a/status", "update_status", "succeeded", "rs-uid", 5),
    ])


def _plain(value: Any) -> Any:
    """A value as JSON holds it (timestamps as their text)."""
    return value if value is None or isinstance(value, bool | int | float | str | dict | list) else str(value)


def _read(conn: Connection, query: str) -> list[dict[str, Any]]:
    return [{k: _plain(v) for k, v in row._mapping.items()} for row in conn.execute(sa.text(query))]


async def backfilled(engine: AsyncEngine) -> dict[str, Any]:
    """action_targets and the audit views after 0003 ran over outbox rows an older kubus wrote."""
    await migrating.downgrade(engine, "base")
    await migrating.upgrade(engine, "0002")
    async with engine.begin() as conn:
        await conn.run_sync(_written_before_0003)
    await migrating.upgrade(engine, "0003")
    async with engine.connect() as conn:
        return {
            "action_targets": await conn.run_sync(_read, "SELECT * FROM action_targets ORDER BY key"),
            "audit_syncs": await conn.run_sync(_read, "SELECT * FROM audit_syncs ORDER BY decision_id"),
            "audit_actions": await conn.run_sync(_read, "SELECT * FROM audit_actions ORDER BY idempotency_key"),
        }


def snapshot(backend: str) -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads(SNAPSHOT.read_text())[backend]
    return recorded


# --- the tests ----------------------------------------------------------------------------------------------
async def test_each_revision_builds_the_schema_it_always_built(store: Store, backend: str) -> None:
    """Upgrading one revision at a time from nothing yields, after each, the schema recorded for it."""
    try:
        built = await schemas(store.engine)
    finally:
        await migrating.upgrade(store.engine)
    assert json.loads(json.dumps(built)) == snapshot(backend)["schemas"]


async def test_0003_backfills_targets_and_views_as_it_always_did(store: Store, backend: str) -> None:
    """Outbox rows written before 0003 get the targets they always got (a set_annotation too, an action kubus no
    longer has), unusable payloads none, and the views show the rows they always showed."""
    try:
        got = await backfilled(store.engine)
    finally:
        await migrating.downgrade(store.engine, "base")  # the rows above fit no later schema's tests
        await migrating.upgrade(store.engine)
    assert json.loads(json.dumps(got)) == snapshot(backend)["backfill"]


def test_revisions_import_no_live_code() -> None:
    """What a revision does never changes with kubus's code: it imports alembic, SQLAlchemy and the stdlib only."""
    for path in sorted(VERSIONS.glob("[0-9]*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                root = name.split(".")[0]
                assert root in ALLOWED_IMPORTS or root in sys.stdlib_module_names, f"{path.name} imports {name}"
