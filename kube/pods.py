"""Pod state as the controllers judge it (``pkg/api/v1/pod`` and ``controller.IsPodActive``).

Time is passed in (``now``), never read here.
"""

from __future__ import annotations

import functools
import re
import sys
from datetime import datetime, timedelta
from typing import Final, NamedTuple

from kube.core import (
    CONDITION_TRUE,
    CONTAINER_RESTART_POLICY_ALWAYS,
    POD_FAILED,
    POD_PENDING,
    POD_READY,
    POD_RUNNING,
    POD_SUCCEEDED,
    POD_UNKNOWN,
    Pod,
    PodCondition,
)
from kube.nodeaffinity import get_target_node_name
from kube.times import micros, parse_time

__all__ = [
    "POD_DELETION_COST",
    "PodFacts",
    "deletion_cost",
    "get_pod_condition",
    "get_pod_ready_condition",
    "is_pod_active",
    "is_pod_available",
    "is_pod_ready",
    "is_pod_terminal",
    "is_pod_terminating",
    "max_container_restarts",
    "pod_facts",
    "pod_key",
    "ready_since",
]


def get_pod_condition(pod: Pod, condition_type: str) -> PodCondition | None:
    """The first condition of ``condition_type`` in the pod's status, if any."""
    for condition in pod.status.conditions:  # a loop, not next(genexpr): the audit row of every pod event asks
        if condition.type == condition_type:
            return condition
    return None


def get_pod_ready_condition(pod: Pod) -> PodCondition | None:
    return get_pod_condition(pod, POD_READY)


def is_pod_ready(pod: Pod) -> bool:
    """The Ready condition is present and True."""
    for condition in pod.status.conditions:  # the loop itself: called for every pod of every sync
        if condition.type == POD_READY:
            return condition.status == CONDITION_TRUE
    return False


def is_pod_available(pod: Pod, min_ready_seconds: int, now: datetime) -> bool:
    """podutil.IsPodAvailable: Ready, and Ready for at least ``min_ready_seconds`` by ``now``.

    Current upstream compares ``lastTransitionTime + minReadySeconds <= now``
    (``Compare(now) <= 0``); older releases used a strict ``Before``. So a pod
    turns available exactly at the boundary, which is also when a requeue
    after ``minReadySeconds`` fires. A Ready condition without a transition
    time is never available when ``min_ready_seconds > 0``.
    """
    if not is_pod_ready(pod):
        return False
    if min_ready_seconds == 0:
        return True
    became_ready = ready_since(pod)
    return became_ready is not None and became_ready + timedelta(seconds=min_ready_seconds) <= now


def ready_since(pod: Pod) -> datetime | None:
    """When a Ready pod became Ready (its Ready condition's lastTransitionTime); None when it is not Ready,
    or the time is missing or unreadable (such a pod is never available with minReadySeconds > 0)."""
    condition = get_pod_ready_condition(pod)
    if condition is None or condition.status != CONDITION_TRUE or not condition.last_transition_time:
        return None
    try:
        return parse_time(condition.last_transition_time)
    except ValueError:
        return None


def is_pod_terminal(pod: Pod) -> bool:
    """Phase Succeeded or Failed: its containers stopped and will not run again."""
    return pod.status.phase in (POD_SUCCEEDED, POD_FAILED)


def is_pod_active(pod: Pod) -> bool:
    """controller.IsPodActive: not terminal and not being deleted."""
    return not is_pod_terminal(pod) and pod.metadata.deletion_timestamp is None


def is_pod_terminating(pod: Pod) -> bool:
    """Being deleted but not yet terminal (the ReplicaSet's terminatingReplicas)."""
    return pod.metadata.deletion_timestamp is not None and not is_pod_terminal(pod)


def pod_key(pod: Pod) -> str:
    """cache.MetaNamespaceKeyFunc: ``namespace/name``, or just ``name`` without a namespace."""
    meta = pod.metadata
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


POD_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_DECIMAL: Final = re.compile(r"-?[0-9]+")
_TERMINAL_PHASES: Final = (POD_SUCCEEDED, POD_FAILED)  # is_pod_terminal
_INT32_OFFSET: Final = 2**31  # a deletion cost (an int32) plus this is 0 .. 2**32 - 1
# ActivePodsWithRanks' phase rule: Pending < Unknown < Running, any other phase as Pending
PHASE_ORDINAL: Final = {POD_PENDING: 0, POD_UNKNOWN: 1, POD_RUNNING: 2}


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


