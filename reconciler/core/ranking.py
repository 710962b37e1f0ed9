"""Which pods a ReplicaSet deletes first on scale-down: upstream's ``ActivePodsWithRanks`` order.

``pods_to_delete_order`` is ``sort.Sort(ActivePodsWithRanks{...})`` from
``pkg/controller/controller_utils.go`` as a pure function, and ``get_pods_to_delete`` is
``getPodsToDelete`` from ``pkg/controller/replicaset/replica_set.go``. The order applies each
rule in turn until one decides (first = deleted first):

1. unassigned before assigned, only when exactly one pod has no ``nodeName``;
2. phase Pending (0) < Unknown (1) < Running (2); any other phase counts as 0;
3. not Ready before Ready;
4. lower ``controller.kubernetes.io/pod-deletion-cost`` (int32; missing or invalid = 0);
5. higher rank (active related pods on the same node) first;
6. both Ready with different Ready ``lastTransitionTime``: the newer log2 bucket first,
   an equal bucket decides by the lower UID and nothing after it; a zero time -> afterOrZero;
7. higher max container restart count first; equal ones: higher max restart count of the restartable
   init containers (sidecars: ``restartPolicy: Always`` in ``spec.initContainers``) first
   (``compareMaxContainerRestarts``, kubernetes/kubernetes#124952);
8. different ``creationTimestamp``: compared as in 6.

Deviations from upstream: ``now`` is always a real time (upstream's zero ``Now`` fallback is
unreachable from the controller, which passes ``metav1.Now()``); a timestamp that does not
parse counts as zero (Go would have failed to decode the pod); Python's sort is stable, so
pods the order deems equal keep their input order, where Go's ``sort.Sort`` leaves it
unspecified; and the inputs are never mutated (upstream sorts ``filteredPods`` in place).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cmp_to_key
from typing import Any, Final

from kube.core import (
    CONDITION_TRUE,
    POD_READY,
    Pod,
)
from kube.pods import (
    PHASE_ORDINAL,
    POD_DELETION_COST,
    PodFacts,
    deletion_cost,
    is_pod_active,
    max_container_restarts,
    pod_facts,
)
from kube.times import micros, parse_time

__all__ = [
    "POD_DELETION_COST",
    "deletion_cost",
    "get_pods_to_delete",
    "logarithmic_rank_diff",
    "max_container_restarts",
    "pods_to_delete",
    "pods_to_delete_order",
    "ranks_by_related_pods_on_same_node",
    "tie_class",
]

_LOG2E: Final = 1.4426950408889634  # Go's math.Log2E, 1/Ln2
_MICROSECOND: Final = timedelta(microseconds=1)
_RANK_LIMIT: Final = 2**32  # _fact_keys' head holds a rank below this


def _go_log2_floor(nanoseconds: int) -> int:
    """int64(math.Log2(float64(d))) for d > 0, computed the way Go's math.Log2 does.

    That is the exact floor(log2(d)) (the bit length less one) except just below a power of two,
    where Go's float rounding may land on the power itself; only there is Go's arithmetic redone.
    """
    floor = nanoseconds.bit_length() - 1
    if nanoseconds < (1 << (floor + 1)) - (1 << max(0, floor - 40)):
        return floor
    frac, exp = math.frexp(float(nanoseconds))
    if frac == 0.5:
        return exp - 1
    return int(math.log(frac) * _LOG2E + exp)


def _log2_bucket(moment: datetime, now: datetime) -> int:
    elapsed = now - moment
    elapsed_ns = ((elapsed.days * 86_400 + elapsed.seconds) * 1_000_000 + elapsed.microseconds) * 1000
    return _go_log2_floor(elapsed_ns) if elapsed_ns > 0 else -1


def logarithmic_rank_diff(t1: datetime, t2: datetime, now: datetime) -> int:
    """logarithmicRankDiff: floor(log2(now - t1)) - floor(log2(now - t2)) in nanoseconds, -1 if not after."""
    return _log2_bucket(t1, now) - _log2_bucket(t2, now)


def _after_or_zero(t1: datetime | None, t2: datetime | None) -> bool:
    """afterOrZero: t1 is after t2, a zero (None) time counting as after any other."""
    if t1 is None or t2 is None:
        return t1 is None
    return t1 > t2


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


@dataclass(slots=True)
class _Ranked:
    pod: Pod
    rank: int
    node_name: str
    phase: int
    ready: bool
    cost: int
    ready_time: datetime | None
    restarts: tuple[int, int]  # max_container_restarts: regular containers, then sidecars
    created: datetime | None
    uid: str

    @classmethod
    def of(cls, pod: Pod, rank: int) -> _Ranked:
        status, meta = pod.status, pod.metadata
        ready, ready_time = False, None
        for condition in status.conditions:  # is_pod_ready and upstream's podReadyTime in one pass
            if condition.type == POD_READY:
                ready = condition.status == CONDITION_TRUE
                ready_time = _time(condition.last_transition_time) if ready else None
                break
        return cls(pod, rank, pod.spec.node_name, PHASE_ORDINAL.get(status.phase, 0), ready,
                   deletion_cost(meta.annotations) if meta.annotations else 0, ready_time,
                   max_container_restarts(pod), _time(meta.creation_timestamp), meta.uid)


def _newer_first(a: _Ranked, b: _Ranked, ta: datetime | None, tb: datetime | None, now: datetime) -> bool:
    """Rules 6 and 8 for times known to differ: log2 buckets, UID on a tie, afterOrZero for zero times."""
    if ta is None or tb is None:
        return _after_or_zero(ta, tb)
    diff = logarithmic_rank_diff(ta, tb, now)
    if diff == 0:
        return a.uid < b.uid
    return diff < 0


def _less(a: _Ranked, b: _Ranked, now: datetime) -> bool:
    """ActivePodsWithRanks.Less: True when ``a`` should be deleted before ``b``."""
    if a.node_name != b.node_name and (not a.node_name or not b.node_name):
        return not a.node_name
    if a.phase != b.phase:
        return a.phase < b.phase
    if a.ready != b.ready:
        return not a.ready
    if a.cost != b.cost:
        return a.cost < b.cost
    if a.rank != b.rank:
        return a.rank > b.rank
    if a.ready and b.ready and a.ready_time != b.ready_time:
        return _newer_first(a, b, a.ready_time, b.ready_time, now)
    if a.restarts != b.restarts:  # compareMaxContainerRestarts: regular containers first, then sidecars
        return a.restarts > b.restarts
    if a.created != b.created:
        return _newer_first(a, b, a.created, b.created, now)
    return False


def pods_to_delete_order(pods: list[Pod], ranks: list[int], now: datetime) -> list[Pod]:
    """Return ``pods`` sorted by ActivePodsWithRanks (first = deleted first), ``ranks[i]`` belonging to ``pods[i]``."""
    if len(pods) != len(ranks):
        raise ValueError(f"{len(pods)} pods but {len(ranks)} ranks")
    return _facts_order([pod_facts(p) for p in pods], ranks, now)


def _facts_order(facts: list[PodFacts], ranks: list[int], now: datetime, limit: int | None = None) -> list[Pod]:
    """The pods of `facts` in deletion order, the first `limit` of them (all without a limit)."""
    if ranks and not 0 <= min(ranks) <= max(ranks) < _RANK_LIMIT:  # ranks are counts of pods: never here
        keys: list[Any] = _sort_keys([f.pod for f in facts], ranks, now)
    else:
        keys = _fact_keys(facts, ranks, now)
    order = sorted(range(len(facts)), key=keys.__getitem__)
    return [facts[i].pod for i in (order if limit is None else order[:limit])]


def _ns(moment: datetime) -> int:
    return micros(moment) * 1000


def _buckets_meet(newer: datetime, older: datetime, earliest: datetime, latest: datetime) -> bool:
    """Whether two times fall in one log2 bucket (`logarithmic_rank_diff` 0) for some `now` in
    [earliest, latest]. The newer time's bucket is never above the older's; both rise as `now` does, each at
    its own powers of two, so walking `now` from one bucket change to the next meets every pair of buckets
    the window holds (at most a few dozen steps: a bucket doubles the elapsed time)."""
    t_new, t_old, at, end = _ns(newer), _ns(older), _ns(earliest), _ns(latest)
    while at <= end:
        new_bucket, old_bucket = _go_floor_or_none(at - t_new), _go_floor_or_none(at - t_old)
        if new_bucket == old_bucket:
            return True
        at = min(t_new + _next_power(new_bucket), t_old + _next_power(old_bucket))
    return False


def _go_floor_or_none(elapsed_ns: int) -> int:
    return _go_log2_floor(elapsed_ns) if elapsed_ns > 0 else -1


def _next_power(bucket: int) -> int:
    """The elapsed nanoseconds at which a time in `bucket` enters the next one (-1, not after: at 1 ns)."""
    return 1 if bucket < 0 else 1 << (bucket + 1)


def _tied_within(a: _Ranked, b: _Ranked, earliest: datetime, latest: datetime) -> bool:
    """Whether `_less` leaves `a` and `b` unordered but for their UIDs at some `now` in [earliest, latest]:
    equal in every rule that does not depend on the clock, and, where the Ready (else the creation) times
    differ, in one log2 bucket at some moment of the window."""
    if (bool(a.node_name), a.phase, a.ready, a.cost, a.rank) != (bool(b.node_name), b.phase, b.ready, b.cost, b.rank):
        return False
    if a.ready and b.ready and a.ready_time != b.ready_time:
        return _times_tie(a.ready_time, b.ready_time, earliest, latest)
    if a.restarts != b.restarts:
        return False
    if a.created != b.created:
        return _times_tie(a.created, b.created, earliest, latest)
    return True


def _times_tie(ta: datetime | None, tb: datetime | None, earliest: datetime, latest: datetime) -> bool:
    if ta is None or tb is None:  # afterOrZero: a zero time orders strictly, whatever the clock
        return False
    return _buckets_meet(max(ta, tb), min(ta, tb), earliest, latest)


def tie_class(pods: list[Pod], ranks: list[int], pick: Pod, earliest: datetime, latest: datetime) -> list[Pod]:
    """The pods of `pods` upstream's scale-down could take in place of `pick` (`pick` included) when its own
    clock read any `now` in [earliest, latest] at its decision: those its comparator leaves unordered against
    `pick` but for the UID at some such moment (kubus breaks that tie by UID, upstream's unstable sort.Sort
    leaves them in its informer's order; LogarithmicScaleDown's buckets move with the clock). Pods whose order
    against `pick` is strict at every moment are not in it: a pair's order by buckets only turns by passing
    through one bucket, i.e. a tie (shadow mode's tie class: reconciler.core.shadow)."""
    ranked = [_Ranked.of(p, r) for p, r in zip(pods, ranks, strict=True)]
    (mine,) = [r for r in ranked if r.pod is pick]
    return [r.pod for r in ranked if r is mine or _tied_within(mine, r, earliest, latest)]


def _by_comparator(pods: list[Pod], ranks: list[int], now: datetime) -> list[Pod]:
    """The same order by calling `_less` itself: the reference the keys are tested against."""

    def compare(a: _Ranked, b: _Ranked) -> int:
        if _less(a, b, now):
            return -1
        return 1 if _less(b, a, now) else 0

    ranked = [_Ranked.of(p, r) for p, r in zip(pods, ranks, strict=True)]
    return [r.pod for r in sorted(ranked, key=cmp_to_key(compare))]


def _sort_keys(pods: list[Pod], ranks: list[int], now: datetime) -> list[tuple[Any, ...]]:
    """One tuple per pod, sorting as `_less` does (and many times faster than calling it n log n times).

    The rules map onto tuple fields one by one, except for Ready pods in one log2 bucket of Ready
    time: `_less` orders two of them by UID when their Ready times differ, but by restarts and
    creation time when the times are equal. Where a bucket holds a single Ready time the tuple
    says the latter; where it holds several, UID comes first. That is `_less` exactly unless some
    pods of the bucket share a Ready time and differ in restarts or creation bucket, and then
    `_less` is not a consistent order at all (A < C and C < B by UID, B < A by restarts): upstream's
    result depends on its informer's map order, and kubus's on UIDs.
    """
    buckets: dict[datetime | None, tuple[int, int]] = {None: (0, 0)}  # a time's key fields, a zero one (0, 0)
    # timestamp text -> (the time, its key fields): pods share timestamps, as they come and turn Ready in
    # bursts, so each text is parsed and bucketed once per call
    stamps: dict[str | None, tuple[datetime | None, tuple[int, int]]] = {}

    def stamp(text: str | None) -> tuple[datetime | None, tuple[int, int]]:
        found = stamps.get(text)
        if found is None:
            moment = _time(text)
            fields = buckets.get(moment)
            if fields is None:
                assert moment is not None
                fields = buckets[moment] = (1, _log2_bucket(moment, now))
            found = stamps[text] = (moment, fields)
        return found

    heads: list[tuple[Any, ...]] = []
    tails: list[tuple[int, int, int, int, str]] = []
    ready_times: dict[tuple[Any, ...], set[datetime | None]] = {}
    shared: list[set[datetime | None] | None] = []  # the pod's set in ready_times (None if not Ready)
    phases = PHASE_ORDINAL
    for pod, rank in zip(pods, ranks, strict=True):
        # the fields of _Ranked.of, read without building one: this loop runs over every pod
        status, meta = pod.status, pod.metadata
        ready, ready_text = False, None
        for condition in status.conditions:
            if condition.type == POD_READY:
                if condition.status == CONDITION_TRUE:
                    ready, ready_text = True, condition.last_transition_time
                break
        head: tuple[Any, ...] = (1 if pod.spec.node_name else 0, phases.get(status.phase, 0), ready,
                                 deletion_cost(meta.annotations) if meta.annotations else 0, -rank)
        if ready:
            ready_time, fields = stamp(ready_text)  # a time that is unset or invalid counts as zero: (0, 0)
            head = (*head, *fields)
            times = ready_times.get(head)
            if times is None:
                times = ready_times[head] = {ready_time}
            else:
                times.add(ready_time)
            shared.append(times)
        else:
            shared.append(None)
        regular, sidecar = max_container_restarts(pod)
        heads.append(head)
        tails.append((-regular, -sidecar, *stamp(meta.creation_timestamp)[1], meta.uid))
    return [(*head, tail[-1], *tail) if times is not None and len(times) > 1 else (*head, "", *tail)
            for head, tail, times in zip(heads, tails, shared, strict=True)]


_FactKey = tuple[int, str, tuple[int, int, int, str]]  # _fact_keys: (head, tie, tail)


def _fact_keys(facts: list[PodFacts], ranks: list[int], now: datetime) -> list[_FactKey]:
    """`_sort_keys` from the pods' facts (kube.pods.PodFacts, kept by the reconciler's cache once per pod
    version), for ranks in 0 .. _RANK_LIMIT - 1, in fewer fields: (head, tie, tail), where the head is
    `_sort_keys`' fields before the tie as one int, mapped so that it sorts as those fields do, and the
    tail its fields after the tie as a tuple. So the two keys order the pods alike, ties included.

    The head, from its most significant bits: ((assigned * 3 + phase) * 2 + ready) (0 .. 11), the
    deletion cost + 2**31 (an int32: 32 bits), _RANK_LIMIT - 1 - rank (32 bits), then the Ready time's
    field (8 bits): (1, bucket) -> bucket + 2, a zero time's (0, 0) -> 0 (a bucket is -1 or more, and
    under 254 for any two datetimes), 0 when not Ready (such a pod never meets a Ready one past the
    ready bit). The creation time's fields are mapped the same way. The times are the facts'
    microseconds, so a bucket is integer arithmetic: no timestamp parsed, no datetime subtracted.
    """
    now_ns = micros(now) * 1000
    top = _RANK_LIMIT - 1
    heads: list[int] = []
    tails: list[tuple[int, int, int, str]] = []
    ready_times: dict[int, set[int | None]] = {}
    shared: list[set[int | None] | None] = []  # the pod's set in ready_times (None if not Ready)
    for (_, _, _, _, _, ready, _, ready_us, created_us, uid, first, regular, sidecar, _, _), rank in zip(
            facts, ranks, strict=True):
        head = (first << 40) + ((top - rank) << 8)
        if ready:
            if ready_us is not None:
                # _log2_bucket + 2, _go_log2_floor's exact case inlined: floor(log2(elapsed ns))
                elapsed = now_ns - ready_us * 1000
                if elapsed > 0:
                    floor = elapsed.bit_length() - 1
                    head += (floor if elapsed < (2 << floor) - (1 << (floor - 40) if floor > 40 else 1) else
                             _go_log2_floor(elapsed)) + 2
                else:
                    head += 1
            times = ready_times.get(head)
            if times is None:
                times = ready_times[head] = {ready_us}
            else:
                times.add(ready_us)
            shared.append(times)
        else:
            shared.append(None)
        heads.append(head)
        if created_us is None:
            created = 0
        else:
            elapsed = now_ns - created_us * 1000
            if elapsed > 0:
                floor = elapsed.bit_length() - 1
                created = (floor if elapsed < (2 << floor) - (1 << (floor - 40) if floor > 40 else 1) else
                           _go_log2_floor(elapsed)) + 2
            else:
                created = 1
        tails.append((-regular, -sidecar, created, uid))
    return [(head, tail[3] if times is not None and len(times) > 1 else "", tail)
            for head, tail, times in zip(heads, tails, shared, strict=True)]


def ranks_by_related_pods_on_same_node(pods_to_rank: list[Pod], related_pods: list[Pod]) -> list[int]:
    """getPodsRankedByRelatedPodsOnSameNode: each pod's count of active related pods on its node ("" included)."""
    pods_on_node = Counter(p.spec.node_name for p in related_pods if is_pod_active(p))
    if not pods_on_node:  # no related pod (a ReplicaSet without an owner): every rank is 0
        return [0] * len(pods_to_rank)
    count = pods_on_node.get  # a dict's get: the Counter's __missing__ is a Python call per pod
    return [count(p.spec.node_name, 0) for p in pods_to_rank]


def get_pods_to_delete(filtered_pods: list[Pod], related_pods: list[Pod], diff: int, now: datetime) -> list[Pod]:
    """getPodsToDelete: the first ``diff`` pods by deletion order, unsorted when all of them go."""
    return pods_to_delete([pod_facts(p) for p in filtered_pods], related_pods, diff, now)


def pods_to_delete(filtered: list[PodFacts], related_pods: list[Pod], diff: int, now: datetime) -> list[Pod]:
    """get_pods_to_delete over the filtered pods' facts (the reconciler's cache keeps them)."""
    if not 0 <= diff <= len(filtered):
        raise ValueError(f"diff {diff} outside 0..{len(filtered)}")
    if diff < len(filtered):
        ranks = ranks_by_related_pods_on_same_node([f.pod for f in filtered], related_pods)
        return _facts_order(filtered, ranks, now, diff)
    return [f.pod for f in filtered]
