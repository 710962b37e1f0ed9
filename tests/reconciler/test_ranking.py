"""Scale-down order: upstream's TestSortingActivePodsWithRanks, getPodsToDelete, and the deletion cost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kube.core import POD_PENDING, POD_RUNNING, POD_SUCCEEDED, POD_UNKNOWN, Pod
from kube.testing import PodBuilder, pod
from reconciler.core.ranking import (
    POD_DELETION_COST,
    _by_comparator,
    deletion_cost,
    get_pods_to_delete,
    logarithmic_rank_diff,
    max_container_restarts,
    pods_to_delete_order,
    ranks_by_related_pods_on_same_node,
)

NOW = datetime(2026, 3, 15, 12, 0, 0, tzinfo=UTC)
THEN_1_MONTH = datetime(2026, 2, 15, 12, 0, 0, tzinfo=UTC)  # now.AddDate(0, -1, 0)
THEN_2_HOURS = NOW - timedelta(hours=2)
THEN_5_HOURS = NOW - timedelta(hours=5)
THEN_8_HOURS = NOW - timedelta(hours=8)


def make(
    name: str,
    node: str,
    phase: str,
    ready: bool,
    restarts: int = 0,
    ready_since: datetime | None = None,
    created: datetime | None = None,
    cost: str | None = None,
    uid: str = "",
) -> Pod:
    """Upstream's test ``pod`` helper: no UID unless given, conditions and restarts only when ready."""
    b = pod(name).on_node(node).phase(phase)
    if ready:
        b = b.ready(at=ready_since).restarts(restarts)
    if created is not None:
        b = b.created(created)
    if cost is not None:
        b = b.annotations({POD_DELETION_COST: cost})
    built = b.build()
    built.metadata.uid = uid
    return built


UNSCHEDULED = make("unscheduled", "", POD_PENDING, False)
PENDING = make("pending", "node", POD_PENDING, False)
UNKNOWN_PHASE = make("unknown-phase", "node", POD_UNKNOWN, False)
NOT_READY = make("not-ready", "node", POD_RUNNING, False)
READY_NO_LTT = make("ready-no-last-transition-time", "node", POD_RUNNING, True)
READY_NOW = make("ready-now", "node", POD_RUNNING, True, 0, NOW, NOW)
READY_THEN = make("ready-then", "node", POD_RUNNING, True, 0, THEN_1_MONTH, THEN_1_MONTH)
READY_HIGH_RESTARTS = make("ready-high-restarts", "node", POD_RUNNING, True, 9001, NOW, NOW)
READY_NOW_CREATED_THEN = make("ready-now-created-then", "node", POD_RUNNING, True, 0, NOW, THEN_1_MONTH)
LOW_COST = make("low-deletion-cost", "node", POD_RUNNING, True, 0, NOW, THEN_1_MONTH, cost="10")
HIGH_COST = make("high-deletion-cost", "node", POD_RUNNING, True, 0, NOW, THEN_1_MONTH, cost="100")
UNSCHEDULED_5H = make("unscheduled-5-hours", "", POD_PENDING, False, 0, THEN_5_HOURS, THEN_5_HOURS)
UNSCHEDULED_8H = make("unscheduled-10-hours", "", POD_PENDING, False, 0, THEN_8_HOURS, THEN_8_HOURS)
READY_2H = make("ready-2-hours", "", POD_RUNNING, True, 0, THEN_2_HOURS, THEN_1_MONTH)
READY_5H = make("ready-5-hours", "", POD_RUNNING, True, 0, THEN_5_HOURS, THEN_1_MONTH)
READY_8H = make("ready-10-hours", "", POD_RUNNING, True, 0, THEN_8_HOURS, THEN_1_MONTH)


def names(pods: list[Pod]) -> list[str]:
    """The pods' names, in order."""
    return [p.metadata.name for p in pods]


