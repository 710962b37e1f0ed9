"""The DaemonSet controller's event handlers: daemon_controller_test.go's TestDeleteFinalStateUnknown,
TestExpectationsOnRecreate, TestAddNode, TestUpdateNode, TestShouldIgnoreNodeUpdate, TestAddPod,
TestAddPodOrphan, TestUpdatePod*, TestDeletePod*, TestDeleteNoDaemonPod, plus the ControllerRevision
handlers (addHistory/updateHistory/deleteHistory) and the listers' GetPodDaemonSets/GetHistoryDaemonSets."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from kube.apps import ControllerRevision, DaemonSet
from kube.core import CONDITION_FALSE, NODE_READY, POD_PENDING, Node, Pod
from kube.meta import LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference
from kube.ownership import new_controller_ref
from kube.testing import daemonset, node, pod, replicaset
from kube.times import format_time
from messages.keys import parse_controller_key
from messages.observed import ADDED, DELETED, DELETED_FINAL_STATE_UNKNOWN, MODIFIED, RELISTED
from reconciler.core.cache import Cache, Change
from reconciler.core.daemonset.handlers import (
    controller_key,
    history_daemonsets,
    on_controller_revision,
    on_daemonset,
    on_node,
    on_pod,
    pod_daemonsets,
    should_ignore_node_update,
)
from reconciler.core.view import Wakeups
from tests.reconciler.builders import NOW, Cluster, cache_of

SIMPLE = {"name": "simple-daemon", "type": "production"}  # simpleDaemonSetLabel
SIMPLE2 = {"name": "simple-daemon", "type": "test"}  # simpleDaemonSetLabel2
NODE_LABELS = {"color": "blue", "speed": "fast"}  # simpleNodeLabel

DS1 = daemonset("foo1").selector(SIMPLE).build()
DS2 = daemonset("foo2").selector(SIMPLE).build()
DS3 = daemonset("foo3").selector(SIMPLE2).build()
KEY1 = controller_key("default", "foo1")
KEY2 = controller_key("default", "foo2")
KEY3 = controller_key("default", "foo3")


def change(old: Any, new: Any, event_type: str = MODIFIED, replayed: bool = False) -> Change:
    obj = new if new is not None else old
    meta = obj.metadata
    return Change(obj.kind, meta.namespace, meta.name, meta.uid, old, new, event_type, replayed)


def pod_wakeups(view: Cache, old: Pod | None, new: Pod | None, event_type: str = MODIFIED,
                replayed: bool = False) -> Wakeups:
    wakeups = Wakeups()
    on_pod(change(old, new, event_type, replayed), view, wakeups)
    return wakeups


def ds_pod(name: str = "pod", labels: dict[str, str] | None = None, owner: Any = None, rv: str = "1") -> Pod:
    """newPod: labels, on node-0, controlled by `owner` when given."""
    b = pod(name).labels(SIMPLE if labels is None else labels).on_node("node-0").rv(rv)
    if owner is not None:
        b = b.owned_by(owner)
    return b.build()


def test_keys_round_trip() -> None:
    assert str(KEY1) == "DaemonSet/default/foo1"
    assert parse_controller_key(str(KEY1)) == KEY1
    assert (KEY1.namespace, KEY1.name) == ("default", "foo1")
    assert parse_controller_key(str(controller_key("kube-system", "a/b"))) == controller_key("kube-system", "a/b")


# --- GetPodDaemonSets / GetHistoryDaemonSets --------------------------------------------------------------

def ds_selecting(name: str, selector: LabelSelector | None, namespace: str = "default") -> DaemonSet:
    return daemonset(name).ns(namespace).raw_selector(selector).build()


FOO_BAR = LabelSelector(match_labels={"foo": "bar"})
BOGUS = LabelSelector(match_expressions=[LabelSelectorRequirement(key="foo", operator="Bogus", values=["bar"])])


@pytest.mark.parametrize(
    ("dss", "labels", "namespace", "expected"),
    [
        pytest.param([ds_selecting("basic", FOO_BAR)], {}, "default", [], id="object-without-labels-matches-nothing"),
        pytest.param([ds_selecting("foo", FOO_BAR)], {"foo": "bar"}, "ns", [], id="matching-labels-other-namespace"),
        pytest.param([ds_selecting("bar", FOO_BAR, "ns")], {"foo": "bar"}, "ns", ["bar"],
                     id="matching-labels-and-namespace"),
        pytest.param([ds_selecting("nil", None)], {"foo": "bar"}, "default", [], id="nil-selector-matches-nothing"),
        pytest.param([ds_selecting("empty", LabelSelector())], {"foo": "bar"}, "default", [],
                     id="empty-selector-matches-nothing"),
        pytest.param([ds_selecting("expr", LabelSelector(match_expressions=[
            LabelSelectorRequirement(key="foo", operator="In", values=["bar", "baz"])]))], {"foo": "baz"},
            "default", ["expr"], id="match-expressions"),
        pytest.param([ds_selecting("b", FOO_BAR), ds_selecting("a", FOO_BAR), ds_selecting("c", LabelSelector(
            match_labels={"foo": "other"}))], {"foo": "bar", "x": "y"}, "default", ["a", "b"],
            id="every-overlapping-daemonset-by-name"),
        pytest.param([ds_selecting("good", FOO_BAR), ds_selecting("bad", BOGUS)], {"foo": "bar"}, "default", [],
                     id="one-invalid-selector-fails-the-whole-lookup"),
        pytest.param([ds_selecting("good", FOO_BAR), ds_selecting("bad", BOGUS, "other")], {"foo": "bar"}, "default",
                     ["good"], id="invalid-selector-in-another-namespace-is-not-listed"),
    ],
)
def test_matching_daemonsets(dss: list[DaemonSet], labels: dict[str, str], namespace: str,
                             expected: list[str]) -> None:
    """The apps/v1 DaemonSet lister's expansion, for pods and for revisions alike."""
    view = cache_of(*dss)
    found = pod_daemonsets(pod("p").ns(namespace).labels(labels).build(), view)
    assert [ds.metadata.name for ds in found] == expected
    history = ControllerRevision(metadata=ObjectMeta(name="r", namespace=namespace, uid="r-uid", labels=labels))
    assert [ds.metadata.name for ds in history_daemonsets(history, view)] == expected


