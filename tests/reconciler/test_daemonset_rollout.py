"""The rolling update arithmetic: util.UnavailableCount/SurgeCount/AllowsSurge/IsPodUpdated (daemonset_util_test.go),
updatedDesiredNodeCounts (update_test.go's TestGetUnavailableNumbers) and rollingUpdate (update_test.go's
TestDaemonSetUpdates* scenarios, replayed sync by sync with upstream's expected creates and deletes)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest

from kube.apps import DaemonSet, DaemonSetUpdateStrategy, RollingUpdateDaemonSet
from kube.meta import IntOrString
from kube.testing import daemonset, pod
from reconciler.core.daemonset.rollout import (
    MAX_SURGE_FIELD,
    MAX_UNAVAILABLE_FIELD,
    TEMPLATE_GENERATION_ANNOTATION,
    TEMPLATE_GENERATION_LABEL,
    DaemonPod,
    NodeNotFoundError,
    RolloutDecision,
    RolloutValueError,
    allows_surge,
    daemon_pod,
    find_updated_pods_on_node,
    is_pod_updated,
    rolling_update,
    surge_count,
    template_generation,
    unavailable_count,
    updated_desired_node_counts,
)

T0 = datetime(2026, 3, 15, 12, 0, 0, tzinfo=UTC)


def unavailable(value: IntOrString | None) -> DaemonSet:
    """newUpdateUnavailable."""
    strategy = DaemonSetUpdateStrategy(type="RollingUpdate",
                                       rolling_update=RollingUpdateDaemonSet(max_unavailable=value))
    return _with_strategy(strategy)


def surge(value: IntOrString) -> DaemonSet:
    """newUpdateSurge: maxUnavailable 0, maxSurge ``value``."""
    return _with_strategy(DaemonSetUpdateStrategy(
        type="RollingUpdate", rolling_update=RollingUpdateDaemonSet(max_unavailable=0, max_surge=value)))


def _with_strategy(strategy: DaemonSetUpdateStrategy) -> DaemonSet:
    ds = daemonset("x").build()
    ds.spec.update_strategy = strategy
    return ds


# --- UnavailableCount / SurgeCount / AllowsSurge ----------------------------------------------------------


@pytest.mark.parametrize(("ds", "total", "expected"), [
    pytest.param(unavailable(2), 5, 2, id="int"),
    pytest.param(unavailable("25%"), 5, 2, id="percent-rounds-up"),
    pytest.param(unavailable("50%"), 3, 2, id="half-of-three"),
    pytest.param(unavailable("100%"), 7, 7, id="all"),
    pytest.param(unavailable("150%"), 4, 6, id="over-100-percent-simply-scales"),
    pytest.param(unavailable("1%"), 0, 0, id="no-nodes"),
    pytest.param(unavailable(0), 5, 0, id="zero"),
    pytest.param(daemonset("x").on_delete().build(), 5, 0, id="on-delete"),
    pytest.param(_with_strategy(DaemonSetUpdateStrategy(type="RollingUpdate")), 5, 0, id="no-rolling-update"),
])
def test_unavailable_count(ds: DaemonSet, total: int, expected: int) -> None:
    assert unavailable_count(ds, total) == expected


@pytest.mark.parametrize(("ds", "total", "expected"), [
    pytest.param(surge(2), 5, 2, id="int"),
    pytest.param(surge("25%"), 5, 2, id="percent-rounds-up"),
    pytest.param(surge("150%"), 4, 6, id="over-100-percent-simply-scales"),
    pytest.param(unavailable(1), 5, 0, id="unset-is-zero"),
    pytest.param(daemonset("x").on_delete().build(), 5, 0, id="on-delete"),
    pytest.param(_with_strategy(DaemonSetUpdateStrategy(type="RollingUpdate")), 5, 0, id="no-rolling-update"),
])
def test_surge_count(ds: DaemonSet, total: int, expected: int) -> None:
    assert surge_count(ds, total) == expected


@pytest.mark.parametrize(("count", "ds", "field", "message"), [
    pytest.param(unavailable_count, unavailable("abc"), MAX_UNAVAILABLE_FIELD,
                 "invalid value for MaxUnavailable: invalid value for IntOrString: invalid type: "
                 "string is not a percentage", id="unavailable-not-a-percentage"),
    pytest.param(unavailable_count, unavailable("x%"), MAX_UNAVAILABLE_FIELD,
                 'invalid value for MaxUnavailable: invalid value for IntOrString: invalid value "x%": '
                 'strconv.Atoi: parsing "x": invalid syntax', id="unavailable-bad-percentage"),
    pytest.param(unavailable_count, unavailable(None), MAX_UNAVAILABLE_FIELD,
                 "invalid value for MaxUnavailable: nil value for IntOrString", id="unavailable-unset"),
    pytest.param(surge_count, surge("abc"), MAX_SURGE_FIELD,
                 "invalid value for MaxSurge: invalid value for IntOrString: invalid type: "
                 "string is not a percentage", id="surge-not-a-percentage"),
])
def test_bad_values_name_the_field(count: Callable[[DaemonSet, int], int], ds: DaemonSet, field: str,
                                   message: str) -> None:
    with pytest.raises(RolloutValueError) as raised:
        count(ds, 4)
    assert raised.value.field == field
    assert raised.value.message == message
    assert str(raised.value) == f"{field}: {message}"
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(("ds", "expected"), [
    pytest.param(surge(1), True, id="one"),
    pytest.param(surge("1%"), True, id="one-percent-of-one-rounds-up"),
    pytest.param(surge(0), False, id="zero"),
    pytest.param(surge("0%"), False, id="zero-percent"),
    pytest.param(surge("abc"), False, id="invalid"),
    pytest.param(unavailable(1), False, id="unset"),
    pytest.param(daemonset("x").on_delete().build(), False, id="on-delete"),
])
def test_allows_surge(ds: DaemonSet, expected: bool) -> None:
    assert allows_surge(ds) is expected


# --- updatedDesiredNodeCounts (TestGetUnavailableNumbers) ------------------------------------------------


def ready(name: str, updated: bool = True) -> DaemonPod:
    return DaemonPod(name=name, updated=updated, ready=True, ready_since=T0)


def terminating(name: str) -> DaemonPod:
    return replace(ready(name), deleting=True)


@pytest.mark.parametrize(("ds", "nodes", "node_to_pods", "expected", "empty_nodes"), [
    pytest.param(unavailable(0), 0, {}, (0, 0, 0), 0, id="no-nodes"),
    pytest.param(unavailable(1), 2, {"node-0": [ready("pod-0")], "node-1": [ready("pod-1")]}, (0, 1, 2), 0,
                 id="two-nodes-with-ready-pods"),
    pytest.param(unavailable(0), 2, {"node-0": [ready("pod-0")]}, (0, 1, 2), 1,
                 id="two-nodes-one-without-pods"),
    pytest.param(surge(0), 2, {"node-0": [ready("pod-0")]}, (0, 1, 2), 1,
                 id="two-nodes-one-without-pods-surge"),
    pytest.param(unavailable("50%"), 2, {"node-0": [ready("pod-0")], "node-1": [ready("pod-1")]}, (0, 1, 2), 0,
                 id="max-unavailable-in-percents"),
    pytest.param(surge("50%"), 2, {"node-0": [ready("pod-0")], "node-1": [ready("pod-1")]}, (1, 0, 2), 0,
                 id="max-surge-in-percents"),
    pytest.param(surge("100%"), 2, {"node-0": [ready("pod-0")], "node-1": [ready("pod-1")]}, (2, 0, 2), 0,
                 id="max-surge-100-percent"),
    pytest.param(unavailable("50%"), 3, {"node-0": [ready("pod-0")], "node-1": [terminating("pod-1")]},
                 (0, 2, 3), 1, id="max-unavailable-in-percents-pod-terminating"),
])
def test_updated_desired_node_counts(ds: DaemonSet, nodes: int, node_to_pods: dict[str, list[DaemonPod]],
                                     expected: tuple[int, int, int], empty_nodes: int) -> None:
    should_run = {f"node-{i}": True for i in range(nodes)}
    counts = updated_desired_node_counts(ds, should_run, node_to_pods)
    assert (counts.max_surge, counts.max_unavailable, counts.desired_number_scheduled) == expected
    assert sum(1 for pods in counts.node_to_pods.values() if not pods) == empty_nodes
    assert set(counts.node_to_pods) == set(should_run) | set(node_to_pods)


def test_updated_desired_node_counts_skips_nodes_that_should_not_run() -> None:
    counts = updated_desired_node_counts(unavailable("50%"), [("a", True), ("b", False), ("c", True)],
                                         {"b": [ready("pod-b")]})
    assert counts.desired_number_scheduled == 2 and counts.max_unavailable == 1
    assert counts.node_to_pods == {"a": [], "b": [ready("pod-b")], "c": []}


def test_updated_desired_node_counts_does_not_mutate_its_input() -> None:
    node_to_pods: dict[str, list[DaemonPod]] = {}
    updated_desired_node_counts(unavailable(1), {"a": True}, node_to_pods)
    assert node_to_pods == {}


def test_updated_desired_node_counts_rejects_bad_values_unavailability_first() -> None:
    ds = _with_strategy(DaemonSetUpdateStrategy(
        type="RollingUpdate", rolling_update=RollingUpdateDaemonSet(max_unavailable="bad", max_surge="worse")))
    with pytest.raises(RolloutValueError) as raised:
        updated_desired_node_counts(ds, {"a": True}, {})
    assert raised.value.field == MAX_UNAVAILABLE_FIELD


# --- IsPodUpdated, GetTemplateGeneration, findUpdatedPodsOnNode ----------------------------------------------

GENERATION = 12345
HASH = "55555"
LABELS = {TEMPLATE_GENERATION_LABEL: str(GENERATION), "controller-revision-hash": HASH}
LABELS_NO_HASH = {TEMPLATE_GENERATION_LABEL: str(GENERATION)}


@pytest.mark.parametrize(("generation", "labels", "hash_", "updated"), [
    pytest.param(GENERATION, LABELS, HASH, True, id="generation-and-hash-both-match"),
    pytest.param(GENERATION, LABELS, HASH + "123", True, id="generation-matches-hash-does-not"),
    pytest.param(GENERATION, LABELS_NO_HASH, HASH, True, id="generation-matches-no-hash-label"),
    pytest.param(GENERATION, LABELS_NO_HASH, "", True, id="generation-matches-no-hash-label-no-hash"),
    pytest.param(GENERATION, LABELS, "", True, id="generation-matches-hash-label-no-hash"),
    pytest.param(GENERATION + 1, LABELS, HASH, True, id="generation-does-not-match-hash-does"),
    pytest.param(GENERATION + 1, LABELS, HASH + "123", False, id="neither-matches"),
    pytest.param(GENERATION, {}, "", False, id="empty-labels-no-hash"),
    pytest.param(GENERATION, {}, HASH, False, id="empty-labels"),
    pytest.param(None, LABELS, HASH + "123", False, id="no-generation"),
    pytest.param(None, {"controller-revision-hash": ""}, "", False, id="empty-hash-never-matches"),
])
def test_is_pod_updated(generation: int | None, labels: dict[str, str], hash_: str, updated: bool) -> None:
    assert is_pod_updated(pod("pod1").labels(labels).build(), hash_, generation) is updated


@pytest.mark.parametrize(("annotations", "expected"), [
    ({}, None),
    ({TEMPLATE_GENERATION_ANNOTATION: "12"}, 12),
    ({TEMPLATE_GENERATION_ANNOTATION: "-3"}, -3),
    ({TEMPLATE_GENERATION_ANNOTATION: "twelve"}, None),
    ({TEMPLATE_GENERATION_ANNOTATION: ""}, None),
])
def test_template_generation(annotations: dict[str, str], expected: int | None) -> None:
    assert template_generation(daemonset("x").annotations(annotations).build()) == expected


def test_daemon_pod_from_a_pod() -> None:
    built = (pod("p").labels({"controller-revision-hash": "h1"}).ready(at=T0).deleting(T0 + timedelta(seconds=3))
             .build())
    assert daemon_pod(built, "h1", None) == DaemonPod(name="p", updated=True, ready=True, ready_since=T0,
                                                      deleting=True)
    assert daemon_pod(pod("q").not_ready(at=T0).build(), "h1", None) == DaemonPod(
        name="q", updated=False, ready=False, ready_since=T0)
    assert daemon_pod(pod("r").ready().build(), "h1", None).ready_since is None


@pytest.mark.parametrize(("pod_", "min_ready", "now", "available"), [
    pytest.param(DaemonPod("p", True), 0, T0, False, id="not-ready"),
    pytest.param(DaemonPod("p", True, ready=True), 0, T0, True, id="ready-no-min"),
    pytest.param(DaemonPod("p", True, ready=True), 5, T0, False, id="ready-without-time-with-min"),
    pytest.param(DaemonPod("p", True, ready=True, ready_since=T0), 5, T0 + timedelta(seconds=4), False,
                 id="before-min"),
    pytest.param(DaemonPod("p", True, ready=True, ready_since=T0), 5, T0 + timedelta(seconds=5), True,
                 id="at-the-boundary"),
])
def test_daemon_pod_availability(pod_: DaemonPod, min_ready: int, now: datetime, available: bool) -> None:
    assert pod_.available(min_ready, now) is available


NEW = DaemonPod("new", updated=True)
OLD = DaemonPod("old", updated=False)


@pytest.mark.parametrize(("pods", "expected"), [
    pytest.param([], (None, None, True), id="empty"),
    pytest.param([NEW], (NEW, None, True), id="new"),
    pytest.param([OLD, NEW], (NEW, OLD, True), id="old-and-new"),
    pytest.param([NEW, replace(NEW, name="new2")], (None, None, False), id="two-new"),
    pytest.param([OLD, replace(OLD, name="old2"), NEW], (None, None, False), id="two-old"),
    pytest.param([OLD, replace(OLD, name="old2", deleting=True)], (None, OLD, True), id="deleting-ignored"),
])
def test_find_updated_pods_on_node(pods: list[DaemonPod],
                                   expected: tuple[DaemonPod | None, DaemonPod | None, bool]) -> None:
    assert find_updated_pods_on_node(pods) == expected


# --- rollingUpdate, one step at a time ---------------------------------------------------------------------


def step(node_to_pods: Mapping[str, list[DaemonPod]], *, max_surge: int = 0, max_unavailable: int = 1,
         desired: int | None = None, should_run: Mapping[str, bool] | None = None) -> RolloutDecision:
    return rolling_update(node_to_pods, max_surge=max_surge, max_unavailable=max_unavailable,
                          desired_number_scheduled=len(node_to_pods) if desired is None else desired,
                          min_ready_seconds=0, now=T0,
                          should_run=should_run if should_run is not None else dict.fromkeys(node_to_pods, True))


def old_ready(name: str) -> DaemonPod:
    return ready(name, updated=False)


def test_no_surge_replaces_unavailable_old_pods_first_then_within_budget() -> None:
    decision = step({"a": [old_ready("pa")], "b": [DaemonPod("pb", updated=False)], "c": [old_ready("pc")],
                     "d": [old_ready("pd")]}, max_unavailable=2)
    # the unavailable old pod goes regardless; it used one unit of the budget, one candidate follows
    assert decision.pods_to_delete == ["pb", "pa"]
    assert decision.num_unavailable == 1 and decision.nodes_to_create == []


def test_no_surge_walks_nodes_in_name_order() -> None:
    node_to_pods = {name: [old_ready(f"p-{name}")] for name in ("n3", "n1", "n2", "n0")}
    assert step(node_to_pods, max_unavailable=2).pods_to_delete == ["p-n0", "p-n1"]


def test_no_surge_counts_empty_doubled_and_crowded_nodes_as_unavailable() -> None:
    decision = step({"empty": [], "both": [old_ready("o1"), ready("n1")],
                     "crowded": [old_ready("o2"), old_ready("o3")], "new-unready": [DaemonPod("n2", updated=True)],
                     "z-old": [old_ready("o4")]}, max_unavailable=4)
    assert decision.num_unavailable == 4 and decision.pods_to_delete == []
    decision = step({"empty": [], "z-old": [old_ready("o4")]}, max_unavailable=2)
    assert decision.pods_to_delete == ["o4"]


def test_no_surge_terminating_pods_do_not_count() -> None:
    # a node whose only pod is being deleted is unavailable; its pod is not deleted again
    decision = step({"a": [replace(old_ready("pa"), deleting=True)], "b": [old_ready("pb")]}, max_unavailable=1)
    assert decision.pods_to_delete == [] and decision.num_unavailable == 1


def test_no_surge_candidates_stop_once_the_budget_is_spent_mid_walk() -> None:
    # upstream stops recording candidates once numUnavailable reaches the budget during the walk
    decision = step({"a": [old_ready("pa")], "b": [DaemonPod("pb", updated=False)], "c": [old_ready("pc")]},
                    max_unavailable=1)
    assert decision.pods_to_delete == ["pb"]


def test_surge_creates_beside_available_old_pods_within_max_surge() -> None:
    node_to_pods = {f"n{i}": [old_ready(f"p{i}")] for i in range(5)}
    decision = step(node_to_pods, max_surge=2, max_unavailable=0)
    assert decision.nodes_to_create == ["n0", "n1"] and decision.pods_to_delete == []
    assert decision.num_available == 5


def test_surge_replaces_unavailable_old_pods_beyond_max_surge() -> None:
    decision = step({"a": [DaemonPod("pa", updated=False)], "b": [DaemonPod("pb", updated=False)],
                     "c": [old_ready("pc")]}, max_surge=1, max_unavailable=0)
    assert decision.nodes_to_create == ["a", "b", "c"]


def test_surge_deletes_the_old_pod_once_the_new_one_is_available() -> None:
    decision = step({"a": [old_ready("old-a"), ready("new-a")], "b": [old_ready("old-b"),
                     DaemonPod("new-b", updated=True)], "c": [old_ready("old-c")]}, max_surge=1, max_unavailable=0)
    assert decision.pods_to_delete == ["old-a"]
    assert decision.num_surge == 1 and decision.nodes_to_create == []


def test_surge_counts_crowded_nodes_against_the_budget() -> None:
    decision = step({"a": [old_ready("o1"), old_ready("o2")], "b": [old_ready("o3")]}, max_surge=1,
                    max_unavailable=0)
    assert decision.num_surge == 1 and decision.nodes_to_create == []


def test_surge_sunsets_nodes_only_while_more_are_available_than_desired() -> None:
    # DaemonSetRollingUpdateWithTolerations: nodes a and b no longer match; c and d do
    should_run = {"a": False, "b": False, "c": True, "d": True}
    state = {"a": [old_ready("pa")], "b": [old_ready("pb")], "c": [], "d": []}
    first = step(state, max_surge=1, max_unavailable=0, desired=2, should_run=should_run)
    assert first.pods_to_delete == [] and first.num_available == 2
    state = {"a": [old_ready("pa")], "b": [old_ready("pb")], "c": [ready("pc")], "d": [DaemonPod("pd", True)]}
    second = step(state, max_surge=1, max_unavailable=0, desired=2, should_run=should_run)
    assert second.pods_to_delete == ["pa"] and second.num_available == 3
    state["d"] = [ready("pd")]
    third = step(state, max_surge=1, max_unavailable=0, desired=2, should_run=should_run)
    assert third.pods_to_delete == ["pa", "pb"]


def test_surge_deletes_an_unavailable_old_pod_on_a_node_that_should_not_run() -> None:
    decision = step({"a": [DaemonPod("pa", updated=False)]}, max_surge=1, max_unavailable=0, desired=0,
                    should_run={"a": False})
    assert decision.pods_to_delete == ["pa"] and decision.nodes_to_create == []


def test_surge_fails_on_a_node_the_lister_does_not_know() -> None:
    with pytest.raises(NodeNotFoundError) as raised:
        step({"gone": [old_ready("p")]}, max_surge=1, max_unavailable=0, should_run={})
    assert str(raised.value) == 'couldn\'t get node for nodeName "gone": node "gone" not found'
    # nodes with no old pod are never looked up
    assert step({"gone": [ready("p")]}, max_surge=1, max_unavailable=0, should_run={}).pods_to_delete == []


def test_max_unavailable_zero_with_max_surge() -> None:
    counts = updated_desired_node_counts(surge(1), {"a": True, "b": True}, {"a": [old_ready("pa")],
                                                                              "b": [old_ready("pb")]})
    assert (counts.max_surge, counts.max_unavailable) == (1, 0)
    decision = rolling_update(counts.node_to_pods, max_surge=counts.max_surge, max_unavailable=counts.max_unavailable,
                              desired_number_scheduled=counts.desired_number_scheduled, min_ready_seconds=0, now=T0,
                              should_run={"a": True, "b": True})
    assert decision == RolloutDecision(nodes_to_create=["a"], num_available=2)


# --- update_test.go's scenarios, sync by sync -------------------------------------------------------------


@dataclass
class SimPod:
    name: str
    node: str
    hash: str
    created: int
    ready_at: datetime | None = None


class Cluster:
    """Upstream's test controller: every sync runs manage and then rollingUpdate, and the fake pod control
    applies creates and deletes to the store at once (so expectations are always satisfied)."""

    def __init__(self, nodes: int, *, max_unavailable: IntOrString = 1, max_surge: IntOrString = 0) -> None:
        self.should_run = {f"node-{i}": True for i in range(nodes)}
        self.pods: dict[str, SimPod] = {}
        self.hash = "rev-1"
        self.counter = itertools.count()
        self.now = T0
        self.min_ready_seconds = 0
        self.set_strategy(max_unavailable, max_surge)

    def set_strategy(self, max_unavailable: IntOrString, max_surge: IntOrString) -> None:
        self.ds = (daemonset("foo").rolling_update(max_unavailable=max_unavailable, max_surge=max_surge)
                   .min_ready_seconds(self.min_ready_seconds).build())

    def update_template(self, hash_: str) -> None:
        self.hash = hash_

    def create(self, node: str) -> None:
        n = next(self.counter)
        name = f"pod-{n:04d}"
        self.pods[name] = SimPod(name, node, self.hash, n)

    def on(self, node: str) -> list[SimPod]:
        return sorted((p for p in self.pods.values() if p.node == node), key=lambda p: p.created)

    def view(self, p: SimPod) -> DaemonPod:
        return DaemonPod(p.name, updated=p.hash == self.hash, ready=p.ready_at is not None, ready_since=p.ready_at)

    def mark_ready(self, count: int | None = None, where: Callable[[SimPod], bool] = lambda p: True,
                   ready: bool = True) -> None:
        """markPodsReady / setPodReadiness: the transition happens now."""
        for p in sorted(self.pods.values(), key=lambda p: p.name):
            if count is not None and count <= 0:
                break
            if (p.ready_at is not None) == ready or not where(p):
                continue
            p.ready_at = self.now if ready else None
            if count is not None:
                count -= 1

    def manage(self) -> tuple[int, int]:
        """The manage loop's part of a sync in these tests: create on empty nodes, prune surplus pods."""
        creates = deletes = 0
        surging = allows_surge(self.ds)
        for node, runs in self.should_run.items():
            here = self.on(node)
            if not here:
                if runs:
                    self.create(node)
                    creates += 1
                continue
            doomed: list[SimPod] = []
            if not surging:
                doomed = here[1:]  # keep the oldest
            elif len(here) > 1:
                oldest_new = next((p for p in here if p.hash == self.hash), None)
                oldest_old = next((p for p in here if p.hash != self.hash), None)
                doomed = [p for p in here if p is not oldest_new and p is not oldest_old]
                if oldest_new is not None and oldest_old is not None and (
                        oldest_old.ready_at is None
                        or self.view(oldest_new).available(self.ds.spec.min_ready_seconds, self.now)):
                    doomed.append(oldest_old)
            for p in doomed:
                del self.pods[p.name]
                deletes += 1
        return creates, deletes

    def sync(self) -> tuple[int, int]:
        creates, deletes = self.manage()
        node_to_pods = {node: [self.view(p) for p in self.on(node)] for node in self.should_run if self.on(node)}
        counts = updated_desired_node_counts(self.ds, self.should_run, node_to_pods)
        decision = rolling_update(counts.node_to_pods, max_surge=counts.max_surge,
                                  max_unavailable=counts.max_unavailable,
                                  desired_number_scheduled=counts.desired_number_scheduled,
                                  min_ready_seconds=self.ds.spec.min_ready_seconds, now=self.now,
                                  should_run=self.should_run)
        for name in decision.pods_to_delete:
            del self.pods[name]
        for node in decision.nodes_to_create:
            self.create(node)
        return creates + len(decision.nodes_to_create), deletes + len(decision.pods_to_delete)

    def expect(self, *syncs: tuple[int, int]) -> None:
        for expected in syncs:
            assert self.sync() == expected

    def ready_names(self) -> set[str]:
        return {p.name for p in self.pods.values() if p.ready_at is not None}


