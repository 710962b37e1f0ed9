"""The audit trail: the objects each action acts on (action_targets), what the executor's result
named (action_results.subject, .resource_version), indexes for time ranges, retention and triggers,
and the views audit_syncs and audit_actions (documented in docs/audit.md).

Outbox rows written before this revision get their targets from their payloads here.

Frozen: the views' SQL and the reading of payloads are this revision's own copies, as kubus had
them when it was written (store/audit_views.py, reconciler/audit_targets.py, messages/codec.py),
so what it does never changes with that code. tests/store/test_frozen_migrations.py holds it to
what it built before.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import context, op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

VIEWS = ("audit_syncs", "audit_actions")

# Event types that show an object is gone, and the create and delete actions, as kubus spelled them
_DELETIONS = "'DELETED', 'DELETED_FINAL_STATE_UNKNOWN'"
_DELETE_ACTIONS = "'delete_pod', 'delete_controller_revision'"
_CREATE_ACTIONS = "'create_pods', 'create_controller_revision'"


def upgrade() -> None:
    op.create_table(
        "action_targets",
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("action_key", sa.Text, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("uid", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("key", name="pk_action_targets"),
        sa.ForeignKeyConstraint(["action_key"], ["outbox.key"], name="fk_action_targets_action_key_outbox",
                                ondelete="CASCADE"),
    )
    op.create_index("ix_action_targets_action_key", "action_targets", ["action_key"])
    op.create_index("ix_action_targets_kind_namespace_name", "action_targets", ["kind", "namespace", "name"])
    op.create_index("ix_action_targets_uid", "action_targets", ["uid"])
    op.add_column("action_results", sa.Column("subject", sa.Text, nullable=True))
    op.add_column("action_results", sa.Column("resource_version", sa.Text, nullable=True))
    op.create_index("ix_action_results_recorded_at", "action_results", ["recorded_at"])
    op.create_index("ix_observed_events_msg_id", "observed_events", ["msg_id"])
    op.create_index("ix_observed_events_recorded_at", "observed_events", ["recorded_at"])
    op.create_index("ix_decisions_decided_at", "decisions", ["decided_at"])
    if not context.is_offline_mode():  # `--sql` prints DDL only: there are no rows to read
        _backfill_targets()
    dialect = op.get_context().dialect.name
    for name, select in (("audit_syncs", _audit_syncs_select), ("audit_actions", _audit_actions_select)):
        op.execute(f"CREATE VIEW {name} AS{select(dialect)}")


def _backfill_targets() -> None:
    conn = op.get_bind()
    outbox = sa.table("outbox", sa.column("key", sa.Text), sa.column("payload", sa.LargeBinary))
    targets = sa.table("action_targets", *(sa.column(c, sa.Text) for c in (
        "key", "action_key", "action", "kind", "namespace", "name", "uid")))
    rows: list[dict[str, str | None]] = []
    for key, payload in conn.execute(sa.select(outbox.c.key, outbox.c.payload)):
        action = _action(bytes(payload))
        if action is None:
            continue  # not an action this kubus understood: left out of the audit views
        rows.extend({"key": k, "action_key": key, "action": action["msg"], "kind": kind, "namespace": namespace,
                     "name": name, "uid": uid} for k, kind, namespace, name, uid in _targets(action))
    if rows:
        conn.execute(sa.insert(targets), rows)


# --- the actions as this revision reads them ---------------------------------------------------------------
# The field types of each action an outbox row could hold (messages/actions.py then); a payload that is
# not JSON, is of a newer schema version, names another action, or lacks or mistypes a field is not used.
_SCHEMA_VERSION = 1
_REQUIRED = 0
_OPTIONAL = 1


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_raw(value: Any) -> bool:
    return True  # a field kept as raw JSON: any value


def _is_strs(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _is_owner_check(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and all(isinstance(value.get(f), str)
                                                              for f in ("kind", "name", "uid")))


def _is_adoption(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and value.get("owner_check") is not None
                             and _is_owner_check(value.get("owner_check"))
                             and isinstance(value.get("patch_type"), str) and "patch" in value)


def _is_pods(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(p, dict) and isinstance(p.get("key"), str) and "pod" in p
                                           for p in value)


Field = tuple[int, Callable[[Any], bool]]
_ENVELOPE: dict[str, Field] = {"key": (_REQUIRED, _is_str), "decision_id": (_REQUIRED, _is_int),
                               "controller": (_REQUIRED, _is_str), "issued_at": (_REQUIRED, _is_str)}
_NAMED: dict[str, Field] = {"namespace": (_REQUIRED, _is_str), "name": (_REQUIRED, _is_str),
                            "uid": (_REQUIRED, _is_str)}
_PATCH: dict[str, Field] = {"patch_type": (_REQUIRED, _is_str), "patch": (_REQUIRED, _is_raw),
                            "owner_check": (_OPTIONAL, _is_owner_check), "adopt_first": (_OPTIONAL, _is_adoption)}
_FIELDS: dict[str, dict[str, Field]] = {
    "create_pods": {"namespace": (_REQUIRED, _is_str), "pods": (_REQUIRED, _is_pods),
                    "owner": (_OPTIONAL, _is_raw), "component": (_OPTIONAL, _is_str)},
    "delete_pod": {**_NAMED, "owner": (_OPTIONAL, _is_raw), "component": (_OPTIONAL, _is_str),
                   "adopt_first": (_OPTIONAL, _is_adoption)},
    "patch_pod": {**_NAMED, **_PATCH},
    "create_controller_revision": {"namespace": (_REQUIRED, _is_str), "revision": (_REQUIRED, _is_raw)},
    "patch_controller_revision": {**_NAMED, **_PATCH},
    "delete_controller_revision": {**_NAMED, "adopt_first": (_OPTIONAL, _is_adoption)},
    "update_status": {**_NAMED, "kind": (_REQUIRED, _is_str), "status": (_REQUIRED, _is_raw),
                      "resource_version": (_OPTIONAL, _is_str), "metadata": (_OPTIONAL, _is_raw),
                      "status_fields": (_OPTIONAL, _is_strs)},
    "bump_collision_count": {**_NAMED, "seen": (_REQUIRED, _is_int)},
    "record_event": {"namespace": (_REQUIRED, _is_str), "involved": (_REQUIRED, _is_raw),
                     "type": (_REQUIRED, _is_str), "reason": (_REQUIRED, _is_str), "message": (_REQUIRED, _is_str),
                     "component": (_REQUIRED, _is_str)},
    "set_annotation": {"kind": (_REQUIRED, _is_str), "namespace": (_REQUIRED, _is_str), "name": (_REQUIRED, _is_str),
                       "annotations": (_REQUIRED, _is_str_map)},
}


def _action(payload: bytes) -> dict[str, Any] | None:
    """The payload as an action of this revision's time, or None when it was not one it could use."""
    try:
        action = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(action, dict):
        return None
    version = action.get("v", 0)
    if not _is_int(version) or version > _SCHEMA_VERSION:
        return None
    tag = action.get("msg")
    fields = _FIELDS.get(tag) if isinstance(tag, str) else None
    if fields is None:
        return None
    for name, (presence, valid) in {**_ENVELOPE, **fields}.items():
        if name not in action:
            if presence == _REQUIRED:
                return None
        elif not valid(action[name]):
            return None
    return action


