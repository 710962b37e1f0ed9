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

    def bind_processor(self, dialect: Dialect) -> Any:
        """On SQLite, process_bind_param and SQLite's DATETIME text in one function: the same text for ~1 µs less a
        value (~1.4 instead of ~2.4 µs on the 2-core machine; a batch binds two per event and two per result)."""
        impl = self.impl_instance.dialect_impl(dialect)
        if dialect.name != "sqlite" or getattr(impl, "_storage_format", None) != _SQLITE_DATETIME:
            return super().bind_processor(dialect)
        return _sqlite_text

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# SQLAlchemy's default storage format for SQLite's DATETIME (sqlalchemy.dialects.sqlite.DATETIME), which
# _sqlite_text writes
_SQLITE_DATETIME = ("%(year)04d-%(month)02d-%(day)02d %(hour)02d:%(minute)02d:%(second)02d.%(microsecond)06d")


def _sqlite_text(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: store timestamps must be timezone-aware")
    # "YYYY-MM-DD HH:MM:SS.ffffff+00:00" (the year and the microseconds always in full): without its offset
    return value.astimezone(UTC).isoformat(" ", "microseconds")[:-6]


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

# Which KUBUS_EVENTS the positions (name "reconciler") and ingest's checkpoints ("ingest") refer to: the stream's
# creation time as the server reports it. A stream created anew (deleted, its data lost) has another.
stream_identities = sa.Table(
    "stream_identities", metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("stream", sa.Text, nullable=False),
    sa.Column("created", sa.Text, nullable=False),
    _at("updated_at"),
)

# One row per reset of the reconciler's positions (store/streams.py, docs/audit.md "Stream resets").
stream_resets = sa.Table(
    "stream_resets", metadata,
    sa.Column("id", BIG_ID, primary_key=True, autoincrement=True),
    _at("at"),
    sa.Column("stream", sa.Text, nullable=False),
    sa.Column("old_created", sa.Text, nullable=True),
    sa.Column("new_created", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("positions", JSON, nullable=False),  # {partition: sequence} as they were
    sa.Column("last_seq", sa.BigInteger, nullable=False),  # the stream's last sequence when it was found
    sa.Column("shifted_by", sa.BigInteger, nullable=False),  # subtracted from the earlier events' stream_seq
    sa.Column("instance", sa.Text, nullable=False),
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
    sa.Index(None, "decided_at"),  # audit queries over a time range, and retention (migration 0003)
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

# The objects each outbox row acts on, one row per effect: per pod of a CreatePods (keyed by the
# pod's idempotency key), else one row keyed by the action's key. Its key is therefore the key the
# executor's result carries (action_results.key). Written with the outbox row (migration 0003), so
# the audit views can find "every action on pod X" without decoding payloads.
action_targets = sa.Table(
    "action_targets", metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("action_key", sa.Text, sa.ForeignKey("outbox.key", ondelete="CASCADE"), nullable=False),
    sa.Column("action", sa.Text, nullable=False),  # the action's tag: create_pods, delete_pod, update_status, ...
    sa.Column("kind", sa.Text, nullable=False),  # the target object's kind: Pod, ReplicaSet, ControllerRevision, ...
    sa.Column("namespace", sa.Text, nullable=False),  # "" for cluster-scoped objects
    sa.Column("name", sa.Text, nullable=False),  # the name asked for ("" when the action does not say)
    sa.Column("uid", sa.Text, nullable=True),  # the uid the action is conditioned on; None for creates
    sa.Index(None, "action_key"),
    sa.Index(None, "kind", "namespace", "name"),
    sa.Index(None, "uid"),
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
    # the object the effect was on as the executor reports it ("namespace/name"), and the
    # resourceVersion its answer carried: how the audit finds the watch event that confirmed it
    sa.Column("subject", sa.Text, nullable=True),
    sa.Column("resource_version", sa.Text, nullable=True),
    sa.Index(None, "decision_id"),
    sa.Index(None, "action_key"),  # joins outbox.key -> its result
    sa.Index(None, "outcome", "finished_at"),
    sa.Index(None, "recorded_at"),  # retention
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
    # what `kubus audit timeline` reads of the object (migration 0008; NULL before it, and for an object that
    # could not be decoded): its controller as "Kind/name" (same namespace), and a few facts by kind
    # (store/events.py, facts_of)
    sa.Column("owner", sa.Text, nullable=True),
    sa.Column("facts", JSON, nullable=True),
    sa.Index(None, "kind", "namespace", "name"),
    sa.Index(None, "uid"),
    sa.Index(None, "msg_id"),  # decisions.trigger -> the event that triggered the sync
    sa.Index(None, "recorded_at"),  # retention
    sa.Index(None, "namespace", "owner"),  # a controller's pods and revisions, for the timeline
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
    sa.Column("results", JSON, nullable=False),  # those results as the controllers got them (ActionResult JSON)
    sa.Column("decision_ids", JSON, nullable=False),  # decisions committed with the batch, in order
    # 'start' only: what the new process loaded from the store (positions, expectations, backoff)
    sa.Column("state", JSON, nullable=True),
    sa.Column("lease_epoch", sa.BigInteger, nullable=True),
    sa.CheckConstraint("kind IN ('start', 'batch')", name="kind"),
    sa.Index(None, "instance", "id"),
    sa.Index(None, "at"),
)

partition_leases = sa.Table(
    "partition_leases", metadata,
    # One row per namespace partition that was ever acquired (0..N-1; the cluster partition has none:
    # every reconciler reads it). See store/leases.py and docs/split.md.
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("owner", sa.Text, nullable=True),  # the reconciler instance holding it; NULL: released
    sa.Column("epoch", sa.BigInteger, nullable=False),  # +1 on every acquisition: the fencing token
    _at("expires_at", nullable=True),
    _at("acquired_at", nullable=True),
)

reconciler_members = sa.Table(
    "reconciler_members", metadata,
    sa.Column("instance", sa.Text, primary_key=True),
    _at("started_at"),
    _at("heartbeat_at"),
    sa.Column("info", JSON, nullable=False),  # host, pid, version ...: shown by `kubus status`
)

# A shadow's actions, whole, as an acting reconciler's outbox would hold them (migration 0007; docs/shadow.md):
# never relayed, kept for the audit trail and for `kubus replay --diff`, which compares them with the replay's.
would_do_actions = sa.Table(
    "would_do_actions", metadata,
    sa.Column("key", sa.Text, primary_key=True),  # the action's idempotency key
    sa.Column("decision_id", sa.BigInteger, nullable=False),  # no foreign key: retention prunes both by time
    sa.Column("payload", sa.LargeBinary, nullable=False),  # the action as JSON (messages/actions.py)
    _at("created_at"),
    sa.Index(None, "decision_id"),
    sa.Index(None, "created_at"),
)

# Shadow mode's acts (migration 0007; docs/shadow.md): one row per would-do act of a shadow's decision
# (side 'kubus': the action it would have issued, never queued) and per act of the acting controller the watch
# showed (side 'upstream'), keyed as the comparator matches them (reconciler.core.shadow.Act).
shadow_acts = sa.Table(
    "shadow_acts", metadata,
    sa.Column("id", BIG_ID, primary_key=True, autoincrement=True),
    sa.Column("side", sa.Text, nullable=False),
    sa.Column("controller_kind", sa.Text, nullable=False),
    sa.Column("controller_key", sa.Text, nullable=False),
    sa.Column("owner_uid", sa.Text, nullable=False),
    sa.Column("verb", sa.Text, nullable=False),  # create_pod, delete_pod, adopt_pod, ..., update_status
    sa.Column("target", sa.Text, nullable=False),  # a DaemonSet pod's node, a pod's namespace/name, a revision
    sa.Column("hash", sa.Text, nullable=False),  # a DaemonSet pod's controller-revision-hash
    sa.Column("fields", JSON, nullable=False),  # a status write's status; a would-do deletion's tie class
    sa.Column("stream_seq", sa.BigInteger, nullable=False),  # kubus: newest event seen; upstream: the event's
    sa.Column("decision_id", sa.BigInteger, nullable=True),  # kubus: the decision (no foreign key: retention)
    sa.Column("ref", sa.Text, nullable=False),  # kubus: the action's idempotency key; upstream: the event's msg_id
    _at("at"),  # kubus: decided_at; upstream: when ingest observed the event
    sa.CheckConstraint("side IN ('kubus', 'upstream')", name="side"),
    sa.Index(None, "controller_key", "at"),
    sa.Index(None, "at"),
)