# --- addDaemonset / updateDaemonset / deleteDaemonset -----------------------------------------------------

@pytest.mark.parametrize(
    ("old", "new", "replayed", "enqueue", "dropped"),
    [
        pytest.param(None, DS1, False, [KEY1], [], id="add"),
        pytest.param(DS1, DS1, False, [KEY1], [], id="update-even-a-resync"),
        pytest.param(DS1, None, False, [KEY1], [KEY1], id="delete-drops-expectations-and-syncs"),
        pytest.param(None, DS1, True, [], [], id="replayed-add"),
        pytest.param(DS1, None, True, [], [], id="replayed-delete"),
    ],
)
def test_daemonset_events(old: DaemonSet | None, new: DaemonSet | None, replayed: bool, enqueue: list[str],
                          dropped: list[str]) -> None:
    wakeups = Wakeups()
    on_daemonset(change(old, new, ADDED if old is None else MODIFIED, replayed), wakeups)
    assert wakeups == Wakeups(enqueue=enqueue, expectations_deleted=dropped)


def test_delete_final_state_unknown_syncs_the_daemonset() -> None:
    """TestDeleteFinalStateUnknown: a tombstone still enqueues the DaemonSet it carries."""
    cluster = Cluster(DS1)
    tombstone, _, _ = cluster.delete(DS1, DELETED_FINAL_STATE_UNKNOWN)
    wakeups = Wakeups()
    on_daemonset(tombstone, wakeups, cluster.cache)
    assert wakeups == Wakeups(enqueue=[KEY1], expectations_deleted=[KEY1])


RECREATED = daemonset("foo1").selector(SIMPLE).uid("new-uid").build()


