"""The reconciler's input log: one row per committed batch, so a replay can feed the controllers
exactly what the live reconciler fed them (which events, which executor results, at which clock),
and one row per start with what the new process loaded (positions, expectations, backoff).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "reconciler_ticks",
        sa.Column("id", BIG_ID, nullable=False, autoincrement=True),
        sa.Column("instance", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("caught_up", sa.Boolean, nullable=False),
        sa.Column("first_seq", sa.BigInteger, nullable=True),
        sa.Column("last_seq", sa.BigInteger, nullable=True),
        sa.Column("partitions", JSON, nullable=False),
        sa.Column("result_keys", JSON, nullable=False),
        sa.Column("results", JSON, nullable=False),
        sa.Column("decision_ids", JSON, nullable=False),
        sa.Column("state", JSON, nullable=True),
        sa.Column("lease_epoch", sa.BigInteger, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_reconciler_ticks"),
        sa.CheckConstraint("kind IN ('start', 'batch')", name="ck_reconciler_ticks_kind"),
    )
    op.create_index("ix_reconciler_ticks_instance_id", "reconciler_ticks", ["instance", "id"])
    op.create_index("ix_reconciler_ticks_at", "reconciler_ticks", ["at"])


def downgrade() -> None:
    op.drop_table("reconciler_ticks")
