"""updateDaemonSetStatus / storeDaemonSetStatus as pure functions.

From daemon_controller_test.go: TestNumberReadyStatus, TestObservedGeneration, TestSimpleDaemonSetPodCreateErrors
(its status part), TestPodIsNotDeletedByDaemonsetWithEmptyLabelSelector (the SelectingAll event); and the counting
rules of updateDaemonSetStatus case by case."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import msgspec
import pytest

from kube import codec
from kube.apps import DaemonSet, DaemonSetCondition, DaemonSetStatus
from kube.core import EVENT_WARNING, POD_FAILED, POD_RUNNING, POD_SUCCEEDED, Node, Pod
from kube.meta import LabelSelector, LabelSelectorRequirement
from kube.testing import PodBuilder, daemonset, node, pod
from reconciler.core.daemonset.placement import Placement, node_should_run_daemon_pod
from reconciler.core.daemonset.status import (
    SELECTING_ALL_MESSAGE,
    SELECTING_ALL_REASON,
    DaemonSetEvent,
    calculate_status,
    needs_write,
    oldest_pod,
    resync_after,
    selecting_all_event,
    uncounted_availability,
)
from tests.reconciler.builders import NOW

HASH = "6d8f7b9c5"
SIMPLE = {"name": "simple-daemon", "type": "production"}
NODE_LABELS = {"color": "blue", "speed": "fast"}
DS = daemonset("foo").selector(SIMPLE).build()
LONG_AGO = NOW - timedelta(hours=1)


def daemon_pod(name: str, node_name: str, *, hash_: str | None = HASH) -> PodBuilder:
    """newPod: the selector's labels plus the hash label, bound to `node_name`, Running."""
    labels = dict(SIMPLE) | ({"controller-revision-hash": hash_} if hash_ is not None else {})
    return pod(name).labels(labels).owned_by(DS).on_node(node_name).phase(POD_RUNNING).created(LONG_AGO)


def nodes(*names: str, labels: Mapping[str, str] | None = None) -> list[Node]:
    return [node(n).labels(dict(labels or {})).build() for n in names]


def by_node(*pods: Pod) -> dict[str, list[Pod]]:
    grouped: dict[str, list[Pod]] = {}
    for p in pods:
        grouped.setdefault(p.spec.node_name, []).append(p)
    return grouped


def counts(status: DaemonSetStatus) -> tuple[int, ...]:
    """(desired, current, misscheduled, ready, updated, available, unavailable)."""
    return (status.desired_number_scheduled, status.current_number_scheduled, status.number_misscheduled,
            status.number_ready, status.updated_number_scheduled, status.number_available,
            status.number_unavailable)


def status_of(ds: DaemonSet, node_list: Sequence[Node], pods: Mapping[str, Sequence[Pod]], *, hash_: str = HASH,
              update: bool = True, placements: Mapping[str, Placement] | None = None) -> DaemonSetStatus:
    return calculate_status(ds, node_list, pods, hash_, NOW, update_observed_generation=update, placements=placements)


# --- counting ---------------------------------------------------------------------------------------------

def test_number_ready_status() -> None:
    """TestNumberReadyStatus: two scheduled pods, not Ready, then Ready."""
    node_list = nodes("node-0", "node-1", labels=NODE_LABELS)
    unready = by_node(daemon_pod("a", "node-0").build(), daemon_pod("b", "node-1").build())
    assert counts(status_of(DS, node_list, unready)) == (2, 2, 0, 0, 2, 0, 2)
    ready = by_node(daemon_pod("a", "node-0").ready(LONG_AGO).build(),
                    daemon_pod("b", "node-1").ready(LONG_AGO).build())
    assert counts(status_of(DS, node_list, ready)) == (2, 2, 0, 2, 2, 2, 0)


def test_create_errors_status() -> None:
    """TestSimpleDaemonSetPodCreateErrors: 100 nodes, only 10 pods created so far."""
    node_list = nodes(*(f"node-{i}" for i in range(100)))
    pods = by_node(*(daemon_pod(f"p{i}", f"node-{i}").build() for i in range(10)))
    assert counts(status_of(DS, node_list, pods)) == (100, 10, 0, 0, 10, 0, 100)


def test_no_nodes() -> None:
    assert counts(status_of(DS, [], by_node(daemon_pod("p", "node-0").build()))) == (0, 0, 0, 0, 0, 0, 0)


MIN_READY_DS = daemonset("foo").selector(SIMPLE).node_selector(NODE_LABELS).min_ready_seconds(30).build()


