"""The replay: the reconciler's loop over recorded bundles, with the clock the ticks recorded.

For each tick, in commit order, it does what the live loop did (through `reconciler.stepping`, the very
functions the live loop runs):

- ``start`` (a reconciler process started): a new cache bootstrapped with the tick's state messages, new
  controllers holding only what the store held at that point (the replay keeps the store's expectations,
  failed-pod backoff and consumer positions as the live commits wrote them), not caught up;
- ``batch``: the controllers are resynced when the loop had just caught up; the tick's messages after
  their partition's position are folded into the cache; the recorded executor results, the changes and
  the syncs due at the tick's clock go through `stepping.decide`; what the live loop would have committed
  moves the replay's copy of the store forward.

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

import msgspec

from kube.times import parse_time
from messages import codec
from reconciler import stepping
from reconciler.cache import Cache
from reconciler.controllers import Controllers, Decided, Settings
from reconciler.core.daemonset.backoff import FailedPodBackoff, gc_cutoff
from reconciler.core.expectations import Expectations
from replay.bundles import Bundle
from replay.diff import Divergence, compare_decisions, compare_state
from replay.whatif import WhatIf
from store.ticks import BATCH, START

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


@dataclass
class Engine:
    what_if: WhatIf | None = None
    compare: bool = False  # compare the decisions (and restarts' state) with the recorded ones
    stop_at_divergence: bool = True
    on_tick: Observer | None = None
    cache: Cache = field(default_factory=Cache)
    controllers: Controllers | None = None
    instance: str | None = None
    caught_up: bool = False
    positions: dict[int, int] = field(default_factory=dict)  # as committed to the store
    loop_positions: dict[int, int] = field(default_factory=dict)  # what the running process skips by
    reads: frozenset[int] | None = None  # a split reconciler's partitions and the cluster's; None: all
    stored_expectations: dict[str, Expectations] = field(default_factory=dict)  # as committed to the store
    stored_backoff: dict[str, FailedPodBackoff] = field(default_factory=dict)
    new_positions: dict[int, int] = field(default_factory=dict)  # what the start's first commit records
    stats: Stats = field(default_factory=Stats)
    divergence: Divergence | None = None
    now: datetime | None = None

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
        if self.controllers is None:
            if state is not None:  # the replay starts here: take what the process loaded
                self.positions, self.stored_expectations, self.stored_backoff = _loaded(state)
            elif (tick.first_seq or 1) > 1:
                raise ReplayError(f"{bundle.where}: a start that resumed at sequence {tick.first_seq} without a "
                                  f"record of what it loaded: replay from the beginning of the history")
        self.cache = Cache()
        what_if = self.what_if
        owned = None if tick.partitions is None else frozenset(tick.partitions)
        self.reads = None if owned is None else owned | {stepping.CLUSTER_PARTITION}
        for seq, subject, payload in bundle.messages:
            if self.reads is not None and stepping.partition_of_subject(subject) not in self.reads:
                continue
            if what_if is not None:
                changed = what_if.payload(payload)
                if changed is None:
                    continue
                payload = changed
            try:
                stepping.bootstrap_one(self.cache, payload, seq)
            except (codec.BadMessage, msgspec.DecodeError, ValueError) as exc:
                log.warning("%s: skipping unusable state message %d on %s: %s", bundle.where, seq, subject, exc)
        if what_if is not None:
            for event in what_if.extra_objects(tick.at):
                self.cache.apply(event, 1)
        owns: Callable[[str], bool] | None = None
        held = (self.positions, self.stored_expectations, self.stored_backoff)
        if owned is None:
            if self.controllers is not None and self.compare and state is not None and self.divergence is None:
                self.divergence = compare_state(bundle, held, _loaded(state))
        else:  # a split reconciler loaded only its partitions' state
            count = (state or {}).get("partition_count")
            if not isinstance(count, int):
                raise ReplayError(f"{bundle.where}: a start of a split reconciler without its partition_count")
            owns = stepping.owns_key(count, owned)
            if state is not None and self.controllers is not None:
                # what it took over another member committed: that is the store's, not this replay's, to know
                _adopt(self, _loaded(state), owned, owns)
            held = stepping.held_state(self.cache, owned, owns, self.positions, self.stored_expectations,
                                       self.stored_backoff)
        self.loop_positions = dict(held[0])
        self.new_positions = {int(p): int(seq) for p, seq in ((state or {}).get("new_positions") or {}).items()}
        self.controllers = stepping.fresh_controllers(self.cache, held[1], held[2], Settings.from_start_state(state))
        self.controllers.owns = owns
        self.caught_up = False
        self.instance = tick.instance
        self.now = tick.at
        self.stats.starts += 1
        self.stats.state += len(bundle.messages)

    # --- one committed batch --------------------------------------------------------------------------------
    def _batch(self, bundle: Bundle) -> list[Decided]:
        tick = bundle.tick
        controllers = self.controllers
        if controllers is None:
            raise ReplayError(f"{bundle.where}: the history must begin with a start tick (a reconciler starting)")
        if tick.instance != self.instance:
            raise ReplayError(f"{bundle.where}: a batch of reconciler {tick.instance!r} while {self.instance!r} runs; "
                              f"interleaved reconcilers cannot be replayed as one: pick one with --instance")
        now = tick.at
        if tick.caught_up and not self.caught_up:
            self.caught_up = True
            controllers.resync_all()  # what the live loop did on catching up, right after the previous batch
        batch = stepping.select(bundle.messages, self.loop_positions, self.reads)
        events = batch.events
        if self.what_if is not None:
            events = self.what_if.events(events)
        changes = stepping.fold(self.cache, events)
        step = stepping.decide(controllers, changes, bundle.results, now, tick.caught_up)
        self._commit(step, now)
        for partition, seq in batch.last_seq.items():
            if seq > self.positions.get(partition, 0):
                self.positions[partition] = seq
            if seq > self.loop_positions.get(partition, 0):
                self.loop_positions[partition] = seq
        self.now = now
        stats = self.stats
        stats.events += len(bundle.messages)
        stats.results += len(bundle.results)
        decisions = step.outcome.decisions
        stats.decisions += len(decisions)
        if self.compare and bundle.decisions is not None and self.divergence is None:
            stats.compared += len(bundle.decisions)
            self.divergence = compare_decisions(bundle, decisions)
        return decisions

    def _commit(self, step: stepping.Step, now: datetime) -> None:
        """What the live loop's transaction wrote that a later start loads again."""
        outcome = step.outcome
        for partition, seq in self.new_positions.items():  # the first commit after a start records them
            self.positions[partition] = max(self.positions.get(partition, 0), seq)
        self.new_positions = {}
        for entry in outcome.backoff:
            self.stored_backoff[entry.key] = entry
        for key, value in outcome.expectations.items():
            self.stored_expectations[key] = Expectations(value.adds, value.dels, frozenset(value.deletion_keys),
                                                         value.set_at or now)
        for key in outcome.expectations_deleted:
            self.stored_expectations.pop(key, None)
        if step.collect:
            cutoff = gc_cutoff(now)
            self.stored_backoff = {k: v for k, v in self.stored_backoff.items() if not v.last_update < cutoff}


