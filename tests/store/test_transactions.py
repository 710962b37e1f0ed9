"""The unit of work: a reconciler's writes for a batch commit together or not at all."""

from __future__ import annotations

import asyncio

import pytest

from store.engine import Store
from tests.store.builders import action, at, decision, event, expectations


class Crash(Exception):
    pass


async def test_exception_inside_transaction_leaves_nothing(store: Store) -> None:
    """A failure after every write of a sync rolls back the decision, outbox rows, expectations,
    events and the position advance."""
    with pytest.raises(Crash):
        async with store.transaction() as tx:
            await tx.record_events([event(7)])
            decision_id = await tx.insert_decision(decision("c-1", seq=7))
            await tx.enqueue([action("a-1", decision_id)])
            await tx.save_expectations([expectations(adds=1)])
            await tx.advance("reconciler", 0, 7)
            raise Crash
    assert await store.pending(10) == []
    assert await store.decisions_for("ns/ds") == []
    async with store.transaction() as tx:
        assert await tx.position("reconciler", 0) == 0
        assert await tx.load_expectations(["ns/ds"]) == {}
        assert await tx.record_events([event(7)]) == 1  # was not recorded before


async def test_transaction_commits_everything_together(store: Store) -> None:
    """Decision, actions, expectations and position are all visible after the block ends."""
    async with store.transaction() as tx:
        decision_id = await tx.insert_decision(decision("c-1", seq=7))
        await tx.enqueue([action("a-1", decision_id), action("a-2", decision_id, created=1)])
        await tx.save_expectations([expectations(adds=2)])
        await tx.advance("reconciler", 0, 7)
    assert [r.key for r in await store.pending(10)] == ["a-1", "a-2"]
    [stored] = await store.decisions_for("ns/ds")
    assert stored.id == decision_id
    assert [r.key for r in await store.outbox_for(decision_id)] == ["a-1", "a-2"]
    async with store.transaction() as tx:
        assert await tx.position("reconciler", 0) == 7
        assert (await tx.load_expectations(["ns/ds"]))["ns/ds"].adds == 2


async def test_concurrent_transactions_serialize(store: Store) -> None:
    """Read-then-write transactions running at once all commit (SQLite: BEGIN IMMEDIATE waits)."""
    async def sync(n: int) -> None:
        async with store.transaction() as tx:
            seq = await tx.position("reconciler", 0)
            await tx.insert_decision(decision(f"c-{n}", seq=n))
            await tx.advance("reconciler", 0, max(seq, n))

    await asyncio.gather(*(sync(n) for n in range(1, 13)))
    assert len(await store.decisions_for("ns/ds")) == 12
    async with store.transaction() as tx:
        assert await tx.position("reconciler", 0) == 12


async def test_naive_timestamps_are_refused(store: Store) -> None:
    """Timestamps must be timezone-aware; they come back as aware UTC."""
    with pytest.raises(Exception, match="naive datetime"):
        async with store.transaction() as tx:
            await tx.insert_decision(decision(decided_at=at(0).replace(tzinfo=None)))
    async with store.transaction() as tx:
        await tx.insert_decision(decision())
    [stored] = await store.decisions_for("ns/ds")
    assert stored.decided_at == at(1)
    assert stored.decided_at.utcoffset() is not None