def test_every_kind_of_node() -> None:
    """One node per rule; pods on a node the lister does not know count nowhere."""
    blue = dict(NODE_LABELS)
    node_list = [
        node("available").labels(blue).build(),  # should run, pod Ready for long enough, current revision
        node("empty").labels(blue).build(),  # should run, no pod: desired only
        node("warming-up").labels(blue).build(),  # should run, Ready 10 s ago: ready, not available
        node("old-revision").labels(blue).build(),  # should run, available pod of another revision
        node("unselected").build(),  # the node selector rejects it, a pod is there: misscheduled
        node("tainted").labels(blue).taint("dedicated", "user1", "NoSchedule").build(),  # (false, true) + pod
        node("unselected-empty").build(),  # nothing at all
    ]
    pods = by_node(
        daemon_pod("p1", "available").ready(LONG_AGO).build(),
        daemon_pod("p3", "warming-up").ready(NOW - timedelta(seconds=10)).build(),
        daemon_pod("p4", "old-revision", hash_="old").ready(LONG_AGO).build(),
        daemon_pod("p5", "unselected").ready(LONG_AGO).build(),
        daemon_pod("p6", "tainted").ready(LONG_AGO).build(),
        daemon_pod("p7", "deleted-node").ready(LONG_AGO).build(),
    )
    status = status_of(MIN_READY_DS, node_list, pods)
    assert counts(status) == (4, 3, 2, 3, 2, 2, 2)


@pytest.mark.parametrize(
    ("ready_at", "ready", "available"),
    [
        pytest.param(None, False, False, id="not-ready"),
        pytest.param(NOW - timedelta(seconds=29), True, False, id="ready-29s"),
        pytest.param(NOW - timedelta(seconds=30), True, True, id="ready-exactly-min-ready-seconds"),
        pytest.param(NOW - timedelta(seconds=31), True, True, id="ready-31s"),
    ],
)
def test_availability_uses_the_injected_now(ready_at: datetime | None, ready: bool, available: bool) -> None:
    b = daemon_pod("p", "n")
    built = (b.ready(ready_at) if ready_at is not None else b.not_ready(LONG_AGO)).build()
    status = status_of(MIN_READY_DS, nodes("n", labels=NODE_LABELS), by_node(built))
    assert (status.number_ready, status.number_available, status.number_unavailable) == (
        int(ready), int(available), 1 - int(available))


def test_ready_without_transition_time_is_not_available_with_min_ready_seconds() -> None:
    status = status_of(MIN_READY_DS, nodes("n", labels=NODE_LABELS), by_node(daemon_pod("p", "n").ready().build()))
    assert (status.number_ready, status.number_available) == (1, 0)


# --- the oldest pod of a node decides ----------------------------------------------------------------------

T1 = LONG_AGO
T2 = LONG_AGO + timedelta(seconds=1)


@pytest.mark.parametrize(
    ("pods", "oldest"),
    [
        pytest.param([pod("b").on_node("n").created(T2), pod("a").on_node("n").created(T1)], "a", id="older-first"),
        pytest.param([pod("b").on_node("n").created(T1), pod("a").on_node("n").created(T1)], "a",
                     id="same-time-smaller-name"),
        pytest.param([pod("a").target_node("n").created(T1), pod("b").on_node("n").created(T2)], "b",
                     id="scheduled-before-older-unscheduled"),
        pytest.param([pod("a").on_node("n").created(T1), pod("b").on_node("n")], "b",
                     id="no-creation-timestamp-is-oldest"),
    ],
)
def test_oldest_pod(pods: list[PodBuilder], oldest: str) -> None:
    """podByCreationTimestampAndPhase."""
    assert oldest_pod([p.build() for p in pods]).metadata.name == oldest


def test_only_the_oldest_pod_is_judged() -> None:
    """A node with an old unready pod of another revision and a new Ready one of this revision counts neither."""
    older = daemon_pod("a", "n", hash_="old").created(T1).not_ready(T1).build()
    newer = daemon_pod("b", "n").created(T2).ready(T1).build()
    status = status_of(DS, nodes("n"), by_node(newer, older))
    assert counts(status) == (1, 1, 0, 0, 0, 0, 1)


