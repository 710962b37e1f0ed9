"""calculateStatus and the status write (replica_set_utils_test.go), and the availability checks
(controller_utils_test.go's nextPodAvailabilityCheck / FindMinNextPodAvailabilityCheck cases)."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest

from kube.apps import ReplicaSet, ReplicaSetCondition, ReplicaSetStatus
from kube.core import CONDITION_TRUE, POD_PENDING, POD_RUNNING, Pod
from kube.testing import replicaset
from kube.times import format_time
from reconciler.core.replicaset.status import (
    FAILED_CREATE,
    FAILED_DELETE,
    REPLICA_FAILURE,
    calculate_status,
    min_next_availability_check,
    needs_write,
    next_availability_check,
    replicas_of,
)
from tests.reconciler.builders import NOW, owned_pod

FULL_LABELS = {"name": "foo", "type": "production"}


def upstream_rs(replicas: int, selector: dict[str, str], min_ready: int = 0) -> ReplicaSet:
    """newReplicaSet: the template always carries name=foo,type=production; the selector is given."""
    return (replicaset("foobar").selector(selector).template_labels(FULL_LABELS).replicas(replicas)
            .min_ready_seconds(min_ready).build())


def upstream_pod(name: str, rs: ReplicaSet, phase: str) -> Pod:
    """newPod: the selector's labels; Running pods are Ready (no lastTransitionTime)."""
    b = owned_pod(name, rs, phase=phase)
    return (b.ready() if phase == POD_RUNNING else b).build()


NOT_FULLY_LABELLED = upstream_rs(1, {"name": "foo"})
FULLY_LABELLED = upstream_rs(2, FULL_LABELS)
LONG_MIN_READY = upstream_rs(1, FULL_LABELS, min_ready=3600)


def counts(status: ReplicaSetStatus) -> tuple[int, int, int, int]:
    return status.replicas, status.fully_labeled_replicas, status.ready_replicas, status.available_replicas


@pytest.mark.parametrize(
    ("rs", "pods", "expected"),
    [
        pytest.param(FULLY_LABELLED, [upstream_pod("pod1", FULLY_LABELLED, POD_RUNNING)], (1, 1, 1, 1),
                     id="1-fully-labelled-pod"),
        pytest.param(NOT_FULLY_LABELLED, [upstream_pod("pod1", NOT_FULLY_LABELLED, POD_RUNNING)], (1, 0, 1, 1),
                     id="1-not-fully-labelled-pod"),
        pytest.param(FULLY_LABELLED, [upstream_pod("pod1", FULLY_LABELLED, POD_RUNNING),
                                      upstream_pod("pod2", FULLY_LABELLED, POD_RUNNING)], (2, 2, 2, 2),
                     id="2-fully-labelled-pods"),
        pytest.param(NOT_FULLY_LABELLED, [upstream_pod("pod1", NOT_FULLY_LABELLED, POD_RUNNING),
                                          upstream_pod("pod2", NOT_FULLY_LABELLED, POD_RUNNING)], (2, 0, 2, 2),
                     id="2-not-fully-labelled-pods"),
        pytest.param(NOT_FULLY_LABELLED, [upstream_pod("pod1", NOT_FULLY_LABELLED, POD_RUNNING),
                                          upstream_pod("pod2", FULLY_LABELLED, POD_RUNNING)], (2, 1, 2, 2),
                     id="1-fully-labelled-1-not"),
        pytest.param(FULLY_LABELLED, [upstream_pod("pod1", FULLY_LABELLED, POD_PENDING)], (1, 1, 0, 0),
                     id="1-non-ready-pod"),
        pytest.param(LONG_MIN_READY, [upstream_pod("pod1", LONG_MIN_READY, POD_RUNNING)], (1, 1, 1, 0),
                     id="1-ready-but-non-available-pod"),
        pytest.param(FULLY_LABELLED, [], (0, 0, 0, 0), id="no-pods"),
    ],
)
def test_calculate_status_counts(rs: ReplicaSet, pods: list[Pod], expected: tuple[int, int, int, int]) -> None:
    """TestCalculateStatus: replicas, fullyLabeledReplicas, readyReplicas, availableReplicas."""
    status = calculate_status(rs, pods, None, None, NOW)
    assert counts(status) == expected
    assert status.conditions == []
    assert status.terminating_replicas is None


