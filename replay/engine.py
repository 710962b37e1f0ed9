"""The replay: the reconciler's loop over recorded bundles, with the clock the ticks recorded.

For each tick, in commit order, it does what the live loop did, through the very functions the live loop
runs (reconciler.core.batch), with an in-memory store (store.memory) as its copy of the store:

- ``start`` (a reconciler process started): a new cache bootstrapped with the tick's state messages, then
  `start` with what the copy of the store holds at that point (the expectations, failed-pod backoff and
  consumer positions as the live commits wrote them);
- ``batch``: `run_batch` with the tick's messages, the recorded executor results, the tick's clock and
  caught-up flag; its commit moves the replay's copy of the store forward, as it moved the live store.

No cluster, no NATS, no database: the decisions are handed to an observer (`on_tick`), and compared with
the recorded ones when asked (`replay.diff`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kube.times import parse_time
from messages import codec, subjects
from reconciler.core import batch, stepping
from reconciler.core.batch import Stored
from reconciler.core.cache import Cache
from reconciler.core.controllers import Controllers, Decided, Settings
from reconciler.core.daemonset.backoff import FailedPodBackoff
from reconciler.core.expectations import Expectations
from reconciler.core.ticks import BATCH, START
from replay.bundles import Bundle
from replay.diff import Divergence, compare_decisions, compare_state
from replay.whatif import WhatIf
from store.memory import MemoryStore

log = logging.getLogger("kubus.replay")


# a young-generation collection walks every object created since the last one and still alive, and most
# of what a replay creates lives on in the cache: 500,000 (not 50,000) runs one collection, not ten, a
# 100,000-event replay (14 ms each)
GC_THRESHOLDS = (500_000, 20, 100)


@contextlib.contextmanager
def tuned_gc() -> Iterator[None]:
    """Fewer garbage collections while replaying: the cache holds every object of the cluster, decoded, and
    with the default thresholds each collection of the older generations walks all of them (a replay then
    spends more time collecting than folding events). Nothing the replay builds is cyclic garbage."""
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


class ReplayError(ValueError):
    """A history the replay cannot follow (says which tick and why)."""


@dataclass
class Stats:
    ticks: int = 0
    starts: int = 0
    events: int = 0  # messages of the batches (the KUBUS_EVENTS messages replayed)
    state: int = 0  # messages of the bootstraps
    results: int = 0
    decisions: int = 0
    compared: int = 0  # recorded decisions compared
    seconds: float = 0.0  # time spent in the engine


@dataclass
class TickOutcome:
    """What one tick did in the replay: handed to the observer."""

    bundle: Bundle
    decisions: list[Decided]
    engine: Engine


Observer = Callable[[TickOutcome], None]


def _copy() -> MemoryStore:
    """The replay's copy of the store: what a start loads, without the audit trail it would not read."""
    return MemoryStore(trail=False)