# --- deleted and terminal pods -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("phase", "deleting", "current"),
    [
        pytest.param(POD_FAILED, True, 0, id="failed-and-deleted-is-skipped"),
        pytest.param(POD_SUCCEEDED, True, 0, id="succeeded-and-deleted-is-skipped"),
        pytest.param(POD_RUNNING, True, 1, id="terminating-still-counts"),
        pytest.param(POD_FAILED, False, 1, id="failed-not-deleted-still-counts"),
    ],
)
def test_deleted_terminal_pods_do_not_count(phase: str, deleting: bool, current: int) -> None:
    """getNodesToDaemonPods(includeDeletedTerminal=false)."""
    b = daemon_pod("p", "n").phase(phase)
    built = (b.deleting(NOW) if deleting else b).build()
    assert status_of(DS, nodes("n"), by_node(built)).current_number_scheduled == current


def test_deleted_terminal_pod_alone_on_an_unwanted_node_is_not_misscheduled() -> None:
    built = daemon_pod("p", "n").phase(POD_FAILED).deleting(NOW).build()
    ds = daemonset("foo").selector(SIMPLE).node_selector(NODE_LABELS).build()
    assert status_of(ds, nodes("n"), by_node(built)).number_misscheduled == 0


# --- updatedNumberScheduled (util.IsPodUpdated) ------------------------------------------------------------

def with_generation(annotation: str | None) -> DaemonSet:
    b = daemonset("foo").selector(SIMPLE)
    return (b.annotations({"deprecated.daemonset.template.generation": annotation}) if annotation is not None
            else b).build()


@pytest.mark.parametrize(
    ("annotation", "labels", "hash_", "updated"),
    [
        pytest.param(None, {"controller-revision-hash": HASH}, HASH, 1, id="hash-matches"),
        pytest.param(None, {"controller-revision-hash": "old"}, HASH, 0, id="hash-differs"),
        pytest.param(None, {}, HASH, 0, id="no-hash-label"),
        pytest.param(None, {"controller-revision-hash": ""}, "", 0, id="empty-hash-never-matches"),
        pytest.param("3", {"pod-template-generation": "3", "controller-revision-hash": "old"}, HASH, 1,
                     id="legacy-generation-matches"),
        pytest.param("3", {"pod-template-generation": "2"}, HASH, 0, id="legacy-generation-differs"),
        pytest.param("+3", {"pod-template-generation": "3"}, HASH, 1, id="generation-is-compared-as-a-number"),
        pytest.param("x", {"pod-template-generation": "x"}, HASH, 0, id="unparsable-annotation-is-absent"),
        pytest.param(None, {"pod-template-generation": ""}, HASH, 0, id="no-annotation-no-legacy-match"),
    ],
)
def test_updated_number_scheduled(annotation: str | None, labels: dict[str, str], hash_: str, updated: int) -> None:
    ds = with_generation(annotation)
    built = pod("p").labels(SIMPLE | labels).owned_by(ds).on_node("n").build()
    status = status_of(ds, nodes("n"), by_node(built), hash_=hash_)
    assert (status.current_number_scheduled, status.updated_number_scheduled) == (1, updated)


# --- placements, observedGeneration and what is kept ----------------------------------------------------

def test_precomputed_placements_are_used() -> None:
    node_list = nodes("a", "b")
    pods = by_node(daemon_pod("p", "a").build())
    placements = {"a": Placement(False, True), "b": Placement(True, True)}
    assert counts(status_of(DS, node_list, pods, placements=placements)) == (1, 0, 1, 0, 0, 0, 1)


@pytest.mark.parametrize(("update", "observed"), [(True, 4), (False, 2)])
def test_observed_generation(update: bool, observed: int) -> None:
    """TestObservedGeneration; with unsatisfied expectations (updateObservedGen false) it is left as it was."""
    ds = daemonset("foo").selector(SIMPLE).generation(4).observed_generation(2).build()
    assert status_of(ds, nodes("n"), by_node(), update=update).observed_generation == observed


def test_collision_count_and_conditions_are_kept_and_input_untouched() -> None:
    condition = DaemonSetCondition(type="Custom", status="True", reason="Kept")
    ds = daemonset("foo").selector(SIMPLE).collision_count(3).build()
    ds.status.conditions = [condition]
    before = codec.encode(ds)
    status = status_of(ds, nodes("n"), by_node(daemon_pod("p", "n").build()))
    assert (status.collision_count, status.conditions) == (3, [condition])
    assert codec.encode(ds) == before
    assert status is not ds.status


# --- storeDaemonSetStatus's skip test ------------------------------------------------------------------

BASE = DaemonSetStatus(desired_number_scheduled=2, current_number_scheduled=2, number_misscheduled=1, number_ready=2,
                       updated_number_scheduled=2, number_available=1, number_unavailable=1, observed_generation=5)