@pytest.mark.parametrize(
    ("terminating", "expected"),
    [
        pytest.param(None, None, id="feature-off-not-reported"),
        pytest.param([], 0, id="none-terminating"),
        pytest.param([upstream_pod("t1", FULLY_LABELLED, POD_RUNNING)], 1, id="one-terminating"),
        pytest.param([upstream_pod(f"t{i}", FULLY_LABELLED, POD_RUNNING) for i in range(3)], 3,
                     id="three-terminating"),
    ],
)
def test_calculate_status_terminating_replicas(terminating: list[Pod] | None, expected: int | None) -> None:
    """TestCalculateStatus with DeploymentReplicaSetTerminatingReplicas: reported only when asked for,
    and terminating pods count nowhere else."""
    active = [upstream_pod("pod1", FULLY_LABELLED, POD_RUNNING)]
    status = calculate_status(FULLY_LABELLED, active, terminating, None, NOW)
    assert status.terminating_replicas == expected
    assert counts(status) == (1, 1, 1, 1)


def test_availability_uses_the_given_clock() -> None:
    """TestAvailableReplicas: with minReadySeconds 15, a pod Ready 16 s ago is available, one Ready now is not."""
    rs = upstream_rs(2, FULL_LABELS, min_ready=15)
    pods = [owned_pod("ready-16s", rs).ready(NOW - timedelta(seconds=16)).build(),
            owned_pod("ready-now", rs).ready(NOW).build()]
    assert counts(calculate_status(rs, pods, None, None, NOW)) == (2, 2, 2, 1)
    assert counts(calculate_status(rs, pods, None, None, NOW + timedelta(seconds=15))) == (2, 2, 2, 2)


def test_ready_replicas() -> None:
    """TestReadyReplicas: a Pending pod and a Running Ready one."""
    rs = upstream_rs(2, FULL_LABELS)
    pods = [upstream_pod("pending", rs, POD_PENDING), upstream_pod("running", rs, POD_RUNNING)]
    assert counts(calculate_status(rs, pods, None, None, NOW)) == (2, 2, 1, 1)


def failure(reason: str = FAILED_CREATE, message: str = "fake manageReplicasErr") -> ReplicaSetCondition:
    return ReplicaSetCondition(type=REPLICA_FAILURE, status=CONDITION_TRUE, last_transition_time=format_time(NOW),
                               reason=reason, message=message)


OTHER_CONDITION = ReplicaSetCondition(type="ImagePullBackOff", status=CONDITION_TRUE, reason="NonExistentImage")
EXISTING_FAILURE = ReplicaSetCondition(type=REPLICA_FAILURE, status=CONDITION_TRUE)
RS2 = upstream_rs(2, {"name": "foo"})


def with_conditions(rs: ReplicaSet, *conditions: ReplicaSetCondition) -> ReplicaSet:
    return msgspec.structs.replace(rs, status=msgspec.structs.replace(rs.status, conditions=list(conditions)))


@pytest.mark.parametrize(
    ("rs", "active", "error", "expected"),
    [
        pytest.param(RS2, 1, "fake manageReplicasErr", [failure(FAILED_CREATE)], id="error-no-condition-diff-below-0"),
        pytest.param(RS2, 3, "fake manageReplicasErr", [failure(FAILED_DELETE)], id="error-no-condition-diff-above-0"),
        pytest.param(RS2, 2, "fake manageReplicasErr", [failure("")], id="error-no-condition-no-diff"),
        pytest.param(with_conditions(upstream_rs(10, {"name": "foo"}), EXISTING_FAILURE), 1, None, [],
                     id="no-error-condition-removed"),
        pytest.param(with_conditions(upstream_rs(10, {"name": "foo"}), EXISTING_FAILURE), 1, "fake manageReplicasErr",
                     [EXISTING_FAILURE], id="error-condition-kept-as-it-was"),
        pytest.param(RS2, 1, None, [], id="no-error-no-condition"),
        pytest.param(with_conditions(RS2, OTHER_CONDITION), 1, "boom", [OTHER_CONDITION, failure(message="boom")],
                     id="appended-after-other-conditions"),
        pytest.param(with_conditions(RS2, OTHER_CONDITION, EXISTING_FAILURE), 1, None, [OTHER_CONDITION],
                     id="removal-keeps-other-conditions"),
    ],
)
def test_calculate_status_conditions(rs: ReplicaSet, active: int, error: str | None,
                                     expected: list[ReplicaSetCondition]) -> None:
    """TestCalculateStatusConditions: ReplicaFailure is added (only when absent) for a manageReplicas error,
    FailedCreate below the replica count and FailedDelete above it, and removed once there is no error."""
    pods = [upstream_pod(f"pod{i}", rs, POD_RUNNING) for i in range(active)]
    before = list(rs.status.conditions)
    status = calculate_status(rs, pods, None, error, NOW)
    assert status.conditions == expected
    assert rs.status.conditions == before  # the cached object is left alone


def test_calculate_status_keeps_observed_generation() -> None:
    rs = replicaset("foobar").generation(3).observed_generation(2).build()
    assert calculate_status(rs, [], None, None, NOW).observed_generation == 2


@pytest.mark.parametrize(("replicas", "expected"), [(None, 1), (0, 0), (5, 5)])
def test_replicas_default_to_one(replicas: int | None, expected: int) -> None:
    assert replicas_of(replicaset().replicas(replicas).build()) == expected