def test_recreation_seen_first_drops_the_old_daemonsets_expectations() -> None:
    """TestExpectationsOnRecreate / updateDaemonset with a changed UID: the new DaemonSet starts clean."""
    cluster = Cluster(DS1)
    added, _, _ = cluster.add(RECREATED)
    wakeups = Wakeups()
    on_daemonset(added, wakeups, cluster.cache)
    assert wakeups == Wakeups(enqueue=[KEY1], expectations_deleted=[KEY1])


def test_late_tombstone_keeps_the_new_daemonsets_expectations() -> None:
    cluster = Cluster(DS1, RECREATED)
    tombstone, _, _ = cluster.delete(DS1, DELETED_FINAL_STATE_UNKNOWN)
    wakeups = Wakeups()
    on_daemonset(tombstone, wakeups, cluster.cache)
    assert wakeups == Wakeups(enqueue=[KEY1])


def test_add_with_view_of_another_name_keeps_expectations() -> None:
    cluster = Cluster(DS2)
    added, _, _ = cluster.add(DS1)
    wakeups = Wakeups()
    on_daemonset(added, wakeups, cluster.cache)
    assert wakeups == Wakeups(enqueue=[KEY1])


# --- addHistory / updateHistory / deleteHistory -----------------------------------------------------------

def revision(labels: dict[str, str] | None = None, owner: DaemonSet | None = None, rv: str = "1",
             deleting: bool = False, ref: OwnerReference | None = None) -> ControllerRevision:
    """newControllerRevision: in `default`, controlled by `owner` (or carrying `ref`) when given."""
    refs = [ref] if ref is not None else [new_controller_ref(owner.metadata, "apps/v1", "DaemonSet")] if owner else []
    meta = ObjectMeta(name="foo1-6d8f7b9c5", namespace="default", uid="rev-uid", resource_version=rv,
                      labels=dict(SIMPLE if labels is None else labels), owner_references=refs,
                      deletion_timestamp=format_time(NOW) if deleting else None)
    return ControllerRevision(metadata=meta, revision=1)


def history_wakeups(old: ControllerRevision | None, new: ControllerRevision | None, replayed: bool = False,
                    view: Cache | None = None) -> Wakeups:
    wakeups = Wakeups()
    event_type = ADDED if old is None else DELETED if new is None else MODIFIED
    on_controller_revision(change(old, new, event_type, replayed), view or cache_of(DS1, DS2, DS3), wakeups)
    return wakeups


GONE = daemonset("gone").selector(SIMPLE).build()
OTHER_KIND_REF = new_controller_ref(replicaset("foo1").build().metadata, "apps/v1", "ReplicaSet")


@pytest.mark.parametrize(
    ("added", "enqueue"),
    [
        pytest.param(revision(owner=DS1), [], id="owned-is-only-logged"),
        pytest.param(revision(owner=GONE), [], id="owner-not-in-cache"),
        pytest.param(revision(labels=SIMPLE), [KEY1, KEY2], id="orphan-syncs-every-matching-daemonset"),
        pytest.param(revision(labels=SIMPLE2), [KEY3], id="orphan-one-match"),
        pytest.param(revision(labels={}), [], id="orphan-without-labels"),
        pytest.param(revision(owner=DS1, deleting=True), [KEY1], id="deleting-owned-syncs-its-owner"),
        pytest.param(revision(deleting=True), [], id="deleting-orphan"),
    ],
)
def test_add_history(added: ControllerRevision, enqueue: list[str]) -> None:
    assert history_wakeups(None, added) == Wakeups(enqueue=enqueue)


