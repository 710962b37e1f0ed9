"""The DaemonSet's manage step: podsShouldBeOnNode over all nodes, getNodesToDaemonPods, unscheduled pods.

Cases come from daemon_controller_test.go. Upstream's expectSyncDaemonSets(creates, deletes, events) runs
a whole sync; here the same counts come from manage() followed by syncNodes' cap (these cases never
reach the rolling update or change with it). Upstream's OnDelete and RollingUpdate (maxUnavailable 1)
strategies behave alike in manage, so the non-surge cases run once with ``max_surge=0``. Claiming is
not manage's business: the ``claimed`` helper stands in for it (selector matches, owned by the
DaemonSet or orphaned), as upstream's pods with ``simpleDaemonSetLabel2`` are never claimed.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

import pytest

from kube.apps import DaemonSet
from kube.core import (
    CONDITION_FALSE,
    CONDITION_TRUE,
    NODE_READY,
    POD_FAILED,
    POD_RUNNING,
    POD_SUCCEEDED,
    Affinity,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    Toleration,
)
from kube.labels import selector_from_label_selector
from kube.ownership import get_controller_of
from kube.testing import DaemonSetBuilder, NodeBuilder, PodBuilder, daemonset, node, pod
from kube.times import format_time
from reconciler.core.daemonset import backoff
from reconciler.core.daemonset.backoff import FailedPodBackoff, failed_pods_backoff_key
from reconciler.core.daemonset.manage import (
    FAILED_DAEMON_POD,
    SUCCEEDED_DAEMON_POD,
    DaemonEvent,
    ManageResult,
    manage,
    nodes_to_daemon_pods,
    pod_order_key,
    pods_should_be_on_node,
    unscheduled_pods_without_node,
)
from reconciler.core.daemonset.placement import Placement
from reconciler.core.daemonset.pods import UNIQUE_LABEL_KEY, SyncNodesPlan, sync_nodes
from tests.reconciler.builders import NOW, names

SIMPLE_DAEMON_SET_LABEL = {"name": "simple-daemon", "type": "production"}
SIMPLE_DAEMON_SET_LABEL2 = {"name": "simple-daemon", "type": "test"}
SIMPLE_NODE_LABEL = {"color": "blue", "speed": "fast"}
SIMPLE_NODE_LABEL2 = {"color": "red", "speed": "fast"}
HASH = "5f8d7c9b"  # the current revision's hash in these tests
DEDICATED = Toleration(key="dedicated", value="user1", effect="NoSchedule")  # noScheduleTolerations

RUN = Placement(True, True)
KEEP_ONLY = Placement(False, True)
NEVER = Placement(False, False)


def new_ds(name: str = "foo") -> DaemonSetBuilder:
    """newDaemonSet: selecting (and labelling its template with) simpleDaemonSetLabel."""
    return daemonset(name).selector(SIMPLE_DAEMON_SET_LABEL)


def surge_ds(name: str = "foo") -> DaemonSetBuilder:
    """newUpdateSurge(1): RollingUpdate with maxUnavailable 0, maxSurge 1."""
    return new_ds(name).rolling_update(max_unavailable=0, max_surge=1)


def new_node(name: str, labels: Mapping[str, str] | None = None) -> NodeBuilder:
    """newNode: Ready, with the given labels."""
    return node(name).labels(labels or {}).ready()


def add_nodes(start: int, count: int, labels: Mapping[str, str] | None = None) -> list[Node]:
    return [new_node(f"node-{i}", labels).build() for i in range(start, start + count)]


def new_pod(name: str, node_name: str, labels: Mapping[str, str], ds: DaemonSet | None,
            *, current: bool = True) -> PodBuilder:
    """newPod: the labels plus the current hash (when ``current``), on ``node_name``, owned by ``ds``."""
    builder = pod(name).ns("default").labels(labels).phase(POD_RUNNING)
    if current:
        builder = builder.labels({UNIQUE_LABEL_KEY: HASH})
    if node_name:
        builder = builder.on_node(node_name)
    if ds is not None:
        builder = builder.owned_by(ds)
    return builder


def add_pods(node_name: str, labels: Mapping[str, str], ds: DaemonSet, count: int,
             phase: str = POD_RUNNING) -> list[Pod]:
    return [new_pod(f"{node_name}-{phase.lower()}-{i}", node_name, labels, ds).phase(phase).build()
            for i in range(count)]


def claimed(ds: DaemonSet, pods: Iterable[Pod]) -> list[Pod]:
    """A stand-in for ClaimPods: the selector matches, and the pod is the DaemonSet's or an orphan."""
    selector = selector_from_label_selector(ds.spec.selector)
    result = []
    for p in pods:
        ref = get_controller_of(p.metadata)
        if selector.matches(p.metadata.labels) and (ref is None or ref.uid == ds.metadata.uid):
            result.append(p)
    return result


def run(ds: DaemonSet, nodes: list[Node], pods: Iterable[Pod] = (), *, max_surge: int = 0,
        entries: Mapping[str, FailedPodBackoff] | None = None, now: datetime = NOW) -> tuple[ManageResult,
                                                                                                SyncNodesPlan]:
    by_node = nodes_to_daemon_pods(claimed(ds, pods))
    result = manage(ds, nodes, by_node, HASH, max_surge=max_surge, backoff_entries=entries or {}, now=now)
    plan = sync_nodes(ds, result.nodes_needing_pods, result.pods_to_delete, HASH, now=now, key_base="corr")
    return result, plan


