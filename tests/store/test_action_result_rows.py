"""The action-result rows exactly as they are stored, on SQLite and PostgreSQL, and the keys `record_results`
returns: every column's value as the database holds it, a redelivered result left as it was (in one batch too:
the first of a key wins) and not returned, the keys of the new rows in the order given. Pinned before the rows'
recording was made cheaper (issue 25): what is written and returned must not change with how it is bound."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from store import sql
from store.engine import Store
from store.results import ResultRow
from tests.store.builders import FakeClock

PLUS_TWO = timezone(timedelta(hours=2))
RECORDED = datetime(2026, 11, 29, 1, 2, 3, 456789, tzinfo=UTC)
RECORDED_LATER = datetime(2026, 11, 29, 1, 2, 4, tzinfo=PLUS_TWO)
FINISHED = datetime(2026, 11, 28, 23, 59, 59, 999999, tzinfo=UTC)


def _row(key: str, **kw: object) -> ResultRow:
    fields: dict[str, object] = {
        "action_key": f"action-{key}", "decision_id": 7, "action": "CreatePod", "outcome": "succeeded", "code": 201,
        "reason": "", "message": "", "object_uid": f"uid-{key}", "executor": "executor-0", "attempts": 1,
        "finished_at": FINISHED}
    fields.update(kw)
    return ResultRow(key=key, **fields)  # type: ignore[arg-type]


FIRST = [
    _row("r1", subject="ns/pod-1", resource_version="12"),
    # NULLs, another offset without microseconds (stored in UTC), a big decision id, a recorded_at the store replaces
    _row("r2", decision_id=None, code=None, object_uid=None, outcome="failed", reason="Conflict",
         message="ünïcode \"quoted\"\nline", finished_at=datetime(2026, 11, 29, 0, 30, tzinfo=PLUS_TWO),
         recorded_at=datetime(2000, 1, 1, tzinfo=UTC)),
    _row("r3", decision_id=2**40, action="DeletePod", code=404, reason="NotFound", attempts=3,
         finished_at=datetime(2026, 11, 28, 12, 0, 0, 1, tzinfo=timezone(timedelta(hours=-5, minutes=-30)))),
]
# a redelivery of r3 and r1 (other values: ignored, the first stays), new r5 and r4, r4 twice (the first wins)
SECOND = [
    _row("r3", outcome="failed"), _row("r5", code=500, subject="ns/five"), _row("r1", attempts=9),
    _row("r4", message="first"), _row("r4", message="second", attempts=2),
]

# (key, action_key, decision_id, action, outcome, code, reason, message, object_uid, executor, attempts, subject,
# resource_version), then finished_at and recorded_at per backend below
STORED = [
    ("r1", "action-r1", 7, "CreatePod", "succeeded", 201, "", "", "uid-r1", "executor-0", 1, "ns/pod-1", "12"),
    ("r2", "action-r2", None, "CreatePod", "failed", None, "Conflict", "ünïcode \"quoted\"\nline", None,
     "executor-0", 1, None, None),
    ("r3", "action-r3", 2**40, "DeletePod", "succeeded", 404, "NotFound", "", "uid-r3", "executor-0", 3, None,
     None),
    ("r4", "action-r4", 7, "CreatePod", "succeeded", 201, "", "first", "uid-r4", "executor-0", 1, None, None),
    ("r5", "action-r5", 7, "CreatePod", "succeeded", 500, "", "", "uid-r5", "executor-0", 1, "ns/five", None),
]
SQLITE_TIMES = [
    ("2026-11-28 23:59:59.999999", "2026-11-29 01:02:03.456789"),
    ("2026-11-28 22:30:00.000000", "2026-11-29 01:02:03.456789"),
    ("2026-11-28 17:30:00.000001", "2026-11-29 01:02:03.456789"),
    ("2026-11-28 23:59:59.999999", "2026-11-28 23:02:04.000000"),
    ("2026-11-28 23:59:59.999999", "2026-11-28 23:02:04.000000"),
]
PG_TIMES = [(f.replace(" ", "T") + "+00:00", r.replace(" ", "T") + "+00:00") for f, r in SQLITE_TIMES]
COLUMNS = ("key, action_key, decision_id, action, outcome, code, reason, message, object_uid, executor, attempts, "
           "subject, resource_version")


async def _record(store: Store, clock: FakeClock) -> tuple[list[str], list[str]]:
    clock.now = RECORDED
    async with store.transaction() as tx:
        first = await tx.record_results(FIRST, RECORDED)
    async with store.transaction() as tx:
        second = await tx.record_results(SECOND, RECORDED_LATER)
        assert await tx.record_results([], RECORDED_LATER) == []
    return first, second


async def test_rows_as_stored(store: Store, backend: str, clock: FakeClock) -> None:
    # the new keys, in the order given (the first of a key): the old multi-row VALUES .. RETURNING gave them so
    assert await _record(store, clock) == (["r1", "r2", "r3"], ["r5", "r4"])
    if backend == "sqlite":
        query = (f"SELECT {COLUMNS}, finished_at, recorded_at, typeof(decision_id), typeof(code), typeof(object_uid), "
                 "typeof(finished_at), typeof(recorded_at), typeof(subject) FROM action_results ORDER BY key")
        types = [("null" if r[2] is None else "integer", "null" if r[5] is None else "integer",
                  "null" if r[8] is None else "text", "text", "text", "null" if r[11] is None else "text")
                 for r in STORED]
        times = SQLITE_TIMES
    else:
        utc = "AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"
        query = (f"SELECT {COLUMNS}, to_char(finished_at {utc}, to_char(recorded_at {utc}, "
                 "pg_typeof(decision_id)::text, pg_typeof(code)::text, pg_typeof(attempts)::text, "
                 "pg_typeof(finished_at)::text, pg_typeof(recorded_at)::text, (subject IS NULL)::text "
                 "FROM action_results ORDER BY key")
        types = [("bigint", "integer", "integer", "timestamp with time zone", "timestamp with time zone",
                  str(r[11] is None).lower()) for r in STORED]
        times = PG_TIMES
    async with store.engine.connect() as conn:
        stored = [tuple(r) for r in (await conn.execute(sa.text(query))).all()]
    assert stored == [(*row, *time, *typed) for row, time, typed in zip(STORED, times, types, strict=True)]


async def test_rows_read_back(store: Store, clock: FakeClock) -> None:
    """Through the schema's types and `results_for`: aware UTC datetimes, the first of each key."""
    await _record(store, clock)
    given = {r.key: r for r in reversed([*FIRST, *SECOND])}
    read = [*await store.results_for(7), *await store.results_for(2**40)]
    async with store.engine.connect() as conn:
        nulls = (await conn.execute(sa.text("SELECT key FROM action_results WHERE decision_id IS NULL"))).all()
    assert [k for (k,) in nulls] == ["r2"]
    assert sorted(r.key for r in read) == ["r1", "r3", "r4", "r5"]
    for row in read:
        recorded = RECORDED if row.key <= "r3" else RECORDED_LATER
        expected = given[row.key]
        assert row.finished_at == expected.finished_at and row.finished_at.tzinfo == UTC
        assert row.recorded_at == recorded and row.recorded_at.tzinfo == UTC
        assert (row.action_key, row.decision_id, row.action, row.outcome, row.code, row.reason, row.message,
                row.object_uid, row.executor, row.attempts, row.subject, row.resource_version) == (
            expected.action_key, expected.decision_id, expected.action, expected.outcome, expected.code,
            expected.reason, expected.message, expected.object_uid, expected.executor, expected.attempts,
            expected.subject, expected.resource_version)


