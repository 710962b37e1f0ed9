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

Stream loss: positions mean something only in the KUBUS_EVENTS that numbered them. A starting reconciler
compares the stream (its creation time, and its end against the positions) with what the store recorded
(store/streams.py); the loop checks again every STREAM_CHECK_INTERVAL and ends with StreamReset when the
stream changed under it. The next one to start resets the positions (an error line, kubus_stream_resets_total,
a stream_resets row), waits for ingest to have relisted into the new stream, and bootstraps afresh. Every
commit is fenced by the stream it started on, so a peer still on the old one commits nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
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
from reconciler import bootstrapping, metrics
from reconciler.awaiting import Unmet
from reconciler.core import batch, stepping
from reconciler.core.batch import CONSUMER
from reconciler.core.cache import Cache
from reconciler.core.controllers import Controllers, Settings
from reconciler.intake import Intake
from reconciler.outgoing import Outgoing
from runtime import failpoints, logs, serving
from runtime.bus import Bus, bus_away, events_info, identity, renew_state, stream_sequence
from runtime.deadletter import EVENTS, STATE, Halts, Original, dead_letter
from store.errors import database_away, describe
from store.outbox import OutboxRow
from store.port import Fence, ReconcilerPort, ReconcilerTransaction
from store.results import ResultRow
from store.streams import INGEST, RECONCILER, Reset, StreamChanged

log = logging.getLogger("kubus.reconciler")

CLUSTER_PARTITION = stepping.CLUSTER_PARTITION  # how the cluster partition is stored in consumer_positions
BATCH = 500
BATCH_WINDOW = 0.05  # seconds a batch may wait for more events once one arrived

partition_of_subject = stepping.partition_of_subject
# results handed to the loop, each batch with the future its recorder awaits (set once committed)
Pending = list[tuple[list[ActionResult], list[ResultRow], asyncio.Future[None]]]


STREAM_CHECK_INTERVAL = 5.0  # seconds between two looks at whether KUBUS_EVENTS is still the stream we started on
INGEST_RELIST_WAIT = 120.0  # seconds a reset waits for ingest to relist into the new stream before going on
INGEST_POLL = 0.5  # seconds between two looks at whether it has


class Stopped(Exception):
    """The reconciler stopped (its partitions changed) before it committed these results."""


class Halted(Stopped):
    """The reconciler stopped at a message of a newer kubus: it decides nothing more until it is upgraded."""