@pytest.mark.parametrize(
    ("p1", "p2"),
    [
        pytest.param(UNSCHEDULED, UNSCHEDULED, id="equality-0-self-unscheduled"),
        pytest.param(PENDING, PENDING, id="equality-1-self-pending"),
        pytest.param(UNKNOWN_PHASE, UNKNOWN_PHASE, id="equality-2-self-unknown-phase"),
        pytest.param(NOT_READY, NOT_READY, id="equality-3-self-not-ready"),
        pytest.param(READY_NOW_CREATED_THEN, READY_NOW_CREATED_THEN, id="equality-4-self-ready-now-created-then"),
        pytest.param(READY_NOW, READY_NOW, id="equality-5-self-ready-now"),
        pytest.param(READY_THEN, READY_THEN, id="equality-6-self-ready-then"),
        pytest.param(READY_HIGH_RESTARTS, READY_HIGH_RESTARTS, id="equality-7-self-high-restarts"),
        pytest.param(READY_NOW_CREATED_THEN, READY_NOW_CREATED_THEN, id="equality-8-self-ready-now-created-then"),
        pytest.param(UNSCHEDULED_5H, UNSCHEDULED_8H, id="equality-9-creation-same-log2-bucket-equal-uid"),
        pytest.param(READY_5H, READY_8H, id="equality-10-ready-time-same-log2-bucket-equal-uid"),
    ],
)
def test_equivalent_pods_keep_their_order(p1: Pod, p2: Pod) -> None:
    """Upstream's equality tests: neither pod sorts before the other, so the stable sort keeps both orders."""
    assert names(pods_to_delete_order([p1, p2], [1, 1], NOW)) == names([p1, p2])
    assert names(pods_to_delete_order([p2, p1], [1, 1], NOW)) == names([p2, p1])