def rolled_out(nodes: int, *, ready: bool = True, **strategy: IntOrString) -> Cluster:
    cluster = Cluster(nodes, **strategy)
    cluster.expect((nodes, 0))
    if ready:
        cluster.mark_ready()
    return cluster


def test_daemonset_updates_pods() -> None:
    cluster = rolled_out(5, max_unavailable=2)
    cluster.update_template("rev-2")
    cluster.expect((0, 2), (2, 0))
    cluster.mark_ready()
    cluster.expect((0, 2), (2, 0))
    cluster.mark_ready()
    cluster.expect((0, 1), (1, 0))
    cluster.mark_ready()
    cluster.expect((0, 0))


def test_daemonset_updates_pods_with_max_surge() -> None:
    cluster = rolled_out(5)
    max_surge = 2
    cluster.set_strategy(0, max_surge)
    cluster.update_template("rev-2")
    cluster.expect((max_surge, 0), (0, 0))
    cluster.mark_ready()
    cluster.expect((max_surge, max_surge), (0, 0))
    cluster.mark_ready()
    cluster.expect((5 % max_surge, max_surge), (0, 0))
    cluster.mark_ready()
    cluster.expect((0, 5 % max_surge), (0, 0))


def test_daemonset_updates_pods_not_matching_taints_with_max_surge() -> None:
    # node-0 gets a NoSchedule taint the new template no longer tolerates: shouldRun turns False
    cluster = rolled_out(5)
    cluster.set_strategy(0, 1)
    cluster.should_run["node-0"] = False
    cluster.update_template("rev-2")
    cluster.expect((1, 1), (0, 0))
    for _ in range(3):
        cluster.mark_ready()
        cluster.expect((1, 1), (0, 0))
    cluster.mark_ready()
    cluster.expect((0, 1), (0, 0))
    assert not cluster.on("node-0")