def counts(ds: DaemonSet, nodes: list[Node], pods: Iterable[Pod] = (), *, max_surge: int = 0) -> tuple[int, int, int]:
    """What expectSyncDaemonSets checks: creates, deletes, events."""
    result, plan = run(ds, nodes, pods, max_surge=max_surge)
    return len(plan.creates), len(plan.deletes), len(result.events)


def at(seconds: int) -> datetime:
    """time.Unix(seconds, 0)."""
    return datetime.fromtimestamp(seconds, UTC)


def pinned(node_name: str) -> Affinity:
    return Affinity(node_affinity=NodeAffinity(required_during_scheduling_ignored_during_execution=NodeSelector(
        node_selector_terms=[NodeSelectorTerm(match_fields=[
            NodeSelectorRequirement(key="metadata.name", operator="In", values=[node_name])])])))


# --- launching: which nodes get a pod -------------------------------------------------------------------------

DS = new_ds().build()


def _color_in_blue() -> Affinity:
    return Affinity(node_affinity=NodeAffinity(required_during_scheduling_ignored_during_execution=NodeSelector(
        node_selector_terms=[NodeSelectorTerm(match_expressions=[
            NodeSelectorRequirement(key="color", operator="In", values=["blue"])])])))


def _with_template_node_name(builder: DaemonSetBuilder, name: str) -> DaemonSetBuilder:
    template = builder.build().spec.template.copy()
    template.spec.node_name = name
    return builder.template(template)


def _mixed_nodes() -> list[Node]:
    return add_nodes(0, 4) + add_nodes(4, 3, SIMPLE_NODE_LABEL)


@pytest.mark.parametrize(("ds", "nodes", "expected_nodes"), [
    pytest.param(DS, add_nodes(0, 5), ["node-0", "node-1", "node-2", "node-3", "node-4"],
                 id="TestSimpleDaemonSetLaunchesPods"),
    pytest.param(DS, [], [], id="TestNoNodesDoesNothing"),
    pytest.param(DS, [new_node("only-node").build()], ["only-node"], id="TestOneNodeDaemonLaunchesPod"),
    pytest.param(DS, [new_node("not-ready").ready(CONDITION_FALSE).build()], ["not-ready"],
                 id="TestNotReadyNodeDaemonDoesLaunchPod"),
    pytest.param(new_ds().node_selector(SIMPLE_NODE_LABEL).build(), _mixed_nodes(), ["node-4", "node-5", "node-6"],
                 id="TestSelectorDaemonLaunchesPods"),
    pytest.param(new_ds().node_selector(SIMPLE_NODE_LABEL2).build(), _mixed_nodes(), [],
                 id="TestBadSelectorDaemonDoesNothing"),
    pytest.param(_with_template_node_name(new_ds(), "node-0").build(), add_nodes(0, 5), ["node-0"],
                 id="TestNameDaemonSetLaunchesPods"),
    pytest.param(_with_template_node_name(new_ds(), "node-10").build(), add_nodes(0, 5), [],
                 id="TestBadNameDaemonSetDoesNothing"),
    pytest.param(_with_template_node_name(new_ds().node_selector(SIMPLE_NODE_LABEL), "node-6").build(),
                 _mixed_nodes(), ["node-6"], id="TestNameAndSelectorDaemonSetLaunchesPods"),
    pytest.param(_with_template_node_name(new_ds().node_selector(SIMPLE_NODE_LABEL), "node-0").build(),
                 _mixed_nodes(), [], id="TestInconsistentNameSelectorDaemonSetDoesNothing"),
    pytest.param(new_ds().affinity(_color_in_blue()).build(), _mixed_nodes(), ["node-4", "node-5", "node-6"],
                 id="TestNodeAffinityDaemonLaunchesPods"),
    pytest.param(DS, [new_node("tainted").taint("dedicated", "user1", "NoSchedule").build()], [],
                 id="TestTaintedNodeDaemonDoesNotLaunchIntolerantPod"),
    pytest.param(new_ds("tolerate").tolerations(DEDICATED).build(),
                 [new_node("tainted").taint("dedicated", "user1", "NoSchedule").build()], ["tainted"],
                 id="TestTaintedNodeDaemonLaunchesToleratePod"),
    pytest.param(DS, [new_node("tainted").ready(CONDITION_FALSE).taint("node.kubernetes.io/not-ready", "",
                                                                       "NoExecute").build()],
                 ["tainted"], id="TestNotReadyNodeDaemonLaunchesPod"),
    pytest.param(DS, [new_node("tainted").condition(NODE_READY, "Unknown").taint("node.kubernetes.io/unreachable", "",
                                                                                 "NoExecute").build()],
                 ["tainted"], id="TestUnreachableNodeDaemonLaunchesPod"),
    pytest.param(new_ds("tolerate").tolerations(DEDICATED).build(), add_nodes(0, 1), ["node-0"],
                 id="TestNodeDaemonLaunchesToleratePod"),
    pytest.param(DS, [new_node("resources-pressure")
                      .taint("node.kubernetes.io/disk-pressure").taint("node.kubernetes.io/memory-pressure")
                      .taint("node.kubernetes.io/pid-pressure").build()], ["resources-pressure"],
                 id="TestTaintPressureNodeDaemonLaunchesPod"),
    pytest.param(DS, [new_node("network-unavailable").condition("NetworkUnavailable", CONDITION_TRUE).build()],
                 ["network-unavailable"], id="TestNetworkUnavailableNodeDaemonLaunchesPod"),
    pytest.param(new_ds().node_selector(SIMPLE_NODE_LABEL).build(),
                 [new_node("not-enough-resource").allocatable(memory="10M", cpu="20m").build(),
                  new_node("enough-resource", SIMPLE_NODE_LABEL).allocatable(memory="100M", cpu="200m").build()],
                 ["enough-resource"], id="TestInsufficientCapacityNodeSufficientCapacityWithNodeLabelDaemonLaunchPod"),
])
def test_launches(ds: DaemonSet, nodes: list[Node], expected_nodes: list[str]) -> None:
    result, plan = run(ds, nodes)
    assert result.nodes_needing_pods == expected_nodes
    assert [name for name, _, _ in plan.creates] == expected_nodes
    assert (plan.deletes, result.events, result.requeue_after) == ([], [], None)