@pytest.mark.parametrize(
    ("lesser", "lesser_rank", "greater", "greater_rank"),
    [
        pytest.param(UNSCHEDULED, 1, PENDING, 2, id="inequality-0-unassigned-first-despite-lower-rank"),
        pytest.param(UNSCHEDULED, 2, PENDING, 1, id="inequality-1-unassigned-first"),
        pytest.param(PENDING, 1, UNKNOWN_PHASE, 2, id="inequality-2-phase-pending-before-unknown"),
        pytest.param(UNKNOWN_PHASE, 1, NOT_READY, 2, id="inequality-3-phase-unknown-before-running"),
        pytest.param(NOT_READY, 1, READY_NO_LTT, 1, id="inequality-4-not-ready-before-ready"),
        pytest.param(READY_NO_LTT, 1, READY_NOW, 1, id="inequality-5-zero-ready-time-first-after-or-zero"),
        pytest.param(READY_NOW, 2, READY_NO_LTT, 1, id="inequality-6-higher-rank-before-ready-time"),
        pytest.param(READY_NOW, 1, READY_THEN, 1, id="inequality-7-newer-ready-bucket-first"),
        pytest.param(READY_NOW, 2, READY_THEN, 1, id="inequality-8-higher-rank-first"),
        pytest.param(READY_HIGH_RESTARTS, 1, READY_NOW, 1, id="inequality-9-more-restarts-first"),
        pytest.param(READY_NOW, 2, READY_HIGH_RESTARTS, 1, id="inequality-10-higher-rank-before-restarts"),
        pytest.param(READY_NOW, 1, READY_NOW_CREATED_THEN, 1, id="inequality-11-newer-creation-bucket-first"),
        pytest.param(READY_NOW_CREATED_THEN, 2, READY_NOW, 1, id="inequality-12-higher-rank-before-creation"),
        pytest.param(LOW_COST, 2, HIGH_COST, 1, id="inequality-13-lower-deletion-cost-before-rank"),
        pytest.param(READY_2H, 1, READY_5H, 1, id="inequality-15-newer-ready-bucket-2h-before-5h"),
    ],
)
def test_lesser_pod_is_deleted_first(lesser: Pod, lesser_rank: int, greater: Pod, greater_rank: int) -> None:
    """Upstream's inequality tests (14 disables PodDeletionCost, a gate kubus treats as always on)."""
    pairs = {lesser.metadata.name: lesser_rank, greater.metadata.name: greater_rank}
    for order in ([lesser, greater], [greater, lesser]):
        ranks = [pairs[p.metadata.name] for p in order]
        assert names(pods_to_delete_order(order, ranks, NOW)) == names([lesser, greater])


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(
            make("a", "", POD_RUNNING, True, 0, THEN_5_HOURS, uid="uid-a"),
            make("b", "", POD_RUNNING, True, 9, THEN_8_HOURS, uid="uid-b"),
            id="ready-time-equal-bucket-lower-uid-first-ignoring-restarts",
        ),
        pytest.param(
            make("a", "", POD_PENDING, False, created=THEN_8_HOURS, uid="uid-a"),
            make("b", "", POD_PENDING, False, created=THEN_5_HOURS, uid="uid-b"),
            id="creation-equal-bucket-lower-uid-first-even-if-older",
        ),
        pytest.param(
            make("zero", "", POD_PENDING, False, uid="uid-z"),
            make("created", "", POD_PENDING, False, created=NOW, uid="uid-a"),
            id="creation-zero-time-first-after-or-zero",
        ),
        pytest.param(
            make("future", "", POD_RUNNING, True, 0, NOW + timedelta(hours=1), uid="uid-z"),
            make("older", "", POD_RUNNING, True, 0, THEN_2_HOURS, uid="uid-a"),
            id="ready-time-not-before-now-is-bucket-minus-one",
        ),
        pytest.param(
            make("empty-phase", "node", "", False),
            make("unknown", "node", POD_UNKNOWN, False),
            id="phase-unlisted-counts-as-pending",
        ),
        pytest.param(
            make("negative", "node", POD_RUNNING, True, 0, THEN_1_MONTH, cost="-5"),
            make("invalid", "node", POD_RUNNING, True, 0, NOW, cost="+10"),
            id="deletion-cost-negative-before-invalid-zero",
        ),
    ],
)
def test_tie_breakers_beyond_upstream_table(first: Pod, second: Pod) -> None:
    """Extra cases for the UID tie, afterOrZero, phase defaults and costs, both input orders."""
    for order in ([first, second], [second, first]):
        assert names(pods_to_delete_order(order, [1, 1], NOW)) == names([first, second])


def test_full_sort_matches_rule_order() -> None:
    """Sorting a mixed set puts each pod where the rules place it."""
    pods = [READY_THEN, READY_NOW, NOT_READY, UNKNOWN_PHASE, PENDING, UNSCHEDULED, READY_HIGH_RESTARTS]
    assert names(pods_to_delete_order(pods, [1] * len(pods), NOW)) == [
        "unscheduled",
        "pending",
        "unknown-phase",
        "not-ready",
        "ready-high-restarts",
        "ready-now",
        "ready-then",
    ]


def ready_pod(name: str, uid: str) -> PodBuilder:
    """Ready on a node since NOW, created a month ago: equal on every rule before the restart counts."""
    return pod(name).uid(uid).on_node("node").phase(POD_RUNNING).ready(NOW).created(THEN_1_MONTH)


