"""The outbox: insert-or-ignore on the idempotency key, the relay's pending scan and mark_sent."""

from __future__ import annotations

from dataclasses import replace

import pytest
import sqlalchemy as sa

from reconciler.core.audit_targets import Target
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


async def test_enqueued_rows_and_targets_as_stored(store: Store, backend: str) -> None:
    """The stored values (SQLite: their text and storage classes) of outbox and action_targets rows, as the
    audit trail's SQL reads them; a key repeated in the batch: the first wins, its targets only."""
    decision_id = await new_decision(store)
    create = Target(key="a/pod-1", action="create_pods", kind="Pod", namespace="ns", name="")
    delete = Target(key="b", action="delete_pod", kind="Pod", namespace="ns", name="web-1", uid="uid-1")
    rows = [replace(action("a", decision_id, created=1.5, payload=b"\x00{}"), targets=(create,)),
            replace(action("b", decision_id, created=2), targets=(delete,)),
            replace(action("a", decision_id, payload=b"again"), targets=(delete,))]
    async with store.transaction() as tx:
        assert await tx.enqueue(rows) == ["a", "b"]
    if backend == "sqlite":
        outbox = ("SELECT key, decision_id, subject, hex(payload), state, attempts, created_at, sent_at, "
                  "typeof(decision_id), typeof(payload), typeof(attempts), typeof(created_at), typeof(sent_at) "
                  "FROM outbox ORDER BY key")
        stored = [("a", decision_id, "kubus.actions.0", "007B7D", "pending", 0, "2025-01-01 12:00:01.500000", None,
                   "integer", "blob", "integer", "text", "null"),
                  ("b", decision_id, "kubus.actions.0", "7B7D", "pending", 0, "2025-01-01 12:00:02.000000", None,
                   "integer", "blob", "integer", "text", "null")]
    else:
        outbox = ("SELECT key, decision_id, subject, encode(payload, 'hex'), state, attempts, "
                  "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), sent_at, "
                  "pg_typeof(decision_id)::text, pg_typeof(payload)::text, pg_typeof(attempts)::text, "
                  "pg_typeof(created_at)::text FROM outbox ORDER BY key")
        stored = [("a", decision_id, "kubus.actions.0", "007b7d", "pending", 0, "2025-01-01 12:00:01.500000", None,
                   "bigint", "bytea", "integer", "timestamp with time zone"),
                  ("b", decision_id, "kubus.actions.0", "7b7d", "pending", 0, "2025-01-01 12:00:02.000000", None,
                   "bigint", "bytea", "integer", "timestamp with time zone")]
    async with store.engine.connect() as conn:
        assert [tuple(r) for r in (await conn.execute(sa.text(outbox))).all()] == stored
        targets = (await conn.execute(sa.text("SELECT key, action_key, action, kind, namespace, name, uid "
                                              "FROM action_targets ORDER BY key"))).all()
    assert [tuple(r) for r in targets] == [("a/pod-1", "a", "create_pods", "Pod", "ns", "", None),
                                           ("b", "b", "delete_pod", "Pod", "ns", "web-1", "uid-1")]
