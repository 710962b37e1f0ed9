"""The reconciler from start to commit, as two pure functions every runner calls.

    state = start(loaded, cache)                                   a process starts
    commit = run_batch(state, messages, results, now, caught_up)   one batch of its loop

The live loop (`reconciler.consuming`), `kubus replay` (`replay.engine`) and the synthetic world
(`replay.synthetic`) each hand the `Commit` to their store adapter (store/port.py: SQL, or in memory),
which writes it in one transaction. Nothing here does I/O or reads a clock: what it is given (the
messages, the executors' results the store found new, the clock, whether the loop has caught up) is
what the batch's tick records, so a replay that gives the same gets the same.

A `Commit` is everything one transaction writes: the stream positions, the observed events, the
expectations and failed-pod backoff the controllers changed (and the backoff's garbage collection), the
decisions with their actions, and the input log's ticks (the start's, with the first commit, then the
batch's). `commit.empty` says whether the batch needs a transaction at all; an empty one leaves the start's
tick and positions for the next. It also says, for the live loop, which messages the batch could not use
(moved to KUBUS_DEAD before the commit) and which message of a newer kubus it stopped before (the loop stops).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from kube.times import parse_time
from messages import subjects
from messages.actions import Action, ActionResult
from messages.keys import ControllerKey
from messages.observed import ObservedEvent
from reconciler.core import stepping
from reconciler.core.audit_targets import Target, targets_of
from reconciler.core.cache import Cache, Change
from reconciler.core.controllers import Controllers, Decided, Settings
from reconciler.core.daemonset.backoff import FailedPodBackoff, gc_cutoff
from reconciler.core.expectations import Expectations
from reconciler.core.shadow import Act, upstream_acts, would_do
from reconciler.core.ticks import BATCH, START, Tick, state_of

CONSUMER = "reconciler"  # the reconciler's consumer positions in the store

Events = list[tuple[ObservedEvent, int]]  # (event, KUBUS_EVENTS sequence), in order


@dataclass(frozen=True, slots=True, kw_only=True)
class Stored:
    """What the store holds for a starting reconciler: its consumer positions ({partition: sequence}), every
    controller's expectations and the DaemonSets' failed-pod backoff."""

    positions: dict[int, int] = field(default_factory=dict)
    expectations: dict[str, Expectations] = field(default_factory=dict)
    backoff: dict[str, FailedPodBackoff] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Loaded:
    """What a starting reconciler has once its cache is bootstrapped: the store's state, what it decides for,
    its settings, how far the bootstrap got, and its name and clock reading."""

    stored: Stored
    partition_count: int  # how namespaces map to partitions
    partitions: frozenset[int] | None = None  # a split reconciler's (None: every partition, alone)
    epochs: Mapping[int, int] = field(default_factory=dict)  # {partition: lease epoch} it decides under
    prefix: str = subjects.PREFIX  # of the actions' subjects
    settings: Settings = field(default_factory=Settings)
    newest: int = 0  # the newest event sequence the bootstrapped state held
    consistent: int = 0  # every event up to this sequence is reflected in the bootstrapped cache
    instance: str
    at: datetime


@dataclass(eq=False, kw_only=True)
class State:
    """A running reconciler's memory between batches."""

    cache: Cache
    controllers: Controllers
    instance: str
    partition_count: int
    prefix: str
    epochs: Mapping[int, int]
    partitions: list[int] | None  # the partitions it decides for, as its ticks record them (None: all)
    reads: frozenset[int] | None  # the partitions whose messages are ours: those and the cluster's (None: all)
    first_seq: int  # where the loop resumes KUBUS_EVENTS
    consistent: int  # every event up to this sequence is reflected in the bootstrapped cache (Loaded.consistent)
    positions: dict[int, int]  # what the loop skips by: the store's positions it loaded, moved by its batches
    # positions of partitions it decides for that the store had none of, and the start's tick: both written by
    # the first commit (see stepping.start_positions)
    new_positions: dict[int, int]
    start_tick: Tick | None
    caught_up: bool = False  # the controllers were resynced for catching up with the history