def test_insufficient_capacity_node_does_not_unschedule_running_pod() -> None:
    """TestInsufficientCapacityNodeDaemonDoesNotUnscheduleRunningPod: resources are the scheduler's business; the
    unlabelled, unowned pod on the node is not the DaemonSet's, so the node still gets one: 1 create."""
    ds = _with_template_node_name(new_ds(), "too-much-mem").build()
    stranger = pod("stranger").on_node("too-much-mem").build()
    assert counts(ds, [new_node("too-much-mem").allocatable(memory="100M", cpu="200m").build()], [stranger]) == (
        1, 0, 0)


def test_port_conflict_with_same_daemon_pod_does_not_delete_pod() -> None:
    """TestPortConflictWithSameDaemonPodDoesNotDeletePod (ports are not modelled: one pod of ours, kept)."""
    assert counts(DS, [new_node("port-conflict").build()], [new_pod("foo-a", "port-conflict",
                                                                    SIMPLE_DAEMON_SET_LABEL, DS).build()]) == (0, 0, 0)


def test_no_port_conflict_node_daemon_launches_pod() -> None:
    """TestNoPortConflictNodeDaemonLaunchesPod: a foreign pod on the node does not count."""
    assert counts(DS, [new_node("no-port-conflict").build()], [pod("other").on_node("no-port-conflict").build()]) == (
        1, 0, 0)


# --- existing pods: pruning, taints, termination --------------------------------------------------------------


def test_deals_with_existing_pods() -> None:
    """TestDealsWithExistingPods: create on node-0 and node-4 (its pods are not claimed), prune to one pod."""
    pods = (add_pods("node-1", SIMPLE_DAEMON_SET_LABEL, DS, 1) + add_pods("node-2", SIMPLE_DAEMON_SET_LABEL, DS, 2)
            + add_pods("node-3", SIMPLE_DAEMON_SET_LABEL, DS, 5) + add_pods("node-4", SIMPLE_DAEMON_SET_LABEL2, DS, 2))
    result, plan = run(DS, add_nodes(0, 5), pods)
    assert (len(plan.creates), len(plan.deletes), len(result.events)) == (2, 5, 0)
    assert result.nodes_needing_pods == ["node-0", "node-4"]
    assert names(result.pods_to_delete) == ["node-2-running-1", "node-3-running-1", "node-3-running-2",
                                            "node-3-running-3", "node-3-running-4"]


def test_selector_daemon_deletes_unselected_pods() -> None:
    """TestSelectorDaemonDeletesUnselectedPods: (5, 4, 0)."""
    ds = new_ds().node_selector(SIMPLE_NODE_LABEL).build()
    pods = (add_pods("node-0", SIMPLE_DAEMON_SET_LABEL2, ds, 2) + add_pods("node-1", SIMPLE_DAEMON_SET_LABEL, ds, 3)
            + add_pods("node-1", SIMPLE_DAEMON_SET_LABEL2, ds, 1) + add_pods("node-4", SIMPLE_DAEMON_SET_LABEL, ds, 1))
    assert counts(ds, add_nodes(0, 5) + add_nodes(5, 5, SIMPLE_NODE_LABEL), pods) == (5, 4, 0)


