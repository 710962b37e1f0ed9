"""The statements store/ builds once, with their values as parameters, against the same statements built with the
values in place (as before they were prebuilt): the same SQL in both dialects, up to the parameters' names, and the
same parameter types and bound values, so that what they write and compare is unchanged."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import asyncpg
from sqlalchemy.engine import Dialect

from reconciler.core.ticks import BATCH, START, Tick
from store import leases, outbox, sql, streams, ticks
from store.tables import outbox as outbox_t
from store.tables import partition_leases, reconciler_ticks, stream_identities

AT = datetime(2026, 11, 28, 23, 40, 1, 123456, tzinfo=UTC)
DIALECTS = [sqlite.dialect(), postgresql.dialect()]


def _shape(stmt: Any, dialect: Dialect, values: dict[str, Any], *, column_keys: list[str] | None = None
           ) -> tuple[str, list[tuple[str, Any]]]:
    """The statement's SQL with its parameters numbered in order of appearance, and each parameter's type and
    bound value (after the type's bind processing) in that order. `column_keys`: an insert's columns, as its
    execution with `values` as parameters compiles it."""
    compiled = stmt.compile(dialect=dialect, column_keys=column_keys)
    sql = compiled.string
    if compiled.positional:  # SQLite's "?": the names in the order they appear
        order = list(compiled.positiontup or [])
    else:
        order = [a or b for a, b in re.findall(r"%\((\w+)\)s|__\[POSTCOMPILE_(\w+)\]", sql)]
    assert order, sql
    for i, name in enumerate(order):
        sql = sql.replace(f"%({name})s", f"<{i}>").replace(f"__[POSTCOMPILE_{name}]", f"<{i}>")
    params = compiled.construct_params(values)
    typed = []
    for name in order:
        bind = compiled.binds[name]
        value = params[name]
        process = bind.type._cached_bind_processor(dialect)
        if process is not None:
            value = [process(v) for v in value] if bind.expanding else process(value)
        typed.append((repr(bind.type), value))
    return sql, typed


def _same(old: Any, new: Any, dialect: Dialect, new_values: dict[str, Any], *, insert: bool = False) -> None:
    old_sql, old_params = _shape(old, dialect, {})
    new_sql, new_params = _shape(new, dialect, new_values, column_keys=list(new_values) if insert else None)
    assert new_sql == old_sql
    assert new_params == old_params


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_stream_identity(dialect: Dialect) -> None:
    old = sa.select(stream_identities.c.created).where(stream_identities.c.name == "reconciler")
    _same(old, streams.IDENTITY, dialect, {"name": "reconciler"})


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_lease_lock(dialect: Dialect) -> None:
    t = partition_leases
    old = sa.select(t).where(t.c.partition.in_([0, 3])).order_by(t.c.partition).with_for_update()
    _same(old, leases.LOCK, dialect, {"partitions": [0, 3]})


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_lease_extend(dialect: Dialect) -> None:
    t = partition_leases
    old = (sa.update(t).where(t.c.partition.in_([0, 3]))
           .values(expires_at=sa.case((t.c.expires_at < AT, AT), else_=t.c.expires_at)))
    _same(old, leases.EXTEND, dialect, {"partitions": [0, 3], "until": AT, "until_then": AT})


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_outbox_mark_sent(dialect: Dialect) -> None:
    t = outbox_t
    old = (sa.update(t).where(t.c.key.in_(["a", "b"]), t.c.state == "pending")
           .values(state="sent", sent_at=AT, attempts=t.c.attempts + 1))
    _same(old, outbox.MARK_SENT, dialect, {"keys": ["a", "b"], "at": AT})


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_outbox_pending(dialect: Dialect) -> None:
    t = outbox_t
    old = sa.select(t).where(t.c.state == "pending").order_by(t.c.created_at, t.c.key).limit(500)
    _same(old, outbox.PENDING, dialect, {"limit": 500})
    old = (sa.select(t).where(t.c.state == "pending", t.c.subject.in_(["s.0", "s.1"]))
           .order_by(t.c.created_at, t.c.key).limit(7))
    _same(old, outbox.PENDING_FOR, dialect, {"subjects": ["s.0", "s.1"], "limit": 7})


def test_a_changed_type_is_seen() -> None:
    """The comparison can fail: the CASE's THEN typed as the column (UtcDateTime) rather than as the value alone
    was (DateTime) binds another parameter type."""
    t = partition_leases
    old = (sa.update(t).where(t.c.partition.in_([0]))
           .values(expires_at=sa.case((t.c.expires_at < AT, AT), else_=t.c.expires_at)))
    wrong = (sa.update(t).where(t.c.partition.in_(sa.bindparam("partitions", expanding=True)))
             .values(expires_at=sa.case((t.c.expires_at < sa.bindparam("until", type_=t.c.expires_at.type),
                                         sa.bindparam("until_then", type_=t.c.expires_at.type)),
                                        else_=t.c.expires_at)))
    with pytest.raises(AssertionError):
        _same(old, wrong, sqlite.dialect(), {"partitions": [0], "until": AT, "until_then": AT})


TICKS = [
    Tick(instance="reconciler-0", kind=BATCH, at=AT, caught_up=True, first_seq=7, last_seq=9, partitions=[0, 3],
         result_keys=["a/create/1"], results=[{"key": "a/create/1", "outcome": "succeeded", "code": 201}],
         decision_ids=[4, 5]),
    Tick(instance="reconciler-0", kind=START, at=AT, caught_up=False, first_seq=1, last_seq=None,
         state={"positions": {"0": 6}, "expectations": {}, "backoff": {}}, lease_epoch=3),
    Tick(instance="reconciler-0", kind=BATCH, at=AT, caught_up=False),  # nulls and empty lists
]


def _values(tick: Tick) -> dict[str, Any]:
    return {k: v for k, v in sql.values_of(tick).items() if k != "id"}


# the JSON columns' bind processing is the driver's: asyncpg's, as the store runs on PostgreSQL
@pytest.mark.parametrize("dialect", [sqlite.dialect(), asyncpg.dialect()], ids=lambda d: d.name)
@pytest.mark.parametrize("tick", TICKS, ids=["batch", "start", "empty"])
def test_tick_insert(dialect: Dialect, tick: Tick) -> None:
    values = _values(tick)
    old = sa.insert(reconciler_ticks).values(values).returning(reconciler_ticks.c.id)
    _same(old, ticks.INSERT, dialect, values, insert=True)


def test_a_tick_is_stored_as_it_was() -> None:
    """What SQLite holds, column by column with its storage class (JSON null and SQL NULL differ), for the old
    statement and the prebuilt one."""
    engine = sa.create_engine("sqlite://")
    reconciler_ticks.create(engine)
    with engine.begin() as conn:
        for tick in TICKS:
            values = _values(tick)
            conn.execute(sa.insert(reconciler_ticks).values(values).returning(reconciler_ticks.c.id)).one()
            conn.execute(ticks.INSERT, values).one()
        columns = [c.name for c in reconciler_ticks.columns if c.name != "id"]
        stored = conn.exec_driver_sql("SELECT " + ", ".join(f"{c}, typeof({c})" for c in columns)
                                      + " FROM reconciler_ticks ORDER BY id").all()
    assert len(stored) == 2 * len(TICKS)
    for old, new in zip(stored[0::2], stored[1::2], strict=True):
        assert new == old