@dataclass(frozen=True, slots=True)
class Sync:
    """One controller sync as its transaction writes it: the decision, and its actions as outbox rows bound for
    `subject`. Each action's decision_id is 0: the store embeds the id it assigns as it encodes the payload."""

    decided: Decided
    partition: int
    lease_epoch: int | None
    subject: str

    @property
    def actions(self) -> list[Action]:
        return self.decided.actions

    def targets(self, action: Action) -> list[Target]:
        """The objects the action acts on, for the audit trail. Computed when a store asks: a replay's copy of
        the store keeps no audit trail and does not pay for one."""
        return targets_of(action, self.decided.known)


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    """Everything one transaction writes for a batch (see the module's docstring)."""

    consumer: str
    at: datetime  # the batch's clock: decided_at, created_at, the fence's "now"
    empty: bool  # nothing to write: no transaction needed
    positions: dict[int, int] = field(default_factory=dict)  # partition -> sequence to advance to (never back)
    events: Events = field(default_factory=list)  # the observed events, for the audit trail
    # their objects as the cache decoded them (a deletion's: the last state it held), by sequence, so that the
    # trail's facts about them (reconciler.core.audit_facts) need no second decoding; an event missing here (one
    # the cache ignored) is decoded by the store
    objects: dict[int, Any] = field(default_factory=dict)
    expectations: dict[str, Expectations] = field(default_factory=dict)  # to save (set_at always set)
    expectations_deleted: list[str] = field(default_factory=list)
    backoff: list[FailedPodBackoff] = field(default_factory=list)  # to save
    backoff_gc_before: datetime | None = None  # drop the backoff entries last updated before this
    decisions: list[Sync] = field(default_factory=list)
    start_tick: Tick | None = None  # the start's tick, with its first commit
    batch: BatchTick | None = None
    # not written by the store: the messages the batch consumed and could not use (the live loop moves them to
    # KUBUS_DEAD before it commits), and the one it stopped before (a newer schema version: the loop stops)
    unusable: list[stepping.Unusable] = field(default_factory=list)
    halted: stepping.Halt | None = None
    # shadow mode (docs/shadow.md): the decisions' actions are not queued but recorded as would-do acts,
    # `would_do[i]` those of `decisions[i]`, beside the acts of the acting controller the batch's events show
    shadow: bool = False
    would_do: list[list[Act]] = field(default_factory=list)
    upstream: list[Act] = field(default_factory=list)

    @property
    def acts(self) -> bool:
        """Whether it commits actions (the relay has something to send)."""
        return not self.shadow and any(d.decided.actions for d in self.decisions)

    def ticks(self, decision_ids: Sequence[int]) -> list[Tick]:
        """The ticks to record, in order, given the ids the store assigned to `decisions`. Built when asked: a
        replay's copy of the store does not keep the input log it is reading."""
        ticks = [] if self.start_tick is None else [self.start_tick]
        if self.batch is not None:
            ticks.append(self.batch.tick(decision_ids))
        return ticks


@dataclass(frozen=True, slots=True)
class BatchTick:
    """What a batch's tick records: the controllers' inputs (see reconciler.core.ticks)."""

    instance: str
    at: datetime
    caught_up: bool
    first_seq: int | None
    last_seq: int | None
    partitions: list[int] | None
    results: list[ActionResult]

    def tick(self, decision_ids: Sequence[int]) -> Tick:
        return Tick(instance=self.instance, kind=BATCH, at=self.at, caught_up=self.caught_up,
                    first_seq=self.first_seq, last_seq=self.last_seq, partitions=self.partitions,
                    result_keys=[r.key for r in self.results], results=[msgspec.to_builtins(r) for r in self.results],
                    decision_ids=list(decision_ids))


def start(loaded: Loaded, cache: Cache) -> State:
    """A reconciler process starting, its cache bootstrapped: fresh controllers holding what the store held
    (a split reconciler: of its partitions), where to resume the history, and the start's tick."""
    owned = loaded.partitions
    stored = loaded.stored
    positions, expectations, backoff = stored.positions, stored.expectations, stored.backoff
    owns: Callable[[ControllerKey], bool] | None = None
    if owned is not None:
        owns = stepping.owns_key(loaded.partition_count, owned)
        positions, expectations, backoff = stepping.held_state(cache, owned, owns, positions, expectations, backoff)
    controllers = stepping.fresh_controllers(cache, expectations, backoff, loaded.settings, owns)
    decided = range(loaded.partition_count) if owned is None else owned
    first_seq, new_positions = stepping.start_positions(decided, positions, loaded.consistent, alone=owned is None)
    recorded = state_of(positions, expectations, backoff)
    recorded["partition_count"] = loaded.partition_count  # how a replay maps namespaces to partitions, as we did
    recorded.update(loaded.settings.start_state())  # the feature gates and resync period decided with
    if positions and loaded.consistent < max(positions.values()):
        # the bootstrap reflects less than the positions (its KUBUS_STATE copy lagged): the batches catch the
        # cache up (stepping.select), and a replay must know from where
        recorded["consistent"] = loaded.consistent
    if new_positions:
        recorded["new_positions"] = {str(p): s for p, s in sorted(new_positions.items())}
    partitions = None if owned is None else sorted(owned)
    tick = Tick(instance=loaded.instance, kind=START, at=loaded.at, caught_up=False, first_seq=first_seq,
                last_seq=loaded.newest or None, partitions=partitions, state=recorded)
    return State(cache=cache, controllers=controllers, instance=loaded.instance,
                 partition_count=loaded.partition_count, prefix=loaded.prefix, epochs=dict(loaded.epochs),
                 partitions=partitions, reads=None if owned is None else owned | {stepping.CLUSTER_PARTITION},
                 first_seq=first_seq, consistent=loaded.consistent, positions=dict(positions),
                 new_positions=new_positions, start_tick=tick)