class StreamReset(Exception):
    """KUBUS_EVENTS is not the stream this loop started on: created anew, or it lost events the loop had
    read. The loop ended; a new one resets the positions and bootstraps from a fresh relist."""


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
        self.stream: str | None = None  # the identity of the KUBUS_EVENTS this loop started on (runtime.bus.identity)
        self._next_check = 0.0
        self.bootstrapped_to = 0  # the newest event sequence the cache was bootstrapped with
        self._consistent_to = 0  # every event up to this one is reflected in the bootstrapped cache
        self.store = store
        self.clock = clock
        self.settings = settings or Settings()
        self.cache = Cache()
        self.state: batch.State | None = None  # once started
        self.caught_up = False
        self.committed = False  # a transaction of this loop committed (the database answered)
        self.relay_wakeup = asyncio.Event()
        # where the rows of each commit go for the relay (reconciler.outgoing); None: it scans the table for them
        self.outgoing: Outgoing | None = None
        self._intake = Intake()
        self._unmet = Unmet()  # the expectations the commits left unmet: where a batch's window may end early
        self._lock = asyncio.Lock()
        self._results: Pending = []
        self._consumed = metrics.LabelledCounts(serving.EVENTS_CONSUMED)
        self.probe = metrics.WorkqueueProbe(time.perf_counter)  # the controllers' key queue's metrics, until run ends

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
        """The stream checked (reset if it must be), bootstrap, then the store's state: the reconciler as it
        starts its first batch."""
        self.stream = await self._settle_stream()
        await self._note_recreated_queues()
        self._fence = dataclasses.replace(self._fence, stream=self.stream)
        done = await self.bootstrap()
        loaded = done.loaded
        stored = await self.store.load(CONSUMER)
        await bootstrapping.dead_letter_unusable(self.bus, done.unusable, stored.positions, self.instance)
        self.state = state = batch.start(batch.Loaded(
            stored=stored, partition_count=self.bus.partitions, partitions=self.owned, epochs=self.fence,
            prefix=self.bus.prefix, settings=self.settings, newest=self.bootstrapped_to,
            consistent=self._consistent_to, instance=self.instance, at=self.clock()), self.cache)
        state.controllers.use_stopwatch(time.perf_counter)
        self._unmet.seed(state.controllers.expectations)
        state.controllers.use_probe(self.probe)  # the workqueue_* metrics, on the same clock
        log.info("cache bootstrapped with %d objects, %d expectations; replaying events from sequence %d",
                 loaded, len(state.controllers.expectations), state.first_seq)
        return state

    # --- stream loss --------------------------------------------------------------------------------
    async def _settle_stream(self) -> str:
        """The identity of KUBUS_EVENTS as it is now, after resetting the store's positions if they refer to
        another stream (created anew since they were recorded) or lie past its end (it lost events)."""
        name = self.bus.stream(subjects.EVENTS_STREAM)
        recorded = await self.store.stream_identity(RECONCILER)
        positions = (await self.store.load(CONSUMER)).positions  # read before the stream's end: they are behind it
        info = await events_info(self.bus)
        current, last = identity(info), info.state.last_seq
        past = {p: s for p, s in positions.items() if s > last}
        if not past and recorded in (None, current):
            if recorded is None:  # first use (or a store from before kubus recorded it): this stream it is
                await self.store.record_stream_identity(RECONCILER, name, current)
            self._note_discarded(info.state.first_seq, positions)
            return current
        recreated = recorded is not None and recorded != current
        reason = "created anew" if recreated else "lost events: positions past its end"
        log.error("stream %s was reset (%s): the reconciler's positions %s refer to the stream created %s; it is "
                  "now the one created %s, last sequence %d. Starting over from a fresh relist: positions reset, "
                  "cache rebuilt", name, reason, _positions(positions), recorded or "(not recorded)", current, last)
        serving.STREAM_RESETS.labels(stream=name, service="reconciler").inc()
        await renew_state(self.bus)
        if recreated:
            await self._wait_for_ingest(current)
        done = await self.store.reset_stream(CONSUMER, Reset(
            stream=name, old_created=recorded, new_created=current, reason=reason, positions=positions,
            last_seq=last, instance=self.instance))
        if not done:
            log.info("stream %s: another reconciler reset the positions already", name)
        return current

    async def _note_recreated_queues(self) -> None:
        """Says loudly when KUBUS_ACTIONS or KUBUS_RESULTS was created anew since the last start (docs/production.md,
        "Stream loss"): actions relayed before and not yet taken, and results not yet recorded, are gone. Nothing
        is replayed: the expectations they would have met time out (5 minutes) and their controllers act again."""
        for base, lost in ((subjects.ACTIONS_STREAM, "actions relayed before that no executor had taken"),
                           (subjects.RESULTS_STREAM, "executors' results not yet recorded")):
            name = self.bus.stream(base)
            current = identity(await self.bus.js.stream_info(name))
            recorded = await self.store.stream_identity(f"stream:{base}")
            if recorded == current:
                continue
            if recorded is not None:
                log.error("stream %s was created anew (it was the one created %s, it is now the one created %s): "
                          "%s are lost; the controllers waiting for them act again once their expectations time "
                          "out (5 minutes)", name, recorded, current, lost)
                serving.STREAM_RESETS.labels(stream=name, service="reconciler").inc()
            await self.store.record_stream_identity(f"stream:{base}", name, current)

    async def _wait_for_ingest(self, current: str) -> None:
        """Waits (up to INGEST_RELIST_WAIT, or a stop) for ingest to have relisted every kind into the stream
        created at `current`: a cache bootstrapped before that lacks objects (a ReplicaSet seen before its pods
        would be given new ones)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + INGEST_RELIST_WAIT
        log.info("waiting for ingest to relist into the stream created %s", current)
        while await self.store.stream_identity(INGEST) != current:
            if self._stopping:
                return
            if loop.time() > deadline:
                log.warning("ingest has not relisted into the stream created %s within %.0f s; bootstrapping "
                            "from what it holds", current, INGEST_RELIST_WAIT)
                return
            with contextlib.suppress(TimeoutError):  # a poll of the store, ended early by a stop
                await asyncio.wait_for(self._stop_requested.wait(), INGEST_POLL)

    def _note_discarded(self, first_seq: int, positions: Mapping[int, int]) -> None:
        """Says when the stream's limits discarded events a position has not reached (they are lost to it)."""
        behind = {p: s for p, s in positions.items() if s + 1 < first_seq}
        if behind:
            log.warning("stream %s discarded events before this reconciler read them: it starts at %d, positions "
                        "%s (its limits are too small for how far the reconciler fell behind; the bootstrap from "
                        "KUBUS_STATE covers the objects, not the events)", self.bus.stream(subjects.EVENTS_STREAM),
                        first_seq, _positions(behind))

    async def _check_stream(self, state: batch.State) -> None:
        """Every STREAM_CHECK_INTERVAL: raises StreamReset when KUBUS_EVENTS is not the stream the loop started
        on, or ends before what the loop has read. A look NATS cannot answer is the next round's."""
        now = asyncio.get_running_loop().time()
        if now < self._next_check:
            return
        self._next_check = now + STREAM_CHECK_INTERVAL
        try:
            info = await events_info(self.bus)
        except Exception as exc:  # NATS reconnecting, a leader election, the stream being re-created
            log.debug("stream check skipped: %s", exc or type(exc).__name__)
            return
        current, last = identity(info), info.state.last_seq
        read = max(state.positions.values(), default=0)
        if current != self.stream or last < read:
            raise StreamReset(f"stream {self.bus.stream(subjects.EVENTS_STREAM)} changed under the loop: started "
                              f"on the one created {self.stream}, now the one created {current}, last sequence "
                              f"{last} (read up to {read})")

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

            sub = await self._subscribe(state.first_seq)
            if target < state.first_seq:
                self._caught_up(state)
            while not self._stopping:
                await self._check_stream(state)
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
                metrics.INTAKE_DEPTH.set(len(self._intake))
                if msgs:
                    serving.STREAM_LAG.labels(stream="events").set(msgs[-1].metadata.num_pending or 0)
                if not self.caught_up and last >= target:
                    self._caught_up(state)
                    log.info("caught up with the event history at sequence %d", last)
        finally:
            # whatever ended the loop (a stop, LeaseLost, an error, a cancellation): results handed to it are
            # not committed, and none are taken any more, so no recorder waits on a loop that is gone
            self._stopping = True
            if self.outgoing is not None:  # a commit may have landed without its rows handed over: the relay scans
                self.outgoing.lost()
            self.probe.close()  # its keys are no longer queued: a new loop enqueues every controller again
            _fail(self._results, Stopped())
            self._results = []
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

    async def _subscribe(self, first_seq: int) -> Any:
        """KUBUS_EVENTS from `first_seq` on, into the intake (an ordered consumer: no acks, its order the stream's)."""
        return await self.bus.js.subscribe(
            f"{self.bus.prefix}.events.>", stream=self.bus.stream(subjects.EVENTS_STREAM), cb=self._intake.deliver,
            ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=first_seq))

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
        self._intake.kick()

    async def _next_batch(self) -> list[Msg]:
        """The next events, waiting no longer than until the next sync is due."""
        timeout: float | None = None
        if self.caught_up:
            ready_at = self.controllers.next_ready_at()
            if len(self.controllers.queue):
                timeout = 0.0
            elif ready_at is not None:
                timeout = max(0.0, (ready_at - self.clock()).total_seconds())
        # woken at least every STREAM_CHECK_INTERVAL, to look at the stream
        timeout = STREAM_CHECK_INTERVAL if timeout is None else min(timeout, STREAM_CHECK_INTERVAL)
        await self._intake.wait(timeout)
        msgs: list[Msg] = []
        # a shadow decides after every event once caught up, as upstream's handlers run per event: so that each
        # of its decisions sees the cluster as it was before the acting controller's next act (docs/shadow.md)
        limit = 1 if self.settings.shadow and self.caught_up else BATCH
        if len(self._intake) or self._results:
            # a short window to let a burst of events and results gather: one sync and one commit per
            # burst instead of one per few events (what a single upstream worker gets from its queue); it ends
            # at the event that meets a controller's expectations, whose next round would wait for the rest
            countdown = self._unmet.countdown(self.clock(), self._cached_pod) if self.caught_up else None
            await self._intake.gather(msgs, limit, BATCH_WINDOW, countdown.met_by if countdown else None)
        else:
            self._intake.take(msgs, limit)
        return msgs

    def _cached_pod(self, uid: str) -> bool:
        return self.cache.get("Pod", uid) is not None

    async def _process(self, state: batch.State, msgs: list[Msg]) -> tuple[int, stepping.Halt | None]:
        # what the batch is given beyond the events (the results fed, the clock, the caught-up flag) is
        # recorded in its tick, which is what `kubus replay` feeds run_batch again
        caught_up = self.caught_up
        messages = [(stream_sequence(m), m.subject, m.data) for m in msgs]
        now = self.clock()
        pending, self._results = self._results, []
        try:
            commit, queued = await self._step(state, messages, pending, caught_up, now)
        except BaseException as exc:  # LeaseLost, the database away: nothing committed, the results not acked
            _fail(pending, exc if isinstance(exc, Exception) else Stopped())
            raise
        self._unmet.saved(commit.expectations, commit.expectations_deleted)
        for _, _, done in pending:
            done.set_result(None)
        if commit.acts:
            if self.outgoing is not None:
                self.outgoing.hand(queued)
            failpoints.hit("reconciler.after-commit")
            self.relay_wakeup.set()
        # every message counts towards catching up, ours or not: the history ends where the stream does
        return max((seq for seq, _, _ in messages), default=0), commit.halted

    async def _step(self, state: batch.State, messages: Sequence[stepping.Message], pending: Pending,
                    caught_up: bool, now: datetime) -> tuple[batch.Commit, list[OutboxRow]]:
        """Decides and commits one batch, in one transaction: the executors' results first (only those the
        store had not recorded reach the controllers), then run_batch's commit, the lease fence last. The commit,
        and the outbox rows it queued (for the relay, once committed)."""
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
                if commit.decisions:  # a test's pause (runtime/failpoints.py): decisions written, not committed
                    await failpoints.reached("reconciler.before-commit")
        self.committed = self.committed or tx is not None
        for sync in commit.decisions:
            decided = sync.decided
            metrics.reconciled(decided)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s decided (%s, %d actions): %s", decided.controller_key, decided.result,
                          len(decided.actions), decided.summary.get("reason", ""), extra=logs.fields(
                              **logs.of_controller(decided.controller_key), decision=decided.correlation_id,
                              partition=sync.partition))
        return commit, (tx.queued if tx is not None else [])

    async def _dead_letter(self, messages: Sequence[stepping.Message], unusable: list[stepping.Unusable]) -> None:
        stream = self.bus.stream(subjects.EVENTS_STREAM)
        by_seq = {seq: (subject, payload) for seq, subject, payload in messages}
        for bad in unusable:
            subject, payload = by_seq[bad.seq]
            data = payload if isinstance(payload, bytes) else b""
            await dead_letter(self.bus, EVENTS, Original(stream, bad.seq, subject, data), bad.reason, bad.error,
                              self.instance)

    def _count(self, events: Iterable[ObservedEvent]) -> None:
        self._consumed.add((event.kind, event.type) for event in events)

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


