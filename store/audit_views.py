"""The audit trail's SQL views as SQLAlchemy tables, for the queries written in Core (store/audit.py);
docs/audit.md says what each column means and gives example queries.

Two views join the tables into the questions people ask:

    audit_syncs     one row per decision (a controller sync): the watch event that triggered it
                    (decisions.trigger is that event's msg_id), how long it took, its reason
    audit_actions   one row per effect of an action (each pod of a CreatePods, else the action):
                    the decision and controller, the idempotency key, the target object, the
                    executor's result, and the watch event that confirmed it

Their SQL belongs to the migration that creates them (migrations/versions/0003_audit_views.py), which
keeps its own copy so that it never changes. To change a view, add a migration that drops it and
creates it anew from SQL of its own, and change its table here to match (tests/store/test_migrations.py
compares them); a later migration that rebuilds a table the views read (SQLite's batch mode copies
tables) drops the views first and re-creates them afterwards, from its own copy of their SQL.
"""

from __future__ import annotations

import sqlalchemy as sa

from store.tables import JSON as JSON_TYPE
from store.tables import UtcDateTime, metadata

VIEWS = ("audit_syncs", "audit_actions")


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
