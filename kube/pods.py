"""Pod state as the controllers judge it (``pkg/api/v1/pod`` and ``controller.IsPodActive``).

Time is passed in (``now``), never read here.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from typing import NamedTuple

from kube.core import CONDITION_TRUE, POD_FAILED, POD_READY, POD_SUCCEEDED, Pod, PodCondition
from kube.ownership import get_controller_of
from kube.times import parse_time

__all__ = [
    "PodFacts",
    "get_pod_condition",
    "get_pod_ready_condition",
    "is_pod_active",
    "is_pod_available",
    "is_pod_ready",
    "is_pod_terminal",
    "is_pod_terminating",
    "pod_facts",
    "pod_key",
    "ready_since",
]


def get_pod_condition(pod: Pod, condition_type: str) -> PodCondition | None:
    """The first condition of ``condition_type`` in the pod's status, if any."""
    return next((c for c in pod.status.conditions if c.type == condition_type), None)


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


class PodFacts(NamedTuple):
    """What the controllers read from a pod in every sync, read once per pod version (`pod_facts`).

    A ReplicaSet sync visits each of its pods (thousands) for the same few facts, and a pod is an
    immutable object replaced on every update: the reconciler's cache computes these when it stores
    the pod, and a sync unpacks a tuple instead of walking conditions and owner references again.
    """

    pod: Pod
    controller_uid: str | None  # the uid of get_controller_of(metadata), None without a controller
    terminal: bool  # is_pod_terminal
    deleting: bool  # metadata.deletionTimestamp is set
    labels: dict[str, str]  # metadata.labels
    ready: bool  # is_pod_ready
    ready_since: datetime | None  # the Ready condition's lastTransitionTime when Ready, None if unset or invalid


def pod_facts(pod: Pod, labels: dict[str, str] | None = None) -> PodFacts:
    """The pod's facts; `labels`, if given, is a dict equal to its labels to keep instead of its own.

    The controller's uid is interned: a sync compares it with its own (interned) uid for every pod,
    and equal interned strings compare by identity, without reading either string."""
    meta = pod.metadata
    controller = get_controller_of(meta)
    return PodFacts(pod, None if controller is None else sys.intern(controller.uid), is_pod_terminal(pod),
                    meta.deletion_timestamp is not None, meta.labels if labels is None else labels,
                    is_pod_ready(pod), ready_since(pod))