async def test_a_batch_of_many_chunks(store: Store) -> None:
    """5,000 results (more than SQLite's 32,766 host parameters hold at 15 a row), every 7th a key recorded
    before, every 11th the repeat of a key earlier in the batch (across chunks too): the new keys, in order."""
    at = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    async with store.transaction() as tx:
        assert await tx.record_results([_row(f"k{i:05d}") for i in range(0, 5000, 7)], at) == [
            f"k{i:05d}" for i in range(0, 5000, 7)]
    batch = [_row(f"k{(i * 13) % 2500:05d}" if i % 11 == 0 else f"k{i:05d}", attempts=i) for i in range(5000)]
    expected, seen = [], {f"k{i:05d}" for i in range(0, 5000, 7)}
    for row in batch:
        if row.key not in seen:
            seen.add(row.key)
            expected.append(row)
    async with store.transaction() as tx:
        assert await tx.record_results(batch, at) == [r.key for r in expected]
    async with store.engine.connect() as conn:
        stored = dict((await conn.execute(sa.text("SELECT key, attempts FROM action_results"))).all())
    assert len(stored) == len(seen)
    assert all(stored[r.key] == r.attempts for r in expected)


async def test_a_library_built_with_a_lower_parameter_limit(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks as a library built with SQLITE_MAX_VARIABLE_NUMBER 45 gets them (three rows of 15 a statement): the
    same new keys, in order, a repeat and a key recorded before among them (the limit itself is the real library's,
    which this does not lower)."""
    monkeypatch.setattr(sql, "SQLITE_MAX_VARIABLES", 45)
    at = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    async with store.transaction() as tx:
        assert await tx.record_results([_row("k3")], at) == ["k3"]
    batch = [_row(f"k{i}") for i in range(10)] + [_row("k1"), _row("k10")]
    async with store.transaction() as tx:
        assert await tx.record_results(batch, at) == [f"k{i}" for i in range(11) if i != 3]
    async with store.engine.connect() as conn:
        assert (await conn.execute(sa.text("SELECT count(*) FROM action_results"))).scalar() == 11


def test_the_parameter_limit_is_the_linked_librarys() -> None:
    probe = sqlite3.connect(":memory:")
    try:
        assert min(probe.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER), 32766) == sql.SQLITE_MAX_VARIABLES
    finally:
        probe.close()