def test_daemonset_updates_when_new_pod_is_not_ready() -> None:
    cluster = rolled_out(5, max_unavailable=3)
    cluster.update_template("rev-2")
    # new pods are not ready: numUnavailable == maxUnavailable
    cluster.expect((0, 3), (3, 0), (0, 0))


def test_daemonset_updates_some_old_pods_not_ready() -> None:
    cluster = rolled_out(5, max_unavailable=2)
    cluster.update_template("rev-2")
    cluster.expect((0, 2), (2, 0), (0, 0))
    # another update: the two unready pods are replaced, the three available ones stay
    cluster.update_template("rev-3")
    cluster.expect((0, 2), (2, 0), (0, 0))
    assert len(cluster.ready_names()) == 5 - 2


def test_daemonset_updates_save_old_healthy_pods() -> None:
    cluster = rolled_out(20, max_unavailable=10)
    cluster.update_template("rev-2")
    cluster.expect((0, 10), (10, 0), (0, 0))
    old_ready = cluster.ready_names()
    for i in range(10):  # upstream draws maxUnavailable at random from [0, 10)
        cluster.set_strategy(i, 0)
        cluster.update_template(f"rev-3-{i}")
        # only the 10 unavailable pods may be updated
        cluster.expect((0, 10), (10, 0), (0, 0))
        assert cluster.ready_names() >= old_ready
    cluster.set_strategy(11, 0)
    cluster.update_template("rev-4")
    cluster.expect((0, 11), (11, 0), (0, 0))
    assert len(cluster.ready_names()) == 9


