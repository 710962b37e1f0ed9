"""The ReplicaSet controller's event handlers: replica_set_test.go's TestPodControllerLookup, TestUpdatePods,
TestOverlappingRSs, TestDeleteFinalStateUnknown, TestDeletionTimestamp, TestWatchPods and TestWatchControllers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from kube.apps import ReplicaSet
from kube.core import POD_FAILED, POD_PENDING, Pod
from kube.meta import LabelSelector, LabelSelectorRequirement
from kube.testing import daemonset, pod, replicaset
from messages.keys import parse_controller_key
from messages.observed import ADDED, DELETED, DELETED_FINAL_STATE_UNKNOWN, MODIFIED, RELISTED
from reconciler.core.cache import Cache, Change
from reconciler.core.controllers import Controllers
from reconciler.core.expectations import expect
from reconciler.core.replicaset.handlers import (
    controller_key,
    on_pod,
    on_replicaset,
    pod_replicasets,
)
from reconciler.core.view import Wakeups
from tests.reconciler.builders import NOW, Cluster, cache_of, owned_pod

RS1 = replicaset("foobar").selector(foo="bar").build()
RS2 = replicaset("barfoo").selector(bar="foo").build()
KEY1 = controller_key("default", "foobar")
KEY2 = controller_key("default", "barfoo")
LABELS1 = {"foo": "bar"}
LABELS2 = {"bar": "foo"}


def change(old: Any, new: Any, event_type: str = MODIFIED, replayed: bool = False) -> Change:
    obj = new if new is not None else old
    meta = obj.metadata
    return Change(obj.kind, meta.namespace, meta.name, meta.uid, old, new, event_type, replayed)


def pod_wakeups(view: Cache, old: Pod | None, new: Pod | None, event_type: str = MODIFIED,
                replayed: bool = False) -> Wakeups:
    wakeups = Wakeups()
    on_pod(change(old, new, event_type, replayed), view, wakeups)
    return wakeups


def rs_pod(name: str = "pod", labels: dict[str, str] | None = None, owner: ReplicaSet | None = None,
           rv: str = "1") -> Pod:
    b = pod(name).labels(labels or {}).rv(rv)
    if owner is not None:
        b = b.owned_by(owner)
    return b.build()


def test_keys_round_trip() -> None:
    assert str(KEY1) == "ReplicaSet/default/foobar"
    assert parse_controller_key(str(KEY1)) == KEY1
    assert (KEY1.namespace, KEY1.name) == ("default", "foobar")


# --- getPodReplicaSets ----------------------------------------------------------------------------------

def rs_selecting(name: str, selector: LabelSelector | None, namespace: str = "default") -> ReplicaSet:
    return replicaset(name).ns(namespace).raw_selector(selector).build()


FOO_BAR = LabelSelector(match_labels={"foo": "bar"})


@pytest.mark.parametrize(
    ("rss", "labels", "namespace", "expected"),
    [
        pytest.param([rs_selecting("basic", None)], {}, "", [], id="pod-without-labels-matches-nothing"),
        pytest.param([rs_selecting("foo", FOO_BAR)], {"foo": "bar"}, "ns", [], id="matching-labels-other-namespace"),
        pytest.param([rs_selecting("bar", FOO_BAR, "ns")], {"foo": "bar"}, "ns", ["bar"],
                     id="matching-labels-and-namespace"),
        pytest.param([rs_selecting("nil", None)], {"foo": "bar"}, "default", [], id="nil-selector-matches-nothing"),
        pytest.param([rs_selecting("empty", LabelSelector())], {"foo": "bar"}, "default", [],
                     id="empty-selector-matches-nothing"),
        pytest.param([rs_selecting("bad", LabelSelector(match_expressions=[
            LabelSelectorRequirement(key="foo", operator="Bogus", values=["bar"])]))], {"foo": "bar"}, "default", [],
            id="invalid-selector-is-skipped"),
        pytest.param([rs_selecting("expr", LabelSelector(match_expressions=[
            LabelSelectorRequirement(key="foo", operator="In", values=["bar", "baz"])]))], {"foo": "baz"},
            "default", ["expr"], id="match-expressions"),
        pytest.param([rs_selecting("b", FOO_BAR), rs_selecting("a", FOO_BAR), rs_selecting("c", LabelSelector(
            match_labels={"foo": "other"}))], {"foo": "bar", "x": "y"}, "default", ["a", "b"],
            id="every-overlapping-replicaset-by-name"),
    ],
)
def test_pod_replicasets(rss: list[ReplicaSet], labels: dict[str, str], namespace: str, expected: list[str]) -> None:
    """TestPodControllerLookup: the ReplicaSets that might adopt an orphan."""
    found = pod_replicasets(pod("p").ns(namespace).labels(labels).build(), cache_of(*rss))
    assert [rs.metadata.name for rs in found] == expected


# --- addRS / updateRS / deleteRS ----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("old", "new", "replayed", "enqueue", "dropped"),
    [
        pytest.param(None, RS1, False, [KEY1], [], id="add"),
        pytest.param(RS1, RS1, False, [KEY1], [], id="update-even-a-resync"),
        pytest.param(RS1, None, False, [KEY1], [KEY1], id="delete-drops-expectations"),
        pytest.param(None, RS1, True, [], [], id="replayed-add"),
        pytest.param(RS1, None, True, [], [], id="replayed-delete"),
    ],
)
def test_replicaset_events(old: ReplicaSet | None, new: ReplicaSet | None, replayed: bool, enqueue: list[str],
                           dropped: list[str]) -> None:
    """TestWatchControllers and deleteRS: every ReplicaSet event syncs it; a deletion also drops its expectations."""
    wakeups = Wakeups()
    on_replicaset(change(old, new, ADDED if old is None else MODIFIED, replayed), wakeups)
    assert wakeups == Wakeups(enqueue=enqueue, expectations_deleted=dropped)


RECREATED = replicaset("foobar").selector(foo="bar").uid("new-uid").build()


def test_recreation_seen_first_drops_the_old_replicasets_expectations() -> None:
    """updateRS with a changed UID: the new ReplicaSet appears while the old one is still cached."""
    cluster = Cluster(RS1)
    added, _, _ = cluster.add(RECREATED)
    wakeups = Wakeups()
    on_replicaset(added, wakeups, cluster.cache)
    assert wakeups == Wakeups(enqueue=[KEY1], expectations_deleted=[KEY1])


def test_late_tombstone_keeps_the_new_replicasets_expectations() -> None:
    cluster = Cluster(RS1, RECREATED)
    tombstone, _, _ = cluster.delete(RS1, DELETED_FINAL_STATE_UNKNOWN)
    wakeups = Wakeups()
    on_replicaset(tombstone, wakeups, cluster.cache)
    assert wakeups == Wakeups(enqueue=[KEY1])


@pytest.mark.parametrize("event_type", [DELETED, DELETED_FINAL_STATE_UNKNOWN])
def test_deletion_with_view_drops_expectations(event_type: str) -> None:
    cluster = Cluster(RS1, RS2)
    deleted, _, _ = cluster.delete(RS1, event_type)
    wakeups = Wakeups()
    on_replicaset(deleted, wakeups, cluster.cache)
    assert wakeups == Wakeups(enqueue=[KEY1], expectations_deleted=[KEY1])


def test_add_with_view_of_another_name_keeps_expectations() -> None:
    cluster = Cluster(RS2)
    added, _, _ = cluster.add(RS1)
    wakeups = Wakeups()
    on_replicaset(added, wakeups, cluster.cache)
    assert wakeups == Wakeups(enqueue=[KEY1])


# --- addPod -------------------------------------------------------------------------------------------------

def test_add_owned_pod_observes_a_creation() -> None:
    wakeups = pod_wakeups(cache_of(RS1), None, rs_pod(labels=LABELS1, owner=RS1), ADDED)
    assert wakeups == Wakeups(enqueue=[KEY1], creations_observed=[KEY1])


@pytest.mark.parametrize(
    "owner",
    [
        pytest.param(replicaset("foobar").selector(foo="bar").uid("stale-uid").build(), id="same-name-other-uid"),
        pytest.param(replicaset("gone").build(), id="owner-not-in-cache"),
        pytest.param(daemonset("foobar").build(), id="owner-of-another-kind"),
    ],
)
def test_add_pod_whose_controller_does_not_resolve(owner: Any) -> None:
    """resolveControllerRef: a reference to another kind, or to a uid the cache does not hold, is nobody's."""
    assert pod_wakeups(cache_of(RS1, RS2), None, rs_pod(labels=LABELS1, owner=owner), ADDED) == Wakeups()