def test_selector_daemon_deals_with_existing_pods() -> None:
    """TestSelectorDaemonDealsWithExistingPods: (3, 20, 0)."""
    ds = new_ds().node_selector(SIMPLE_NODE_LABEL).build()
    pods = (add_pods("node-0", SIMPLE_DAEMON_SET_LABEL, ds, 1) + add_pods("node-1", SIMPLE_DAEMON_SET_LABEL, ds, 3)
            + add_pods("node-1", SIMPLE_DAEMON_SET_LABEL2, ds, 2) + add_pods("node-2", SIMPLE_DAEMON_SET_LABEL, ds, 4)
            + add_pods("node-6", SIMPLE_DAEMON_SET_LABEL, ds, 13) + add_pods("node-7", SIMPLE_DAEMON_SET_LABEL2, ds, 4)
            + add_pods("node-9", SIMPLE_DAEMON_SET_LABEL, ds, 1) + add_pods("node-9", SIMPLE_DAEMON_SET_LABEL2, ds, 1))
    result, plan = run(ds, add_nodes(0, 5) + add_nodes(5, 5, SIMPLE_NODE_LABEL), pods)
    assert (len(plan.creates), len(plan.deletes), len(result.events)) == (3, 20, 0)
    assert result.nodes_needing_pods == ["node-5", "node-7", "node-8"]


@pytest.mark.parametrize(("effect", "expected"), [
    pytest.param("NoSchedule", (0, 0, 0), id="TestNoScheduleTaintedDoesntEvicitRunningIntolerantPod"),
    pytest.param("NoExecute", (0, 1, 0), id="TestNoExecuteTaintedDoesEvicitRunningIntolerantPod"),
])
def test_tainted_node_with_running_intolerant_pod(effect: str, expected: tuple[int, int, int]) -> None:
    ds = new_ds("intolerant").build()
    tainted = new_node("tainted").taint("dedicated", "user1", effect).build()
    running = new_pod("keep-or-stop", "tainted", SIMPLE_DAEMON_SET_LABEL, ds).build()
    assert counts(ds, [tainted], [running]) == expected


def test_respects_termination() -> None:
    """TestDaemonSetRespectsTermination: the node's only pod is being deleted: no create, no delete."""
    deleting = new_pod("node-0-a", "node-0", SIMPLE_DAEMON_SET_LABEL, DS).deleting(NOW).build()
    assert counts(DS, add_nodes(0, 1, SIMPLE_NODE_LABEL), [deleting]) == (0, 0, 0)


def test_not_should_continue_running_skips_pods_being_deleted() -> None:
    ds = new_ds().node_selector(SIMPLE_NODE_LABEL).build()
    pods = [new_pod("a", "node-0", SIMPLE_DAEMON_SET_LABEL, ds).build(),
            new_pod("b", "node-0", SIMPLE_DAEMON_SET_LABEL, ds).deleting(NOW).build(),
            new_pod("c", "node-0", SIMPLE_DAEMON_SET_LABEL, ds).phase(POD_FAILED).build()]
    result, _ = run(ds, add_nodes(0, 1), pods)
    # no FailedDaemonPod event and no backoff outside the shouldContinueRunning branch
    assert (names(result.pods_to_delete), result.events, result.backoff_updates) == (["a", "c"], [], [])


def test_delete_unscheduled_pod_for_not_existing_node() -> None:
    """TestDeleteUnscheduledPodForNotExistingNode: the pod pinned to node-2 (gone) by affinity is deleted; the one
    bound to node-1 (gone too) is left to the pod GC."""
    pods = (add_pods("node-0", SIMPLE_DAEMON_SET_LABEL, DS, 1) + add_pods("node-1", SIMPLE_DAEMON_SET_LABEL, DS, 1)
            + [new_pod("pod1-node-3", "", SIMPLE_DAEMON_SET_LABEL, DS).build()])
    pods[-1].spec.affinity = pinned("node-2")
    result, plan = run(DS, add_nodes(0, 1), pods)
    assert (len(plan.creates), len(plan.deletes), len(result.events)) == (0, 1, 0)
    assert names(result.pods_to_delete) == ["pod1-node-3"]


def test_unscheduled_pods_without_node_order_and_scope() -> None:
    unscheduled = [new_pod(n, "", SIMPLE_DAEMON_SET_LABEL, DS).build() for n in ("z", "a", "m")]
    unscheduled[0].spec.affinity = pinned("gone-b")
    unscheduled[1].spec.affinity = pinned("gone-b")
    unscheduled[2].spec.affinity = pinned("gone-a")
    bound = new_pod("bound", "gone-a", SIMPLE_DAEMON_SET_LABEL, DS).build()
    here = new_pod("here", "", SIMPLE_DAEMON_SET_LABEL, DS).build()
    here.spec.affinity = pinned("node-0")
    by_node = nodes_to_daemon_pods([*unscheduled, bound, here])
    assert names(unscheduled_pods_without_node(["node-0"], by_node)) == ["m", "a", "z"]


# --- failed and succeeded pods ------------------------------------------------------------------------------


@pytest.mark.parametrize(("failed", "normal", "expected"), [
    pytest.param(0, 1, (0, 0, 0), id="normal (do nothing)"),
    pytest.param(0, 0, (1, 0, 0), id="no pods (create 1)"),
    pytest.param(1, 0, (0, 1, 1), id="1 failed pod (kill 1), 0 normal pod (create 0; will create in the next sync)"),
    pytest.param(1, 3, (0, 3, 1), id="1 failed pod (kill 1), 3 normal pods (kill 2)"),
])
def test_kill_failed_pods(failed: int, normal: int, expected: tuple[int, int, int]) -> None:
    """TestDaemonKillFailedPods."""
    pods = (add_pods("node-0", SIMPLE_DAEMON_SET_LABEL, DS, failed, POD_FAILED)
            + add_pods("node-0", SIMPLE_DAEMON_SET_LABEL, DS, normal))
    assert counts(DS, add_nodes(0, 1), pods) == expected