@pytest.mark.parametrize(
    ("old", "new", "enqueue"),
    [
        pytest.param(revision(owner=DS1, rv="1"), revision(owner=DS1, rv="1", labels={}), [],
                     id="same-resource-version-is-a-resync"),
        pytest.param(revision(owner=DS1, rv="1"), revision(owner=DS1, rv="2"), [KEY1], id="owned-syncs-its-owner"),
        pytest.param(revision(owner=DS1, rv="1"), revision(owner=DS2, rv="2"), [KEY1, KEY2],
                     id="controller-changed-syncs-both"),
        pytest.param(revision(owner=DS1, rv="1"), revision(rv="2"), [KEY1, KEY1, KEY2],
                     id="released-syncs-former-owner-and-every-match"),
        pytest.param(revision(owner=GONE, rv="1"), revision(owner=DS2, rv="2"), [KEY2],
                     id="former-owner-gone"),
        pytest.param(revision(rv="1"), revision(rv="2"), [], id="orphan-without-meta-change"),
        pytest.param(revision(labels={"x": "y"}, rv="1"), revision(labels=SIMPLE2, rv="2"), [KEY3],
                     id="orphan-labels-changed"),
        pytest.param(revision(owner=DS1, rv="1"), revision(ref=OTHER_KIND_REF, rv="2"), [KEY1],
                     id="now-controlled-by-another-kind"),
        pytest.param(revision(owner=DS1, rv="1"), revision(owner=DS1, rv="2", deleting=True), [KEY1],
                     id="deletion-timestamp-is-just-an-update"),
    ],
)
def test_update_history(old: ControllerRevision, new: ControllerRevision, enqueue: list[str]) -> None:
    assert history_wakeups(old, new) == Wakeups(enqueue=enqueue)


@pytest.mark.parametrize(
    ("gone", "enqueue"),
    [
        pytest.param(revision(owner=DS1), [KEY1], id="owned"),
        pytest.param(revision(), [], id="orphan"),
        pytest.param(revision(owner=GONE), [], id="owner-gone"),
        pytest.param(revision(ref=OTHER_KIND_REF), [], id="owner-of-another-kind"),
    ],
)
def test_delete_history(gone: ControllerRevision, enqueue: list[str]) -> None:
    assert history_wakeups(gone, None) == Wakeups(enqueue=enqueue)


def test_history_tombstone_through_the_cache() -> None:
    cluster = Cluster(DS1)
    tombstone, _, _ = cluster.delete(revision(owner=DS1), DELETED_FINAL_STATE_UNKNOWN)
    wakeups = Wakeups()
    on_controller_revision(tombstone, cluster.cache, wakeups)
    assert wakeups == Wakeups(enqueue=[KEY1])


@pytest.mark.parametrize(("old", "new"), [(None, revision()), (revision(owner=DS1), None),
                                          (revision(owner=DS1, rv="1"), revision(owner=DS2, rv="2"))])
def test_replayed_history_changes_do_nothing(old: ControllerRevision | None, new: ControllerRevision | None) -> None:
    assert history_wakeups(old, new, replayed=True) == Wakeups()


# --- addPod -----------------------------------------------------------------------------------------------

def test_add_pod_observes_a_creation_of_its_controller_only() -> None:
    """TestAddPod: each pod syncs its own DaemonSet, though both select it."""
    view = cache_of(DS1, DS2)
    assert pod_wakeups(view, None, ds_pod("pod1", owner=DS1), ADDED) == Wakeups(
        enqueue=[KEY1], creations_observed=[KEY1])
    assert pod_wakeups(view, None, ds_pod("pod2", owner=DS2), ADDED) == Wakeups(
        enqueue=[KEY2], creations_observed=[KEY2])


@pytest.mark.parametrize(
    "owner",
    [
        pytest.param(daemonset("foo1").selector(SIMPLE).uid("stale-uid").build(), id="same-name-other-uid"),
        pytest.param(GONE, id="owner-not-in-cache"),
        pytest.param(replicaset("foo1").build(), id="owner-of-another-kind"),
    ],
)
def test_add_pod_whose_controller_does_not_resolve(owner: Any) -> None:
    """resolveControllerRef: a reference to another kind, or to a uid the cache does not hold, is nobody's."""
    assert pod_wakeups(cache_of(DS1, DS2), None, ds_pod(owner=owner), ADDED) == Wakeups()


@pytest.mark.parametrize(
    ("labels", "enqueue"),
    [
        pytest.param(SIMPLE, [KEY1, KEY2], id="TestAddPodOrphan"),
        pytest.param(SIMPLE2, [KEY3], id="one-match"),
        pytest.param({"no": "match"}, [], id="no-match"),
        pytest.param({}, [], id="no-labels"),
    ],
)
def test_add_orphan_syncs_matching_daemonsets(labels: dict[str, str], enqueue: list[str]) -> None:
    """An orphan wakes every DaemonSet that might adopt it, and is no creation anyone waits for."""
    assert pod_wakeups(cache_of(DS3, DS2, DS1), None, ds_pod(labels=labels), ADDED) == Wakeups(enqueue=enqueue)