BASE = (replicaset("foobar").generation(1).observed_generation(1)
        .status(replicas=2, ready=1, available=1, fully_labeled=2).build())


def status_with(**changes: object) -> ReplicaSetStatus:
    return msgspec.structs.replace(BASE.status, **changes)


@pytest.mark.parametrize(
    ("rs", "new", "write"),
    [
        pytest.param(BASE, status_with(), False, id="unchanged"),
        pytest.param(BASE, status_with(replicas=3), True, id="replicas"),
        pytest.param(BASE, status_with(fully_labeled_replicas=1), True, id="fully-labeled"),
        pytest.param(BASE, status_with(ready_replicas=2), True, id="ready"),
        pytest.param(BASE, status_with(available_replicas=0), True, id="available"),
        pytest.param(BASE, status_with(terminating_replicas=0), True, id="terminating-nil-vs-zero"),
        pytest.param(BASE, status_with(conditions=[failure()]), True, id="conditions"),
        pytest.param(msgspec.structs.replace(BASE, metadata=msgspec.structs.replace(BASE.metadata, generation=2)),
                     status_with(), True, id="new-generation"),
    ],
)
def test_needs_write(rs: ReplicaSet, new: ReplicaSetStatus, write: bool) -> None:
    """updateReplicaSetStatus returns early only when nothing it writes changed and the generation is observed."""
    assert needs_write(rs, new) is write


# --- availability checks ------------------------------------------------------------------------------------

RS = replicaset("foobar").build()


def ready_since(seconds_ago: float | None, name: str = "p") -> Pod:
    b = owned_pod(name, RS)
    return (b.ready(NOW - timedelta(seconds=seconds_ago)) if seconds_ago is not None else b.ready()).build()


@pytest.mark.parametrize(
    ("pod", "min_ready", "expected"),
    [
        pytest.param(ready_since(10), 30, timedelta(seconds=20), id="ready-10s-of-30s"),
        pytest.param(ready_since(0), 30, timedelta(seconds=30), id="ready-now"),
        pytest.param(ready_since(28.5), 30, timedelta(seconds=1), id="whole-seconds-in-the-api"),
        pytest.param(ready_since(30), 30, None, id="available-at-the-boundary"),
        pytest.param(ready_since(60), 30, None, id="long-available"),
        pytest.param(ready_since(10), 0, None, id="no-min-ready-seconds"),
        pytest.param(ready_since(None), 30, None, id="no-last-transition-time"),
        pytest.param(owned_pod("p", RS).not_ready(NOW).build(), 30, None, id="not-ready"),
        pytest.param(owned_pod("p", RS).build(), 30, None, id="no-ready-condition"),
        pytest.param(ready_since(-5), 30, timedelta(seconds=35), id="clock-skew-ready-in-the-future"),
    ],
)
def test_next_availability_check(pod: Pod, min_ready: int, expected: timedelta | None) -> None:
    """nextPodAvailabilityCheck: time until a Ready pod becomes available, if it is not yet."""
    assert next_availability_check(pod, min_ready, NOW) == expected


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([], None, id="no-pods"),
        pytest.param([ready_since(60, "a"), owned_pod("b", RS).build()], None, id="nothing-to-wait-for"),
        pytest.param([ready_since(10, "a"), ready_since(25, "b"), ready_since(60, "c")], timedelta(seconds=5),
                     id="the-soonest"),
        pytest.param([ready_since(25, "b"), ready_since(10, "a")], timedelta(seconds=5), id="order-does-not-matter"),
    ],
)
def test_min_next_availability_check(pods: list[Pod], expected: timedelta | None) -> None:
    """FindMinNextPodAvailabilityCheck: the soonest of the pods' checks."""
    assert min_next_availability_check(pods, 30, NOW) == expected


def test_status_asks_the_template_once_per_shared_labels_dict() -> None:
    """fullyLabeledReplicas over the pods' facts: pods sharing one labels dict (the cache's) are matched against
    the template's labels once per dict, not once per pod; the counts are the per-pod ones."""
    from kube.pods import pod_facts
    from reconciler.core.replicaset.status import status_of
    from tests.reconciler.test_claiming import CountingLabels

    full, partial = CountingLabels(FULL_LABELS), CountingLabels({"name": "foo"})
    facts = [pod_facts(upstream_pod(f"pod{i}", NOT_FULLY_LABELLED, POD_RUNNING), full) for i in range(200)]
    facts += [pod_facts(upstream_pod(f"half{i}", NOT_FULLY_LABELLED, POD_RUNNING), partial) for i in range(50)]
    status = status_of(FULLY_LABELLED, facts, None, None, NOW)
    assert counts(status) == (250, 200, 250, 250)
    assert (full.reads, partial.reads) == (1, 1)