def _positions(positions: Mapping[int, int]) -> str:
    return "{" + ", ".join(f"{p}: {s}" for p, s in sorted(positions.items())) + "}"


RETRY_INITIAL = 0.5  # seconds before a loop ended by the database or NATS being away starts again; doubled each time
RETRY_MAX = 30.0


def next_retry(previous: float, committed: bool) -> float:
    """The wait before the next loop: RETRY_INITIAL, doubling while the weather lasts, from the start again once
    a loop committed (it found the database and NATS back)."""
    return min(max((0.0 if committed else previous) * 2, RETRY_INITIAL), RETRY_MAX)


def away(exc: BaseException) -> str:
    """What was away, in a few words (no credentials): for the log line of a loop that starts over."""
    what = "the database" if database_away(exc) else "NATS"
    return f"{what} is away ({describe(exc)})"


class SoleReconciler:
    """The one reconciler of `kubus up` (every partition, unfenced), built again when the stream is reset."""

    def __init__(self, bus: Bus, store: ReconcilerPort, instance: str, settings: Settings | None = None,
                 halts: Halts | None = None) -> None:
        self._bus, self._store, self._instance, self._settings = bus, store, instance, settings
        self._halts = halts or Halts()
        self.outgoing = Outgoing()  # the relay's, handed every loop's commits
        self.current = self._make()
        self.relay_wakeup = self.current.relay_wakeup
        self._stopping = False
        self._stop_requested = asyncio.Event()
        self._replaced = asyncio.Event()

    def _make(self) -> Reconciler:
        loop = Reconciler(self._bus, self._store, instance=self._instance, settings=self._settings,
                          halts=self._halts)
        loop.outgoing = self.outgoing
        return loop

    @property
    def caught_up(self) -> bool:
        return self.current.caught_up

    def stop(self) -> None:
        self._stopping = True
        self._stop_requested.set()
        self._replaced.set()
        self.current.stop()

    async def run(self) -> None:
        delay = 0.0
        while True:
            try:
                await self.current.run()
                return
            except (StreamReset, StreamChanged) as exc:
                if self._stopping:
                    return
                log.warning("%s; starting the reconciler over", exc)
            except Exception as exc:
                if self._stopping or not (database_away(exc) or bus_away(exc)):
                    raise  # a bug, not the weather: the service stops, saying what
                # as a split reconciler's loop (reconciler.partitioned): what this one held in memory is ahead of
                # the store, so the next one starts from what the store committed, after a backoff
                delay = next_retry(delay, self.current.committed)
                log.warning("%s: the reconciler stopped, nothing of its batch committed; starting again from what "
                            "the store holds in %.1f s", away(exc), delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop_requested.wait(), delay)
                if self._stopping:
                    return
            self.current = self._make()
            self.current.relay_wakeup = self.relay_wakeup
            self._replaced.set()
            self._replaced = asyncio.Event()

    async def record_results(self, results: list[ActionResult], rows: list[ResultRow]) -> None:
        """Hands the results to the current loop; results a loop ended by a reset did not commit go to the next
        one (recording them is idempotent by key)."""
        while True:
            current, replaced = self.current, self._replaced
            try:
                await current.record_results(results, rows)
                return
            except Stopped:
                if self._stopping:
                    raise
                if self.current is current:
                    await replaced.wait()


def _fail(pending: Pending, exc: Exception) -> None:
    """Results handed to the loop that it will not commit: their recorder leaves them for redelivery."""
    for _, _, done in pending:
        if not done.done():
            done.set_exception(exc)
