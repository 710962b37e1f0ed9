"""The reconciler's shell: bus -> cache -> decisions -> one SQL transaction -> outbox.

Progress lives in SQL, not in NATS: each batch of events commits its decisions, expectations,
outbox rows and the stream position together, so after a crash the reconciler resumes exactly
after the last committed event (eventsourcing's "tracking position in the same transaction").
On start it rebuilds its cache from the compacted KUBUS_STATE stream, then replays KUBUS_EVENTS
from the lowest committed position; the cache ignores events older than what it holds, but the
controllers' expectations still observe them. Once it has caught up, every controller is synced
(an informer's initial list), and from then on each batch of events is followed by the syncs due.
The executors' results come in through `record_results` and are committed by the same loop, in
the same transaction as the next batch, so expectations have one writer and a burst of events
and results costs one commit.

In a split deployment (reconciler.partitioned) a Reconciler is given the partitions it holds
leases on, with their epochs: it bootstraps, replays and decides for those (and reads the cluster
partition), and ends every committing transaction with `check_fence`, so a reconciler that lost a
lease commits nothing. It runs until `stop()`; a change of its partitions builds a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from messages import codec, subjects
from messages.actions import ActionResult
from messages.observed import ObservedEvent
from reconciler import bootstrapping, stepping
from reconciler.audit_targets import targets_of
from reconciler.cache import Cache
from reconciler.controllers import STATUS_ONLY_INTERVAL, Controllers, Outcome, Settings
from reconciler.core.daemonset.backoff import FailedPodBackoff, gc_cutoff
from reconciler.core.expectations import Expectations
from runtime import failpoints, serving
from runtime.bus import Bus
from store import backoff as backoff_rows
from store import decisions as decision_rows
from store import events as event_rows
from store import expectations as expectation_rows
from store import leases as lease_rows
from store import results as result_rows
from store import ticks as tick_rows
from store.outbox import OutboxRow
from store.results import ResultRow

log = logging.getLogger("kubus.reconciler")

CONSUMER = "reconciler"
CLUSTER_PARTITION = stepping.CLUSTER_PARTITION  # how the cluster partition is stored in consumer_positions
BATCH = 500
BATCH_WINDOW = 0.05  # seconds a batch may wait for more events once one arrived

partition_number = stepping.partition_number
partition_of_subject = stepping.partition_of_subject
Batch = stepping.Batch
# results handed to the loop, each batch with the future its recorder awaits (set once committed)
Pending = list[tuple[list[ActionResult], list[ResultRow], asyncio.Future[None]]]


class Stopped(Exception):
    """The reconciler stopped (its partitions changed) before it committed these results."""


class Reconciler:
    def __init__(self, bus: Bus, store: Any, clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 instance: str = "reconciler", partitions: Mapping[int, int] | None = None,
                 lease_ttl: float | None = None, settings: Settings | None = None):
        self.bus = bus
        self.instance = instance
        # None: every partition, unfenced (a reconciler alone by construction, `kubus up`). Otherwise the
        # partitions held, {partition: lease epoch}: checked by every commit, extended by lease_ttl
        self.fence: dict[int, int] = dict(partitions or {})
        self.owned: frozenset[int] | None = None if partitions is None else frozenset(partitions)
        self._reads = None if self.owned is None else self.owned | {CLUSTER_PARTITION}
        self._tick_partitions = None if self.owned is None else sorted(self.owned)  # as ticks record them
        self.lease_ttl = lease_ttl
        self._stopping = False
        self._stop_requested = asyncio.Event()
        self._start: tick_rows.Tick | None = None  # recorded with the first commit
        self.bootstrapped_to = 0  # the newest event sequence the cache was bootstrapped with
        self._consistent_to = 0  # every event up to this one is reflected in the bootstrapped cache
        # positions of partitions we decide for that the store has none of: written with the first commit,
        # so that the state it commits for them says from where the next owner must replay
        self._new_positions: dict[int, int] = {}
        self.store = store
        self.clock = clock
        self.cache = Cache()
        self.controllers = Controllers(self.cache, status_only_interval=STATUS_ONLY_INTERVAL, settings=settings)
        self.caught_up = False
        self.relay_wakeup = asyncio.Event()
        self._queue: asyncio.Queue[Msg | None] = asyncio.Queue()
        self._lock = asyncio.Lock()
        self._results: Pending = []
        self._consumed: dict[tuple[str, str], Any] = {}  # prometheus children, looked up once
        self._owns_key = stepping.owns_key(bus.partitions, self.owned or ())
        if self.owned is not None:
            self.controllers.owns = self._owns_key

    def reads(self, subject: str) -> bool:
        """Whether a `<prefix>.<events|state>.<partition>....` message is for this reconciler."""
        return self._reads is None or partition_of_subject(subject) in self._reads

    def stop(self) -> None:
        """Ends `run()` after the batch in flight, or at once while it is still starting (its partitions
        changed)."""
        self._stopping = True
        self._stop_requested.set()
        self.kick()

    # --- bootstrap ---------------------------------------------------------------------------------
    async def bootstrap(self) -> int:
        """Fills the cache from the compacted state (our partitions' and the cluster's objects); returns
        how many objects it loaded."""
        done = await bootstrapping.bootstrap(self.bus, self.cache, self.reads)
        self.bootstrapped_to, self._consistent_to = done.newest, done.consistent
        return done.loaded

    async def _load(self) -> tuple[int, dict[int, int]]:
        """Bootstrap, then the store's state of our partitions: where to resume the history, and the positions."""
        loaded = await self.bootstrap()
        async with self.store.transaction() as tx:
            positions: dict[int, int] = await tx.positions(CONSUMER)
            stored = await tx.all_expectations()
            backoff = await tx.all_backoff()
        if self.owned is not None:
            positions, stored, backoff = stepping.held_state(self.cache, self.owned, self._owns_key, positions,
                                                             stored, backoff)
        self.controllers.expectations = {
            k: Expectations(v.adds, v.dels, v.deletion_keys, v.set_at) for k, v in stored.items()}
        self.controllers.backoff = {k: FailedPodBackoff(key=k, delay_seconds=v.delay_seconds, last_update=v.last_update)
                                    for k, v in backoff.items()}
        decided = range(self.bus.partitions) if self.owned is None else self.owned
        start, self._new_positions = stepping.start_positions(decided, positions, self._consistent_to,
                                                              alone=self.owned is None)
        state = tick_rows.state_of(positions, stored, backoff)
        state["partition_count"] = self.bus.partitions  # how a replay maps namespaces to partitions, as we did
        state.update(self.controllers.settings.start_state())  # the feature gates and resync period decided with
        if self._new_positions:
            state["new_positions"] = {str(p): s for p, s in sorted(self._new_positions.items())}
        self._start = tick_rows.Tick(instance=self.instance, kind=tick_rows.START, at=self.clock(), caught_up=False,
                                     first_seq=start, last_seq=self.bootstrapped_to or None,
                                     partitions=self._tick_partitions, state=state)
        log.info("cache bootstrapped with %d objects, %d expectations; replaying events from sequence %d",
                 loaded, len(stored), start)
        return start, positions

    # --- consuming --------------------------------------------------------------------------------
    async def run(self) -> None:
        sub = None
        try:
            # a stop while starting (the partitions moved again) ends the start-up at once, not after it
            starting = asyncio.ensure_future(self._load())
            stopped = asyncio.ensure_future(self._stop_requested.wait())
            await asyncio.wait([starting, stopped], return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if not starting.done():
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
                return
            start, positions = starting.result()
            info = await self.bus.js.stream_info(self.bus.stream(subjects.EVENTS_STREAM))
            target = info.state.last_seq

            async def on_event(msg: Msg) -> None:
                await self._queue.put(msg)

            sub = await self.bus.js.subscribe(
                f"{self.bus.prefix}.events.>", stream=self.bus.stream(subjects.EVENTS_STREAM), cb=on_event,
                ordered_consumer=True,
                config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start))
            if target < start:
                self._caught_up()
            while not self._stopping:
                msgs = await self._next_batch()
                async with self._lock:
                    last = await self._process(msgs, positions)
                serving.WORKQUEUE_DEPTH.labels(name="reconciler").set(self._queue.qsize())
                if msgs:
                    serving.STREAM_LAG.labels(stream="events").set(msgs[-1].metadata.num_pending or 0)
                if not self.caught_up and last >= target:
                    self._caught_up()
                    log.info("caught up with the event history at sequence %d", last)
        finally:
            # whatever ended the loop (a stop, LeaseLost, an error, a cancellation): results handed to it are
            # not committed, and none are taken any more, so no recorder waits on a loop that is gone
            self._stopping = True
            _fail(self._results, Stopped())
            self._results = []
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

    def _caught_up(self) -> None:
        self.caught_up = True
        self.controllers.resync_all()
        self.kick()

    def kick(self) -> None:
        """Wakes the loop for syncs that need no new event (results, delayed requeues)."""
        self._queue.put_nowait(None)

    async def _next_batch(self) -> list[Msg]:
        """The next events, waiting no longer than until the next sync is due."""
        timeout: float | None = None
        if self.caught_up:
            ready_at = self.controllers.next_ready_at()
            if len(self.controllers.queue):
                timeout = 0.0
            elif ready_at is not None:
                timeout = max(0.0, (ready_at - self.clock()).total_seconds())
        first: Msg | None = None
        if timeout == 0.0:
            first = None if self._queue.empty() else self._queue.get_nowait()
        else:
            with contextlib.suppress(TimeoutError):
                first = await asyncio.wait_for(self._queue.get(), timeout)
        msgs = [first] if first is not None else []
        # a short window to let a burst of events and results gather: one sync and one commit per
        # burst instead of one per few events (what a single upstream worker gets from its queue)
        woken = first is not None or bool(self._results)
        deadline = asyncio.get_running_loop().time() + BATCH_WINDOW if woken else 0.0
        while len(msgs) < BATCH:
            if self._queue.empty():
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    msg = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            else:
                msg = self._queue.get_nowait()
            if msg is not None:
                msgs.append(msg)
        return msgs

    def _decode(self, msgs: list[Msg], positions: dict[int, int]) -> Batch:
        return stepping.select([(m.metadata.sequence.stream, m.subject, m.data) for m in msgs], positions,
                               self._reads)

    def _count(self, event: ObservedEvent) -> None:
        counter = self._consumed.get((event.kind, event.type))
        if counter is None:
            counter = self._consumed[(event.kind, event.type)] = serving.EVENTS_CONSUMED.labels(
                kind=event.kind, type=event.type)
        counter.inc()

    async def _process(self, msgs: list[Msg], positions: dict[int, int]) -> int:
        # the steps are reconciler.stepping's, shared with `kubus replay`; what they are given beyond the
        # events (the results fed, the clock, the caught-up flag) is recorded in the batch's tick
        caught_up = self.caught_up
        batch = self._decode(msgs, positions)
        changes = stepping.fold(self.cache, batch.events, self._count)
        now = self.clock()
        pending, self._results = self._results, []
        try:
            decided = await self._step(batch, changes, pending, msgs, caught_up, now)
        except BaseException as exc:  # LeaseLost, the database away: nothing committed, the results not acked
            _fail(pending, exc if isinstance(exc, Exception) else Stopped())
            raise
        for _, _, done in pending:
            done.set_result(None)
        if decided:
            failpoints.hit("reconciler.after-commit")
        for partition, seq in batch.last_seq.items():
            positions[partition] = max(positions.get(partition, 0), seq)
        if decided:
            self.relay_wakeup.set()
        # every message counts towards catching up, ours or not: the history ends where the stream does
        return max((m.metadata.sequence.stream for m in msgs), default=0)

    async def _step(self, batch: Batch, changes: stepping.Changes,
                    pending: Pending,
                    msgs: list[Msg], caught_up: bool, now: datetime) -> bool:
        """Decides and commits one batch; whether it decided actions."""
        fed: list[ActionResult] = []
        async with contextlib.AsyncExitStack() as stack:
            tx: Any = None
            if pending:  # results first: the syncs below see the expectations they lowered
                tx = await stack.enter_async_context(self.store.transaction())
                rows = [row for _, batch_rows, _ in pending for row in batch_rows]
                fresh = set(await result_rows.record(tx.conn, rows, at=now))
                fed = [r for results, _, _ in pending for r in results if r.key in fresh]
            step = stepping.decide(self.controllers, changes, fed, now, caught_up)
            outcome = step.outcome
            if tx is None and (batch.events or batch.last_seq or outcome.decisions or outcome.expectations
                               or outcome.expectations_deleted or step.touched or step.collect):
                tx = await stack.enter_async_context(self.store.transaction())
            if step.collect:
                await tx.gc_backoff(gc_cutoff(now))
            if tx is not None:
                decision_ids = await self._commit(tx, batch, outcome, now)
                await self._record_tick(tx, msgs, caught_up, fed, now, decision_ids)
                # last: a reconciler whose lease moved on commits none of the above (LeaseLost rolls back)
                await lease_rows.check_fence(tx.conn, self.instance, self.fence, now=now, ttl=self.lease_ttl)
        return any(d.actions for d in outcome.decisions)

    async def _commit(self, tx: Any, batch: Batch, outcome: Outcome, now: datetime) -> list[int]:
        for partition, seq in self._new_positions.items():
            await tx.advance(CONSUMER, partition, seq)
        self._new_positions = {}  # a failed commit ends the loop: no later commit needs them
        await tx.record_events([
            event_rows.ObservedEvent(stream_seq=seq, msg_id=e.msg_id, kind=e.kind, event_type=e.type,
                                     namespace=e.namespace, name=e.name, uid=e.uid,
                                     resource_version=e.resource_version,
                                     observed_at=datetime.fromisoformat(e.observed_at.replace("Z", "+00:00")))
            for e, seq in batch.events])
        await _save_expectations(tx, outcome, now)
        ids: list[int] = []
        if outcome.decisions:
            partitions = [partition_number(self.bus.partition_of(d.namespace)) for d in outcome.decisions]
            ids = await tx.insert_decisions([
                decision_rows.Decision(
                    correlation_id=d.correlation_id, controller_key=d.controller_key,
                    controller_kind=d.controller_kind, partition=partition, stream_seq=d.stream_seq,
                    trigger=d.trigger, decided_at=now, duration_ms=d.duration_ms, summary=d.summary,
                    lease_epoch=self.fence.get(partition))
                for d, partition in zip(outcome.decisions, partitions, strict=True)])
            rows = []
            for decided, decision_id in zip(outcome.decisions, ids, strict=True):
                result = "error" if "error" in decided.summary else "success"
                serving.RECONCILES.labels(controller=decided.controller_kind, result=result).inc()
                serving.RECONCILE_TIME.labels(controller=decided.controller_kind).observe(decided.duration_ms / 1000)
                for action in decided.actions:
                    action = msgspec.structs.replace(action, decision_id=decision_id)
                    subject = subjects.action_subject(self.bus.partition_of(decided.namespace), self.bus.prefix)
                    rows.append(OutboxRow(key=action.key, decision_id=decision_id, subject=subject,
                                          payload=codec.encode(action), created_at=now,
                                          targets=tuple(targets_of(action))))
            if rows:
                await tx.enqueue(rows)
        for partition, seq in batch.last_seq.items():
            await tx.advance(CONSUMER, partition, seq)
        return ids

    async def _record_tick(self, tx: Any, msgs: list[Msg], caught_up: bool, fed: list[ActionResult],
                           now: datetime, decision_ids: list[int]) -> None:
        """The batch as the controllers saw it, for `kubus replay`: the event range, the results, the clock,
        and the decisions it committed."""
        if self._start is not None:
            await tx.record_tick(self._start)
            self._start = None
        seqs = [m.metadata.sequence.stream for m in msgs]
        await tx.record_tick(tick_rows.Tick(
            instance=self.instance, kind=tick_rows.BATCH, at=now, caught_up=caught_up,
            first_seq=min(seqs, default=None), last_seq=max(seqs, default=None), partitions=self._tick_partitions,
            result_keys=[r.key for r in fed], results=[msgspec.to_builtins(r) for r in fed],
            decision_ids=decision_ids))

    # --- results ------------------------------------------------------------------------------------
    async def record_results(self, results: list[ActionResult], rows: list[ResultRow]) -> None:
        """Hands the executors' results to the loop; returns once they are committed (the results
        recorder acknowledges them only then). The ones seen for the first time reach the controllers."""
        if self._stopping:
            raise Stopped()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._results.append((results, rows, done))
        self.kick()
        await done


def _fail(pending: Pending, exc: Exception) -> None:
    """Results handed to the loop that it will not commit: their recorder leaves them for redelivery."""
    for _, _, done in pending:
        if not done.done():
            done.set_exception(exc)


async def _save_expectations(tx: Any, outcome: Outcome, now: datetime) -> None:
    if outcome.backoff:
        await tx.save_backoff([backoff_rows.Backoff(key=e.key, delay_seconds=e.delay_seconds, last_update=e.last_update)
                               for e in outcome.backoff])
    if outcome.expectations:
        await tx.save_expectations([
            expectation_rows.Expectations(controller_key=k, adds=v.adds, dels=v.dels,
                                          deletion_keys=frozenset(v.deletion_keys), set_at=v.set_at or now)
            for k, v in outcome.expectations.items()])
    if outcome.expectations_deleted:
        await tx.delete_expectations(sorted(outcome.expectations_deleted))
