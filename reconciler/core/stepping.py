"""The steps of one batch of the reconciler's loop, as functions of (cache, controllers, messages, results, clock).

`reconciler.core.batch.run_batch` (which the live loop, `kubus replay` and the synthetic world all call) goes
through these, so a replay feeds the controllers exactly what the live loop fed them, in the same order:

1. :func:`select`: the batch's stream messages, minus those a partition already committed (after a
   restart the loop re-reads from the lowest committed position), decoded; the unusable ones set aside
   with their reasons (the shell moves them to KUBUS_DEAD), and the batch ended before one of a newer
   schema version (the shell stops there);
2. :func:`fold`: the events into the cache, each giving the change the handlers see (an event whose
   object does not decode is set aside as unusable too);
3. :func:`decide`: the executors' results, then the changes, then the syncs that are due (once caught
   up; before that only the expectations' changes), then the failed-pod backoff's garbage collection.

Nothing here does I/O or reads a clock. What the live loop adds around it (the store, NATS, metrics)
is recorded per batch in `reconciler_ticks` (reconciler/core/ticks.py), which is what a replay reads back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, TypeVar

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

CLUSTER_PARTITION = -1  # how the cluster partition is stored in consumer_positions

E = TypeVar("E")  # expectations as the store or the controllers hold them
B = TypeVar("B")  # failed-pod backoff entries, likewise

Payload = bytes | ObservedEvent  # a message as published, or already decoded
Message = tuple[int, str, Payload]  # (KUBUS_EVENTS sequence, subject, payload)
Changes = list[tuple[Change, int, str]]  # (change, sequence, Nats-Msg-Id), as Controllers.observe takes them


def partition_number(partition: str) -> int:
    return CLUSTER_PARTITION if partition == subjects.CLUSTER else int(partition)


def partition_of_subject(subject: str) -> int:
    """`<prefix>.events.<partition>.<kind>.<uid>` -> the partition's number (raises ValueError for a subject
    that names none: see `classify`)."""
    return partition_number(subject.split(".")[2])


# where a message whose subject names no partition counts: one partition, so that one reconciler of a split
# deployment (its owner) moves it to KUBUS_DEAD and its committed position keeps it from being read again
MALFORMED_SUBJECT_PARTITION = 0


# a subject's head (all of it before its last part, the object's uid) -> its partition, per partition count, for
# the subjects classify found well-formed: every event of a batch and every message of a bootstrap is classified,
# and a subject's partition and form depend on its head only (see classify), which the objects of a kind in a
# partition share (a subject's own entry missed for the first event of every object: ~40% of a busy history's)
_PARTITIONS: dict[int | None, dict[str, int]] = {}
PARTITIONS_REMEMBERED: Final = 1 << 16  # heads remembered per partition count (forgotten all at once past it)


def classify(subject: str, partition_count: int | None = None) -> tuple[int, codec.BadMessage | None]:
    """The partition a KUBUS_EVENTS (or KUBUS_STATE) message counts in, and what is wrong with its subject:
    `<prefix>.<events|state>.<partition>.<kind>.<uid>`, the partition `cluster` or a number below
    `partition_count`. A subject that is not such counts in MALFORMED_SUBJECT_PARTITION.

    What `_classify` reads of a subject (how many parts it has, its third) is its head's: the part after the
    last dot holds none, so two subjects of one head are classified alike, and a head found well-formed once
    answers for every subject of it."""
    known = _PARTITIONS.get(partition_count)
    if known is None:
        known = _PARTITIONS[partition_count] = {}
    head = subject.rpartition(".")[0]
    partition_number_ = known.get(head)
    if partition_number_ is not None:
        return partition_number_, None
    found = _classify(subject, partition_count)
    if found[1] is None:
        if len(known) >= PARTITIONS_REMEMBERED:
            known.clear()
        known[head] = found[0]
    return found


def _classify(subject: str, partition_count: int | None) -> tuple[int, codec.BadMessage | None]:
    parts = subject.split(".")
    if len(parts) == 5:
        partition = parts[2]
        if partition == subjects.CLUSTER:
            return CLUSTER_PARTITION, None
        if partition.isascii() and partition.isdigit() and (partition_count is None
                                                           or int(partition) < partition_count):
            return int(partition), None
        why = f"partition {partition!r} is not `cluster` nor one of the bus's {partition_count or ''} partitions"
    else:
        why = "not <prefix>.events.<partition>.<kind>.<uid>"
    return MALFORMED_SUBJECT_PARTITION, codec.BadMessage(codec.BAD_SUBJECT, f"subject {subject!r}: {why}")


@dataclass(frozen=True, slots=True)
class Unusable:
    """A message the batch could not use, and why: the shell moves it to KUBUS_DEAD before it commits the
    position past it. `subject` is "" when the message was decoded and its object did not (fold)."""

    seq: int
    subject: str
    reason: str  # codec.REASONS
    error: str


@dataclass(frozen=True, slots=True)
class Halt:
    """The message the batch stopped before: written by a newer kubus (codec.NewerSchema)."""

    seq: int
    subject: str
    error: str


@dataclass
class Batch:
    events: list[tuple[ObservedEvent, int]]
    last_seq: dict[int, int]  # partition -> the batch's last sequence there (skipped messages included)
    # events up to their partition's committed position that the bootstrapped cache does not reflect (its
    # KUBUS_STATE copy lagged): decided on before, so folded into the cache only (see start_positions)
    catch_up: list[tuple[ObservedEvent, int]] = field(default_factory=list)
    unusable: list[Unusable] = field(default_factory=list)  # consumed (counted in last_seq), not applied
    halted: Halt | None = None  # the batch ends before this message: nothing from it on is consumed
    consumed: int = 0  # how many of the messages given the batch consumed (all of them unless halted)


def select(messages: Sequence[Message], positions: Mapping[int, int],
           partitions: Container[int] | None = None, partition_count: int | None = None,
           consistent: int | None = None) -> Batch:
    """The batch's events to apply: those after their partition's committed position, decoded. An unusable one
    (a bad subject, codec.BadMessage) is returned in `unusable`; its sequence still counts as consumed. One of
    a newer schema version (codec.NewerSchema) ends the batch before it: `halted`, and neither it nor what
    follows is consumed. With `partitions` (a reconciler of a split deployment), messages of other partitions
    are not this reconciler's: skipped and not counted. With `consistent` (what the bootstrapped cache
    reflects), a committed event after it is returned in `catch_up` (one that is unusable was dead-lettered
    when it was first consumed: skipped)."""
    events: list[tuple[ObservedEvent, int]] = []
    catch_up: list[tuple[ObservedEvent, int]] = []
    last_seq: dict[int, int] = {}
    unusable: list[Unusable] = []
    for index, (seq, subject, payload) in enumerate(messages):
        partition, bad_subject = classify(subject, partition_count)
        if partitions is not None and partition not in partitions:
            continue
        if seq <= positions.get(partition, 0):
            last_seq[partition] = seq  # committed before a restart
            if consistent is not None and seq > consistent and bad_subject is None:
                # (an unusable one was dead-lettered; a newer one cannot have been committed: the loop halts before it)
                with contextlib.suppress(codec.BadMessage, codec.NewerSchema):
                    catch_up.append((payload if isinstance(payload, ObservedEvent)
                                     else codec.decode_observed(payload), seq))
            continue
        if bad_subject is not None:
            unusable.append(Unusable(seq, subject, bad_subject.reason, str(bad_subject)))
        elif isinstance(payload, ObservedEvent):
            events.append((payload, seq))
        else:
            try:
                events.append((codec.decode_observed(payload), seq))
            except codec.NewerSchema as exc:
                return Batch(events, last_seq, catch_up, unusable, Halt(seq, subject, str(exc)), index)
            except codec.BadMessage as exc:
                unusable.append(Unusable(seq, subject, exc.reason, str(exc)))
        last_seq[partition] = seq
    return Batch(events, last_seq, catch_up, unusable, None, len(messages))


def fold(cache: Cache, events: Iterable[tuple[ObservedEvent, int]],
         count: Callable[[ObservedEvent], None] | None = None, unusable: list[Unusable] | None = None) -> Changes:
    """Applies the events to the cache in order; the changes, for the controllers' handlers. An event whose
    object does not decode changes nothing more and is added to `unusable`."""
    changes: Changes = []
    for event, seq in events:
        if count is not None:
            count(event)
        try:
            change = cache.apply(event, seq)
        except (msgspec.DecodeError, ValueError) as exc:
            if unusable is not None:
                unusable.append(Unusable(seq, "", codec.BAD_OBJECT, f"{event.kind} {event.namespace}/{event.name} "
                                         f"at sequence {seq} does not decode: {exc}"))
            continue
        if change is not None:
            changes.append((change, seq, event.msg_id))
    return changes


def bootstrap_one(cache: Cache, subject: str, payload: Payload, seq: int,
                  partition_count: int | None = None) -> Change | None:
    """One message of KUBUS_STATE (the last event of an object) into a starting reconciler's cache.

    Raises codec.BadMessage for an unusable message (the caller moves it to KUBUS_DEAD), codec.NewerSchema
    for one of a newer kubus (the caller does not start)."""
    _, bad_subject = classify(subject, partition_count)
    if bad_subject is not None:
        raise bad_subject
    event = payload if isinstance(payload, ObservedEvent) else codec.decode_observed(payload)
    try:
        return cache.apply(event, seq, final_state=False)  # what a deleted object was matters to no bootstrap
    except (msgspec.DecodeError, ValueError) as exc:
        raise codec.BadMessage(codec.BAD_OBJECT, f"{event.kind} {event.namespace}/{event.name} does not "
                               f"decode: {exc}") from None


@dataclass
class Step:
    outcome: Outcome
    collect: bool  # the failed-pod backoff was collected: the store drops rows older than gc_cutoff(now)
    touched: bool  # the controllers' memory moved (keys left the queue, the backoff GC ran): record the batch


def decide(controllers: Controllers, changes: Changes, results: list[ActionResult], now: datetime,
           caught_up: bool, events_until: datetime | None = None) -> Step:
    """The controllers' part of one batch, after the events were folded into the cache; `events_until`: when
    its newest event was observed (see Controllers.sync_ready)."""
    if results:  # results first: the syncs below see the expectations they lowered
        controllers.results(results, now)
    controllers.observe(changes, now)
    resync_before = controllers.next_resync
    if caught_up:
        popped = _due(controllers, now)
        outcome = controllers.sync_ready(now, format_micro_time(now), events_until=events_until)
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
    after the lowest position, or after `consistent` when that is lower (KUBUS_STATE's copy lagged behind the
    positions): the committed events between reach the cache (`select`'s catch_up). A partition it decides for
    with no position yet (nobody committed anything for it, or a previous owner committed state for it in a
    batch without its events) resumes no later than `consistent`, and the first commit records that position for
    it: the expectations and backoff that commit writes stand for the events up to it, so a takeover after a
    crash replays from there and observes what those expectations wait for (without the record it resumed
    after its own bootstrap, and an expectation whose pod was created meanwhile waited out the 5-minute
    timeout).

    A split start on an empty stream (`consistent` 0) records 0 too: its commits may all be of the cluster
    partition's events, whose position a split start leaves out, and without a position of its own the next
    start would resume after its bootstrap, past its partitions' events that no commit observed.

    `alone` (one reconciler for every partition) with nothing committed replays the whole history, which
    records every event in the audit trail from the first start on; after that its lowest position (the
    cluster partition's included) is never past an event no commit observed."""
    missing = sorted(p for p in decided if p not in positions)
    start = 1 if alone and not positions else min([*positions.values(), consistent]) + 1
    return start, {p: start - 1 for p in missing if start > 1 or not alone}


def fresh_controllers(cache: Cache, expectations: Mapping[str, Expectations],
                      backoff: Mapping[str, FailedPodBackoff], settings: Settings | None = None,
                      owns: Callable[[ControllerKey], bool] | None = None) -> Controllers:
    """The controllers of a starting reconciler: what the store holds, nothing else in memory; `settings`
    as the start recorded them (Settings.from_start_state); `owns` a split reconciler's keys (owns_key)."""
    return Controllers(cache, expectations, STATUS_ONLY_INTERVAL, settings, backoff=backoff, owns=owns)