def test_kill_failed_pod_event_and_backoff_entry() -> None:
    failed = add_pods("node-0", SIMPLE_DAEMON_SET_LABEL, DS, 1, POD_FAILED)
    result, _ = run(DS, add_nodes(0, 1), failed)
    key = failed_pods_backoff_key(DS, "node-0")
    assert result.events == [DaemonEvent("Warning", FAILED_DAEMON_POD,
                                         "Found failed daemon pod default/node-0-failed-0 on node node-0, "
                                         "will try to kill it")]
    assert result.backoff_updates == [FailedPodBackoff(key=key, delay_seconds=1.0, last_update=NOW)]
    assert result.backoff == {key: result.backoff_updates[0]}
    assert result.requeue_after is None


def test_kill_failed_pods_backoff() -> None:
    """TestDaemonKillFailedPodsBackoff, with the production delays (1s, doubling)."""
    nodes = add_nodes(0, 1)
    failed = add_pods("node-0", SIMPLE_DAEMON_SET_LABEL, DS, 1, POD_FAILED)
    key = failed_pods_backoff_key(DS, "node-0")

    # first sync deletes the pod, initializing the backoff
    first, plan = run(DS, nodes, failed)
    assert (len(plan.creates), len(plan.deletes), len(first.events)) == (0, 1, 1)
    assert backoff.get(first.backoff, key) == timedelta(seconds=1)

    # an immediate second sync is limited by the backoff, which is not raised while waiting
    second, plan = run(DS, nodes, failed, entries=first.backoff)
    assert (len(plan.creates), len(plan.deletes), len(second.events)) == (0, 0, 0)
    assert (second.backoff, second.backoff_updates, second.requeue_after) == (first.backoff, [], timedelta(seconds=1))

    # just before the backoff ends it still holds; at its end the failed pod is deleted again, delay doubled
    early, _ = run(DS, nodes, failed, entries=first.backoff, now=NOW + timedelta(seconds=1, microseconds=-1))
    assert (early.pods_to_delete, early.requeue_after) == ([], timedelta(seconds=1))
    third, plan = run(DS, nodes, failed, entries=first.backoff, now=NOW + timedelta(seconds=1))
    assert (len(plan.creates), len(plan.deletes), len(third.events)) == (0, 1, 1)
    assert third.backoff_updates == [FailedPodBackoff(key=key, delay_seconds=2.0,
                                                      last_update=NOW + timedelta(seconds=1))]


def test_second_failed_pod_on_a_node_waits_for_the_backoff_the_first_started() -> None:
    """Both failed pods share the node's key: Next for the first puts the second in backoff in the same sync."""
    failed = [new_pod(n, "node-0", SIMPLE_DAEMON_SET_LABEL, DS).phase(POD_FAILED).created(at(t)).build()
              for n, t in (("young", 200), ("old", 100))]
    result, _ = run(DS, add_nodes(0, 1), failed)
    assert names(result.pods_to_delete) == ["old"]
    assert len(result.events) == 1
    assert result.requeue_after == timedelta(seconds=1)


def test_backoff_key_follows_observed_generation() -> None:
    """A DaemonSet whose observedGeneration moved gets a fresh key: the old entry holds nothing back."""
    ds = new_ds().uid("ds-uid").generation(3).observed_generation(3).build()
    failed = add_pods("node-0", SIMPLE_DAEMON_SET_LABEL, ds, 1, POD_FAILED)
    stale = {"ds-uid/2/node-0": FailedPodBackoff(key="ds-uid/2/node-0", delay_seconds=900.0, last_update=NOW)}
    result, _ = run(ds, add_nodes(0, 1), failed, entries=stale)
    assert len(result.pods_to_delete) == 1
    assert sorted(result.backoff) == ["ds-uid/2/node-0", "ds-uid/3/node-0"]
    assert [e.key for e in result.backoff_updates] == ["ds-uid/3/node-0"]


def test_requeue_is_the_earliest_backoff_over_all_nodes() -> None:
    nodes = add_nodes(0, 3)
    failed = [p for i in range(3) for p in add_pods(f"node-{i}", SIMPLE_DAEMON_SET_LABEL, DS, 1, POD_FAILED)]
    entries = {k: FailedPodBackoff(key=k, delay_seconds=d, last_update=NOW)
               for k, d in ((failed_pods_backoff_key(DS, "node-0"), 8.0), (failed_pods_backoff_key(DS, "node-1"), 4.0))}
    result, _ = run(DS, nodes, failed, entries=entries)
    assert names(result.pods_to_delete) == ["node-2-failed-0"]
    assert result.requeue_after == timedelta(seconds=4)
    assert [e.key for e in result.backoff_updates] == [failed_pods_backoff_key(DS, "node-2")]
    assert entries == {k: FailedPodBackoff(key=k, delay_seconds=d, last_update=NOW)
                       for k, d in ((failed_pods_backoff_key(DS, "node-0"), 8.0),
                                    (failed_pods_backoff_key(DS, "node-1"), 4.0))}


