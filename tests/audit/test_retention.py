"""Retention: rows older than the cutoff go, in batches, pending actions and their decisions stay; the
reconciler enforces it on an interval, `kubus db prune` on demand."""

from __future__ import annotations

import argparse
import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from kubus.cli import build_parser
from reconciler.core.shadow import CREATE_POD, UPSTREAM, Act
from reconciler.service import enforce_retention
from store import retention, shadow
from store.engine import Store
from store.retention import Pruned, parse_duration, parse_retention
from store.shadow import ShadowActRow
from store.ticks import BATCH, Tick
from tests.audit.scenario import Scenario, at


async def counts(store: Store) -> dict[str, int]:
    async with store.engine.connect() as conn:
        return {t: int((await conn.exec_driver_sql(f"SELECT COUNT(*) FROM {t}")).scalar_one())
                for t in ("observed_events", "action_results", "outbox", "action_targets", "decisions",
                          "reconciler_ticks", "shadow_acts")}


async def add_ticks(store: Store) -> None:
    async with store.transaction() as tx:
        for when in (at(1), at(5400)):
            await tx.record_tick(Tick(instance="reconciler-0", kind=BATCH, at=when, caught_up=True))
            # a shadow's acts, by when they happened (docs/shadow.md)
            act = Act(UPSTREAM, "ReplicaSet/default/web", "uid-web", CREATE_POD, seq=1, ref="Pod/u/1/ADDED")
            await shadow.record(tx.conn, [ShadowActRow(act=act, at=when)])


@pytest.mark.parametrize("batch", [retention.BATCH, 2])
async def test_prune_deletes_what_is_older_than_the_cutoff(store: Store, history: Scenario, batch: int) -> None:
    """At 10:05 the first three decisions, their sent actions, results and events are history; the
    pending status write of 10:02 keeps its decision; everything from 11:30 stays."""
    await add_ticks(store)
    assert await counts(store) == {"observed_events": 13, "action_results": 9, "outbox": 7, "action_targets": 10,
                                   "decisions": 6, "reconciler_ticks": 2, "shadow_acts": 2}
    pruned = await store.prune(at(300), batch=batch)
    assert pruned.as_dict() == {"observed_events": 11, "action_results": 8, "outbox": 5, "decisions": 3,
                                "reconciler_ticks": 1, "shadow_acts": 1, "would_do_actions": 0}
    assert await counts(store) == {"observed_events": 2, "action_results": 1, "outbox": 2, "action_targets": 2,
                                   "decisions": 3, "reconciler_ticks": 1, "shadow_acts": 1}
    async with store.engine.connect() as conn:
        rows = (await conn.exec_driver_sql(
            "SELECT action, target_name, state, outcome, confirmed_seq FROM audit_actions ORDER BY decided_at")).all()
        left = sorted(int(i) for i in (await conn.exec_driver_sql("SELECT id FROM decisions")).scalars())
    assert [tuple(r) for r in rows] == [("update_status", "web", "pending", None, None),
                                        ("create_pods", "agent-ccccc", "sent", "succeeded", 13)]
    assert left == sorted(history.decision_ids[n] for n in (33, 4, 5))
    assert (await store.prune(at(300), batch=batch)).total == 0


async def test_prune_keeps_a_pending_action_however_old(store: Store, history: Scenario) -> None:
    """Everything goes but what the relay has yet to publish, and the decision it belongs to."""
    await store.prune(at(10 ** 6))
    assert await counts(store) == {"observed_events": 0, "action_results": 0, "outbox": 1, "action_targets": 1,
                                   "decisions": 1, "reconciler_ticks": 0, "shadow_acts": 0}


def test_db_prune_command(history: Scenario, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kubus db prune --older-than 7d`: everything the scenario wrote in 2025 is older than that."""
    args = build_parser().parse_args(["db", "prune", "--older-than", "7d", "--db-url", db_url,
                                      "--data-dir", str(tmp_path)])
    assert args.run(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("kubus db prune: deleted 13 observed events, 9 action results, 6 outbox rows, "
                          "5 decisions, 0 reconciler ticks, 0 shadow acts, 0 would do actions older than ")


def test_db_prune_needs_a_duration(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["db", "prune", "--older-than", "a week"])
    assert info.value.code == 2
    assert "'a week' is not a duration; use a number and a unit (s, m, h, d, w), e.g. 90s, 1h30m, 7d" in \
        capsys.readouterr().err


class FakeStore:
    """Prune calls, answered from a script (an exception is raised)."""

    def __init__(self, *answers: Pruned | Exception) -> None:
        self.answers = list(answers)
        self.cutoffs: list[datetime] = []
        self.done = asyncio.Event()  # the script is through: the next call waits until cancelled

    async def prune(self, before: datetime) -> Pruned:
        if not self.answers:
            self.done.set()
            await asyncio.Event().wait()
        self.cutoffs.append(before)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_the_reconciler_enforces_retention_on_an_interval(caplog: pytest.LogCaptureFixture) -> None:
    """Each round prunes what is older than the retention; a failed round is logged and retried."""
    now = datetime(2025, 6, 8, 12, 0, tzinfo=UTC)
    store = FakeStore(sa.exc.OperationalError("DELETE", {}, Exception("database is locked")),
                      Pruned(observed_events=4), Pruned())
    caplog.set_level(logging.INFO, "kubus.reconciler")
    task = asyncio.create_task(enforce_retention(store, timedelta(days=7), interval=0, clock=lambda: now))
    try:
        await asyncio.wait_for(store.done.wait(), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert store.cutoffs == [datetime(2025, 6, 1, 12, 0, tzinfo=UTC)] * 3
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("audit trail retention paused: (builtins.Exception) database is locked") for m in messages)
    assert any(m.startswith("audit trail retention: deleted {'observed_events': 4,") for m in messages)


@pytest.mark.parametrize(("text", "expected"), [
    ("90s", timedelta(seconds=90)), ("15m", timedelta(minutes=15)), ("1h30m", timedelta(minutes=90)),
    ("7d", timedelta(days=7)), ("2w", timedelta(days=14)), ("0.5h", timedelta(minutes=30)),
])
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "7", "d", "7x", "1h 30m", "-1h", "a week"])
def test_not_durations(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


def test_retention_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """--retention on `kubus reconcile` and `kubus up`, from KUBUS_RETENTION, 30 days by default."""
    def parsed(*argv: str) -> Any:
        args: argparse.Namespace = build_parser().parse_args(["reconcile", *argv])
        return args.retention

    assert parse_retention("off") is None and parse_retention("0") is None
    monkeypatch.delenv("KUBUS_RETENTION", raising=False)
    assert parsed() == timedelta(days=30)
    assert parsed("--retention", "12h") == timedelta(hours=12)
    assert parsed("--retention", "off") is None
    monkeypatch.setenv("KUBUS_RETENTION", "7d")
    assert parsed() == timedelta(days=7)
    assert build_parser().parse_args(["up", "--retention", "1d"]).retention == timedelta(days=1)
