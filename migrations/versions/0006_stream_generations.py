"""Stream generations: which KUBUS_EVENTS (by its creation time) the stored positions and ingest checkpoints
refer to, and a row per reset (the stream was recreated or lost messages, and the positions were started over).

`stream_identities` has one row per user of the stream: `reconciler` (the consumer positions) and `ingest`
(its checkpoints: written once ingest has relisted into that stream). `stream_resets` is the audit trail's
record of each reset (docs/audit.md, "Stream resets").

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "stream_identities",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("stream", sa.Text, nullable=False),
        sa.Column("created", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_stream_identities"),
    )
    op.create_table(
        "stream_resets",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stream", sa.Text, nullable=False),
        sa.Column("old_created", sa.Text, nullable=True),
        sa.Column("new_created", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("positions", JSON, nullable=False),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
        sa.Column("shifted_by", sa.BigInteger, nullable=False),
        sa.Column("instance", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_stream_resets"),
    )


def downgrade() -> None:
    op.drop_table("stream_resets")
    op.drop_table("stream_identities")