def stored(generation: int = 5, **status: int) -> DaemonSet:
    ds = daemonset("foo").selector(SIMPLE).generation(generation).build()
    ds.status = msgspec.structs.replace(BASE, **status)
    return ds


@pytest.mark.parametrize(
    ("ds", "new", "write"),
    [
        pytest.param(stored(), BASE, False, id="unchanged"),
        pytest.param(stored(generation=6), BASE, True, id="generation-ahead-of-observed"),
        pytest.param(stored(generation=4), BASE, False, id="observed-ahead-of-generation"),
        pytest.param(stored(generation=6), msgspec.structs.replace(BASE, observed_generation=6), True,
                     id="new-observed-generation-is-not-what-is-compared"),
        pytest.param(stored(), msgspec.structs.replace(BASE, observed_generation=9), False,
                     id="new-observed-generation-alone-does-not-write"),
        pytest.param(stored(), msgspec.structs.replace(BASE, desired_number_scheduled=3), True, id="desired"),
        pytest.param(stored(), msgspec.structs.replace(BASE, current_number_scheduled=1), True, id="current"),
        pytest.param(stored(), msgspec.structs.replace(BASE, number_misscheduled=0), True, id="misscheduled"),
        pytest.param(stored(), msgspec.structs.replace(BASE, number_ready=1), True, id="ready"),
        pytest.param(stored(), msgspec.structs.replace(BASE, updated_number_scheduled=1), True, id="updated"),
        pytest.param(stored(), msgspec.structs.replace(BASE, number_available=2), True, id="available"),
        pytest.param(stored(), msgspec.structs.replace(BASE, number_unavailable=0), True, id="unavailable"),
        pytest.param(stored(), msgspec.structs.replace(BASE, collision_count=7, conditions=[
            DaemonSetCondition(type="X")]), False, id="collision-count-and-conditions-are-not-compared"),
    ],
)
def test_needs_write(ds: DaemonSet, new: DaemonSetStatus, write: bool) -> None:
    assert needs_write(ds, new) is write


def test_status_round_trip_needs_no_second_write() -> None:
    ds = daemonset("foo").selector(SIMPLE).generation(3).build()
    status = status_of(ds, nodes("n"), by_node(daemon_pod("p", "n").ready(LONG_AGO).build()))
    assert needs_write(ds, status)
    ds.status = status
    assert not needs_write(ds, status_of(ds, nodes("n"), by_node(daemon_pod("p", "n").ready(LONG_AGO).build())))


# --- the requeue after minReadySeconds ---------------------------------------------------------------------

@pytest.mark.parametrize(
    ("min_ready", "ready", "available", "after"),
    [
        pytest.param(0, 2, 1, None, id="no-min-ready-seconds"),
        pytest.param(30, 2, 2, None, id="all-ready-are-available"),
        pytest.param(30, 2, 1, timedelta(seconds=30), id="some-ready-not-yet-available"),
        pytest.param(30, 0, 0, None, id="none-ready"),
    ],
)
def test_resync_after(min_ready: int, ready: int, available: int, after: timedelta | None) -> None:
    ds = daemonset("foo").min_ready_seconds(min_ready).build()
    status = DaemonSetStatus(number_ready=ready, number_available=available)
    assert resync_after(ds, status) == after


def _surging(new_ready_at: datetime | None, *, old_ready: bool = True) -> dict[str, list[Pod]]:
    """Node n1: an old pod (created long ago) and a new one beside it, Ready since `new_ready_at` (None: not
    Ready). Node n2: one pod, long available."""
    old = daemon_pod("old", "n1", hash_="old")
    old = old.ready(LONG_AGO) if old_ready else old
    new = daemon_pod("new", "n1").created(NOW - timedelta(seconds=5))
    new = new.ready(new_ready_at) if new_ready_at is not None else new
    return by_node(old.build(), new.build(), daemon_pod("other", "n2").ready(LONG_AGO).build())


