"""The store's port on plain dicts: `kubus replay`'s copy of the store and the synthetic world's store.

It keeps what the SQL store keeps, in the shapes the SQL store reads back: consumer positions,
expectations and failed-pod backoff (what a start loads), the executors' results (de-duplicated by key),
and the audit trail: observed events, decisions with the ids it assigns, outbox rows with those ids in
their payloads, their audit targets, and the input log's ticks. `trail=False` leaves the audit trail out:
a replay reads the input log, it does not need a copy of it, nor to pay for one.

A transaction applies its writes when its block ends, and none of them when the block raises. There are no
leases: a memory store belongs to one process, so nobody else can take a partition from under it, and
every fence holds. `load_now` and `write` are the same operations for callers without an event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING

from kube.times import Clock, utcnow
from reconciler.core.audit_targets import Target
from reconciler.core.batch import CONSUMER, Commit, Stored
from reconciler.core.daemonset.backoff import FailedPodBackoff
from reconciler.core.expectations import Expectations
from reconciler.core.ticks import Tick
from store import decisions, events, outbox, shadow
from store.decisions import Decision
from store.events import ObservedEventRow
from store.outbox import OutboxRow
from store.port import UNFENCED, Fence, ReconcilerPort, RelayPort, TrailPort
from store.results import ResultRow
from store.streams import RECONCILER, Reset


class MemoryStore:
    """The in-memory adapter of store/port.py (everything but the audit's SQL questions)."""

    def __init__(self, *, trail: bool = True, clock: Clock = utcnow) -> None:
        self.trail = trail
        self._clock = clock
        self.positions: dict[str, dict[int, int]] = {}  # consumer -> partition -> last applied sequence
        self.expectations: dict[str, Expectations] = {}
        self.backoff: dict[str, FailedPodBackoff] = {}
        self.results: dict[str, ResultRow] = {}
        # the audit trail
        self.events: dict[int, ObservedEventRow] = {}
        self.decisions: dict[int, Decision] = {}
        self.outbox: dict[str, OutboxRow] = {}  # without targets, as the SQL store reads rows back
        self.shadow_acts: list[shadow.ShadowActRow] = []  # a shadow's acts (docs/shadow.md)
        self.targets: dict[str, tuple[str, Target]] = {}  # effect key -> (the outbox row's key, its target)
        self.ticks: list[Tick] = []
        self.identities: dict[str, str] = {}  # which stream the positions refer to (store/streams.py)
        self.resets: list[Reset] = []
        self._last_decision = 0
        self._last_tick = 0

    @classmethod
    def holding(cls, stored: Stored, consumer: str = CONSUMER, *, trail: bool = True) -> MemoryStore:
        """A store that holds `stored` (what a start recorded it loaded)."""
        store = cls(trail=trail)
        store.positions[consumer] = dict(stored.positions)
        store.expectations = dict(stored.expectations)
        store.backoff = dict(stored.backoff)
        return store

    # --- the reconciler's port -------------------------------------------------------------------------
    async def load(self, consumer: str) -> Stored:
        return self.load_now(consumer)

    def load_now(self, consumer: str = CONSUMER) -> Stored:
        return Stored(positions=dict(self.positions.get(consumer, {})), expectations=dict(self.expectations),
                      backoff=dict(self.backoff))

    async def stream_identity(self, name: str) -> str | None:
        return self.identities.get(name)

    async def record_stream_identity(self, name: str, stream: str, created: str) -> None:
        self.identities[name] = created

    async def reset_stream(self, consumer: str, reset: Reset) -> bool:
        """store.streams.reset on dicts (the audit trail's events keep their sequences: a memory store
        belongs to one run, which never sees two generations of a stream)."""
        if self.identities.get(RECONCILER) != reset.old_created:
            return False
        self.positions.pop(consumer, None)
        self.identities[RECONCILER] = reset.new_created
        self.resets.append(reset)
        return True

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTransaction]:
        tx = MemoryTransaction(self)
        yield tx
        tx.apply()

    def write(self, commit: Commit, fence: Fence = UNFENCED) -> list[int]:
        """A transaction of one commit; the decisions' ids."""
        ids = self._assign(len(commit.decisions))
        self._apply(commit, ids)
        return ids

    def _assign(self, count: int) -> list[int]:
        """Decision ids, in order (as a sequence: ids of a transaction rolled back are not given again)."""
        first = self._last_decision + 1
        self._last_decision += count
        return list(range(first, first + count))

    def _outbox_rows(self, commit: Commit, ids: Sequence[int], queued: Collection[str] = ()) -> list[OutboxRow]:
        """The outbox rows `commit` adds, its decisions given `ids`: those of a key neither held nor in `queued`
        (insert-or-ignore: a decision replayed after a crash); none without a trail, nor in shadow mode."""
        if not self.trail or commit.shadow:
            return []
        seen = set(queued)
        rows = []
        for sync, decision_id in zip(commit.decisions, ids, strict=True):
            for row in outbox.rows_of(sync, decision_id, commit.at):
                if row.key not in self.outbox and row.key not in seen:
                    seen.add(row.key)
                    rows.append(row)
        return rows

    def _apply(self, commit: Commit, ids: Sequence[int], rows: Sequence[OutboxRow] | None = None) -> None:
        """How a commit moves the stored state (the SQL store's Transaction.commit, in dicts); `rows`: its outbox
        rows, if a transaction made them already (_outbox_rows)."""
        if commit.backoff_gc_before is not None:
            cutoff = commit.backoff_gc_before
            self.backoff = {k: v for k, v in self.backoff.items() if not v.last_update < cutoff}
        for entry in commit.backoff:
            self.backoff[entry.key] = entry
        self.expectations.update(commit.expectations)
        for key in commit.expectations_deleted:
            self.expectations.pop(key, None)
        positions = self.positions.setdefault(commit.consumer, {})
        for partition, seq in commit.positions.items():
            if seq > positions.get(partition, 0):  # never back, as the SQL upsert's WHERE
                positions[partition] = seq
        if not self.trail:
            return
        for event, seq in commit.events:
            self.events.setdefault(seq, events.row_of(event, seq, commit.objects.get(seq)))
        if commit.shadow:
            self.shadow_acts.extend(shadow.rows_of(commit, ids))
        for sync, decision_id in zip(commit.decisions, ids, strict=True):
            self.decisions[decision_id] = dataclasses.replace(decisions.row_of(sync, commit.at), id=decision_id)
        for row in self._outbox_rows(commit, ids) if rows is None else rows:
            if row.key in self.outbox:  # insert-or-ignore, for rows made before another transaction's apply
                continue
            self.outbox[row.key] = dataclasses.replace(row, targets=())
            for target in row.targets:
                self.targets.setdefault(target.key, (row.key, target))
        for tick in commit.ticks(ids):
            self._last_tick += 1
            self.ticks.append(dataclasses.replace(tick, id=self._last_tick))

    # --- the relay ----------------------------------------------------------------------------------------
    async def pending(self, limit: int, subjects: Collection[str] | None = None) -> list[OutboxRow]:
        rows = [r for r in self.outbox.values()
                if r.state == "pending" and (subjects is None or r.subject in subjects)]
        return sorted(rows, key=lambda r: (r.created_at, r.key))[:limit]

    async def mark_sent(self, keys: Iterable[str]) -> int:
        at = self._clock()
        changed = 0
        for key in keys:
            row = self.outbox.get(key)
            if row is not None and row.state == "pending":
                self.outbox[key] = dataclasses.replace(row, state="sent", sent_at=at, attempts=row.attempts + 1)
                changed += 1
        return changed

    # --- the trail, read back -------------------------------------------------------------------------------
    async def decisions_for(self, controller_key: str, limit: int = 100) -> list[Decision]:
        found = [d for d in self.decisions.values() if d.controller_key == controller_key]
        return sorted(found, key=lambda d: (d.decided_at, d.id or 0), reverse=True)[:limit]

    async def outbox_for(self, decision_id: int) -> list[OutboxRow]:
        return self.outbox_now(decision_id)

    def outbox_now(self, decision_id: int) -> list[OutboxRow]:
        return sorted((r for r in self.outbox.values() if r.decision_id == decision_id),
                      key=lambda r: (r.created_at, r.key))

    async def results_for(self, decision_id: int) -> list[ResultRow]:
        return sorted((r for r in self.results.values() if r.decision_id == decision_id),
                      key=lambda r: (r.finished_at, r.key))


