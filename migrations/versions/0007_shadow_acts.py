"""Shadow mode: the acts of a shadow's decisions (would-do, never queued) and of the acting controller (as the
watch showed them), side by side for the comparator, and the shadow's actions whole (docs/shadow.md).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "shadow_acts",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("side", sa.Text, nullable=False),
        sa.Column("controller_kind", sa.Text, nullable=False),
        sa.Column("controller_key", sa.Text, nullable=False),
        sa.Column("owner_uid", sa.Text, nullable=False),
        sa.Column("verb", sa.Text, nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("hash", sa.Text, nullable=False),
        sa.Column("fields", JSON, nullable=False),
        sa.Column("stream_seq", sa.BigInteger, nullable=False),
        sa.Column("decision_id", sa.BigInteger, nullable=True),
        sa.Column("ref", sa.Text, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("side IN ('kubus', 'upstream')", name="ck_shadow_acts_side"),
        sa.PrimaryKeyConstraint("id", name="pk_shadow_acts"),
    )
    op.create_index("ix_shadow_acts_controller_key_at", "shadow_acts", ["controller_key", "at"])
    op.create_index("ix_shadow_acts_at", "shadow_acts", ["at"])
    op.create_table(
        "would_do_actions",
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("decision_id", sa.BigInteger, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_would_do_actions"),
    )
    op.create_index("ix_would_do_actions_decision_id", "would_do_actions", ["decision_id"])
    op.create_index("ix_would_do_actions_created_at", "would_do_actions", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_would_do_actions_created_at", table_name="would_do_actions")
    op.drop_index("ix_would_do_actions_decision_id", table_name="would_do_actions")
    op.drop_table("would_do_actions")
    op.drop_index("ix_shadow_acts_at", table_name="shadow_acts")
    op.drop_index("ix_shadow_acts_controller_key_at", table_name="shadow_acts")
    op.drop_table("shadow_acts")
