"""The audit trail's SQL views, defined once for the migration that creates them and the code and
tests that read them (see docs/audit.md for what each column means and example queries).

Two views join the tables into the questions people ask:

    audit_syncs     one row per decision (a controller sync): the watch event that triggered it
                    (decisions.trigger is that event's msg_id), how long it took, its reason
    audit_actions   one row per effect of an action (each pod of a CreatePods, else the action):
                    the decision and controller, the idempotency key, the target object, the
                    executor's result, and the watch event that confirmed it

The SELECTs are standard SQL but for two spellings that differ between SQLite and PostgreSQL:
reading a field of a JSON column, and truncating a timestamp to its minute.

This module holds the current definitions. To change a view, add a migration that drops and
re-creates it from here; a later migration that rebuilds a table the views read (SQLite's batch
mode copies tables) drops the views first and re-creates them afterwards.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from store.tables import JSON as JSON_TYPE
from store.tables import UtcDateTime, metadata

VIEWS = ("audit_syncs", "audit_actions")

# Event types that show an object is gone, as messages.observed spells them (frozen here: a view
# must not change when a Python constant does).
_DELETIONS = "'DELETED', 'DELETED_FINAL_STATE_UNKNOWN'"
_DELETE_ACTIONS = "'delete_pod', 'delete_controller_revision'"
_CREATE_ACTIONS = "'create_pods', 'create_controller_revision'"


def _json_text(dialect: str) -> Callable[[str, str], str]:
    """An expression reading a top-level field of a JSON column as text."""
    if dialect == "postgresql":
        return lambda column, field: f"({column} ->> '{field}')"
    if dialect == "sqlite":
        return lambda column, field: f"json_extract({column}, '$.{field}')"
    raise NotImplementedError(f"kubus's audit views support SQLite and PostgreSQL, not {dialect}")


def _minute(dialect: str, column: str) -> str:
    """'YYYY-MM-DD HH:MM' of a UTC timestamp, as text on both backends."""
    if dialect == "postgresql":
        return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI')"
    # SQLite keeps timestamps as 'YYYY-MM-DD HH:MM:SS.ffffff' text in UTC (store.tables.UtcDateTime)
    return f"substr({column}, 1, 16)"


def audit_syncs_select(dialect: str) -> str:
    field = _json_text(dialect)
    return f"""
SELECT
    d.id AS decision_id,
    d.correlation_id AS correlation_id,
    d.controller_kind AS controller_kind,
    d.controller_key AS controller_key,
    d."partition" AS "partition",
    d.stream_seq AS stream_seq,
    d."trigger" AS "trigger",
    d.decided_at AS decided_at,
    d.duration_ms AS duration_ms,
    {field('d.summary', 'reason')} AS decision_reason,
    {field('d.summary', 'error')} AS decision_error,
    d.summary AS summary,
    d.lease_epoch AS lease_epoch,
    e.stream_seq AS trigger_seq,
    e.kind AS trigger_kind,
    e.event_type AS trigger_type,
    e.namespace AS trigger_namespace,
    e.name AS trigger_name,
    e.uid AS trigger_uid,
    e.resource_version AS trigger_resource_version,
    e.observed_at AS trigger_observed_at,
    (SELECT COUNT(*) FROM outbox o WHERE o.decision_id = d.id) AS actions
FROM decisions d
LEFT JOIN observed_events e ON e.stream_seq = (
    SELECT MAX(t.stream_seq) FROM observed_events t
    WHERE t.msg_id = d."trigger" AND t.stream_seq <= d.stream_seq)
"""


def audit_actions_select(dialect: str) -> str:
    # The confirming watch event: for a delete, the object's deletion; for a create, the first
    # event of the object the executor created; for an update, the event carrying exactly the
    # resourceVersion the API answered with. Only a succeeded effect is confirmed.
    return f"""
SELECT
    t."key" AS idempotency_key,
    t.action_key AS action_key,
    o.decision_id AS decision_id,
    d.correlation_id AS correlation_id,
    d.controller_kind AS controller_kind,
    d.controller_key AS controller_key,
    d.decided_at AS decided_at,
    t.action AS action,
    t.kind AS target_kind,
    t.namespace AS target_namespace,
    t.name AS target_name,
    COALESCE(t.uid, r.object_uid) AS target_uid,
    o.state AS state,
    o.created_at AS enqueued_at,
    o.sent_at AS sent_at,
    r.outcome AS outcome,
    r.code AS code,
    r.reason AS reason,
    r.message AS message,
    r.object_uid AS object_uid,
    r.subject AS result_subject,
    r.resource_version AS result_resource_version,
    r.executor AS executor,
    r.attempts AS attempts,
    r.finished_at AS finished_at,
    {_minute(dialect, 'r.finished_at')} AS finished_minute,
    c.stream_seq AS confirmed_seq,
    c.event_type AS confirmed_by,
    c.observed_at AS confirmed_at