def test_add_pod_already_being_deleted_is_a_deletion() -> None:
    deleting = pod("pod").labels(SIMPLE).owned_by(DS1).deleting(NOW).build()
    assert pod_wakeups(cache_of(DS1), None, deleting, ADDED) == Wakeups(
        enqueue=[KEY1], deletions_observed=[(KEY1, "default/pod")])


# --- updatePod --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("old", "new", "enqueue"),
    [
        pytest.param(ds_pod(owner=DS1, rv="1"), ds_pod(owner=DS1, rv="2"), [KEY1], id="TestUpdatePod"),
        pytest.param(ds_pod(rv="1"), ds_pod(rv="2"), [], id="TestUpdatePodOrphanSameLabels"),
        pytest.param(ds_pod(labels={"foo2": "bar2"}, rv="1"), ds_pod(rv="2"), [KEY1, KEY2],
                     id="TestUpdatePodOrphanWithNewLabels"),
        pytest.param(ds_pod(owner=DS1, rv="1"), ds_pod(owner=DS2, rv="2"), [KEY1, KEY2],
                     id="TestUpdatePodChangeControllerRef"),
        pytest.param(ds_pod(owner=DS1, rv="1"), ds_pod(rv="2"), [KEY1, KEY1, KEY2],
                     id="TestUpdatePodControllerRefRemoved"),
        pytest.param(ds_pod(labels=SIMPLE, owner=DS1, rv="1"), ds_pod(labels=SIMPLE2, owner=DS1, rv="2"), [KEY1],
                     id="owned-pod-relabelled-syncs-its-owner-only"),
        pytest.param(ds_pod(owner=DS1, rv="7"), ds_pod(labels=SIMPLE2, owner=DS2, rv="7"), [],
                     id="same-resource-version-is-a-resync"),
        pytest.param(ds_pod(owner=GONE, rv="1"), ds_pod(owner=DS2, rv="2"), [KEY2], id="former-owner-gone"),
    ],
)
def test_update_pod_syncs(old: Pod, new: Pod, enqueue: list[str]) -> None:
    """The old and the new controller, or every match of an orphan whose labels or reference changed."""
    assert pod_wakeups(cache_of(DS1, DS2, DS3), old, new) == Wakeups(enqueue=enqueue)


MIN_READY = daemonset("foo1").selector(SIMPLE).min_ready_seconds(30).build()


@pytest.mark.parametrize(
    ("ds", "old_ready", "new_ready", "after"),
    [
        pytest.param(MIN_READY, False, True, [(KEY1, timedelta(seconds=31))], id="turned-ready"),
        pytest.param(MIN_READY, True, True, [], id="already-ready"),
        pytest.param(MIN_READY, True, False, [], id="turned-unready"),
        pytest.param(DS1, False, True, [], id="no-min-ready-seconds"),
    ],
)
def test_pod_turning_ready_checks_availability_later(ds: DaemonSet, old_ready: bool, new_ready: bool,
                                                     after: list[tuple[str, timedelta]]) -> None:
    """updatePod: minReadySeconds + 1 s after a pod turns Ready, its DaemonSet looks again."""
    base = pod("pod").labels(SIMPLE).owned_by(ds).phase(POD_PENDING)
    old = (base.ready(NOW) if old_ready else base.not_ready(NOW)).rv("1").build()
    new = (base.ready(NOW) if new_ready else base.not_ready(NOW)).rv("2").build()
    assert pod_wakeups(cache_of(ds), old, new) == Wakeups(enqueue=[KEY1], enqueue_after=after)


