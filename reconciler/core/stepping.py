"""The steps of one batch of the reconciler's loop, as functions of (cache, controllers, messages, results, clock).

`reconciler.core.batch.run_batch` (which the live loop, `kubus replay` and the synthetic world all call) goes
through these, so a replay feeds the controllers exactly what the live loop fed them, in the same order:

1. :func:`select`: the batch's stream messages, minus those a partition already committed (after a
   restart the loop re-reads from the lowest committed position), decoded;
2. :func:`fold`: the events into the cache, each giving the change the handlers see;
3. :func:`decide`: the executors' results, then the changes, then the syncs that are due (once caught
   up; before that only the expectations' changes), then the failed-pod backoff's garbage collection.

Nothing here does I/O or reads a clock. What the live loop adds around it (the store, NATS, metrics)
is recorded per batch in `reconciler_ticks` (reconciler/core/ticks.py), which is what a replay reads back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import msgspec

from kube.times import format_micro_time
from messages import codec, subjects
from messages.actions import ActionResult
from messages.keys import ControllerKey, parse_controller_key
from messages.observed import ObservedEvent
from reconciler.core.cache import Cache, Change
from reconciler.core.controllers import STATUS_ONLY_INTERVAL, Controllers, Outcome, Settings
from reconciler.core.daemonset.backoff import FailedPodBackoff
from reconciler.core.expectations import Expectations

log = logging.getLogger("kubus.reconciler")

CLUSTER_PARTITION = -1  # how the cluster partition is stored in consumer_positions

E = TypeVar("E")  # expectations as the store or the controllers hold them
B = TypeVar("B")  # failed-pod backoff entries, likewise

Payload = bytes | ObservedEvent  # a message as published, or already decoded
Message = tuple[int, str, Payload]  # (KUBUS_EVENTS sequence, subject, payload)
Changes = list[tuple[Change, int, str]]  # (change, sequence, Nats-Msg-Id), as Controllers.observe takes them


def partition_number(partition: str) -> int:
    return CLUSTER_PARTITION if partition == subjects.CLUSTER else int(partition)


def partition_of_subject(subject: str) -> int:
    """`<prefix>.events.<partition>.<kind>.<uid>` -> the partition's number."""
    return partition_number(subject.split(".")[2])


@dataclass
class Batch:
    events: list[tuple[ObservedEvent, int]]
    last_seq: dict[int, int]  # partition -> the batch's last sequence there (skipped messages included)


def select(messages: Iterable[Message], positions: Mapping[int, int],
           partitions: Container[int] | None = None) -> Batch:
    """The batch's events to apply: those after their partition's committed position, decoded (an
    unusable one is logged and skipped; its sequence still counts as consumed). With `partitions`
    (a reconciler of a split deployment), messages of other partitions are not this reconciler's:
    skipped and not counted."""
    events: list[tuple[ObservedEvent, int]] = []
    last_seq: dict[int, int] = {}
    for seq, subject, payload in messages:
        partition = partition_of_subject(subject)
        if partitions is not None and partition not in partitions:
            continue
        last_seq[partition] = seq
        if seq <= positions.get(partition, 0):
            continue  # committed before a restart
        if isinstance(payload, ObservedEvent):
            events.append((payload, seq))
            continue
        try:
            events.append((codec.decode_observed(payload), seq))
        except codec.BadMessage as exc:
            log.error("event %d on %s is unusable and skipped: %s", seq, subject, exc)
    return Batch(events, last_seq)


def fold(cache: Cache, events: Iterable[tuple[ObservedEvent, int]],
         count: Callable[[ObservedEvent], None] | None = None) -> Changes:
    """Applies the events to the cache in order; the changes, for the controllers' handlers."""
    changes: Changes = []
    for event, seq in events:
        if count is not None:
            count(event)
        try:
            change = cache.apply(event, seq)
        except (msgspec.DecodeError, ValueError) as exc:
            log.error("%s %s/%s at sequence %d does not decode, ignored: %s", event.kind, event.namespace,
                      event.name, seq, exc)
            continue
        if change is not None:
            changes.append((change, seq, event.msg_id))
    return changes


def bootstrap_one(cache: Cache, payload: Payload, seq: int) -> Change | None:
    """One message of KUBUS_STATE (the last event of an object) into a starting reconciler's cache.

    Raises codec.BadMessage, msgspec.DecodeError or ValueError for an unusable message (the caller
    logs and skips it)."""
    event = payload if isinstance(payload, ObservedEvent) else codec.decode_observed(payload)
    return cache.apply(event, seq, final_state=False)  # what a deleted object was matters to no bootstrap


