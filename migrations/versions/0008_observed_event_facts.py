"""What the audit trail keeps of each observed object for `kubus audit timeline`: the controller that owns it
(`owner`, `Kind/name` in the object's namespace) and the few facts a rollout's timeline reads (`facts`, JSON: a
pod's node, revision hash and Ready time; a controller's minReadySeconds; a ControllerRevision's number).

Columns added, no table rebuilt (SQLite adds a nullable column in place), so the audit views stay as they are.
Events recorded before this revision have neither: the timeline shows what it can of them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("observed_events", sa.Column("owner", sa.Text, nullable=True))
    op.add_column("observed_events", sa.Column("facts", JSON, nullable=True))
    op.create_index("ix_observed_events_namespace_owner", "observed_events", ["namespace", "owner"])


def downgrade() -> None:
    op.drop_index("ix_observed_events_namespace_owner", table_name="observed_events")
    # ALTER TABLE ... DROP COLUMN on both (SQLite >= 3.35), not alembic's batch mode: that copies the table, which
    # the audit views read
    op.execute("ALTER TABLE observed_events DROP COLUMN facts")
    op.execute("ALTER TABLE observed_events DROP COLUMN owner")