@pytest.mark.parametrize(
    ("old", "new", "deletions"),
    [
        pytest.param(ds_pod(owner=DS1, rv="1"), pod("pod").labels(SIMPLE).owned_by(DS1).deleting(NOW).rv("2").build(),
                     [(KEY1, "default/pod")], id="deletion-timestamp-set"),
        pytest.param(ds_pod(owner=DS1, rv="1"), pod("pod").labels(SIMPLE2).owned_by(DS1).deleting(NOW).rv("2").build(),
                     [(KEY1, "default/pod")], id="labels-changed-too-still-one-observation"),
        pytest.param(ds_pod(owner=DS1, rv="1"), pod("pod").labels(SIMPLE).owned_by(DS2).deleting(NOW).rv("2").build(),
                     [(KEY2, "default/pod")], id="controller-changed-too-only-the-new-one"),
        pytest.param(pod("pod").labels(SIMPLE).owned_by(DS1).deleting(NOW).rv("2").build(),
                     pod("pod").labels(SIMPLE).owned_by(DS1).deleting(NOW).rv("3").build(),
                     [(KEY1, "default/pod")], id="already-deleting-counts-again"),
        pytest.param(ds_pod(rv="1"), pod("pod").labels(SIMPLE).deleting(NOW).rv("2").build(), [],
                     id="orphan-being-deleted"),
    ],
)
def test_update_to_deleting_is_a_deletion(old: Pod, new: Pod, deletions: list[tuple[str, str]]) -> None:
    """updatePod: a graceful deletion counts now, for the current pod's controller only."""
    wakeups = pod_wakeups(cache_of(DS1, DS2), old, new)
    assert wakeups == Wakeups(enqueue=[k for k, _ in deletions], deletions_observed=deletions)


# --- deletePod --------------------------------------------------------------------------------------------

NO_KIND_REF = OwnerReference(controller=True)  # TestDeleteNoDaemonPod's `{Controller: &true}`


@pytest.mark.parametrize(
    ("gone", "wakeups"),
    [
        pytest.param(ds_pod("pod1", owner=DS1), Wakeups(enqueue=[KEY1], deletions_observed=[(KEY1, "default/pod1")]),
                     id="TestDeletePod"),
        pytest.param(ds_pod("pod1"), Wakeups(), id="TestDeletePodOrphan"),
        pytest.param(pod("pod_0").on_node("node1").build(), Wakeups(), id="deleted-non-daemon-pod"),
        pytest.param(Pod(metadata=ObjectMeta(name="pod_0", namespace="default", owner_references=[NO_KIND_REF])),
                     Wakeups(), id="deleted-non-daemon-pod-with-controller"),
        pytest.param(ds_pod(owner=GONE), Wakeups(), id="owner-gone"),
    ],
)
def test_delete_pod(gone: Pod, wakeups: Wakeups) -> None:
    """TestDeletePod, TestDeletePodOrphan, TestDeleteNoDaemonPod: only an owned pod's deletion wakes anyone."""
    assert pod_wakeups(cache_of(DS1, DS2, DS3), gone, None, DELETED) == wakeups


def test_delete_final_state_unknown_of_a_pod() -> None:
    """A tombstone of a pod the cache never held still syncs its controller."""
    cluster = Cluster(DS1)
    tombstone, _, _ = cluster.delete(ds_pod("pod0", owner=DS1), DELETED_FINAL_STATE_UNKNOWN)
    assert tombstone.old is not None and tombstone.new is None
    wakeups = Wakeups()
    on_pod(tombstone, cluster.cache, wakeups)
    assert wakeups == Wakeups(enqueue=[KEY1], deletions_observed=[(KEY1, "default/pod0")])


def test_graceful_deletion_is_observed_on_every_event() -> None:
    """Plain counts: the deletion timestamp, a later update, and the final delete each observe a deletion."""
    cluster = Cluster(DS1)
    deleting = pod("pod0").labels(SIMPLE).owned_by(DS1)
    steps = [(cluster.add, deleting.rv("1")), (cluster.update, deleting.deleting(NOW).rv("2")),
             (cluster.update, deleting.deleting(NOW).annotations(touched="yes").rv("3")),
             (cluster.delete, deleting.deleting(NOW).rv("4"))]
    observed: list[list[tuple[str, str]]] = []
    for apply, state in steps:
        applied, _, _ = apply(state.build())
        wakeups = Wakeups()
        on_pod(applied, cluster.cache, wakeups)
        observed.append(wakeups.deletions_observed)
    assert observed == [[], [(KEY1, "default/pod0")], [(KEY1, "default/pod0")], [(KEY1, "default/pod0")]]


