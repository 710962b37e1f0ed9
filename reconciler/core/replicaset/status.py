"""calculateStatus and the status-write test of replica_set_utils.go, as pure functions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

import msgspec

from kube.apps import ReplicaSet, ReplicaSetCondition, ReplicaSetStatus
from kube.core import CONDITION_TRUE, Pod
from kube.labels import selector_from_set
from kube.pods import PodFacts, get_pod_ready_condition, is_pod_ready, pod_facts
from kube.times import format_time, parse_time

REPLICA_FAILURE: Final = "ReplicaFailure"
FAILED_CREATE: Final = "FailedCreate"
FAILED_DELETE: Final = "FailedDelete"


def calculate_status(rs: ReplicaSet, active: Sequence[Pod], terminating: Sequence[Pod] | None,
                     manage_error: str | None, now: datetime) -> ReplicaSetStatus:
    """The status the counts and the last manageReplicas error call for (observedGeneration unchanged).

    `terminating` is None when status.terminatingReplicas is not reported (the feature gate off).
    """
    return status_of(rs, [pod_facts(p) for p in active], None if terminating is None else len(terminating),
                     manage_error, now)


def status_of(rs: ReplicaSet, active: Sequence[PodFacts], terminating: int | None, manage_error: str | None,
              now: datetime) -> ReplicaSetStatus:
    """calculate_status over the active pods' facts, given the count of terminating ones (or None)."""
    template_labels = selector_from_set(rs.spec.template.metadata.labels)
    pairs = template_labels.label_pairs  # matches(labels) is `pairs <= labels.items()` when not None
    min_ready_seconds = rs.spec.min_ready_seconds
    # is_pod_available's test, `became_ready + minReadySeconds <= now`, with the sum's operand made once
    min_ready = timedelta(seconds=min_ready_seconds)
    fully_labeled = ready = available = 0
    # the template's answer for the last labels dict seen (pods with equal labels share one: see claim_active)
    last_labels: dict[str, str] | None = None
    last_matched = False
    for facts in active:
        labels = facts[4]
        if labels is not last_labels:
            last_labels = labels
            last_matched = pairs <= labels.items() if pairs is not None else template_labels.matches(labels)
        if last_matched:
            fully_labeled += 1
        if facts[5]:  # Ready
            ready_since = facts[6]
            ready += 1
            if min_ready_seconds == 0 or (ready_since is not None and ready_since + min_ready <= now):
                available += 1
    conditions = list(rs.status.conditions)
    failure = next((c for c in conditions if c.type == REPLICA_FAILURE), None)
    if manage_error is not None and failure is None:
        diff = len(active) - replicas_of(rs)
        reason = FAILED_CREATE if diff < 0 else FAILED_DELETE if diff > 0 else ""
        conditions.append(ReplicaSetCondition(type=REPLICA_FAILURE, status=CONDITION_TRUE,
                                              last_transition_time=format_time(now), reason=reason,
                                              message=manage_error))
    elif manage_error is None and failure is not None:
        conditions = [c for c in conditions if c.type != REPLICA_FAILURE]
    return msgspec.structs.replace(
        rs.status, replicas=len(active), fully_labeled_replicas=fully_labeled, ready_replicas=ready,
        available_replicas=available, conditions=conditions,
        terminating_replicas=terminating)


def replicas_of(rs: ReplicaSet) -> int:
    """spec.replicas; the API defaults a missing value to 1."""
    return 1 if rs.spec.replicas is None else rs.spec.replicas


def needs_write(rs: ReplicaSet, new: ReplicaSetStatus) -> bool:
    """updateReplicaSetStatus's early return, inverted: something the status shows changed."""
    old = rs.status
    return not (old.replicas == new.replicas and old.fully_labeled_replicas == new.fully_labeled_replicas
                and old.ready_replicas == new.ready_replicas and old.available_replicas == new.available_replicas
                and old.terminating_replicas == new.terminating_replicas
                and rs.metadata.generation == old.observed_generation and old.conditions == new.conditions)


def next_availability_check(pod: Pod, min_ready_seconds: int, now: datetime) -> timedelta | None:
    """nextPodAvailabilityCheck: how long until a Ready pod becomes available, if it is not yet."""
    if min_ready_seconds <= 0 or not is_pod_ready(pod):
        return None
    condition = get_pod_ready_condition(pod)
    if condition is None or not condition.last_transition_time:
        return None
    try:
        became_ready = parse_time(condition.last_transition_time)
    except ValueError:
        return None
    remaining = became_ready + timedelta(seconds=min_ready_seconds) - now
    return remaining if remaining > timedelta(0) else None


def min_next_availability_check(pods: Sequence[Pod], min_ready_seconds: int, now: datetime) -> timedelta | None:
    """FindMinNextPodAvailabilityCheck with one clock reading (the evaluation time is `now`)."""
    checks = [c for p in pods if (c := next_availability_check(p, min_ready_seconds, now)) is not None]
    return min(checks, default=None)
