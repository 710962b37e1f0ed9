"""The observed-event audit rows exactly as they are stored, on SQLite and PostgreSQL: every column's value as the
database holds it (SQLite's text, PostgreSQL's types), the rows a stream sequence already recorded left as they are
(in one batch too), and the count of new rows `record_events` returns. Pinned before the rows' recording was made
cheaper (issue 25): what is written must not change with how it is bound."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from store.engine import Store
from store.events import ObservedEventRow
from store.tables import observed_events
from tests.store.builders import FakeClock

PLUS_TWO = timezone(timedelta(hours=2))
RECORDED = datetime(2026, 11, 29, 1, 2, 3, 456789, tzinfo=UTC)
RECORDED_LATER = datetime(2026, 11, 29, 1, 2, 4, tzinfo=PLUS_TWO)


def _row(seq: int, **kw: object) -> ObservedEventRow:
    fields: dict[str, object] = {
        "msg_id": f"Pod/uid-{seq}/{seq}/MODIFIED", "kind": "Pod", "event_type": "MODIFIED", "namespace": "ns",
        "name": f"pod-{seq}", "uid": f"uid-{seq}", "resource_version": str(seq),
        "observed_at": datetime(2026, 11, 28, 23, 59, 59, 999999, tzinfo=UTC)}
    fields.update(kw)
    return ObservedEventRow(stream_seq=seq, **fields)  # type: ignore[arg-type]


FIRST = [
    _row(1, owner="DaemonSet/agent",
         facts={"node": "node-1", "revision": "6d4b8f", "ready_since": None, "deleting": False}),
    # another offset, no microseconds: stored in UTC
    _row(2, observed_at=datetime(2026, 11, 29, 0, 30, tzinfo=PLUS_TWO), owner=None, facts=None),
    _row(3, kind="DaemonSet", event_type="ADDED", namespace="", name="agent", uid="ds-uid", resource_version="77",
         owner="Deployment/ünïcode \"quoted\"", facts={"generation": 3, "min_ready_seconds": 0, "nested": [1, 2.5]}),
    _row(4, observed_at=datetime(2026, 11, 28, 12, 0, 0, 1, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
         facts={}),
]
# a redelivery of 1 and 3 (other values: ignored, the first stays), new 5, and 6 twice in the batch (the first wins)
SECOND = [
    _row(3, name="other", facts=None), _row(5, event_type="DELETED", facts={"deleting": True}),
    _row(1, owner="x"), _row(6, name="six"), _row(6, name="six-again", owner="ReplicaSet/web"),
]

# (stream_seq, msg_id, kind, event_type, namespace, name, uid, resource_version, observed_at, recorded_at, owner,
# facts), as each backend stores them; the datetimes and facts per backend below
STORED = [
    (1, "Pod/uid-1/1/MODIFIED", "Pod", "MODIFIED", "ns", "pod-1", "uid-1", "1", "DaemonSet/agent"),
    (2, "Pod/uid-2/2/MODIFIED", "Pod", "MODIFIED", "ns", "pod-2", "uid-2", "2", None),
    (3, "Pod/uid-3/3/MODIFIED", "DaemonSet", "ADDED", "", "agent", "ds-uid", "77", "Deployment/ünïcode \"quoted\""),
    (4, "Pod/uid-4/4/MODIFIED", "Pod", "MODIFIED", "ns", "pod-4", "uid-4", "4", None),
    (5, "Pod/uid-5/5/MODIFIED", "Pod", "DELETED", "ns", "pod-5", "uid-5", "5", None),
    (6, "Pod/uid-6/6/MODIFIED", "Pod", "MODIFIED", "ns", "six", "uid-6", "6", None),
]
# SQLite: SQLAlchemy's DATETIME text, in UTC; JSON as json.dumps writes it (None as JSON's null, not SQL NULL)
SQLITE_TIMES = [
    ("2026-11-28 23:59:59.999999", "2026-11-29 01:02:03.456789"),
    ("2026-11-28 22:30:00.000000", "2026-11-29 01:02:03.456789"),
    ("2026-11-28 23:59:59.999999", "2026-11-29 01:02:03.456789"),
    ("2026-11-28 17:30:00.000001", "2026-11-29 01:02:03.456789"),
    ("2026-11-28 23:59:59.999999", "2026-11-28 23:02:04.000000"),
    ("2026-11-28 23:59:59.999999", "2026-11-28 23:02:04.000000"),
]
SQLITE_FACTS = [
    '{"node": "node-1", "revision": "6d4b8f", "ready_since": null, "deleting": false}',
    "null",
    '{"generation": 3, "min_ready_seconds": 0, "nested": [1, 2.5]}',
    "{}",
    '{"deleting": true}',
    "null",
]
# PostgreSQL: timestamptz (shown in UTC), JSONB as PostgreSQL writes it back (its own key order and spacing)
PG_TIMES = [(s.replace(" ", "T") + "+00:00", r.replace(" ", "T") + "+00:00") for s, r in SQLITE_TIMES]
PG_FACTS = [
    '{"node": "node-1", "deleting": false, "revision": "6d4b8f", "ready_since": null}',
    "null",
    '{"nested": [1, 2.5], "generation": 3, "min_ready_seconds": 0}',
    "{}",
    '{"deleting": true}',
    "null",
]


async def _record(store: Store, clock: FakeClock) -> tuple[int, int]:
    clock.now = RECORDED
    async with store.transaction() as tx:
        first = await tx.record_events(FIRST)
    clock.now = RECORDED_LATER
    async with store.transaction() as tx:
        second = await tx.record_events(SECOND)
        assert await tx.record_events([]) == 0
    return first, second


async def test_rows_as_stored(store: Store, backend: str, clock: FakeClock) -> None:
    assert await _record(store, clock) == (4, 2)
    if backend == "sqlite":
        query = ("SELECT stream_seq, msg_id, kind, event_type, namespace, name, uid, resource_version, owner, "
                 "observed_at, recorded_at, facts, typeof(stream_seq), typeof(observed_at), typeof(recorded_at), "
                 "typeof(owner), typeof(facts) FROM observed_events ORDER BY stream_seq")
        types = [("integer", "text", "text", "null" if owner is None else "text", "text")
                 for *_, owner in STORED]
        times, facts = SQLITE_TIMES, SQLITE_FACTS
    else:
        query = ("SELECT stream_seq, msg_id, kind, event_type, namespace, name, uid, resource_version, owner, "
                 "to_char(observed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"'), "
                 "to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"'), facts::text, "
                 "pg_typeof(stream_seq)::text, pg_typeof(observed_at)::text, pg_typeof(recorded_at)::text, "
                 "pg_typeof(owner)::text, jsonb_typeof(facts) FROM observed_events ORDER BY stream_seq")
        types = [("bigint", "timestamp with time zone", "timestamp with time zone", "text",
                  "null" if fact == "null" else "object") for fact in PG_FACTS]
        times, facts = PG_TIMES, PG_FACTS
    async with store.engine.connect() as conn:
        stored = [tuple(r) for r in (await conn.execute(sa.text(query))).all()]
    assert stored == [(*row, *time, fact, *typed) for row, time, fact, typed in zip(STORED, times, facts, types,
                                                                                     strict=True)]


async def test_rows_read_back(store: Store, clock: FakeClock) -> None:
    """Through the schema's types: aware UTC datetimes, facts as they were given (None as None)."""
    await _record(store, clock)
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.select(observed_events).order_by(observed_events.c.stream_seq))).all()
    given = {r.stream_seq: r for r in reversed([*FIRST, *SECOND])}  # the first of each sequence
    for row in rows:
        expected = given[row.stream_seq]
        recorded = RECORDED if row.stream_seq <= 4 else RECORDED_LATER
        assert row._asdict() == {"stream_seq": expected.stream_seq, "msg_id": expected.msg_id,
                                 "kind": expected.kind, "event_type": expected.event_type,
                                 "namespace": expected.namespace, "name": expected.name, "uid": expected.uid,
                                 "resource_version": expected.resource_version,
                                 "observed_at": expected.observed_at, "recorded_at": recorded,
                                 "owner": expected.owner, "facts": expected.facts}
        assert row.observed_at.tzinfo == UTC and row.recorded_at.tzinfo == UTC
    assert len(rows) == 6


