"""Reconciler state: positions, expectations, failed-pod backoff, observed events
and decisions."""

from __future__ import annotations

from dataclasses import replace

import pytest
import sqlalchemy as sa

from store.engine import Store
from tests.store.builders import FakeClock, at, backoff, decision, event, expectations


async def test_positions_start_at_zero_and_never_go_back(store: Store, clock: FakeClock) -> None:
    """advance is monotonic per (consumer, partition); other partitions and consumers are apart."""
    async with store.transaction() as tx:
        assert await tx.position("r", 0) == 0
        await tx.advance("r", 0, 5)
        await tx.advance("r", 0, 3)
        await tx.advance("r", 1, 2)
        await tx.advance("other", 0, 100)
    async with store.transaction() as tx:
        assert await tx.position("r", 0) == 5
        await tx.advance("r", 0, 9)
        await tx.advance("r", 0, 9)
    async with store.transaction() as tx:
        assert await tx.positions("r") == {0: 9, 1: 2}
        assert await tx.positions("nobody") == {}


async def test_expectations_round_trip(store: Store) -> None:
    """Counts and the UID-tracked deletion keys survive a save and load; a save overwrites."""
    async with store.transaction() as tx:
        await tx.save_expectations([
            expectations("ns/a", adds=3, set_at=1),
            expectations("ns/b", dels=2, deleting=frozenset({"ns/pod-2", "ns/pod-1"}), set_at=2),
        ])
    async with store.transaction() as tx:
        loaded = await tx.load_expectations(["ns/a", "ns/b", "ns/missing"])
        assert loaded == {"ns/a": expectations("ns/a", adds=3, set_at=1),
                          "ns/b": expectations("ns/b", dels=2, deleting=frozenset({"ns/pod-1", "ns/pod-2"}), set_at=2)}
        await tx.save_expectations([expectations("ns/b", dels=1, deleting=frozenset({"ns/pod-2"}), set_at=3)])
        await tx.delete_expectations(["ns/a"])
    async with store.transaction() as tx:
        assert await tx.load_expectations(["ns/a", "ns/b"]) == {
            "ns/b": expectations("ns/b", dels=1, deleting=frozenset({"ns/pod-2"}), set_at=3)}
        assert await tx.load_expectations([]) == {}


async def test_backoff_put_get_and_gc(store: Store) -> None:
    """Backoff entries are upserted by key, and garbage-collected by age."""
    async with store.transaction() as tx:
        await tx.save_backoff([backoff("ds/1/n1", 10, updated=0), backoff("ds/1/n2", 20, updated=100),
                               backoff("ds/1/n3", 1, updated=0)])
        await tx.save_backoff([backoff("ds/1/n1", 20, updated=50)])
    async with store.transaction() as tx:
        assert await tx.load_backoff(["ds/1/n1", "ds/1/x"]) == {"ds/1/n1": backoff("ds/1/n1", 20, updated=50)}
        await tx.delete_backoff(["ds/1/n3"])
        assert await tx.gc_backoff(at(60)) == 1
    async with store.transaction() as tx:
        assert set(await tx.load_backoff(["ds/1/n1", "ds/1/n2", "ds/1/n3"])) == {"ds/1/n2"}


async def test_observed_events_are_recorded_once(store: Store, clock: FakeClock) -> None:
    """A redelivered event (same stream sequence) is not recorded again."""
    async with store.transaction() as tx:
        assert await tx.record_events([event(1), event(2, name="pod-2")]) == 2
        assert await tx.record_events([event(2, name="pod-2"), event(3)]) == 1
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.text("SELECT stream_seq, name FROM observed_events ORDER BY 1"))).all()
    assert [tuple(r) for r in rows] == [(1, "pod-1"), (2, "pod-2"), (3, "pod-1")]


async def test_decisions_keep_order_ids_and_summary(store: Store) -> None:
    """A batch of decisions gets ids in order; the JSON summary and optional fields round-trip."""
    batch = [decision("c-1", seq=1), decision("c-2", seq=2, trigger=None, lease_epoch=4,
                                                  summary={"delete": [{"pod": "p", "why": "excess"}]})]
    async with store.transaction() as tx:
        ids = await tx.insert_decisions(batch)
    assert ids[1] > ids[0]
    newest_first = await store.decisions_for("ns/ds")
    assert newest_first == [replace(batch[1], id=ids[1]), replace(batch[0], id=ids[0])]
    assert await store.decisions_for("ns/ds", limit=1) == newest_first[:1]


async def test_duplicate_correlation_id_is_refused(store: Store) -> None:
    """Deciding twice under one correlation id is a bug surfaced as IntegrityError."""
    async with store.transaction() as tx:
        await tx.insert_decision(decision("c-1"))
    with pytest.raises(sa.exc.IntegrityError):
        async with store.transaction() as tx:
            await tx.insert_decision(decision("c-1"))