@pytest.mark.parametrize(
    ("min_ready", "new_ready_at", "after"),
    [
        # the new pod turned Ready 1 s ago (lastTransitionTime has whole seconds): available at +1 s; looked at
        # again 1 s after that, the delay updatePod asks for (minReadySeconds + 1 s after the Ready event)
        pytest.param(2, NOW - timedelta(seconds=1), timedelta(seconds=2), id="ready-not-yet-available"),
        pytest.param(2, NOW, timedelta(seconds=3), id="just-ready"),
        pytest.param(2, NOW - timedelta(seconds=2), None, id="available-at-now"),
        pytest.param(2, NOW - timedelta(seconds=3), None, id="already-available"),
        pytest.param(2, None, None, id="not-ready"),
        pytest.param(0, NOW - timedelta(seconds=1), None, id="no-min-ready-seconds"),
    ],
)
def test_uncounted_availability(min_ready: int, new_ready_at: datetime | None, after: timedelta | None) -> None:
    ds = daemonset("foo").selector(SIMPLE).min_ready_seconds(min_ready).build()
    assert uncounted_availability(ds, _surging(new_ready_at), NOW) == after


def test_a_surge_pod_the_status_does_not_count_still_requeues_the_daemonset() -> None:
    """The stall found in a CI run of test_max_surge: a status requeue armed earlier swallowed updatePod's later
    one (the delaying queue keeps a key's earliest time) and fired before the new pod was available. The status
    counts each node's oldest pod, so ready == available and upstream's rule requeues nothing: the old pod would
    wait for an unrelated event. kubus requeues at the new pod's availability + 1 s."""
    ds = daemonset("foo").selector(SIMPLE).min_ready_seconds(2).build()
    pods = _surging(NOW - timedelta(seconds=1))
    status = calculate_status(ds, nodes("n1", "n2"), pods, HASH, NOW, update_observed_generation=True)
    assert (status.number_ready, status.number_available) == (2, 2)  # the old pod is what n1 counts
    assert resync_after(ds, status) is None  # upstream's rule alone
    assert resync_after(ds, status, pods, NOW) == timedelta(seconds=2)


# --- SelectingAll ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("selector", "event"),
    [
        pytest.param(LabelSelector(), DaemonSetEvent(EVENT_WARNING, SELECTING_ALL_REASON, SELECTING_ALL_MESSAGE),
                     id="empty-selector"),
        pytest.param(None, None, id="nil-selector-selects-nothing"),
        pytest.param(LabelSelector(match_labels={"a": "b"}), None, id="match-labels"),
        pytest.param(LabelSelector(match_expressions=[LabelSelectorRequirement(key="a", operator="Exists")]), None,
                     id="match-expressions"),
    ],
)
def test_selecting_all_event(selector: LabelSelector | None, event: DaemonSetEvent | None) -> None:
    """TestPodIsNotDeletedByDaemonsetWithEmptyLabelSelector: one Warning event, and no sync."""
    assert selecting_all_event(daemonset("foo").raw_selector(selector).build()) == event


def test_selecting_all_event_text() -> None:
    assert SELECTING_ALL_REASON == "SelectingAll"
    assert SELECTING_ALL_MESSAGE == "This daemon set is selecting all pods. A non-empty selector is required."


def _pinned(node_name: str) -> DaemonSet:
    ds = daemonset("pinned").selector(SIMPLE).build()
    ds.spec.template.spec.node_name = node_name
    return ds


@pytest.mark.parametrize("ds", [DS, MIN_READY_DS, _pinned("tainted")],
                         ids=["everywhere-untainted", "node-selector", "node-name"])
def test_placement_computed_here_is_node_should_run_daemon_pod_on_every_node(ds: DaemonSet) -> None:
    """Without `placements`, each node's placement is worked out here (an untainted node skips the taint check when
    the template has no nodeName, nodeSelector or affinity): the same counts as NodeShouldRunDaemonPod's answers."""
    blue = dict(NODE_LABELS)
    node_list = [
        node("plain").labels(blue).build(),
        node("no-schedule").labels(blue).taint("dedicated", "user1", "NoSchedule").build(),
        node("no-execute").labels(blue).taint("dedicated", "user1", "NoExecute").build(),
        node("tainted").labels(blue).taint("dedicated", "user1", "NoSchedule").build(),
        node("tolerated").labels(blue).taint("node.kubernetes.io/unschedulable", "", "NoSchedule").build(),
        node("unlabelled").build(),
    ]
    pods = by_node(*(daemon_pod(f"p-{n.metadata.name}", n.metadata.name).ready(LONG_AGO).build() for n in node_list))
    answers = {n.metadata.name: node_should_run_daemon_pod(n, ds) for n in node_list}
    assert counts(status_of(ds, node_list, pods)) == counts(status_of(ds, node_list, pods, placements=answers))
    assert len({answer for answer in answers.values()}) > 1  # the nodes are not all alike to this DaemonSet