async def test_a_naive_datetime_is_refused(store: Store) -> None:
    """Refused as every store timestamp is (store.tables.UtcDateTime), whichever error carries the message."""
    with pytest.raises((ValueError, sa.exc.StatementError), match="naive datetime"):
        async with store.transaction() as tx:
            await tx.record_events([_row(1, observed_at=datetime(2026, 11, 28, 12))])
    async with store.engine.connect() as conn:
        assert (await conn.execute(sa.text("SELECT count(*) FROM observed_events"))).scalar() == 0


async def test_a_large_batch_is_counted_whole(store: Store) -> None:
    """More rows than one statement's page of values (SQLAlchemy's insertmanyvalues sends 1,000 a statement), half of
    them recorded before: the count is of the new ones, all of them."""
    async with store.transaction() as tx:
        assert await tx.record_events([_row(seq) for seq in range(0, 2500, 2)]) == 1250
    async with store.transaction() as tx:
        assert await tx.record_events([_row(seq) for seq in range(2500)]) == 1250
    async with store.engine.connect() as conn:
        assert (await conn.execute(sa.text("SELECT count(*), min(stream_seq), max(stream_seq) "
                                           "FROM observed_events"))).one() == (2500, 0, 2499)


async def test_a_batch_of_one(store: Store) -> None:
    """One row is one execution, not a batch of them (SQLAlchemy and the drivers take another path): counted alike."""
    async with store.transaction() as tx:
        assert await tx.record_events([_row(1)]) == 1
        assert await tx.record_events([_row(1, name="again")]) == 0
    async with store.engine.connect() as conn:
        assert (await conn.execute(sa.text("SELECT stream_seq, name FROM observed_events"))).all() == [(1, "pod-1")]