def _text(obj: Any, field: str) -> str | None:
    """A string field of a JSON object, "" when absent; None when the object cannot be read so."""
    value = obj.get(field, "")
    return value if isinstance(value, str) else None


def _object_name(raw: Any) -> str:
    """The name an object body asks for: metadata.name, else metadata.generateName; "" when unreadable."""
    if not isinstance(raw, dict):
        return ""
    meta = raw.get("metadata", {})
    if not isinstance(meta, dict):
        return ""
    name, generate = _text(meta, "name"), _text(meta, "generateName")
    if name is None or generate is None:
        return ""
    return name or generate


def _reference(raw: Any) -> tuple[str, str, str, str]:
    """(kind, namespace, name, uid) of an ObjectReference; all "" when unreadable."""
    if not isinstance(raw, dict):
        return "", "", "", ""
    kind, namespace, name, uid = (_text(raw, f) for f in ("kind", "namespace", "name", "uid"))
    if kind is None or namespace is None or name is None or uid is None:
        return "", "", "", ""
    return kind, namespace, name, uid


Target = tuple[str, str, str, str, str | None]  # (key, kind, namespace, name, uid)


def _targets(a: dict[str, Any]) -> list[Target]:
    """The action's effects and the object each is on: a CreatePods has one per pod, keyed by the pod's key."""
    tag = a["msg"]
    if tag == "create_pods":
        return [(p["key"], "Pod", a["namespace"], _object_name(p["pod"]), None) for p in a["pods"]]
    if tag in ("delete_pod", "patch_pod"):
        return [(a["key"], "Pod", a["namespace"], a["name"], a["uid"])]
    if tag == "create_controller_revision":
        return [(a["key"], "ControllerRevision", a["namespace"], _object_name(a["revision"]), None)]
    if tag in ("patch_controller_revision", "delete_controller_revision"):
        return [(a["key"], "ControllerRevision", a["namespace"], a["name"], a["uid"])]
    if tag == "update_status":
        return [(a["key"], a["kind"], a["namespace"], a["name"], a["uid"])]
    if tag == "bump_collision_count":
        return [(a["key"], "DaemonSet", a["namespace"], a["name"], a["uid"])]
    if tag == "record_event":
        kind, namespace, name, uid = _reference(a["involved"])
        return [(a["key"], kind, namespace or a["namespace"], name, uid or None)]
    return [(a["key"], a["kind"], a["namespace"], a["name"], None)]  # set_annotation


# --- the views, as this revision creates them ------------------------------------------------------------
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


def _audit_syncs_select(dialect: str) -> str:
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


def _audit_actions_select(dialect: str) -> str:
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


def downgrade() -> None:
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.drop_index("ix_decisions_decided_at", "decisions")
    op.drop_index("ix_observed_events_recorded_at", "observed_events")
    op.drop_index("ix_observed_events_msg_id", "observed_events")
    op.drop_index("ix_action_results_recorded_at", "action_results")
    with op.batch_alter_table("action_results") as batch:
        batch.drop_column("resource_version")
        batch.drop_column("subject")
    op.drop_table("action_targets")