def test_succeeded_pod_is_deleted_with_a_normal_event() -> None:
    done = new_pod("done", "node-0", SIMPLE_DAEMON_SET_LABEL, DS).phase(POD_SUCCEEDED).build()
    running = new_pod("running", "node-0", SIMPLE_DAEMON_SET_LABEL, DS).build()
    result, _ = run(DS, add_nodes(0, 1), [done, running])
    assert names(result.pods_to_delete) == ["done"]
    assert result.events == [DaemonEvent("Normal", SUCCEEDED_DAEMON_POD,
                                         "Found succeeded daemon pod default/done on node node-0, "
                                         "will try to delete it")]
    assert (result.backoff_updates, result.nodes_needing_pods) == ([], [])


# --- podsShouldBeOnNode directly: the branches ----------------------------------------------------------------


def should_be_on_node(pods: list[Pod], placement: Placement = RUN, *, ds: DaemonSet = DS, max_surge: int = 0,
                      now: datetime = NOW) -> tuple[list[str], list[str]]:
    plan = pods_should_be_on_node("node-0", pods, placement, ds, HASH, max_surge=max_surge, backoff_entries={},
                                  now=now)
    return plan.nodes_needing_pods, names(plan.pods_to_delete)


def p(name: str, *, created: int = 0, current: bool = True, ready: bool | None = None, node_name: str = "node-0",
      deleting: bool = False, phase: str = POD_RUNNING, ready_at: int | None = None) -> Pod:
    builder = new_pod(name, node_name, SIMPLE_DAEMON_SET_LABEL, DS, current=current).phase(phase)
    if created:
        builder = builder.created(at(created))
    if ready is True:
        builder = builder.ready(at(ready_at) if ready_at is not None else None)
    elif ready is False:
        builder = builder.not_ready()
    if deleting:
        builder = builder.deleting(NOW)
    return builder.build()


@pytest.mark.parametrize(("pods", "placement", "max_surge", "expected"), [
    pytest.param([], RUN, 0, (["node-0"], []), id="should run, nothing there: create"),
    pytest.param([], KEEP_ONLY, 0, ([], []), id="keep-only, nothing there: nothing"),
    pytest.param([], KEEP_ONLY, 1, ([], []), id="keep-only, surge, nothing there: nothing"),
    pytest.param([], NEVER, 0, ([], []), id="never, nothing there: nothing"),
    pytest.param([p("a")], KEEP_ONLY, 0, ([], []), id="keep-only keeps its pod"),
    pytest.param([p("a"), p("b", deleting=True)], NEVER, 0, ([], ["a"]), id="never: delete all but deleting"),
    pytest.param([p("a", deleting=True)], RUN, 0, ([], []), id="only a terminating pod: wait"),
    pytest.param([p("a", deleting=True)], RUN, 1, (["node-0"], []), id="surge, only a terminating pod: create"),
    pytest.param([p("a", deleting=True)], KEEP_ONLY, 1, ([], []), id="surge, keep-only, terminating: nothing"),
    pytest.param([p("b", created=20), p("a", created=10), p("c", created=30)], RUN, 0, ([], ["b", "c"]),
                 id="duplicates: keep the oldest"),
    pytest.param([p("b", created=10), p("a", created=10)], RUN, 0, ([], ["b"]), id="same age: by name"),
    pytest.param([p("old", created=10, node_name=""), p("new", created=20)], RUN, 0, ([], ["old"]),
                 id="scheduled first, however old the other"),
    pytest.param([p("a", phase=POD_SUCCEEDED)], RUN, 0, ([], ["a"]), id="succeeded: delete, create next sync"),
    pytest.param([p("a", phase=POD_SUCCEEDED)], RUN, 1, (["node-0"], ["a"]), id="surge, succeeded: delete, create"),
    pytest.param([p("a", phase=POD_FAILED)], RUN, 1, (["node-0"], ["a"]), id="surge, failed: delete, create"),
    pytest.param([p("new", created=9), p("new2", created=5)], RUN, 1, ([], ["new"]),
                 id="surge: two new, keep the oldest"),
    pytest.param([p("o1", current=False, created=1, ready=True), p("o2", current=False, created=2, ready=True)],
                 RUN, 1, ([], ["o2"]), id="surge: two old, keep the oldest"),
    pytest.param([p("new", created=2), p("old", created=1, current=False, ready=False)], RUN, 1, ([], ["old"]),
                 id="surge: old not ready goes"),
    pytest.param([p("new", created=2, ready=False), p("old", created=1, current=False, ready=True)], RUN, 1,
                 ([], []), id="surge: new not ready, old ready: keep both"),
    pytest.param([p("new", created=2, ready=True), p("old", created=1, current=False, ready=True)], RUN, 1,
                 ([], ["old"]), id="surge: new available: old goes"),
    pytest.param([p("new", created=2, ready=True), p("old", created=1, current=False, ready=True)], RUN, 0,
                 ([], ["new"]), id="no surge: hashes do not matter, the oldest stays"),
])
def test_pods_should_be_on_node_branches(pods: list[Pod], placement: Placement, max_surge: int,
                                         expected: tuple[list[str], list[str]]) -> None:
    assert should_be_on_node(pods, placement, max_surge=max_surge) == expected