def test_daemonset_updates_all_old_not_ready_pods_and_new_not_ready_pods() -> None:
    cluster = rolled_out(100, max_unavailable=10)
    hash1 = cluster.hash
    cluster.update_template("rev-2")
    for _ in range(10):
        cluster.expect((0, 10), (10, 0))
        cluster.mark_ready()
    cluster.expect((0, 0))
    # maxUnavailable 10; 88 unavailable new pods, 2 unavailable old pods, 10 available old pods
    old_unavailable: set[str] = set()
    for i, p in enumerate(sorted(cluster.pods.values(), key=lambda p: p.name)):
        if i >= 10:
            p.ready_at = None
        if i < 12:
            p.hash = hash1
            if i >= 10:
                old_unavailable.add(p.name)
    cluster.expect((0, 2), (2, 0), (0, 0))
    assert not old_unavailable & set(cluster.pods)


def test_daemonset_updates_all_old_pods_not_ready() -> None:
    cluster = rolled_out(5, ready=False, max_unavailable=3)
    cluster.update_template("rev-2")
    # all old pods are unavailable, so all go
    cluster.expect((0, 5), (5, 0), (0, 0))


def test_daemonset_updates_all_old_pods_not_ready_max_surge() -> None:
    cluster = rolled_out(5, ready=False)
    max_surge = 3
    cluster.set_strategy(0, max_surge)
    cluster.update_template("rev-2")
    # all old pods are unavailable, so surged everywhere
    cluster.now = datetime.fromtimestamp(100, UTC)
    cluster.expect((5, 0))
    # waiting for the new pods to go ready, old pods are deleted
    cluster.now = datetime.fromtimestamp(200, UTC)
    cluster.expect((0, 5))

    cluster.mark_ready(5)
    cluster.min_ready_seconds = 15
    cluster.set_strategy(0, max_surge)
    cluster.update_template("rev-3")
    cluster.now = datetime.fromtimestamp(300, UTC)
    cluster.expect((3, 0))

    current_nodes = {p.node for p in cluster.pods.values() if p.hash == cluster.hash}
    # two updated pods turn ready at 300; one old pod on a node without an updated pod turns unready
    cluster.mark_ready(2, lambda p: p.hash == cluster.hash)
    cluster.mark_ready(1, lambda p: p.hash != cluster.hash and p.node not in current_nodes, ready=False)

    # the new pods still wait for minReadySeconds, so only the unready old pod gets a replacement
    cluster.now = datetime.fromtimestamp(310, UTC)
    cluster.expect((1, 0))
    # the new pods are now available: their old pods go
    cluster.now = datetime.fromtimestamp(320, UTC)
    cluster.expect((1, 3))
    cluster.mark_ready(3, lambda p: p.hash == cluster.hash)
    cluster.now = datetime.fromtimestamp(340, UTC)
    cluster.expect((0, 2))
    # the update is complete
    cluster.now = datetime.fromtimestamp(350, UTC)
    cluster.expect((0, 0))
    assert {p.hash for p in cluster.pods.values()} == {"rev-3"} and len(cluster.pods) == 5


