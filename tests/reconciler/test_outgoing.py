"""The outbox rows a loop hands to the relay (reconciler.outgoing): in the scan's order, none published twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reconciler.outgoing import Outgoing
from store.outbox import OutboxRow

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def row(key: str, at: datetime = T0) -> OutboxRow:
    return OutboxRow(key=key, decision_id=1, subject="kubus.actions.3", payload=key.encode(), created_at=at)


def keys(rows: list[OutboxRow]) -> list[str]:
    return [r.key for r in rows]


def test_rows_are_taken_once_in_the_scans_order_creation_then_key() -> None:
    outgoing = Outgoing()
    later = T0 + timedelta(milliseconds=3)
    outgoing.hand([row("b/status", later), row("b/create", later)])
    outgoing.hand([row("a/status"), row("a/create")])  # a commit's rows: one clock, ordered by key as SQL orders them
    assert keys(outgoing.take()) == ["a/create", "a/status", "b/create", "b/status"]
    assert outgoing.take() == []


def test_complete_only_from_a_scanning_round_until_rows_are_lost() -> None:
    outgoing = Outgoing()
    assert not outgoing.complete  # at the start the table may hold rows of an earlier process
    outgoing.scanning()
    assert outgoing.complete
    outgoing.lost()
    assert not outgoing.complete


def test_a_scanning_round_publishes_the_rows_it_reads_and_the_handover_the_rest() -> None:
    outgoing = Outgoing()
    outgoing.hand([row("before")])  # in the table already: the scan reads it
    outgoing.scanning()
    outgoing.hand([row("during")])  # committed before the scan read, handed too
    outgoing.scanned([row("before"), row("during"), row("read-then-handed")])
    outgoing.hand([row("read-then-handed"), row("after")])  # its commit seen by the scan, handed just after
    assert keys(outgoing.take()) == ["after"]
    outgoing.hand([row("read-then-handed-again")])
    assert keys(outgoing.take()) == ["read-then-handed-again"]  # the scan's keys filter one take only