class PodFacts(NamedTuple):
    """What the controllers read from a pod in every sync, read once per pod version (`pod_facts`).

    A ReplicaSet sync visits each of its pods (thousands) for the same few facts, and a DaemonSet sync
    every pod on every node; a pod is an immutable object replaced on every update: the reconciler's
    cache computes these when it stores the pod, and a sync unpacks a tuple instead of walking the pod's
    metadata, spec, status, conditions and owner references again.
    """

    pod: Pod
    controller_uid: str | None  # the uid of get_controller_of(metadata), None without a controller
    terminal: bool  # is_pod_terminal
    deleting: bool  # metadata.deletionTimestamp is set
    labels: dict[str, str]  # metadata.labels
    ready: bool  # is_pod_ready
    ready_since: datetime | None  # the Ready condition's lastTransitionTime when Ready, None if unset or invalid
    ready_us: int | None  # ready_since in microseconds since the epoch (kube.times.micros), None with it
    created_us: int | None  # metadata.creationTimestamp in microseconds since the epoch, None if unset or invalid
    uid: str  # metadata.uid
    # the first four rules of the scale-down ranking (reconciler.core.ranking) as one int that sorts as they
    # do: ((assigned * 3 + phase ordinal) * 2 + ready) * 2**32 + deletion cost + 2**31
    rank_head: int
    restarts: int  # max_container_restarts: the regular containers'
    sidecar_restarts: int  # max_container_restarts: the restartable init containers'
    name: str  # metadata.name
    node: str | None  # GetTargetNodeName (kube.nodeaffinity.get_target_node_name): where a DaemonSet's pod runs


def pod_facts(pod: Pod, labels: dict[str, str] | None = None, previous: PodFacts | None = None) -> PodFacts:
    """The pod's facts; `labels`, if given, is a dict equal to its labels to keep instead of its own;
    `previous`, if given, the facts of an earlier version of the same pod (its creation time is reused
    when the text is the same: an update never changes it).

    The controller's uid is interned: a sync compares it with its own (interned) uid for every pod,
    and equal interned strings compare by identity, without reading either string."""
    meta = pod.metadata
    status = pod.status
    controller = None
    for owner in meta.owner_references:  # get_controller_of, inlined: this runs for every pod event
        if owner.controller:
            controller = sys.intern(owner.uid)
            break
    ready, since, ready_us = False, None, None
    for condition in status.conditions:  # is_pod_ready and ready_since in one pass
        if condition.type == POD_READY:
            if condition.status == CONDITION_TRUE:
                ready = True
                if condition.last_transition_time:
                    try:
                        since = parse_time(condition.last_transition_time)
                    except ValueError:
                        since = None
                    else:
                        ready_us = _micros_of(condition.last_transition_time)
            break
    created = meta.creation_timestamp
    if previous is not None and previous.pod.metadata.creation_timestamp == created:
        created_us = previous.created_us
    else:
        created_us = _micros_of(created)
    regular = 0  # max_container_restarts, without its set when no init container reports
    for container in status.container_statuses:
        if container.restart_count > regular:
            regular = container.restart_count
    sidecar = max_container_restarts(pod)[1] if status.init_container_statuses else 0
    annotations = meta.annotations
    spec = pod.spec
    node: str | None = spec.node_name  # get_target_node_name, its common case inlined (the affinity only when unbound)
    if not node:
        node = get_target_node_name(pod) if spec.affinity is not None else None
    head = ((((3 if spec.node_name else 0) + PHASE_ORDINAL.get(status.phase, 0)) * 2 + ready) << 32) + (
        (deletion_cost(annotations) if annotations and POD_DELETION_COST in annotations else 0) + _INT32_OFFSET)
    # tuple.__new__: what PodFacts(...) does without its Python-level __new__ (half the cost of building one)
    return _new_tuple(PodFacts, (pod, controller, status.phase in _TERMINAL_PHASES, meta.deletion_timestamp is not None,
                                 meta.labels if labels is None else labels, ready, since, ready_us, created_us,
                                 meta.uid, head, regular, sidecar, meta.name, node))


_new_tuple: Final = tuple.__new__


@functools.lru_cache(maxsize=65536)
def _micros_of(text: str | None) -> int | None:
    """A timestamp's text as kube.times.micros, None when unset or unreadable (a zero time to the controllers).

    Cached as parse_time is: pods are created and turn Ready in bursts, and every status update of a pod
    repeats its times."""
    if not text:
        return None
    try:
        return micros(parse_time(text))
    except ValueError:
        return None

