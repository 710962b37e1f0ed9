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
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cmp_to_key
from typing import Any, Final

from kube.core import (
    CONDITION_TRUE,
    CONTAINER_RESTART_POLICY_ALWAYS,
    POD_PENDING,
    POD_READY,
    POD_RUNNING,
    POD_UNKNOWN,
    Pod,
)
from kube.pods import is_pod_active
from kube.times import parse_time

__all__ = [
    "POD_DELETION_COST",
    "deletion_cost",
    "get_pods_to_delete",
    "logarithmic_rank_diff",
    "max_container_restarts",
    "pods_to_delete_order",
    "ranks_by_related_pods_on_same_node",
]

POD_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"

_PHASE_ORDINAL: Final = {POD_PENDING: 0, POD_UNKNOWN: 1, POD_RUNNING: 2}
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_DECIMAL: Final = re.compile(r"-?[0-9]+")
_LOG2E: Final = 1.4426950408889634  # Go's math.Log2E, 1/Ln2
_MICROSECOND: Final = timedelta(microseconds=1)


def deletion_cost(annotations: dict[str, str]) -> int:
    """GetDeletionCostFromPodAnnotations: the int32 cost, 0 when missing or invalid."""
    value = annotations.get(POD_DELETION_COST)
    if value is None:
        return 0
    # validFirstDigit rejects "+10" and "008" (but not "-08"); then strconv.ParseInt(v, 10, 32).
    if not value or not (value[0] == "-" or value == "0" or "1" <= value[0] <= "9"):
        return 0
    if _DECIMAL.fullmatch(value) is None:
        return 0
    cost = int(value)
    return cost if _INT32_MIN <= cost <= _INT32_MAX else 0


def max_container_restarts(pod: Pod) -> tuple[int, int]:
    """maxContainerRestarts: (the highest restart count of the regular containers, that of the restartable
    init containers). An init container status counts when ``spec.initContainers`` has a container of that
    name with ``restartPolicy: Always``; run-to-completion init containers never count."""
    status = pod.status
    regular = 0
    for container in status.container_statuses:
        if container.restart_count > regular:
            regular = container.restart_count
    sidecar = 0
    if status.init_container_statuses:
        sidecars = {c.name for c in pod.spec.init_containers if c.restart_policy == CONTAINER_RESTART_POLICY_ALWAYS}
        for container in status.init_container_statuses:
            if container.name in sidecars and container.restart_count > sidecar:
                sidecar = container.restart_count
    return regular, sidecar


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
        return cls(pod, rank, pod.spec.node_name, _PHASE_ORDINAL.get(status.phase, 0), ready,
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

    keys = _sort_keys(pods, ranks, now)
    order = sorted(range(len(pods)), key=keys.__getitem__)
    return [pods[i] for i in order]


def tie_keys(pods: list[Pod], ranks: list[int], now: datetime) -> list[tuple[Any, ...]]:
    """Each pod's place in the deletion order with its UID taken out: pods with equal keys are equal for
    upstream's comparator, whose unstable sort.Sort leaves them in its informer's order, where kubus breaks
    the tie by UID (shadow mode's tie class: reconciler.core.shadow)."""
    return [tuple(v for v in key if v != pod.metadata.uid)
            for pod, key in zip(pods, _sort_keys(pods, ranks, now), strict=True)]


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
    phases = _PHASE_ORDINAL
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


def ranks_by_related_pods_on_same_node(pods_to_rank: list[Pod], related_pods: list[Pod]) -> list[int]:
    """getPodsRankedByRelatedPodsOnSameNode: each pod's count of active related pods on its node ("" included)."""
    pods_on_node = Counter(p.spec.node_name for p in related_pods if is_pod_active(p))
    return [pods_on_node[p.spec.node_name] for p in pods_to_rank]


def get_pods_to_delete(filtered_pods: list[Pod], related_pods: list[Pod], diff: int, now: datetime) -> list[Pod]:
    """getPodsToDelete: the first ``diff`` pods by deletion order, unsorted when all of them go."""
    if not 0 <= diff <= len(filtered_pods):
        raise ValueError(f"diff {diff} outside 0..{len(filtered_pods)}")
    if diff < len(filtered_pods):
        ranks = ranks_by_related_pods_on_same_node(filtered_pods, related_pods)
        return pods_to_delete_order(filtered_pods, ranks, now)[:diff]
    return list(filtered_pods)