FROM action_targets t
JOIN outbox o ON o."key" = t.action_key
JOIN decisions d ON d.id = o.decision_id
LEFT JOIN action_results r ON r."key" = t."key"
LEFT JOIN observed_events c ON r.outcome = 'succeeded' AND c.stream_seq = (
    CASE
        WHEN t.action IN ({_DELETE_ACTIONS}) THEN (
            SELECT MIN(e.stream_seq) FROM observed_events e
            WHERE e.uid = t.uid AND e.event_type IN ({_DELETIONS}))
        WHEN t.action IN ({_CREATE_ACTIONS}) THEN (
            SELECT MIN(e.stream_seq) FROM observed_events e
            WHERE e.uid = r.object_uid AND e.kind = t.kind)
        ELSE (
            SELECT MIN(e.stream_seq) FROM observed_events e
            WHERE e.uid = r.object_uid AND e.resource_version = r.resource_version)
    END)
"""


SELECTS: dict[str, Callable[[str], str]] = {"audit_syncs": audit_syncs_select, "audit_actions": audit_actions_select}


def create_statements(dialect: str) -> list[str]:
    return [f"CREATE VIEW {name} AS{SELECTS[name](dialect)}" for name in VIEWS]


def drop_statements() -> list[str]:
    return [f"DROP VIEW IF EXISTS {name}" for name in reversed(VIEWS)]


# The views as SQLAlchemy tables, for queries written in Core (store/audit.py). A MetaData of their
# own: they are not tables the migrations create, and the schema check must not look for them.
view_metadata = sa.MetaData()


def _at(name: str) -> sa.Column[object]:
    return sa.Column(name, UtcDateTime())


audit_syncs = sa.Table(
    "audit_syncs", view_metadata,
    sa.Column("decision_id", sa.BigInteger),
    sa.Column("correlation_id", sa.Text),
    sa.Column("controller_kind", sa.Text),
    sa.Column("controller_key", sa.Text),
    sa.Column("partition", sa.Integer),
    sa.Column("stream_seq", sa.BigInteger),
    sa.Column("trigger", sa.Text),
    _at("decided_at"),
    sa.Column("duration_ms", sa.Float),
    sa.Column("decision_reason", sa.Text),
    sa.Column("decision_error", sa.Text),
    sa.Column("summary", JSON_TYPE),
    sa.Column("lease_epoch", sa.BigInteger),
    sa.Column("trigger_seq", sa.BigInteger),
    sa.Column("trigger_kind", sa.Text),
    sa.Column("trigger_type", sa.Text),
    sa.Column("trigger_namespace", sa.Text),
    sa.Column("trigger_name", sa.Text),
    sa.Column("trigger_uid", sa.Text),
    sa.Column("trigger_resource_version", sa.Text),
    _at("trigger_observed_at"),
    sa.Column("actions", sa.Integer),
)

audit_actions = sa.Table(
    "audit_actions", view_metadata,
    sa.Column("idempotency_key", sa.Text),
    sa.Column("action_key", sa.Text),
    sa.Column("decision_id", sa.BigInteger),
    sa.Column("correlation_id", sa.Text),
    sa.Column("controller_kind", sa.Text),
    sa.Column("controller_key", sa.Text),
    _at("decided_at"),
    sa.Column("action", sa.Text),
    sa.Column("target_kind", sa.Text),
    sa.Column("target_namespace", sa.Text),
    sa.Column("target_name", sa.Text),
    sa.Column("target_uid", sa.Text),
    sa.Column("state", sa.Text),
    _at("enqueued_at"),
    _at("sent_at"),
    sa.Column("outcome", sa.Text),
    sa.Column("code", sa.Integer),
    sa.Column("reason", sa.Text),
    sa.Column("message", sa.Text),
    sa.Column("object_uid", sa.Text),
    sa.Column("result_subject", sa.Text),
    sa.Column("result_resource_version", sa.Text),
    sa.Column("executor", sa.Text),
    sa.Column("attempts", sa.Integer),
    _at("finished_at"),
    sa.Column("finished_minute", sa.Text),
    sa.Column("confirmed_seq", sa.BigInteger),
    sa.Column("confirmed_by", sa.Text),
    _at("confirmed_at"),
)

assert not set(VIEWS) & set(metadata.tables), "a view must not share a name with a table"
