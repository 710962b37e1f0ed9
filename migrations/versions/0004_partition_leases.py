"""Partition leases and reconciler membership, for reconcilers that split the namespace partitions
among themselves (docs/split.md): who holds which partition, under which fencing epoch, until when;
and which reconcilers are alive.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def at(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "partition_leases",
        sa.Column("partition", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("owner", sa.Text, nullable=True),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        at("expires_at", nullable=True),
        at("acquired_at", nullable=True),
        sa.PrimaryKeyConstraint("partition", name="pk_partition_leases"),
    )
    op.create_table(
        "reconciler_members",
        sa.Column("instance", sa.Text, nullable=False),
        at("started_at"),
        at("heartbeat_at"),
        sa.Column("info", JSON, nullable=False),
        sa.PrimaryKeyConstraint("instance", name="pk_reconciler_members"),
    )


def downgrade() -> None:
    op.drop_table("reconciler_members")
    op.drop_table("partition_leases")