@pytest.mark.parametrize(
    ("labels", "enqueue"),
    [
        pytest.param(LABELS1, [KEY1], id="one-match"),
        pytest.param({**LABELS1, **LABELS2}, [KEY2, KEY1], id="two-matches"),
        pytest.param({"no": "match"}, [], id="no-match"),
        pytest.param({}, [], id="no-labels"),
    ],
)
def test_add_orphan_syncs_matching_replicasets(labels: dict[str, str], enqueue: list[str]) -> None:
    """An orphan wakes every ReplicaSet that might adopt it, and is no creation anyone waits for."""
    assert pod_wakeups(cache_of(RS1, RS2), None, rs_pod(labels=labels), ADDED) == Wakeups(enqueue=enqueue)


def test_overlapping_replicasets_only_the_owner_syncs() -> None:
    """TestOverlappingRSs: nine ReplicaSets select the pod; its controller reference picks one."""
    rss = [replicaset(f"rs{j}").selector(foo="bar").build() for j in range(1, 10)]
    owner = rss[3]
    wakeups = pod_wakeups(cache_of(*reversed(rss)), None, rs_pod(labels=LABELS1, owner=owner), ADDED)
    assert wakeups == Wakeups(enqueue=[controller_key("default", "rs4")],
                              creations_observed=[controller_key("default", "rs4")])