def test_surge_with_empty_hash_counts_unlabelled_pods_as_new() -> None:
    """``pod.Labels[hashKey] == hash`` with a missing label reads "": only an empty hash makes such pods new."""
    pods = [p("u1", created=1, current=False, ready=True), p("u2", created=2, current=False, ready=True)]
    plan = pods_should_be_on_node("node-0", pods, RUN, DS, "", max_surge=1, backoff_entries={}, now=NOW)
    assert names(plan.pods_to_delete) == ["u2"]


def test_order_key() -> None:
    pods = [p("c", created=5), p("b", created=5), p("u", node_name=""), p("zero"), p("a", created=9)]
    assert names(sorted(pods, key=pod_order_key)) == ["zero", "b", "c", "a", "u"]


# --- surge cases of daemon_controller_test.go -----------------------------------------------------------------

SURGE_DS = surge_ds().build()


def surge_pod(name: str, node_name: str, *, created: int, current: bool = True, ready: str | None = None,
              ready_at: int | None = None) -> Pod:
    builder = new_pod(name, node_name, SIMPLE_DAEMON_SET_LABEL, SURGE_DS, current=current).created(at(created))
    if ready is not None:
        builder = builder.ready(at(ready_at) if ready_at is not None else None, status=ready)
    return builder.build()


def test_surge_deals_with_existing_pods() -> None:
    """TestSurgeDealsWithExistingPods: (2, 5, 0), as without surge (all pods are of the current revision)."""
    pods = (add_pods("node-1", SIMPLE_DAEMON_SET_LABEL, SURGE_DS, 1)
            + add_pods("node-2", SIMPLE_DAEMON_SET_LABEL, SURGE_DS, 2)
            + add_pods("node-3", SIMPLE_DAEMON_SET_LABEL, SURGE_DS, 5)
            + add_pods("node-4", SIMPLE_DAEMON_SET_LABEL2, SURGE_DS, 2))
    assert counts(SURGE_DS, add_nodes(0, 5), pods, max_surge=1) == (2, 5, 0)


def test_surge_preserves_ready_old_pods() -> None:
    """TestSurgePreservesReadyOldPods: (3, 1, 0), deleting only the younger old ready pod."""
    pods = [surge_pod("node-1-new", "node-1", created=100),
            surge_pod("node-1-old", "node-1", created=50, current=False, ready=CONDITION_TRUE),
            surge_pod("node-1-delete", "node-1", created=60, current=False, ready=CONDITION_TRUE),
            *add_pods("node-2", SIMPLE_DAEMON_SET_LABEL, SURGE_DS, 1)]
    result, plan = run(SURGE_DS, add_nodes(0, 5), pods, max_surge=1)
    assert (len(plan.creates), len(plan.deletes), len(result.events)) == (3, 1, 0)
    assert names(result.pods_to_delete) == ["node-1-delete"]
    assert result.nodes_needing_pods == ["node-0", "node-3", "node-4"]


def test_surge_creates_new_pod_when_at_max_surge_and_old_pod_deleted() -> None:
    """TestSurgeCreatesNewPodWhenAtMaxSurgeAndOldPodDeleted: node-4 has only a deleted old pod: (1, 0, 0)."""
    pods = [surge_pod("node-0-new", "node-0", created=100, ready=CONDITION_FALSE),
            surge_pod("node-0-old-ready", "node-0", created=50, current=False, ready=CONDITION_TRUE)]
    for i in range(1, 5):
        old = surge_pod(f"node-{i}-preserve", f"node-{i}", created=1, current=False, ready=CONDITION_TRUE)
        if i == 4:
            old.metadata.deletion_grace_period_seconds = 30
            old.metadata.deletion_timestamp = format_time(at(31))
        pods.append(old)
    result, plan = run(SURGE_DS, add_nodes(0, 5), pods, max_surge=1)
    assert (len(plan.creates), len(plan.deletes), len(result.events)) == (1, 0, 0)
    assert result.nodes_needing_pods == ["node-4"]


def test_surge_deletes_unready_old_pods() -> None:
    """TestSurgeDeletesUnreadyOldPods: (3, 2, 0)."""
    pods = [surge_pod("node-1-new", "node-1", created=100),
            surge_pod("node-1-old-unready", "node-1", created=50, current=False, ready=CONDITION_FALSE),
            surge_pod("node-1-delete", "node-1", created=60, current=False, ready=CONDITION_TRUE),
            *add_pods("node-2", SIMPLE_DAEMON_SET_LABEL, SURGE_DS, 1)]
    result, plan = run(SURGE_DS, add_nodes(0, 5), pods, max_surge=1)
    assert (len(plan.creates), len(plan.deletes), len(result.events)) == (3, 2, 0)
    assert sorted(names(result.pods_to_delete)) == ["node-1-delete", "node-1-old-unready"]