@pytest.mark.parametrize(
    ("builder", "expected"),
    [
        pytest.param(pod("p"), (0, 0), id="no-statuses"),
        pytest.param(pod("p").restarts(3), (3, 0), id="regular-only"),
        pytest.param(pod("p").restarts(1).sidecar("proxy", 4), (1, 4), id="regular-and-sidecar-kept-apart"),
        pytest.param(pod("p").sidecar("a", 2).sidecar("b", 7), (0, 7), id="max-over-sidecars"),
        pytest.param(pod("p").init_container("setup", restarts=9), (0, 0), id="run-to-completion-init-ignored"),
        pytest.param(pod("p").init_container("setup", restart_policy="OnFailure", restarts=9), (0, 0),
                     id="init-restart-policy-other-than-always-ignored"),
        pytest.param(pod("p").init_container("setup", restarts=9).sidecar("proxy", 2), (0, 2),
                     id="only-the-restartable-one-counts"),
    ],
)
def test_max_container_restarts(builder: PodBuilder, expected: tuple[int, int]) -> None:
    """maxContainerRestarts: (regular containers, restartable init containers) separately, as upstream since #124952."""
    assert max_container_restarts(builder.build()) == expected


def test_init_container_status_without_a_restartable_spec_is_not_a_sidecar() -> None:
    """The status is matched to spec.initContainers by name: a status alone says nothing of restartPolicy."""
    built = pod("p").sidecar("proxy", 1).build()
    built.status.init_container_statuses[0].name = "renamed"
    built.status.init_container_statuses[0].restart_count = 5
    assert max_container_restarts(built) == (0, 0)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(ready_pod("sidecar-restarted", "uid-b").sidecar("proxy", 5),
                     ready_pod("sidecar-steady", "uid-a").sidecar("proxy", 1),
                     id="equal-regular-restarts-more-sidecar-restarts-first"),
        pytest.param(ready_pod("regular-restarted", "uid-b").restarts(2).sidecar("proxy", 0),
                     ready_pod("sidecar-restarted", "uid-a").restarts(1).sidecar("proxy", 90),
                     id="regular-restarts-decide-before-sidecar-restarts"),
        pytest.param(ready_pod("sidecar-restarted", "uid-b").sidecar("proxy", 1),
                     ready_pod("init-restarted", "uid-a").init_container("setup", restarts=30),
                     id="run-to-completion-init-restarts-do-not-count"),
        pytest.param(ready_pod("sidecar-restarted", "uid-b").sidecar("proxy", 1),
                     ready_pod("newer-but-steady", "uid-a").sidecar("proxy", 0).created(NOW),
                     id="sidecar-restarts-decide-before-creation-time"),
    ],
)
def test_sidecar_restarts_break_a_tie_of_regular_restarts(first: PodBuilder, second: PodBuilder) -> None:
    """ActivePodsWithRanks.Less rule 7, compareMaxContainerRestarts: the pod whose containers restarted more goes
    first; only on equal regular counts do the restartable init containers' (sidecars') counts decide."""
    a, b = first.build(), second.build()
    for order in ([a, b], [b, a]):
        assert names(pods_to_delete_order(order, [1, 1], NOW)) == names([a, b])
        assert names(_by_comparator(order, [1, 1], NOW)) == names([a, b])


def test_equal_sidecar_restarts_fall_through_to_creation_time() -> None:
    """compareMaxContainerRestarts returns nil on equal counts: rule 8 decides (the newer pod first)."""
    older = ready_pod("older", "uid-a").sidecar("proxy", 3).build()
    newer = ready_pod("newer", "uid-b").sidecar("proxy", 3).created(NOW).build()
    assert names(pods_to_delete_order([older, newer], [1, 1], NOW)) == ["newer", "older"]