def test_add_pod_already_being_deleted_is_a_deletion() -> None:
    """addPod: a pod first seen with a deletionTimestamp (a restart) is a deletion, not a creation."""
    deleting = pod("pod").labels(LABELS1).owned_by(RS1).deleting(NOW).build()
    assert pod_wakeups(cache_of(RS1), None, deleting, ADDED) == Wakeups(
        enqueue=[KEY1], deletions_observed=[(KEY1, "default/pod")])


# --- updatePod ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("old", "new", "enqueue"),
    [
        pytest.param(rs_pod(labels=LABELS1, owner=RS1, rv="1"), rs_pod(labels=LABELS2, owner=RS1, rv="2"), [KEY1],
                     id="case-1-owned-pod-relabelled-syncs-its-owner"),
        pytest.param(rs_pod(labels=LABELS2, owner=RS2, rv="1"), rs_pod(labels=LABELS2, rv="2"), [KEY2, KEY2],
                     id="case-2-orphaned-syncs-former-owner-and-matching"),
        pytest.param(rs_pod(labels=LABELS2, owner=RS1, rv="1"), rs_pod(labels=LABELS2, rv="2"), [KEY1, KEY2],
                     id="case-3-orphaned-syncs-former-owner-and-another-match"),
        pytest.param(rs_pod(labels=LABELS1, owner=RS2, rv="1"), rs_pod(labels=LABELS2, owner=RS2, rv="2"), [KEY2],
                     id="case-4-keep-reference-change-labels"),
        pytest.param(rs_pod(labels=LABELS1, owner=RS1, rv="1"), rs_pod(labels=LABELS1, owner=RS2, rv="2"),
                     [KEY1, KEY2], id="controller-changed-syncs-both"),
        pytest.param(rs_pod(labels={"x": "y"}, rv="1"), rs_pod(labels=LABELS1, rv="2"), [KEY1],
                     id="orphan-labels-change-to-a-match"),
        pytest.param(rs_pod(labels=LABELS1, rv="1"), rs_pod(labels=LABELS1, rv="2"), [],
                     id="orphan-without-meta-change-is-ignored"),
        pytest.param(rs_pod(labels=LABELS1, owner=RS1, rv="7"), rs_pod(labels=LABELS2, owner=RS2, rv="7"), [],
                     id="resync-with-same-resource-version-is-ignored"),
    ],
)
def test_update_pod_syncs(old: Pod, new: Pod, enqueue: list[str]) -> None:
    """TestUpdatePods: the old and the new controller, or every match of an orphan whose labels changed."""
    assert pod_wakeups(cache_of(RS1, RS2), old, new) == Wakeups(enqueue=enqueue)