def run_batch(state: State, messages: Sequence[stepping.Message], results: list[ActionResult], now: datetime,
              caught_up: bool, *, recorded: bool = False,
              rewrite: Callable[[Events], Events] | None = None) -> Commit:
    """One batch: `messages` (KUBUS_EVENTS, in order, every partition's) and the executors' `results` that the
    store found new, at `now`; `caught_up`: the loop has caught up with the history (see catch_up).

    `recorded`: the batch's transaction is open already (result rows were recorded in it, new or not), so the
    batch commits whatever else it holds. `rewrite` changes the events before they are folded
    (`kubus replay --set`)."""
    controllers = state.controllers
    if caught_up:
        catch_up(state)
    batch = stepping.select(messages, state.positions, state.reads, state.partition_count, state.consistent)
    # committed events the bootstrap missed (its KUBUS_STATE copy lagged): into the cache only, before the new ones
    # (an object's events are all in one partition: each object's come in order)
    stepping.fold(state.cache, batch.catch_up)
    # a batch that stopped before a message of a newer kubus consumed only what came before it: that is what
    # its tick records, and where the loop resumes once upgraded
    if batch.halted is not None:
        messages = messages[:batch.consumed]
    events = batch.events if rewrite is None else rewrite(batch.events)
    unusable = list(batch.unusable)
    changes = stepping.fold(state.cache, events, unusable=unusable)
    step = stepping.decide(controllers, changes, results, now, caught_up, _observed_until(events))
    outcome = step.outcome
    if not (recorded or batch.events or batch.last_seq or outcome.decisions or outcome.expectations
            or outcome.expectations_deleted or step.touched or step.collect):
        return Commit(consumer=CONSUMER, at=now, empty=True, halted=batch.halted)
    positions, state.new_positions = state.new_positions, {}  # a failed commit ends the loop: none later needs them
    for partition, seq in batch.last_seq.items():
        positions[partition] = max(positions.get(partition, 0), seq)
        state.positions[partition] = max(state.positions.get(partition, 0), seq)
    start_tick, state.start_tick = state.start_tick, None
    seqs = [m[0] for m in messages]
    shadow = controllers.settings.shadow
    return Commit(
        shadow=shadow,
        would_do=[would_do(decided, state.cache, now) for decided in outcome.decisions] if shadow else [],
        # what the acting controller did before the shadow caught up, it had no chance to decide
        upstream=_upstream(changes, state, controllers) if shadow and caught_up else [],
        consumer=CONSUMER, at=now, empty=False, positions=positions, events=events,
        objects={seq: change.old if change.new is None else change.new for change, seq, _ in changes},
        expectations={k: v if v.set_at is not None else Expectations(v.adds, v.dels, v.deletion_keys, now)
                      for k, v in outcome.expectations.items()},
        expectations_deleted=sorted(outcome.expectations_deleted), backoff=outcome.backoff,
        backoff_gc_before=gc_cutoff(now) if step.collect else None,
        decisions=[_sync(state, decided) for decided in outcome.decisions], start_tick=start_tick,
        unusable=sorted(unusable, key=lambda u: u.seq), halted=batch.halted,
        batch=BatchTick(state.instance, now, caught_up, min(seqs, default=None), max(seqs, default=None),
                         state.partitions, results))


def catch_up(state: State) -> None:
    """The loop has caught up with the history: every controller is synced once, as after an informer's
    initial list (once; run_batch does it for the first batch that says so, if the loop has not yet)."""
    if not state.caught_up:
        state.caught_up = True
        state.controllers.resync_all()


def _observed_until(events: Sequence[tuple[ObservedEvent, int]]) -> datetime | None:
    """When the newest of a batch's events was observed (ingest's clock), None for a batch without one."""
    newest = max((e.observed_at for e, _ in events if e.observed_at), default="")
    try:
        return parse_time(newest) if newest else None
    except ValueError:
        return None


def _upstream(changes: list[tuple[Change, int, str]], state: State, controllers: Controllers) -> list[Act]:
    """The acting controller's acts the batch's changes show (shadow mode), as of the batch's end."""
    held, awaiting = controllers.held_early, controllers.awaiting
    return [act for change, seq, msg_id in changes
            for act in upstream_acts(change, seq, msg_id, state.cache, held, awaiting)]


def _sync(state: State, decided: Decided) -> Sync:
    partition = subjects.partition_of(decided.namespace, state.partition_count)
    number = stepping.partition_number(partition)
    return Sync(decided, number, state.epochs.get(number), subjects.action_subject(partition, state.prefix))