class MemoryTransaction:
    """Writes held until the transaction's block ends (see MemoryStore.transaction)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._results: dict[str, ResultRow] = {}
        self._commits: list[tuple[Commit, list[int], list[OutboxRow]]] = []
        self.queued: list[OutboxRow] = []

    async def record_results(self, rows: Sequence[ResultRow], at: datetime) -> list[str]:
        fresh = []
        for row in rows:
            if row.key in self._store.results or row.key in self._results:
                continue
            self._results[row.key] = dataclasses.replace(row, recorded_at=at)
            fresh.append(row.key)
        return fresh

    async def commit(self, commit: Commit, fence: Fence) -> list[int]:
        ids = self._store._assign(len(commit.decisions))
        rows = self._store._outbox_rows(commit, ids, {row.key for row in self.queued})
        self._commits.append((commit, ids, rows))
        self.queued.extend(rows)
        return ids

    async def lease_now(self, local: datetime) -> datetime:
        """One process, one clock: the caller's (and its fences always hold)."""
        return local

    def apply(self) -> None:
        self._store.results.update(self._results)
        for commit, ids, rows in self._commits:
            self._store._apply(commit, ids, rows)


if TYPE_CHECKING:  # the memory store is the port, the audit's SQL questions aside (mypy checks it here)
    def _is_port(store: MemoryStore) -> tuple[ReconcilerPort, RelayPort, TrailPort]:
        return store, store, store