# --- replayed pod changes ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("old", "new", "event_type", "wakeups"),
    [
        pytest.param(None, ds_pod(owner=DS1), ADDED, Wakeups(creations_observed=[KEY1]), id="added"),
        pytest.param(ds_pod(owner=DS1), None, DELETED, Wakeups(deletions_observed=[(KEY1, "default/pod")]),
                     id="deleted"),
        pytest.param(None, pod("pod").labels(SIMPLE).owned_by(DS1).deleting(NOW).build(), MODIFIED,
                     Wakeups(deletions_observed=[(KEY1, "default/pod")]), id="deletion-timestamp"),
        pytest.param(None, pod("pod").labels(SIMPLE).owned_by(DS1).deleting(NOW).build(), ADDED,
                     Wakeups(deletions_observed=[(KEY1, "default/pod")]), id="added-already-deleting"),
        pytest.param(None, ds_pod(owner=DS1), MODIFIED, Wakeups(), id="modified"),
        pytest.param(None, ds_pod(owner=DS1), RELISTED, Wakeups(), id="relisted-may-be-old"),
        pytest.param(None, ds_pod(), ADDED, Wakeups(), id="orphan"),
        pytest.param(None, ds_pod(owner=GONE), ADDED, Wakeups(), id="owner-gone"),
    ],
)
def test_replayed_pod_changes_only_feed_expectations(old: Pod | None, new: Pod | None, event_type: str,
                                                     wakeups: Wakeups) -> None:
    assert pod_wakeups(cache_of(DS1, DS2), old, new, event_type, replayed=True) == wakeups


# --- addNode / updateNode ---------------------------------------------------------------------------------

def node_wakeups(old: Node | None, new: Node | None, *dss: DaemonSet, replayed: bool = False) -> Wakeups:
    wakeups = Wakeups()
    event_type = ADDED if old is None else DELETED if new is None else MODIFIED
    on_node(change(old, new, event_type, replayed), cache_of(*dss), wakeups)
    return wakeups


def new_node(name: str = "node1", labels: dict[str, str] | None = None) -> Any:
    """newNode: Ready, the given labels (none but the builder's hostname otherwise)."""
    return node(name).labels(labels or {}).ready().allocatable(pods="100")


SELECTING_DS = daemonset("ds").selector(SIMPLE).node_selector(NODE_LABELS).build()
PLAIN_DS = daemonset("ds").selector(SIMPLE).build()
DS_KEY = controller_key("default", "ds")


def test_add_node_syncs_daemonsets_that_should_run_there() -> None:
    """TestAddNode: a node the node selector rejects wakes nothing; a matching one wakes the DaemonSet."""
    assert node_wakeups(None, new_node("node1").build(), SELECTING_DS) == Wakeups()
    assert node_wakeups(None, new_node("node2", NODE_LABELS).build(), SELECTING_DS) == Wakeups(enqueue=[DS_KEY])


def test_add_node_syncs_every_daemonset_that_should_run_in_namespace_and_name_order() -> None:
    dss = [daemonset("b").ns("kube-system").build(), daemonset("a").ns("kube-system").build(),
           daemonset("z").build(), daemonset("picky").node_selector(NODE_LABELS).build()]
    assert node_wakeups(None, new_node().build(), *dss) == Wakeups(enqueue=[
        controller_key("default", "z"), controller_key("kube-system", "a"), controller_key("kube-system", "b")])


def test_add_node_where_pods_may_only_keep_running_wakes_nothing() -> None:
    """addNode tests shouldRun only: an untolerated NoSchedule taint gives (false, true)."""
    tainted = new_node().taint("dedicated", "user1", "NoSchedule").build()
    assert node_wakeups(None, tainted, PLAIN_DS) == Wakeups()


