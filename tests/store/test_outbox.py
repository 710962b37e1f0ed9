"""The outbox: insert-or-ignore on the idempotency key, the relay's pending scan and mark_sent."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from store.engine import Store
from tests.store.builders import FakeClock, action, at, decision


async def new_decision(store: Store, correlation_id: str = "c-1") -> int:
    async with store.transaction() as tx:
        return await tx.insert_decision(decision(correlation_id))


async def test_enqueue_ignores_duplicate_keys(store: Store) -> None:
    """A replayed decision's actions are not queued twice, and the first payload stays."""
    decision_id = await new_decision(store)
    async with store.transaction() as tx:
        assert await tx.enqueue([action("a", decision_id, payload=b"first"), action("b", decision_id)]) == ["a", "b"]
    async with store.transaction() as tx:
        assert await tx.enqueue([action("a", decision_id, payload=b"replayed"), action("c", decision_id),
                                 action("c", decision_id)]) == ["c"]
    pending = await store.pending(10)
    assert [(r.key, r.payload) for r in pending] == [("a", b"first"), ("b", b"{}"), ("c", b"{}")]


async def test_enqueue_does_not_resurrect_sent_rows(store: Store) -> None:
    """An action enqueued again after the relay sent it stays sent."""
    decision_id = await new_decision(store)
    async with store.transaction() as tx:
        await tx.enqueue([action("a", decision_id)])
    assert await store.mark_sent(["a"]) == 1
    async with store.transaction() as tx:
        assert await tx.enqueue([action("a", decision_id)]) == []
    assert await store.pending(10) == []


async def test_pending_is_oldest_first_and_mark_sent_removes(store: Store, clock: FakeClock) -> None:
    """The relay sees pending rows oldest first, up to its limit; sent rows leave the scan."""
    decision_id = await new_decision(store)
    async with store.transaction() as tx:
        await tx.enqueue([action("late", decision_id, created=3), action("early", decision_id, created=1),
                          action("mid-b", decision_id, created=2), action("mid-a", decision_id, created=2)])
    assert [r.key for r in await store.pending(3)] == ["early", "mid-a", "mid-b"]
    clock.tick(30)
    assert await store.mark_sent(["early", "mid-a"]) == 2
    assert [r.key for r in await store.pending(10)] == ["mid-b", "late"]
    sent = {r.key: r for r in await store.outbox_for(decision_id)}
    assert (sent["early"].state, sent["early"].sent_at, sent["early"].attempts) == ("sent", clock.now, 1)
    assert (sent["late"].state, sent["late"].sent_at, sent["late"].created_at) == ("pending", None, at(3))


async def test_mark_sent_touches_pending_rows_only(store: Store) -> None:
    """Marking twice changes nothing the second time."""
    decision_id = await new_decision(store)
    async with store.transaction() as tx:
        await tx.enqueue([action("a", decision_id), action("b", decision_id)])
    assert await store.mark_sent(["a"]) == 1
    assert await store.mark_sent(["a", "unknown"]) == 0
    assert {r.key: (r.state, r.attempts) for r in await store.outbox_for(decision_id)} == {
        "a": ("sent", 1), "b": ("pending", 0)}


async def test_outbox_rows_need_their_decision(store: Store) -> None:
    """The foreign key to decisions is enforced on both backends (SQLite: foreign_keys=ON)."""
    with pytest.raises(sa.exc.IntegrityError):
        async with store.transaction() as tx:
            await tx.enqueue([action("orphan", 999)])