@dataclass
class Step:
    outcome: Outcome
    collect: bool  # the failed-pod backoff was collected: the store drops rows older than gc_cutoff(now)
    touched: bool  # the controllers' memory moved (keys left the queue, the backoff GC ran): record the batch


def decide(controllers: Controllers, changes: Changes, results: list[ActionResult], now: datetime,
           caught_up: bool) -> Step:
    """The controllers' part of one batch, after the events were folded into the cache."""
    if results:  # results first: the syncs below see the expectations they lowered
        controllers.results(results, now)
    controllers.observe(changes, now)
    resync_before = controllers.next_resync
    if caught_up:
        popped = _due(controllers, now)
        outcome = controllers.sync_ready(now, format_micro_time(now))
    else:
        popped = False
        outcome = controllers.take_changes(Outcome())
    collected_before = controllers.backoff_collected
    collect = controllers.collect_backoff(now)
    # the periodic resync is armed (or re-armed) at this batch's clock: a replay must see this batch to resync
    # when the live loop did
    rearmed = controllers.next_resync != resync_before
    return Step(outcome, collect, popped or rearmed or controllers.backoff_collected != collected_before)


def _due(controllers: Controllers, now: datetime) -> bool:
    """Whether sync_ready(now) will hand out a key (a queued, delayed or held-back one, or a resync's)."""
    if len(controllers.queue):
        return True
    ready_at = controllers.next_ready_at()
    return ready_at is not None and ready_at <= now


def owns_key(partition_count: int, partitions: Container[int]) -> Callable[[ControllerKey], bool]:
    """Whether a controller's key is in one of `partitions` (a split reconciler's): its namespace's partition."""
    def owns(key: ControllerKey) -> bool:
        return partition_number(subjects.partition_of(key.namespace, partition_count)) in partitions
    return owns


def held_state(cache: Cache, partitions: Container[int], owns: Callable[[ControllerKey], bool],
               positions: Mapping[int, int], expectations: Mapping[str, E], backoff: Mapping[str, B]
               ) -> tuple[dict[int, int], dict[str, E], dict[str, B]]:
    """What a split reconciler takes of the store's positions, expectations and backoff: its partitions'.
    The cluster partition's position is left out: every reconciler advances it, so it says nothing of what
    this one's cache has seen. Called after the bootstrap: the failed-pod backoff, keyed
    "<ds uid>/<generation>/<node>", is ours when its DaemonSet is in the cache. An expectation whose key no
    controller of this kubus writes is nobody's."""
    ours_ds = {ds.metadata.uid for ds in cache.all("DaemonSet")}
    return ({p: s for p, s in positions.items() if p in partitions},
            {k: v for k, v in expectations.items() if (key := parse_controller_key(k)) is not None and owns(key)},
            {k: v for k, v in backoff.items() if k.split("/", 1)[0] in ours_ds})


def start_positions(decided: Iterable[int], positions: Mapping[int, int], consistent: int, *, alone: bool
                    ) -> tuple[int, dict[int, int]]:
    """Where a starting reconciler resumes KUBUS_EVENTS, and the positions its first commit must record.

    `positions` are the store's for what it reads (its partitions', when split); `decided` the partitions it
    decides for; `consistent` the sequence up to which its bootstrapped cache reflects every event. It resumes
    after the lowest position. A partition it decides for with no position yet (nobody committed anything
    for it, or a previous owner committed state for it in a batch without its events) resumes no later than
    `consistent`, and the first commit records that position for it: the expectations and backoff that
    commit writes stand for the events up to it, so a takeover after a crash replays from there and observes
    what those expectations wait for (without the record it resumed after its own bootstrap, and an
    expectation whose pod was created meanwhile waited out the 5-minute timeout).

    `alone` (one reconciler for every partition) with nothing committed replays the whole history, which
    records every event in the audit trail from the first start on."""
    missing = sorted(p for p in decided if p not in positions)
    if alone and not positions:
        start = 1
    else:
        start = min([*positions.values(), *([consistent] if missing else [])], default=consistent) + 1
    return start, {p: start - 1 for p in missing if start > 1}


def fresh_controllers(cache: Cache, expectations: Mapping[str, Expectations],
                      backoff: Mapping[str, FailedPodBackoff], settings: Settings | None = None,
                      owns: Callable[[ControllerKey], bool] | None = None) -> Controllers:
    """The controllers of a starting reconciler: what the store holds, nothing else in memory; `settings`
    as the start recorded them (Settings.from_start_state); `owns` a split reconciler's keys (owns_key)."""
    return Controllers(cache, expectations, STATUS_ONLY_INTERVAL, settings, backoff=backoff, owns=owns)
