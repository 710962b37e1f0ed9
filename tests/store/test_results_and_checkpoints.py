"""Executor results (idempotent by key) and ingest checkpoints."""

from __future__ import annotations

from store.engine import Store
from tests.store.builders import FakeClock, result


async def test_results_are_recorded_once(store: Store, clock: FakeClock) -> None:
    """A redelivered result is ignored: the first recording, and its time, stay."""
    assert await store.record_results([result("r-1"), result("r-2", outcome="failed", code=422)]) == ["r-1", "r-2"]
    first = clock.now
    clock.tick(10)
    assert await store.record_results([result("r-1", outcome="failed"), result("r-3", decision_id=2)]) == ["r-3"]
    recorded = await store.results_for(1)
    assert [(r.key, r.outcome, r.code, r.recorded_at) for r in recorded] == [
        ("r-1", "succeeded", 201, first), ("r-2", "failed", 422, first)]
    assert recorded[0] == result("r-1", recorded_at=first)
    assert await store.record_results([]) == []


async def test_checkpoints(store: Store) -> None:
    """A kind without a checkpoint has None; a save overwrites (even with a lower version)."""
    assert await store.checkpoint("pods") is None
    await store.save_checkpoint("pods", "100")
    await store.save_checkpoint("nodes", "7")
    await store.save_checkpoint("pods", "90")
    assert await store.checkpoint("pods") == "90"
    assert await store.checkpoints() == {"pods": "90", "nodes": "7"}
    async with store.transaction() as tx:
        await tx.save_checkpoint("replicasets", "3")
    assert await store.checkpoint("replicasets") == "3"
