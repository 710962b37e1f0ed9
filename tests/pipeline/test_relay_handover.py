"""The outbox relay publishes the rows the reconciler's loop hands over without scanning the table, and scans
whenever the handover may miss rows: at its start, after a failed round (reconciler.outgoing)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Collection, Iterable
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from messages import codec, subjects
from messages.actions import DeletePod
from reconciler.consuming import Reconciler
from reconciler.outgoing import Outgoing
from reconciler.relaying import RELAY_BATCH, RelayProgress, relay
from reconciler.service import run_reconciler
from runtime import serving
from runtime.bus import Bus
from runtime.serving import Health
from store.engine import Store, open_store
from store.outbox import OutboxRow
from tests.pipeline.test_reconciler import publish, replicaset_event
from tests.simulation import until

ISSUED = "2026-11-29T10:00:00.000000Z"


class Outbox:
    """The relay's port over a dict: pending rows in insertion order; its scans counted; `mark_sent` raising while
    `failing`."""

    def __init__(self, rows: Iterable[OutboxRow] = ()) -> None:
        self.rows = {row.key: row for row in rows}
        self.scans = 0
        self.failing = False

    async def pending(self, limit: int, subjects: Collection[str] | None = None) -> list[OutboxRow]:
        self.scans += 1
        return list(self.rows.values())[:limit]

    async def mark_sent(self, keys: Iterable[str]) -> int:
        if self.failing:
            raise ConnectionError("the database is away")
        keys = list(keys)
        for key in keys:
            self.rows.pop(key, None)
        return len(keys)


def row(bus: Bus, key: str) -> OutboxRow:
    action = DeletePod(key=key, decision_id=7, controller="ReplicaSet/shop/web", issued_at=ISSUED, namespace="shop",
                       name=f"pod-{key}", uid="u")
    return OutboxRow(key=key, decision_id=7, subject=subjects.action_subject("2", bus.prefix),
                     payload=codec.encode(action), created_at=datetime.now(UTC))


async def published(bus: Bus) -> list[str]:
    stream = bus.stream(subjects.ACTIONS_STREAM)
    info = await bus.js.stream_info(stream)
    return [codec.decode_action((await bus.js.get_msg(stream, seq)).data or b"").key
            for seq in range(info.state.first_seq, info.state.last_seq + 1)] if info.state.messages else []


class Rounds(RelayProgress):
    """RelayProgress counting the relay's rounds that succeeded."""

    def __init__(self) -> None:
        super().__init__()
        self.succeeded_rounds = 0

    def succeeded(self) -> None:
        super().succeeded()
        self.succeeded_rounds += 1


def commit(outbox: Outbox, outgoing: Outgoing, wakeup: asyncio.Event, *rows: OutboxRow) -> None:
    """What the reconciler's loop does: the rows in the table, then handed over, then the relay woken."""
    outbox.rows.update((r.key, r) for r in rows)
    outgoing.hand(list(rows))
    wakeup.set()


async def test_handed_rows_are_published_without_a_scan_and_a_failed_round_scans_again(bus: Bus) -> None:
    outbox = Outbox([row(bus, "left-by-an-earlier-process")])
    outgoing, wakeup, stop, rounds = Outgoing(), asyncio.Event(), asyncio.Event(), Rounds()
    task = asyncio.create_task(relay(bus, outbox, wakeup, interval=0.02, stop=stop, progress=rounds,
                                     outgoing=outgoing))
    try:
        await until("the start's scan", lambda: not outbox.rows)
        assert outbox.scans == 1 and outgoing.complete
        commit(outbox, outgoing, wakeup, row(bus, "a"), row(bus, "b"))
        await until("the handed rows", lambda: not outbox.rows)
        commit(outbox, outgoing, wakeup, row(bus, "c"))
        await until("the next commit's", lambda: not outbox.rows)
        idle_from = rounds.succeeded_rounds
        await until("idle rounds", lambda: rounds.succeeded_rounds >= idle_from + 3)  # every 20 ms: nothing read
        assert outbox.scans == 1

        outbox.failing = True  # published, not marked: the row stays in the table only
        commit(outbox, outgoing, wakeup, row(bus, "d"))
        await until("the failed round", lambda: rounds.failing_since is not None)
        outbox.failing = False
        await until("the row the failed round left", lambda: not outbox.rows)
        assert outbox.scans == 2
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    # JetStream kept one copy of "d", published by the failed round and again by the scan after it
    assert await published(bus) == ["left-by-an-earlier-process", "a", "b", "c", "d"]


async def test_the_depth_gauge_shows_what_a_scan_would_find(bus: Bus) -> None:
    """kubus_outbox_pending: at most one scan's batch, handed over or not (docs/production.md)."""
    outbox, outgoing, wakeup, stop = Outbox(), Outgoing(), asyncio.Event(), asyncio.Event()
    outgoing.scanning()  # as after the start's scan
    task = asyncio.create_task(relay(bus, outbox, wakeup, interval=60, stop=stop, outgoing=outgoing))
    try:
        commit(outbox, outgoing, wakeup, *(row(bus, f"r{i:04}") for i in range(RELAY_BATCH + 1)))
        await until("the handed rows", lambda: not outbox.rows)
        assert serving.OUTBOX_DEPTH._value.get() == RELAY_BATCH
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert outbox.scans == 0


class CountingStore:
    """The SQL store, its relay scans counted."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.scans = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def pending(self, limit: int, subjects: Collection[str] | None = None) -> list[OutboxRow]:
        self.scans += 1
        return await self._store.pending(limit, subjects)


async def actions(bus: Bus, want: int) -> list[bytes]:
    """The first `want` actions the relay published, as JetStream stored them."""
    stream = bus.stream(subjects.ACTIONS_STREAM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    while (await bus.js.stream_info(stream)).state.messages < want:
        assert loop.time() < deadline, f"fewer than {want} actions published"
        await asyncio.sleep(0.02)  # polling the stream, up to the deadline
    return [(await bus.js.get_msg(stream, seq)).data or b"" for seq in range(1, want + 1)]


async def test_the_reconciler_hands_its_commits_to_the_relay_byte_for_byte(bus: Bus, tmp_path: Path) -> None:
    """`kubus up`'s reconciler: its relay scans the table once, at its start; each commit's rows are handed over,
    and what is published is what the outbox holds."""
    store = CountingStore(await open_store(None, str(tmp_path)))
    task = asyncio.create_task(run_reconciler(bus, store, Health()))  # type: ignore[arg-type]
    try:
        for index in range(3):  # one commit after another, as events trickle
            await publish(bus, replicaset_event(f"ns{index}", 2))
            await actions(bus, index + 1)
        sent = await actions(bus, 3)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.text("select payload, state from outbox order by created_at, key"))).all()
    await store.close()
    assert [bytes(payload) for payload, _ in rows] == sent
    assert {state for _, state in rows} == {"sent"}
    assert store.scans == 1


async def test_a_loop_that_ends_makes_the_relay_scan(bus: Bus, tmp_path: Path) -> None:
    """Whatever ended a loop (here a stop as it starts), a commit of it may have landed without its rows handed."""
    store = await open_store(None, str(tmp_path))
    loop = Reconciler(bus, store, instance=f"r{uuid.uuid4().hex[:6]}")
    loop.outgoing = outgoing = Outgoing()
    outgoing.scanning()
    loop.stop()
    await asyncio.wait_for(loop.run(), 10)
    await store.close()
    assert not outgoing.complete