@pytest.mark.parametrize(("clock", "deleted"), [
    pytest.param(50 + 10, ["node-1-delete"], id="TestSurgePreservesOldReadyWithUnsatisfiedMinReady"),
    pytest.param(50 + 20, ["node-1-delete", "node-1-old-ready"], id="TestSurgeDeletesOldReadyWithUnsatisfiedMinReady"),
])
def test_surge_min_ready_seconds(clock: int, deleted: list[str]) -> None:
    """minReadySeconds 15; the new pod turned Ready at 50: available from 65 on."""
    ds = surge_ds().min_ready_seconds(15).build()
    pods = [surge_pod("node-1-new", "node-1", created=100, ready=CONDITION_TRUE, ready_at=50),
            surge_pod("node-1-old-ready", "node-1", created=50, current=False, ready=CONDITION_TRUE),
            surge_pod("node-1-delete", "node-1", created=60, current=False, ready=CONDITION_TRUE),
            *add_pods("node-2", SIMPLE_DAEMON_SET_LABEL, ds, 1)]
    result, plan = run(ds, add_nodes(0, 5), pods, max_surge=1, now=at(clock))
    assert (len(plan.creates), len(plan.deletes), len(result.events)) == (3, len(deleted), 0)
    assert sorted(names(result.pods_to_delete)) == deleted


# --- getNodesToDaemonPods, determinism, placements ------------------------------------------------------------


@pytest.mark.parametrize(("include_deleted_terminal", "expected"), [
    pytest.param(False, {"node-0": ["owned-0", "succeeded-0"], "node-1": ["failed-1", "owned-1"]},
                 id="exclude deleted terminal pods"),
    pytest.param(True, {"node-0": ["owned-0", "succeeded-0", "succeeded-deleted-0"],
                        "node-1": ["failed-1", "failed-deleted-1", "owned-1"]}, id="include deleted terminal pods"),
])
def test_nodes_to_daemon_pods(include_deleted_terminal: bool, expected: dict[str, list[str]]) -> None:
    """TestGetNodesToDaemonPods (after claiming), plus a pod with no target node, which is skipped."""
    def mk(name: str, node_name: str, phase: str = POD_RUNNING, deleting: bool = False) -> Pod:
        builder = new_pod(name, node_name, SIMPLE_DAEMON_SET_LABEL, DS).phase(phase)
        return builder.deleting(NOW).build() if deleting else builder.build()

    pods = [mk("owned-0", "node-0"), mk("owned-1", "node-1"), mk("succeeded-0", "node-0", POD_SUCCEEDED),
            mk("failed-1", "node-1", POD_FAILED), mk("succeeded-deleted-0", "node-0", POD_SUCCEEDED, True),
            mk("failed-deleted-1", "node-1", POD_FAILED, True), mk("nowhere", "")]
    grouped = nodes_to_daemon_pods(reversed(pods), include_deleted_terminal)
    assert {k: names(v) for k, v in grouped.items()} == expected
    assert list(grouped) == sorted(grouped)


def test_nodes_to_daemon_pods_groups_by_affinity_target() -> None:
    pending = new_pod("pending", "", SIMPLE_DAEMON_SET_LABEL, DS).build()
    pending.spec.affinity = pinned("node-3")
    assert {k: names(v) for k, v in nodes_to_daemon_pods([pending]).items()} == {"node-3": ["pending"]}


def test_manage_is_deterministic_whatever_the_input_order() -> None:
    nodes = add_nodes(0, 6)
    pods = (add_pods("node-1", SIMPLE_DAEMON_SET_LABEL, DS, 3) + add_pods("node-4", SIMPLE_DAEMON_SET_LABEL, DS, 2)
            + add_pods("node-5", SIMPLE_DAEMON_SET_LABEL, DS, 1, POD_FAILED))
    expected, _ = run(DS, nodes, pods)
    assert expected.nodes_needing_pods == ["node-0", "node-2", "node-3"]
    assert names(expected.pods_to_delete) == ["node-1-running-1", "node-1-running-2", "node-4-running-1",
                                              "node-5-failed-0"]
    rng = random.Random(7)
    for _ in range(5):
        shuffled_nodes, shuffled_pods = list(nodes), list(pods)
        rng.shuffle(shuffled_nodes)
        rng.shuffle(shuffled_pods)
        result, _ = run(DS, shuffled_nodes, shuffled_pods)
        assert result == expected


def test_manage_reports_placements_and_leaves_inputs_alone() -> None:
    ds = new_ds().build()
    nodes = [new_node("b").taint("dedicated", "user1", "NoSchedule").build(), new_node("a").build(),
             new_node("c").taint("dedicated", "user1", "NoExecute").build()]
    entries: dict[str, FailedPodBackoff] = {}
    by_node = {"b": [new_pod("x", "b", SIMPLE_DAEMON_SET_LABEL, ds).phase(POD_FAILED).build()]}
    result = manage(ds, nodes, by_node, HASH, max_surge=0, backoff_entries=entries, now=NOW)
    assert result.placements == {"a": RUN, "b": KEEP_ONLY, "c": NEVER}
    assert list(result.placements) == ["a", "b", "c"]
    assert (result.nodes_needing_pods, names(result.pods_to_delete)) == (["a"], ["x"])
    assert entries == {}
    assert [n.metadata.name for n in nodes] == ["b", "a", "c"]
