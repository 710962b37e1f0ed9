"""The reconciler's shell: bus -> `run_batch` -> one store transaction -> outbox.

The batch itself is reconciler.core.batch's (`start` once, then `run_batch` per batch, the same functions
`kubus replay` and the synthetic world call); this module is the NATS plumbing around them, the store's
transaction (store/port.py) and the metrics.

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
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from kube.times import Clock, utcnow
from messages import codec, subjects
from messages.actions import ActionResult
from messages.observed import ObservedEvent
from reconciler import bootstrapping
from reconciler.core import batch, stepping
from reconciler.core.batch import CONSUMER
from reconciler.core.cache import Cache
from reconciler.core.controllers import Controllers, Settings
from runtime import failpoints, serving
from runtime.bus import Bus
from runtime.deadletter import EVENTS, STATE, Halts, Original, dead_letter
from store.port import Fence, ReconcilerPort, ReconcilerTransaction
from store.results import ResultRow

log = logging.getLogger("kubus.reconciler")

CLUSTER_PARTITION = stepping.CLUSTER_PARTITION  # how the cluster partition is stored in consumer_positions
BATCH = 500
BATCH_WINDOW = 0.05  # seconds a batch may wait for more events once one arrived

partition_of_subject = stepping.partition_of_subject
# results handed to the loop, each batch with the future its recorder awaits (set once committed)
Pending = list[tuple[list[ActionResult], list[ResultRow], asyncio.Future[None]]]


class Stopped(Exception):
    """The reconciler stopped (its partitions changed) before it committed these results."""


class Halted(Stopped):
    """The reconciler stopped at a message of a newer kubus: it decides nothing more until it is upgraded."""


class Reconciler:
    def __init__(self, bus: Bus, store: ReconcilerPort, clock: Clock = utcnow,
                 instance: str = "reconciler", partitions: Mapping[int, int] | None = None,
                 lease_ttl: float | None = None, settings: Settings | None = None, halts: Halts | None = None):
        self.bus = bus
        self.halts = halts or Halts()  # the service's: /readyz is false while a consumer is halted
        self.halted = False  # stopped at a message of a newer kubus (see run)
        self.instance = instance
        # None: every partition, unfenced (a reconciler alone by construction, `kubus up`). Otherwise the
        # partitions held, {partition: lease epoch}: checked by every commit, extended by lease_ttl
        self.fence: dict[int, int] = dict(partitions or {})
        self.owned: frozenset[int] | None = None if partitions is None else frozenset(partitions)
        self._reads = None if self.owned is None else self.owned | {CLUSTER_PARTITION}
        self.lease_ttl = lease_ttl
        self._fence = Fence(instance, self.fence, lease_ttl)
        self._stopping = False
        self._stop_requested = asyncio.Event()
        self.bootstrapped_to = 0  # the newest event sequence the cache was bootstrapped with
        self._consistent_to = 0  # every event up to this one is reflected in the bootstrapped cache
        self.store = store
        self.clock = clock
        self.settings = settings or Settings()
        self.cache = Cache()
        self.state: batch.State | None = None  # once started
        self.caught_up = False
        self.relay_wakeup = asyncio.Event()
        self._queue: asyncio.Queue[Msg | None] = asyncio.Queue()
        self._lock = asyncio.Lock()
        self._results: Pending = []
        self._consumed: dict[tuple[str, str], Any] = {}  # prometheus children, looked up once

    @property
    def controllers(self) -> Controllers:
        if self.state is None:
            raise RuntimeError("the reconciler has not started")
        return self.state.controllers

    def reads(self, partition: int) -> bool:
        """Whether messages of `partition` (stepping.classify) are for this reconciler."""
        return self._reads is None or partition in self._reads

    def stop(self) -> None:
        """Ends `run()` after the batch in flight, or at once while it is still starting (its partitions
        changed)."""
        self._stopping = True
        self._stop_requested.set()
        self.kick()

    # --- bootstrap ---------------------------------------------------------------------------------
    async def bootstrap(self) -> bootstrapping.Bootstrapped:
        """Fills the cache from the compacted state (our partitions' and the cluster's objects)."""
        done = await bootstrapping.bootstrap(self.bus, self.cache, self.reads)
        self.bootstrapped_to, self._consistent_to = done.newest, done.consistent
        return done

    async def _load(self) -> batch.State:
        """Bootstrap, then the store's state: the reconciler as it starts its first batch."""
        done = await self.bootstrap()
        loaded = done.loaded
        stored = await self.store.load(CONSUMER)
        await bootstrapping.dead_letter_unusable(self.bus, done.unusable, stored.positions, self.instance)
        self.state = state = batch.start(batch.Loaded(
            stored=stored, partition_count=self.bus.partitions, partitions=self.owned, epochs=self.fence,
            prefix=self.bus.prefix, settings=self.settings, newest=self.bootstrapped_to,
            consistent=self._consistent_to, instance=self.instance, at=self.clock()), self.cache)
        state.controllers.use_stopwatch(time.perf_counter)
        log.info("cache bootstrapped with %d objects, %d expectations; replaying events from sequence %d",
                 loaded, len(state.controllers.expectations), state.first_seq)
        return state

    # --- consuming --------------------------------------------------------------------------------
    async def run(self) -> None:
        sub = None
        self.halts.clear(STATE)
        self.halts.clear(EVENTS)
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
            try:
                state = starting.result()
            except codec.NewerSchema as exc:  # in KUBUS_STATE: no cache can be built, so nothing is decided
                await self._halt(STATE, f"{self.bus.stream(subjects.STATE_STREAM)} at start", str(exc))
                return
            info = await self.bus.js.stream_info(self.bus.stream(subjects.EVENTS_STREAM))
            target = info.state.last_seq

            async def on_event(msg: Msg) -> None:
                await self._queue.put(msg)

            sub = await self.bus.js.subscribe(
                f"{self.bus.prefix}.events.>", stream=self.bus.stream(subjects.EVENTS_STREAM), cb=on_event,
                ordered_consumer=True,
                config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=state.first_seq))
            if target < state.first_seq:
                self._caught_up(state)
            while not self._stopping:
                msgs = await self._next_batch()
                async with self._lock:
                    last, halt = await self._process(state, msgs)
                if halt is not None:
                    # what came before it is committed; the position stays before it, so an upgraded process
                    # starts there. Deciding on without the events from there on would act on a cache that no
                    # longer follows the cluster (its expectations would time out, and pods be made twice)
                    with contextlib.suppress(Exception):
                        await sub.unsubscribe()
                    sub = None
                    where = f"{self.bus.stream(subjects.EVENTS_STREAM)}#{halt.seq} ({halt.subject})"
                    await self._halt(EVENTS, where, halt.error)
                    return
                serving.WORKQUEUE_DEPTH.labels(name="reconciler").set(self._queue.qsize())
                if msgs:
                    serving.STREAM_LAG.labels(stream="events").set(msgs[-1].metadata.num_pending or 0)
                if not self.caught_up and last >= target:
                    self._caught_up(state)
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

    async def _halt(self, consumer: str, where: str, error: str) -> None:
        """Stopped at a message of a newer kubus: says so once (/readyz false), hands back the results given to
        it, and waits for stop() with the rest of the process running (the relay, /healthz, /metrics)."""
        self.halted = True
        self.halts.halt(consumer, where, error)
        _fail(self._results, Halted(error))
        self._results = []
        await self._stop_requested.wait()

    def _caught_up(self, state: batch.State) -> None:
        self.caught_up = True
        batch.catch_up(state)
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

    async def _process(self, state: batch.State, msgs: list[Msg]) -> tuple[int, stepping.Halt | None]:
        # what the batch is given beyond the events (the results fed, the clock, the caught-up flag) is
        # recorded in its tick, which is what `kubus replay` feeds run_batch again
        caught_up = self.caught_up
        messages = [(m.metadata.sequence.stream, m.subject, m.data) for m in msgs]
        now = self.clock()
        pending, self._results = self._results, []
        try:
            commit = await self._step(state, messages, pending, caught_up, now)
        except BaseException as exc:  # LeaseLost, the database away: nothing committed, the results not acked
            _fail(pending, exc if isinstance(exc, Exception) else Stopped())
            raise
        for _, _, done in pending:
            done.set_result(None)
        if commit.acts:
            failpoints.hit("reconciler.after-commit")
            self.relay_wakeup.set()
        # every message counts towards catching up, ours or not: the history ends where the stream does
        return max((seq for seq, _, _ in messages), default=0), commit.halted

    async def _step(self, state: batch.State, messages: Sequence[stepping.Message], pending: Pending,
                    caught_up: bool, now: datetime) -> batch.Commit:
        """Decides and commits one batch, in one transaction: the executors' results first (only those the
        store had not recorded reach the controllers), then run_batch's commit, the lease fence last."""
        async with contextlib.AsyncExitStack() as stack:
            tx: ReconcilerTransaction | None = None
            fed: list[ActionResult] = []
            if pending:  # results first: the syncs see the expectations they lowered
                tx = await stack.enter_async_context(self.store.transaction())
                fresh = set(await tx.record_results([row for _, rows, _ in pending for row in rows], now))
                fed = [r for results, _, _ in pending for r in results if r.key in fresh]
            commit = batch.run_batch(state, messages, fed, now, caught_up, recorded=tx is not None)
            self._count(event for event, _ in commit.events)
            if commit.unusable:  # in KUBUS_DEAD before the position moves past them
                await self._dead_letter(messages, commit.unusable)
            if not commit.empty:
                if tx is None:
                    tx = await stack.enter_async_context(self.store.transaction())
                await tx.commit(commit, self._fence)
        for sync in commit.decisions:
            decided = sync.decided
            result = "error" if "error" in decided.summary else "success"
            serving.RECONCILES.labels(controller=decided.controller_kind, result=result).inc()
            serving.RECONCILE_TIME.labels(controller=decided.controller_kind).observe(decided.duration_ms / 1000)
        return commit

    async def _dead_letter(self, messages: Sequence[stepping.Message], unusable: list[stepping.Unusable]) -> None:
        stream = self.bus.stream(subjects.EVENTS_STREAM)
        by_seq = {seq: (subject, payload) for seq, subject, payload in messages}
        for bad in unusable:
            subject, payload = by_seq[bad.seq]
            data = payload if isinstance(payload, bytes) else b""
            await dead_letter(self.bus, EVENTS, Original(stream, bad.seq, subject, data), bad.reason, bad.error,
                              self.instance)

    def _count(self, events: Iterable[ObservedEvent]) -> None:
        for event in events:
            counter = self._consumed.get((event.kind, event.type))
            if counter is None:
                counter = self._consumed[(event.kind, event.type)] = serving.EVENTS_CONSUMED.labels(
                    kind=event.kind, type=event.type)
            counter.inc()

    # --- results ------------------------------------------------------------------------------------
    async def record_results(self, results: list[ActionResult], rows: list[ResultRow]) -> None:
        """Hands the executors' results to the loop; returns once they are committed (the results
        recorder acknowledges them only then). The ones seen for the first time reach the controllers."""
        if self.halted:
            raise Halted("stopped at a message of a newer kubus")
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