def test_daemonset_updates_no_template_changed() -> None:
    cluster = rolled_out(5, ready=False, max_unavailable=3)
    cluster.expect((0, 0))


@pytest.mark.parametrize("seed", range(30))
def test_the_walk_over_the_pods_view_decides_as_over_daemon_pods(seed: int) -> None:
    """Issue 25: over the sync's view of the pods (daemon_pods_by_node), the walk judges a node with one pod
    from the pod itself, without its DaemonPod. It must decide what it decides over the DaemonPods: random
    nodes with none, one or two pods, old or new (hash or template generation), Ready or not, Ready for long
    enough or not (minReadySeconds), without a Ready time, being deleted."""
    import random

    from kube.core import Pod
    from reconciler.core.daemonset.rollout import daemon_pods_by_node

    rng = random.Random(seed)
    min_ready = rng.choice([0, 0, 5])
    pods_by_node: dict[str, list[Pod]] = {}
    for n in range(rng.randrange(1, 40)):
        pods = []
        for i in range(rng.choice([1, 1, 1, 2])):
            built = pod(f"p{n}-{i}").labels(rng.choice([{"controller-revision-hash": "h1"},
                                                        {"controller-revision-hash": "h0"},
                                                        {TEMPLATE_GENERATION_LABEL: "3"}, {}]))
            built = rng.choice([built.ready(at=T0 - timedelta(seconds=rng.choice([1, 5, 60]))), built.ready(),
                                built.not_ready(at=T0), built])
            if rng.random() < 0.15:
                built = built.deleting(T0)
            pods.append(built.build())
        pods_by_node[f"node-{n:02d}"] = pods
    generation = rng.choice([None, 3])
    view = daemon_pods_by_node(pods_by_node, "h1", generation, min_ready)
    plain = {name: [daemon_pod(p, "h1", generation) for p in pods] for name, pods in pods_by_node.items()}
    budget = rng.randrange(0, 6)
    for nodes in view, plain:
        assert set(nodes) == set(pods_by_node)
    walked = [rolling_update(nodes, max_surge=0, max_unavailable=budget, desired_number_scheduled=len(nodes),
                             min_ready_seconds=min_ready, now=T0) for nodes in (view, plain)]
    assert walked[0] == walked[1]