@pytest.mark.parametrize(
    ("value", "cost"),
    [
        pytest.param(None, 0, id="missing"),
        pytest.param("10", 10, id="positive"),
        pytest.param("-10", -10, id="negative"),
        pytest.param("0", 0, id="zero"),
        pytest.param("-08", -8, id="negative-leading-zero-parses"),
        pytest.param("008", 0, id="leading-zero-invalid"),
        pytest.param("+10", 0, id="plus-sign-invalid"),
        pytest.param("", 0, id="empty-invalid"),
        pytest.param("-", 0, id="lone-minus-invalid"),
        pytest.param("1_0", 0, id="underscore-invalid"),
        pytest.param(" 5", 0, id="space-invalid"),
        pytest.param("\u0661", 0, id="non-ascii-digit-invalid"),
        pytest.param("2147483647", 2**31 - 1, id="int32-max"),
        pytest.param("2147483648", 0, id="int32-overflow-invalid"),
        pytest.param("-2147483648", -(2**31), id="int32-min"),
        pytest.param("-2147483649", 0, id="int32-underflow-invalid"),
    ],
)
def test_deletion_cost_parses_like_upstream(value: str | None, cost: int) -> None:
    """GetDeletionCostFromPodAnnotations: int32, validFirstDigit, 0 on any error."""
    annotations = {} if value is None else {POD_DELETION_COST: value}
    assert deletion_cost(annotations) == cost


def test_logarithmic_rank_diff_buckets_nanoseconds() -> None:
    """Buckets are floor(log2(ns)): 5h and 8h share bucket 44, 2h is bucket 42, now itself is -1."""
    assert logarithmic_rank_diff(THEN_5_HOURS, THEN_8_HOURS, NOW) == 0
    assert logarithmic_rank_diff(THEN_2_HOURS, THEN_8_HOURS, NOW) == -2
    assert logarithmic_rank_diff(NOW, NOW - timedelta(microseconds=1), NOW) == -1 - 9


def test_ranks_count_active_related_pods_per_node() -> None:
    """Ranks count active related pods on the pod's node, unassigned pods sharing the "" node."""
    a1 = pod("a1").on_node("a").build()
    a2 = pod("a2").on_node("a").build()
    a_done = pod("a-done").on_node("a").phase(POD_SUCCEEDED).build()
    a_deleting = pod("a-deleting").on_node("a").deleting(NOW).build()
    b1 = pod("b1").on_node("b").build()
    u1 = pod("u1").build()
    related = [a1, a2, a_done, a_deleting, b1, u1, pod("u2").build()]
    assert ranks_by_related_pods_on_same_node([a1, b1, u1, pod("c").on_node("c").build()], related) == [2, 1, 2, 0]


def test_get_pods_to_delete_prefers_doubled_up_nodes() -> None:
    """getPodsToDelete deletes from the node with more related pods first."""
    lonely = make("lonely", "n1", POD_RUNNING, True, 0, NOW, NOW, uid="1")
    crowded = make("crowded", "n2", POD_RUNNING, True, 0, NOW, NOW, uid="2")
    sibling = make("sibling", "n2", POD_RUNNING, True, 0, NOW, NOW, uid="3")
    filtered = [lonely, crowded]
    assert names(get_pods_to_delete(filtered, [lonely, crowded, sibling], 1, NOW)) == ["crowded"]
    assert names(filtered) == ["lonely", "crowded"]


def test_get_pods_to_delete_skips_sorting_when_all_go() -> None:
    """With diff == len(pods) every pod goes, in input order; diff 0 deletes none."""
    filtered = [READY_THEN, UNSCHEDULED]
    assert names(get_pods_to_delete(filtered, filtered, 2, NOW)) == ["ready-then", "unscheduled"]
    assert get_pods_to_delete(filtered, filtered, 0, NOW) == []


@pytest.mark.parametrize("diff", [pytest.param(-1, id="negative"), pytest.param(3, id="more-than-pods")])
def test_get_pods_to_delete_rejects_out_of_range_diff(diff: int) -> None:
    """A diff outside 0..len(pods) is a caller bug (upstream would panic on the slice)."""
    with pytest.raises(ValueError, match="diff"):
        get_pods_to_delete([READY_NOW, READY_THEN], [], diff, NOW)


def test_order_rejects_mismatched_ranks() -> None:
    """Pods and ranks must pair up one to one."""
    with pytest.raises(ValueError, match="ranks"):
        pods_to_delete_order([READY_NOW], [], NOW)