def test_owned_pod_status_change_syncs_its_owner() -> None:
    """TestWatchPods: a pod of the ReplicaSet turning Failed syncs it."""
    old = owned_pod("pod", RS1).rv("1").build()
    new = owned_pod("pod", RS1, phase=POD_FAILED).rv("2").build()
    assert pod_wakeups(cache_of(RS1), old, new) == Wakeups(enqueue=[KEY1])


MIN_READY = replicaset("foobar").selector(foo="bar").min_ready_seconds(30).build()


@pytest.mark.parametrize(
    ("rs", "old_ready", "new_ready", "after"),
    [
        pytest.param(MIN_READY, False, True, [(KEY1, timedelta(seconds=31))], id="turned-ready"),
        pytest.param(MIN_READY, True, True, [], id="already-ready"),
        pytest.param(MIN_READY, True, False, [], id="turned-unready"),
        pytest.param(RS1, False, True, [], id="no-min-ready-seconds"),
    ],
)
def test_pod_turning_ready_checks_availability_later(rs: ReplicaSet, old_ready: bool, new_ready: bool,
                                                     after: list[tuple[str, timedelta]]) -> None:
    """updatePod: minReadySeconds + 1 s after a pod turns Ready, its ReplicaSet looks again."""
    base = owned_pod("pod", rs, phase=POD_PENDING)
    old = (base.ready(NOW) if old_ready else base.not_ready(NOW)).rv("1").build()
    new = (base.ready(NOW) if new_ready else base.not_ready(NOW)).rv("2").build()
    assert pod_wakeups(cache_of(rs), old, new) == Wakeups(enqueue=[KEY1], enqueue_after=after)


@pytest.mark.parametrize(
    ("old", "new", "deletions"),
    [
        pytest.param(rs_pod(labels=LABELS1, owner=RS1, rv="1"),
                     pod("pod").labels(LABELS1).owned_by(RS1).deleting(NOW).rv("2").build(),
                     [(KEY1, "default/pod")], id="deletion-timestamp-set"),
        pytest.param(rs_pod(labels=LABELS1, owner=RS1, rv="1"),
                     pod("pod").labels(LABELS2).owned_by(RS1).deleting(NOW).rv("2").build(),
                     [(KEY1, "default/pod"), (KEY1, "default/pod")], id="labels-changed-too-observes-both"),
        pytest.param(rs_pod(labels=LABELS1, owner=RS1, rv="1"),
                     pod("pod").labels(LABELS2).owned_by(RS2).deleting(NOW).rv("2").build(),
                     [(KEY2, "default/pod"), (KEY1, "default/pod")], id="controller-changed-too-observes-both"),
        pytest.param(rs_pod(labels=LABELS1, rv="1"), pod("pod").labels(LABELS1).deleting(NOW).rv("2").build(),
                     [], id="orphan-being-deleted"),
    ],
)
def test_update_to_deleting_is_a_deletion(old: Pod, new: Pod, deletions: list[tuple[str, str]]) -> None:
    """updatePod: a graceful deletion counts now, for the current and (labels changed) the old controller."""
    wakeups = pod_wakeups(cache_of(RS1, RS2), old, new)
    assert wakeups == Wakeups(enqueue=[k for k, _ in deletions], deletions_observed=deletions)


# --- deletePod ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("gone", "wakeups"),
    [
        pytest.param(rs_pod(labels=LABELS1, owner=RS1), Wakeups(enqueue=[KEY1], deletions_observed=[
            (KEY1, "default/pod")]), id="owned"),
        pytest.param(rs_pod(labels=LABELS1), Wakeups(), id="orphan"),
        pytest.param(rs_pod(labels=LABELS1, owner=replicaset("gone").build()), Wakeups(), id="owner-gone"),
    ],
)
def test_delete_pod(gone: Pod, wakeups: Wakeups) -> None:
    assert pod_wakeups(cache_of(RS1), gone, None, DELETED) == wakeups


