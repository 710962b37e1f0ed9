"""The unit of work: everything a reconciler writes for a batch of events, committed together.

`record_results` and `commit` are the SQL adapter's side of the reconciler's port (store/port.py); the
repositories below them are what they, the lease keeper, the history import and the tests use."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from kube.times import Clock
from reconciler.core.batch import Commit
from store import (
    backoff,
    checkpoints,
    decisions,
    events,
    expectations,
    leases,
    outbox,
    positions,
    results,
    shadow,
    streams,
    ticks,
)
from store.backoff import BackoffRow
from store.decisions import Decision
from store.events import ObservedEventRow
from store.expectations import ExpectationsRow
from store.outbox import OutboxRow
from store.port import Fence
from store.results import ResultRow


class Transaction:
    """Repositories bound to one open database transaction.

    Obtained from `Store.transaction()`; it commits when the `async with` block ends and rolls
    back everything (decisions, outbox rows, position) if the block raises.
    """

    def __init__(self, conn: AsyncConnection, clock: Clock, lease_clock: leases.LeaseClock = "database") -> None:
        self.conn = conn
        self._now = clock
        self.lease_clock: leases.LeaseClock = lease_clock
        self.queued: list[OutboxRow] = []

    # the reconciler's port
    async def record_results(self, rows: Sequence[ResultRow], at: datetime) -> list[str]:
        return await results.record(self.conn, rows, at=at)

    async def commit(self, commit: Commit, fence: Fence) -> list[int]:
        """The batch's writes; the fence last, so that a reconciler whose lease moved on commits nothing
        (LeaseLost rolls the transaction back). The decisions' ids, in order."""
        if commit.backoff_gc_before is not None:
            await self.gc_backoff(commit.backoff_gc_before)
        await self.record_events([events.row_of(event, seq, commit.objects.get(seq)) for event, seq in commit.events])
        if commit.backoff:
            await self.save_backoff([backoff.row_of(entry) for entry in commit.backoff])
        if commit.expectations:
            await self.save_expectations([expectations.row_of(k, v) for k, v in commit.expectations.items()])
        if commit.expectations_deleted:
            await self.delete_expectations(commit.expectations_deleted)
        ids = await self.insert_decisions([decisions.row_of(sync, commit.at) for sync in commit.decisions])
        if commit.shadow:  # nothing to send: the actions are would-do acts (docs/shadow.md)
            await shadow.record(self.conn, shadow.rows_of(commit, ids))
            await shadow.record_actions(self.conn, commit, ids)
        else:
            rows = [row for sync, decision_id in zip(commit.decisions, ids, strict=True)
                    for row in outbox.rows_of(sync, decision_id, commit.at)]
            if rows:
                new = set(await self.enqueue(rows))
                self.queued.extend(row for row in rows if row.key in new)
        await positions.advance_all(self.conn, commit.consumer, commit.positions, at=self._now())
        for tick in commit.ticks(ids):
            await self.record_tick(tick)
        await streams.check(self.conn, streams.RECONCILER, fence.stream)
        await leases.check_fence(self.conn, fence.owner, fence.epochs, now=commit.at, ttl=fence.ttl,
                                 clock=self.lease_clock)
        return ids

    async def lease_now(self, local: datetime) -> datetime:
        return await leases.lease_now(self.conn, local, self.lease_clock)

    # consumer positions
    async def position(self, consumer: str, partition: int) -> int:
        return await positions.load(self.conn, consumer, partition)

    async def positions(self, consumer: str) -> dict[int, int]:
        return await positions.load_all(self.conn, consumer)

    async def advance(self, consumer: str, partition: int, seq: int) -> None:
        await positions.advance(self.conn, consumer, partition, seq, at=self._now())

    # events and decisions
    async def record_events(self, rows: Iterable[ObservedEventRow]) -> int:
        return await events.record(self.conn, rows, at=self._now())

    async def insert_decision(self, decision: Decision) -> int:
        (decision_id,) = await decisions.insert(self.conn, [decision])
        return decision_id

    async def insert_decisions(self, rows: Sequence[Decision]) -> list[int]:
        return await decisions.insert(self.conn, rows)

    async def enqueue(self, rows: Iterable[OutboxRow]) -> list[str]:
        return await outbox.enqueue(self.conn, rows)

    # expectations
    async def load_expectations(self, keys: Iterable[str]) -> dict[str, ExpectationsRow]:
        return await expectations.load(self.conn, keys)

    async def all_expectations(self) -> dict[str, ExpectationsRow]:
        return await expectations.load_all(self.conn)

    async def save_expectations(self, rows: Iterable[ExpectationsRow]) -> None:
        await expectations.save(self.conn, rows)

    async def delete_expectations(self, keys: Iterable[str]) -> None:
        await expectations.delete(self.conn, keys)

    # failed-pod backoff
    async def load_backoff(self, keys: Iterable[str]) -> dict[str, BackoffRow]:
        return await backoff.load(self.conn, keys)

    async def all_backoff(self) -> dict[str, BackoffRow]:
        return await backoff.load_all(self.conn)

    async def save_backoff(self, entries: Iterable[BackoffRow]) -> None:
        await backoff.save(self.conn, entries)

    async def delete_backoff(self, keys: Iterable[str]) -> None:
        await backoff.delete(self.conn, keys)

    async def gc_backoff(self, updated_before: datetime) -> int:
        return await backoff.gc(self.conn, updated_before)

    # the reconciler's input log
    async def record_tick(self, tick: ticks.Tick) -> int:
        return await ticks.record(self.conn, tick)

    # ingest checkpoints, for a caller that wants them in the same transaction as other writes
    async def save_checkpoint(self, kind: str, resource_version: str) -> None:
        await checkpoints.save(self.conn, kind, resource_version, at=self._now())
