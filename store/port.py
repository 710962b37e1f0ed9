"""The store's one port: what the reconciler, the outbox relay and the audit need from a store, as Protocols.

Adapters: the SQL store (`store.engine.Store`: SQLite and PostgreSQL, the same SQLAlchemy code, chosen by
URL) is all of `Port`; the in-memory store (`store.memory.MemoryStore`, for `kubus replay` and the
synthetic world) all but the audit's questions, which are SQL over views. One contract suite runs on all
three (tests/store/test_port_contract.py).

The reconciler's batch is one transaction, in this order: record the executors' result rows (the store
says which are new: only those reach the controllers), run the batch (reconciler.core.batch.run_batch),
commit what it returns, the lease fence last::

    async with store.transaction() as tx:
        fresh = await tx.record_results(rows, at=now)
        commit = run_batch(state, messages, [r for r in results if r.key in fresh], now, caught_up)
        await tx.commit(commit, fence)
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from reconciler.core.batch import Commit, Stored
from store.audit import ALL_TIME, ControllerHistory, PodHistory, Row, TimelineRows, TimeRange
from store.decisions import Decision
from store.outbox import OutboxRow
from store.results import ResultRow
from store.streams import Reset


@dataclass(frozen=True, slots=True)
class Fence:
    """The lease check that ends a committing transaction (store.leases.check_fence): `owner` must still hold
    every partition of `epochs` under that epoch, unexpired at the lease clock (`lease_now`: PostgreSQL's
    clock, the one the lease keeper renews by; SQLite's and the memory store's is the commit's own `at`);
    with `ttl` the leases are extended to that clock + ttl. No epochs: nothing to check (a reconciler alone
    by construction).

    `stream`: the KUBUS_EVENTS (its creation time) the commit's positions refer to; the store refuses the commit
    (store.streams.StreamChanged) once its positions refer to another one, reset by a peer meanwhile."""

    owner: str = ""
    epochs: Mapping[int, int] = field(default_factory=dict)
    ttl: float | None = None
    stream: str | None = None


UNFENCED = Fence()


class ReconcilerTransaction(Protocol):
    queued: list[OutboxRow]
    """The outbox rows this transaction's commits queued (those whose key was new, as the store wrote them): what
    the relay may publish once it committed, without reading them back (reconciler/outgoing.py)."""

    async def record_results(self, rows: Sequence[ResultRow], at: datetime) -> list[str]:
        """Records the result rows not recorded yet (by key); the keys of those that were new."""
        ...

    async def commit(self, commit: Commit, fence: Fence) -> list[int]:
        """Writes the batch's commit, the fence checked last (store.leases.LeaseLost rolls the whole
        transaction back, result rows included); the ids assigned to commit.decisions, in order."""
        ...

    async def lease_now(self, local: datetime) -> datetime:
        """The time leases are measured against in this transaction (store.leases.lease_now): the database's
        clock on PostgreSQL, so that every reconciler's host agrees on it whatever its own clock says;
        `local`, the caller's clock, where there is one host (SQLite, the memory store)."""
        ...


class ReconcilerPort(Protocol):
    async def load(self, consumer: str) -> Stored:
        """The consumer's positions, and every expectation and backoff entry: what a starting reconciler holds."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[ReconcilerTransaction]:
        """A unit of work: commits when the block ends, rolls back everything if it raises."""
        ...

    async def stream_identity(self, name: str) -> str | None:
        """The KUBUS_EVENTS creation time `name` (store.streams.RECONCILER, INGEST) refers to; None: never recorded."""
        ...

    async def record_stream_identity(self, name: str, stream: str, created: str) -> None:
        """Records `name`'s identity (its first use of the stream)."""
        ...

    async def reset_stream(self, consumer: str, reset: Reset) -> bool:
        """Starts the consumer over on a new stream generation (store.streams.reset): False when a peer did."""
        ...


class RelayPort(Protocol):
    async def pending(self, limit: int, subjects: Collection[str] | None = None) -> list[OutboxRow]:
        """Up to `limit` pending outbox rows, oldest first (then by key); only those bound for `subjects`."""
        ...

    async def mark_sent(self, keys: Iterable[str]) -> int:
        """Marks pending rows sent; how many changed."""
        ...


class TrailPort(Protocol):
    """The audit trail's rows, read back by decision (what a replay compares, what a test looks at)."""

    async def decisions_for(self, controller_key: str, limit: int = 100) -> list[Decision]:
        """The controller's latest decisions, newest first."""
        ...

    async def outbox_for(self, decision_id: int) -> list[OutboxRow]:
        """The decision's outbox rows (payloads with its id), by creation then key."""
        ...

    async def results_for(self, decision_id: int) -> list[ResultRow]:
        """The results recorded for the decision's actions, by when they finished, then key."""
        ...


class AuditPort(Protocol):
    """The audit trail's questions (store/audit.py, over SQL views: the SQL store's)."""

    label: str  # which database, for messages

    async def pod_history(self, namespace: str, name: str) -> PodHistory | None: ...

    async def controller_history(self, namespace: str, name: str, kind: str | None = None,
                                 window: TimeRange = ALL_TIME, limit: int = 500) -> ControllerHistory | None: ...

    async def failures(self, window: TimeRange = ALL_TIME, limit: int = 100,
                       controller_key: str | None = None) -> list[Row]: ...

    async def slowest(self, window: TimeRange = ALL_TIME, limit: int = 10) -> list[Row]: ...

    async def created_per_minute(self, window: TimeRange = ALL_TIME) -> list[Row]: ...

    async def timeline_rows(self, kind: str, namespace: str, name: str,
                            until: datetime | None = None) -> TimelineRows | None: ...


class Port(ReconcilerPort, RelayPort, TrailPort, AuditPort, Protocol):
    """Everything kubus asks of its store."""
