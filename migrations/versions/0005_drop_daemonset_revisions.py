"""Drop daemonset_revisions: the DaemonSet controller keeps its revisions as ControllerRevisions in the API, as
upstream's does, and nothing has read or written this table since.

The downgrade creates the table again as 0001 did, empty: its rows were read by nothing.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_table("daemonset_revisions")


def downgrade() -> None:
    op.create_table(
        "daemonset_revisions",
        sa.Column("ds_uid", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("revision", sa.BigInteger, nullable=False),
        sa.Column("hash", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("ds_uid", "name", name="pk_daemonset_revisions"),
    )