def test_delete_final_state_unknown() -> None:
    """TestDeleteFinalStateUnknown: a tombstone of a pod the cache never held still syncs its controller."""
    cluster = Cluster(RS1)
    gone = owned_pod("pod0", RS1).build()
    tombstone, _, _ = cluster.delete(gone, DELETED_FINAL_STATE_UNKNOWN)
    assert tombstone.old is not None and tombstone.new is None
    wakeups = Wakeups()
    on_pod(tombstone, cluster.cache, wakeups)
    assert wakeups == Wakeups(enqueue=[KEY1], deletions_observed=[(KEY1, "default/pod0")])


# --- replayed changes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("old", "new", "event_type", "wakeups"),
    [
        pytest.param(None, rs_pod(labels=LABELS1, owner=RS1), ADDED, Wakeups(creations_observed=[KEY1]),
                     id="added"),
        pytest.param(rs_pod(labels=LABELS1, owner=RS1), None, DELETED,
                     Wakeups(deletions_observed=[(KEY1, "default/pod")]), id="deleted"),
        pytest.param(None, pod("pod").labels(LABELS1).owned_by(RS1).deleting(NOW).build(), MODIFIED,
                     Wakeups(deletions_observed=[(KEY1, "default/pod")]), id="deletion-timestamp"),
        pytest.param(None, rs_pod(labels=LABELS1, owner=RS1), MODIFIED, Wakeups(), id="modified"),
        pytest.param(None, rs_pod(labels=LABELS1, owner=RS1), RELISTED, Wakeups(), id="relisted-may-be-old"),
        pytest.param(None, rs_pod(labels=LABELS1), ADDED, Wakeups(), id="orphan"),
    ],
)
def test_replayed_pod_changes_only_feed_expectations(old: Pod | None, new: Pod | None, event_type: str,
                                                     wakeups: Wakeups) -> None:
    """A change the cache already reflected observes creations and deletions, and syncs nothing."""
    assert pod_wakeups(cache_of(RS1), old, new, event_type, replayed=True) == wakeups


# --- TestDeletionTimestamp: the expectations see each deletion once -----------------------------------------

def test_deletion_timestamp_counts_each_deletion_once() -> None:
    """TestDeletionTimestamp, through the engine's expectations (UID-tracked by pod key)."""
    cluster = Cluster(RS1)
    controllers = Controllers(cluster.cache)
    deleting = pod("pod0").labels(LABELS1).owned_by(RS1).deleting(NOW).rv("1")

    # a pod added with a deletion timestamp lowers deletions, not creations
    controllers.expectations[KEY1] = expect(0, 1, NOW, frozenset({"default/pod0"}))
    controllers.observe([cluster.add(deleting.build())], NOW)
    assert controllers.queue.pop_ready(NOW) == [KEY1]
    assert controllers.expectations[KEY1].fulfilled()
    assert controllers.expectations[KEY1].adds == 0

    # an update from no deletion timestamp to one is a deletion
    cluster = Cluster(RS1)
    controllers = Controllers(cluster.cache)
    controllers.expectations[KEY1] = expect(0, 1, NOW, frozenset({"default/pod0"}))
    cluster.add(owned_pod("pod0", RS1).rv("2").build())
    controllers.observe([cluster.update(deleting.rv("3").build())], NOW)
    assert controllers.queue.pop_ready(NOW) == [KEY1]
    assert controllers.expectations[KEY1].fulfilled()

    # another update of the deleting pod is not a second deletion, nor is its final delete
    second = owned_pod("secondPod", RS1).build()
    cluster.add(second)
    controllers.expectations[KEY1] = expect(0, 1, NOW, frozenset({"default/secondPod"}))
    controllers.observe([cluster.update(deleting.rv("4").annotations(touched="yes").build())], NOW)
    assert not controllers.expectations[KEY1].fulfilled()
    controllers.observe([cluster.delete(deleting.rv("5").build())], NOW)
    assert not controllers.expectations[KEY1].fulfilled()

    # deleting the second pod clears the expectations
    controllers.observe([cluster.delete(second)], NOW)
    assert controllers.queue.pop_ready(NOW) == [KEY1]
    assert controllers.expectations[KEY1].fulfilled()
    assert controllers.expectations[KEY1].deletion_keys == frozenset()