@pytest.mark.parametrize(
    ("old", "new", "ds", "enqueue"),
    [
        pytest.param(new_node(), new_node(), SELECTING_DS, False, id="nothing-changed"),
        pytest.param(new_node(), new_node(labels=NODE_LABELS), SELECTING_DS, True, id="node-labels-changed"),
        pytest.param(new_node().taint("dedicated", "user1", "NoSchedule"), new_node(), PLAIN_DS, True,
                     id="node-taints-changed"),
        pytest.param(new_node(), new_node().allocatable(memory="200M", cpu="200m"), PLAIN_DS, False,
                     id="node-allocatable-changed"),
        pytest.param(new_node(), new_node().ready(CONDITION_FALSE), PLAIN_DS, False, id="node-condition-changed"),
        pytest.param(new_node(), new_node(labels={"unrelated": "x"}), SELECTING_DS, False,
                     id="labels-changed-placement-did-not"),
        pytest.param(new_node(), new_node().taint("dedicated", "user1", "NoExecute"), PLAIN_DS, True,
                     id="noexecute-taint-flips-both"),
        pytest.param(new_node().taint("dedicated", "user1", "NoSchedule"),
                     new_node().taint("dedicated", "user1", "NoExecute"), PLAIN_DS, True,
                     id="noschedule-to-noexecute-flips-should-continue-running"),
        pytest.param(new_node().taint("a", "1", "NoSchedule"), new_node().taint("b", "2", "NoSchedule"), PLAIN_DS,
                     False, id="one-untolerated-noschedule-taint-for-another"),
        pytest.param(new_node(), new_node().taint("node.kubernetes.io/unschedulable", "", "NoSchedule"), PLAIN_DS,
                     False, id="cordon-taint-is-tolerated"),
    ],
)
def test_update_node(old: Any, new: Any, ds: DaemonSet, enqueue: bool) -> None:
    """TestUpdateNode: a DaemonSet syncs only when the node's (shouldRun, shouldContinueRunning) for it changes."""
    wakeups = node_wakeups(old.rv("1").build(), new.rv("2").build(), ds)
    assert wakeups == Wakeups(enqueue=[DS_KEY] if enqueue else [])


def test_update_node_syncs_only_the_daemonsets_whose_placement_changed() -> None:
    blue = daemonset("blue").node_selector(color="blue").build()
    red = daemonset("red").node_selector(color="red").build()
    everywhere = daemonset("everywhere").build()
    old = new_node(labels={"color": "blue"}).build()
    new = new_node(labels={"color": "red"}).build()
    assert node_wakeups(old, new, red, everywhere, blue) == Wakeups(
        enqueue=[controller_key("default", "blue"), controller_key("default", "red")])


@pytest.mark.parametrize(
    ("old", "new", "ignored"),
    [
        pytest.param(new_node(), new_node(), True, id="nothing-changed"),
        pytest.param(new_node(), new_node(labels=NODE_LABELS), False, id="node-labels-changed"),
        pytest.param(new_node().taint("dedicated", "user1", "NoSchedule"), new_node(), False,
                     id="node-taints-changed"),
        pytest.param(new_node().rv("1"), new_node().rv("2").annotations(a="b").ready(CONDITION_FALSE)
                     .allocatable(memory="1Gi").unschedulable(), True, id="only-labels-and-taints-count"),
        pytest.param(new_node().condition(NODE_READY, "True"), new_node().condition("DiskPressure", "True"), True,
                     id="condition-types-changed"),
    ],
)
def test_should_ignore_node_update(old: Any, new: Any, ignored: bool) -> None:
    """TestShouldIgnoreNodeUpdate."""
    assert should_ignore_node_update(old.build(), new.build()) is ignored


def test_node_deletion_and_replayed_node_changes_wake_nothing() -> None:
    """There is no deleteNode handler; node changes feed no expectations."""
    n = new_node(labels=NODE_LABELS).build()
    assert node_wakeups(n, None, SELECTING_DS) == Wakeups()
    assert node_wakeups(None, n, SELECTING_DS, replayed=True) == Wakeups()