@dataclass
class Engine:
    what_if: WhatIf | None = None
    compare: bool = False  # compare the decisions (and restarts' state) with the recorded ones
    stop_at_divergence: bool = True
    on_tick: Observer | None = None
    store: MemoryStore = field(default_factory=_copy)  # the replay's copy of the store
    state: batch.State | None = None  # the running process's (None before the first start)
    cache: Cache = field(default_factory=Cache)
    instance: str | None = None
    stats: Stats = field(default_factory=Stats)
    divergence: Divergence | None = None
    now: datetime | None = None

    @property
    def controllers(self) -> Controllers | None:
        return None if self.state is None else self.state.controllers

    @property
    def caught_up(self) -> bool:
        return self.state is not None and self.state.caught_up

    # --- driving --------------------------------------------------------------------------------------------
    def run(self, bundles: Iterable[Bundle], until: Callable[[Bundle], bool] | None = None) -> Stats:
        """Replays the bundles (until one for which `until` says stop, which is not replayed); the stats."""
        with tuned_gc():
            for bundle in bundles:
                if until is not None and until(bundle):
                    break
                self.feed(bundle)
                if self.divergence is not None and self.stop_at_divergence:
                    break
        return self.stats

    def feed(self, bundle: Bundle) -> list[Decided]:
        started = time.perf_counter()
        tick = bundle.tick
        if tick.kind == START:
            self._start(bundle)
            decisions: list[Decided] = []
        elif tick.kind == BATCH:
            decisions = self._batch(bundle)
        else:
            raise ReplayError(f"{bundle.where}: unknown tick kind {tick.kind!r}")
        self.stats.ticks += 1
        self.stats.seconds += time.perf_counter() - started
        if self.on_tick is not None:
            self.on_tick(TickOutcome(bundle, decisions, self))
        return decisions

    # --- a process starts -----------------------------------------------------------------------------------
    def _start(self, bundle: Bundle) -> None:
        tick = bundle.tick
        state = tick.state
        if self.state is None:
            if state is not None:  # the replay starts here: take what the process loaded
                self.store = MemoryStore.holding(_loaded(state), trail=False)
            elif (tick.first_seq or 1) > 1:
                raise ReplayError(f"{bundle.where}: a start that resumed at sequence {tick.first_seq} without a "
                                  f"record of what it loaded: replay from the beginning of the history")
        cache = Cache()
        what_if = self.what_if
        owned = None if tick.partitions is None else frozenset(tick.partitions)
        reads = None if owned is None else owned | {stepping.CLUSTER_PARTITION}
        recorded_count = (state or {}).get("partition_count")
        count = recorded_count if isinstance(recorded_count, int) else subjects.DEFAULT_PARTITIONS
        for seq, subject, payload in bundle.messages:
            if reads is not None and stepping.classify(subject, count)[0] not in reads:
                continue
            if what_if is not None:
                changed = what_if.payload(payload)
                if changed is None:
                    continue
                payload = changed
            try:
                stepping.bootstrap_one(cache, subject, payload, seq, count)
            except codec.BadMessage as exc:  # the live bootstrap moved it to KUBUS_DEAD and went on
                log.warning("%s: skipping unusable state message %d on %s: %s", bundle.where, seq, subject, exc)
            except codec.NewerSchema as exc:
                raise ReplayError(f"{bundle.where}: state message {seq} on {subject}: {exc}") from None
        if what_if is not None:
            for event in what_if.extra_objects(tick.at):
                cache.apply(event, 1)
        if owned is None:
            self.check_start(bundle)
        else:  # a split reconciler loaded only its partitions' state
            if not isinstance(recorded_count, int):
                raise ReplayError(f"{bundle.where}: a start of a split reconciler without its partition_count")
            if state is not None and self.state is not None:
                # what it took over another member committed: that is the store's, not this replay's, to know
                _adopt(self.store, cache, _loaded(state), owned, count)
        self.cache = cache
        self.state = batch.start(batch.Loaded(
            stored=self.store.load_now(), partition_count=count, partitions=owned,
            settings=Settings.from_start_state(state), newest=tick.last_seq or 0,
            consistent=int((state or {}).get("consistent", (tick.first_seq or 1) - 1)),
            instance=tick.instance, at=tick.at), cache)
        # the positions its first commit recorded are the start's record (a history recorded before they were
        # recorded has none)
        self.state.new_positions = {int(p): int(seq) for p, seq in ((state or {}).get("new_positions") or {}).items()}
        self.instance = tick.instance
        self.now = tick.at
        self.stats.starts += 1
        self.stats.state += len(bundle.messages)

    def check_start(self, bundle: Bundle) -> None:
        """What a restart (of a reconciler deciding for every partition) is checked for under `compare`: that what
        it recorded it loaded is what the replay's copy of the store holds (a divergence otherwise). `_start`
        calls it; replay.parallel calls it alone at the start where another process takes the history over."""
        state = bundle.tick.state
        if self.state is not None and self.compare and state is not None and self.divergence is None:
            self.divergence = compare_state(bundle, self.store.load_now(), _loaded(state))

    # --- one committed batch --------------------------------------------------------------------------------
    def _batch(self, bundle: Bundle) -> list[Decided]:
        tick = bundle.tick
        state = self.state
        if state is None:
            raise ReplayError(f"{bundle.where}: the history must begin with a start tick (a reconciler starting)")
        if tick.instance != self.instance:
            raise ReplayError(f"{bundle.where}: a batch of reconciler {tick.instance!r} while {self.instance!r} runs; "
                              f"interleaved reconcilers cannot be replayed as one: pick one with --instance")
        # every batch tick was committed, so it commits here too (recorded)
        commit = batch.run_batch(state, bundle.messages, bundle.results, tick.at, tick.caught_up, recorded=True,
                                 rewrite=None if self.what_if is None else self.what_if.events)
        # the unusable messages the live loop moved to KUBUS_DEAD are skipped here alike; a batch that stopped
        # before a newer kubus's message recorded only what it consumed before it
        for bad in commit.unusable:
            log.info("%s: unusable event %d skipped (%s): %s", bundle.where, bad.seq, bad.reason, bad.error)
        self.store.write(commit)
        self.now = tick.at
        stats = self.stats
        stats.events += len(bundle.messages)
        stats.results += len(bundle.results)
        decisions = [sync.decided for sync in commit.decisions]
        stats.decisions += len(decisions)
        if self.compare and bundle.decisions is not None and self.divergence is None:
            stats.compared += len(bundle.decisions)
            self.divergence = compare_decisions(bundle, decisions)
        return decisions


def _adopt(store: MemoryStore, cache: Cache, loaded: Stored, owned: frozenset[int], partition_count: int) -> None:
    """A split reconciler's start: the store's state of its partitions, as it loaded it, replaces the replay's."""
    _, ours_expected, ours_backoff = stepping.held_state(cache, owned, stepping.owns_key(partition_count, owned), {},
                                                         store.expectations, store.backoff)
    store.positions.setdefault(batch.CONSUMER, {}).update(loaded.positions)
    store.expectations = {k: v for k, v in store.expectations.items() if k not in ours_expected} | loaded.expectations
    store.backoff = {k: v for k, v in store.backoff.items() if k not in ours_backoff} | loaded.backoff


def _loaded(state: dict[str, Any]) -> Stored:
    """A start tick's record of what the process loaded."""
    positions = {int(p): int(s) for p, s in (state.get("positions") or {}).items()}
    expectations = {
        k: Expectations(int(v["adds"]), int(v["dels"]), frozenset(v.get("deletion_keys") or ()),
                        None if v.get("set_at") is None else parse_time(v["set_at"]))
        for k, v in (state.get("expectations") or {}).items()}
    backoff = {k: FailedPodBackoff(key=k, delay_seconds=float(v["delay_seconds"]),
                                   last_update=parse_time(v["last_update"]))
               for k, v in (state.get("backoff") or {}).items()}
    return Stored(positions=positions, expectations=expectations, backoff=backoff)
