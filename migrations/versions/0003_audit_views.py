"""The audit trail: the objects each action acts on (action_targets), what the executor's result
named (action_results.subject, .resource_version), indexes for time ranges, retention and triggers,
and the views audit_syncs and audit_actions (store/audit_views.py; documented in docs/audit.md).

Outbox rows written before this revision get their targets from their payloads here.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from store.audit_views import create_statements, drop_statements

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


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
    for statement in create_statements(dialect):
        op.execute(statement)


def _backfill_targets() -> None:
    from messages import codec
    from reconciler.audit_targets import targets_of

    conn = op.get_bind()
    outbox = sa.table("outbox", sa.column("key", sa.Text), sa.column("payload", sa.LargeBinary))
    targets = sa.table("action_targets", *(sa.column(c, sa.Text) for c in (
        "key", "action_key", "action", "kind", "namespace", "name", "uid")))
    rows: list[dict[str, str | None]] = []
    for key, payload in conn.execute(sa.select(outbox.c.key, outbox.c.payload)):
        try:
            action = codec.decode_action(bytes(payload))
        except codec.BadMessage:
            continue  # not an action this kubus understands: left out of the audit views
        rows.extend({"key": x.key, "action_key": key, "action": x.action, "kind": x.kind, "namespace": x.namespace,
                     "name": x.name, "uid": x.uid} for x in targets_of(action))
    if rows:
        conn.execute(sa.insert(targets), rows)


def downgrade() -> None:
    for statement in drop_statements():
        op.execute(statement)
    op.drop_index("ix_decisions_decided_at", "decisions")
    op.drop_index("ix_observed_events_recorded_at", "observed_events")
    op.drop_index("ix_observed_events_msg_id", "observed_events")
    op.drop_index("ix_action_results_recorded_at", "action_results")
    with op.batch_alter_table("action_results") as batch:
        batch.drop_column("resource_version")
        batch.drop_column("subject")
    op.drop_table("action_targets")
