"""Stream generations in the store (store/streams.py): a reset starts the positions over once, keeps the audit
trail's earlier events below 1 in their order, and fences a reconciler still on the old stream."""

from __future__ import annotations

import pytest

from reconciler.core.batch import CONSUMER, Commit
from store.engine import Store
from store.port import Fence
from store.streams import INGEST, RECONCILER, Reset, StreamChanged
from tests.store.builders import T0, decision, event

OLD, NEW, NEWER = "2025-01-01T10:00:00+00:00", "2025-01-01T11:00:00+00:00", "2025-01-01T12:00:00+00:00"


def reset(old: str | None, new: str, positions: dict[int, int] | None = None) -> Reset:
    return Reset(stream="KUBUS_EVENTS", old_created=old, new_created=new, reason="created anew",
                 positions=positions or {}, last_seq=2, instance="r-1")


async def test_a_reset_starts_the_positions_over_once_and_says_so(store: Store) -> None:
    await store.record_stream_identity(RECONCILER, "KUBUS_EVENTS", OLD)
    async with store.transaction() as tx:
        await tx.advance(CONSUMER, 0, 40)
        await tx.advance(CONSUMER, 1, 42)
    assert await store.reset_stream(CONSUMER, reset(OLD, NEW, {0: 40, 1: 42}))
    # a peer that found the same thing a moment later changes nothing
    assert not await store.reset_stream(CONSUMER, reset(OLD, NEW, {0: 40, 1: 42}))
    assert (await store.load(CONSUMER)).positions == {}
    assert await store.stream_identity(RECONCILER) == NEW
    assert await store.stream_identity(INGEST) is None  # ingest records its own, once it has relisted
    [row] = await store.stream_resets()
    assert (row["old_created"], row["new_created"], row["positions"], row["instance"]) == (
        OLD, NEW, {"0": 40, "1": 42}, "r-1")


async def test_earlier_events_move_below_1_in_order_and_the_new_stream_records_its_own(store: Store) -> None:
    async with store.transaction() as tx:
        await tx.record_events([event(5), event(7), event(9)])
        await tx.insert_decision(decision("c-1", seq=9))
    await store.record_stream_identity(RECONCILER, "KUBUS_EVENTS", OLD)
    assert await store.reset_stream(CONSUMER, reset(OLD, NEW))
    async with store.transaction() as tx:
        assert await tx.record_events([event(1), event(5)]) == 2  # the new stream's 1 and 5: no collision
    async with store.engine.connect() as conn:
        seqs = [s for (s,) in await conn.exec_driver_sql("SELECT stream_seq FROM observed_events ORDER BY stream_seq")]
        [decided] = [s for (s,) in await conn.exec_driver_sql("SELECT stream_seq FROM decisions")]
    [row] = await store.stream_resets()
    assert row["shifted_by"] == 9  # the newest old event lands on 0
    assert seqs == [5 - 9, 7 - 9, 9 - 9, 1, 5] and decided == 9 - 9
    # a second reset moves both generations below 1 again, still in order
    assert await store.reset_stream(CONSUMER, reset(NEW, NEWER))
    async with store.engine.connect() as conn:
        again = [s for (s,) in await conn.exec_driver_sql("SELECT stream_seq FROM observed_events ORDER BY stream_seq")]
    assert len(again) == 5 and again == sorted(again) and again[-1] <= 0
    assert [s - again[0] for s in again] == [s - seqs[0] for s in seqs]


async def test_a_commit_on_the_old_stream_is_refused(store: Store) -> None:
    await store.record_stream_identity(RECONCILER, "KUBUS_EVENTS", OLD)
    await store.reset_stream(CONSUMER, reset(OLD, NEW))
    stale = Commit(consumer=CONSUMER, at=T0, empty=False, positions={0: 40})
    with pytest.raises(StreamChanged):
        async with store.transaction() as tx:
            await tx.commit(stale, Fence(stream=OLD))
    assert (await store.load(CONSUMER)).positions == {}
    async with store.transaction() as tx:
        await tx.commit(Commit(consumer=CONSUMER, at=T0, empty=False, positions={0: 3}), Fence(stream=NEW))
    assert (await store.load(CONSUMER)).positions == {0: 3}
