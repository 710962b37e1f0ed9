"""The SQL schema: one Core `Table` per stored concept.

These definitions are what the code queries; the schema itself is created by the hand-written
migrations in `migrations/versions/`, and a test checks that the two agree. Table and column names
are part of the documented audit schema: change them only with a migration and a note.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect

# Named constraints and indexes, so a later migration can drop or alter them by a name it knows
# on both backends (SQLite and PostgreSQL would otherwise invent different ones).
NAMING = {
    "pk": "pk_%(table_name)s",
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING)

# JSONB on PostgreSQL (indexable, compact); JSON text on SQLite.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

# SQLite only autoincrements an INTEGER PRIMARY KEY (the rowid alias), not a BIGINT one.
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class UtcDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware timestamp stored in UTC.

    SQLite keeps no offset, so values read back from it are naive; this type refuses naive input
    and returns aware UTC datetimes on both backends, so callers can compare them freely.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: store timestamps must be timezone-aware")
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _at(name: str, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, UtcDateTime(), nullable=nullable)


ingest_checkpoints = sa.Table(
    "ingest_checkpoints", metadata,
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("resource_version", sa.Text, nullable=False),
    _at("updated_at"),
)

consumer_positions = sa.Table(
    "consumer_positions", metadata,
    sa.Column("consumer", sa.Text, primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("stream_seq", sa.BigInteger, nullable=False),
    _at("updated_at"),
)

expectations = sa.Table(
    "expectations", metadata,
    sa.Column("controller_key", sa.Text, primary_key=True),
    sa.Column("adds", sa.Integer, nullable=False),
    sa.Column("dels", sa.Integer, nullable=False),
    sa.Column("deletion_keys", JSON, nullable=False),
    _at("set_at"),
)

pod_backoff = sa.Table(
    "pod_backoff", metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("delay_seconds", sa.Float, nullable=False),
    _at("last_update"),
    sa.Index(None, "last_update"),  # the garbage collection scans by age
)

daemonset_revisions = sa.Table(
    "daemonset_revisions", metadata,
    sa.Column("ds_uid", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("revision", sa.BigInteger, nullable=False),
    sa.Column("hash", sa.Text, nullable=False),
    _at("created_at"),
)

decisions = sa.Table(
    "decisions", metadata,
    sa.Column("id", BIG_ID, primary_key=True, autoincrement=True),
    sa.Column("correlation_id", sa.Text, nullable=False, unique=True),
    sa.Column("controller_key", sa.Text, nullable=False),
    sa.Column("controller_kind", sa.Text, nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("stream_seq", sa.BigInteger, nullable=False),
    sa.Column("trigger", sa.Text, nullable=True),
    _at("decided_at"),
    sa.Column("duration_ms", sa.Float, nullable=False),
    sa.Column("summary", JSON, nullable=False),
    sa.Column("lease_epoch", sa.BigInteger, nullable=True),
    sa.Index(None, "controller_key", "decided_at"),
)

outbox = sa.Table(
    "outbox", metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("decision_id", BIG_ID, sa.ForeignKey("decisions.id"), nullable=False),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("payload", sa.LargeBinary, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    _at("created_at"),
    _at("sent_at", nullable=True),
    sa.CheckConstraint("state IN ('pending', 'sent')", name="state"),
    sa.Index(None, "state", "created_at"),  # the relay's scan for pending rows, oldest first
    sa.Index(None, "decision_id"),  # the audit's "what did this decision ask for"
)

action_results = sa.Table(
    "action_results", metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("action_key", sa.Text, nullable=False),
    # No foreign key: results arrive from executors and must be recorded even if the decision
    # was pruned by retention meanwhile.
    sa.Column("decision_id", sa.BigInteger, nullable=True),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("code", sa.Integer, nullable=True),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("object_uid", sa.Text, nullable=True),
    sa.Column("executor", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    _at("finished_at"),
    _at("recorded_at"),
    sa.Index(None, "decision_id"),
    sa.Index(None, "action_key"),  # joins outbox.key -> its result
    sa.Index(None, "outcome", "finished_at"),
)

observed_events = sa.Table(
    "observed_events", metadata,
    sa.Column("stream_seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("msg_id", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("event_type", sa.Text, nullable=False),
    # "" for cluster-scoped objects, as the API does, so equality lookups need no NULL handling.
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("uid", sa.Text, nullable=False),
    sa.Column("resource_version", sa.Text, nullable=False),
    _at("observed_at"),
    _at("recorded_at"),
    sa.Index(None, "kind", "namespace", "name"),
    sa.Index(None, "uid"),
)

reconciler_ticks = sa.Table(
    "reconciler_ticks", metadata,
    sa.Column("id", BIG_ID, primary_key=True, autoincrement=True),
    sa.Column("instance", sa.Text, nullable=False),
    # 'start': a reconciler started (first_seq: where its replay of the event history began; last_seq:
    # the newest event its cache was bootstrapped with). 'batch': one committed batch of its loop.
    sa.Column("kind", sa.Text, nullable=False),
    _at("at"),  # the clock the controllers were given for this batch
    sa.Column("caught_up", sa.Boolean, nullable=False),  # as the batch began
    sa.Column("first_seq", sa.BigInteger, nullable=True),  # KUBUS_EVENTS range the batch took, all partitions
    sa.Column("last_seq", sa.BigInteger, nullable=True),
    sa.Column("partitions", JSON, nullable=False),  # the namespace partitions it consumed (null: all)
    sa.Column("result_keys", JSON, nullable=False),  # executor results fed to the controllers, in order
    sa.Column("lease_epoch", sa.BigInteger, nullable=True),
    sa.CheckConstraint("kind IN ('start', 'batch')", name="kind"),
    sa.Index(None, "instance", "id"),
    sa.Index(None, "at"),
)