def _adopt(engine: Engine, loaded: tuple[dict[int, int], dict[str, Expectations], dict[str, FailedPodBackoff]],
           owned: frozenset[int], owns: Callable[[str], bool]) -> None:
    """A split reconciler's start: the store's state of its partitions, as it loaded it, replaces the replay's."""
    positions, expectations, backoff = loaded
    _, ours_expected, ours_backoff = stepping.held_state(engine.cache, owned, owns, {}, engine.stored_expectations,
                                                         engine.stored_backoff)
    engine.positions.update(positions)
    engine.stored_expectations = {k: v for k, v in engine.stored_expectations.items()
                                  if k not in ours_expected} | expectations
    engine.stored_backoff = {k: v for k, v in engine.stored_backoff.items() if k not in ours_backoff} | backoff


def _loaded(state: dict[str, Any]) -> tuple[dict[int, int], dict[str, Expectations], dict[str, FailedPodBackoff]]:
    """A start tick's record of what the process loaded, as the engine keeps it."""
    positions = {int(p): int(s) for p, s in (state.get("positions") or {}).items()}
    expectations = {
        k: Expectations(int(v["adds"]), int(v["dels"]), frozenset(v.get("deletion_keys") or ()),
                        None if v.get("set_at") is None else parse_time(v["set_at"]))
        for k, v in (state.get("expectations") or {}).items()}
    backoff = {k: FailedPodBackoff(key=k, delay_seconds=float(v["delay_seconds"]),
                                   last_update=parse_time(v["last_update"]))
               for k, v in (state.get("backoff") or {}).items()}
    return positions, expectations, backoff
