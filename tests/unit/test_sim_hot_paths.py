"""The sim's hot paths made cheaper for issue 25 (round 6) answer as before: timestamps, resource keys, store reads."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

from sim import resources as R
from sim.registry import format_time
from sim.store import ADDED, ObjectStore


def test_format_time_of_each_second_whatever_came_before() -> None:
    """The last second's text is reused only for the same UTC second; other seconds, other zones and earlier
    times are formatted afresh."""
    base = datetime(2026, 11, 29, 6, 5, 48, 100, tzinfo=UTC)
    plus_two = timezone(timedelta(hours=2))
    cases = [
        (base, "2026-11-29T06:05:48Z"),
        (base.replace(microsecond=999_999), "2026-11-29T06:05:48Z"),
        (base + timedelta(seconds=1), "2026-11-29T06:05:49Z"),
        (base.astimezone(plus_two), "2026-11-29T06:05:48Z"),  # the same instant, written in another zone
        (base.replace(tzinfo=plus_two), "2026-11-29T04:05:48Z"),  # the same fields, another instant
        (base, "2026-11-29T06:05:48Z"),
        (base - timedelta(days=400), "2025-10-25T06:05:48Z"),
        (base + timedelta(seconds=1), "2026-11-29T06:05:49Z"),
        (base + timedelta(seconds=1, microseconds=5), "2026-11-29T06:05:49Z"),
    ]
    assert [format_time(t) for t, _ in cases] == [text for _, text in cases]


def test_a_resource_hashes_and_finds_as_its_equal() -> None:
    """A resource's hash is its fields' (kept, not recomputed): an equal copy keys the same table entries, a
    resource differing in any field does not."""
    store = ObjectStore()
    store.put(R.PODS, {"metadata": {"name": "p", "namespace": "ns"}}, ADDED)
    copy = dataclasses.replace(R.PODS)
    assert copy is not R.PODS and copy == R.PODS and hash(copy) == hash(R.PODS)
    found = store.get(copy, "ns", "p")
    assert found is not None and found.obj["metadata"]["name"] == "p"
    other = dataclasses.replace(R.PODS, verbs=("get",))
    assert hash(other) != hash(R.PODS) and store.get(other, "ns", "p") is None
    assert store.get(R.PODS, "ns", "q") is None and store.get(R.PODS, "other", "p") is None
    assert store.get(R.NODES, "", "p") is None
