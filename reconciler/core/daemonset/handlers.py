"""The DaemonSet controller's event handlers, as pure functions producing wake-ups.

Upstream (pkg/controller/daemon/daemon_controller.go) registers handlers on four informers:

* DaemonSets (addDaemonset / updateDaemonset / deleteDaemonset): every event syncs the DaemonSet; a
  deletion (or an update whose UID changed: the name now belongs to a re-created DaemonSet) also drops
  its expectations. The failed-pods backoff is not touched: its keys carry the DaemonSet's UID and are
  garbage-collected by age.
* ControllerRevisions (addHistory / updateHistory / deleteHistory): they feed no expectations. An owned
  revision's add is only logged; its update and delete sync the owner. An orphan syncs every DaemonSet
  whose selector matches its labels (getDaemonSetsForHistory), on add, and on an update that changed its
  labels or controller reference.
* Pods (addPod / updatePod / deletePod): as the ReplicaSet's, with three differences: the DaemonSet's
  expectations are plain counts (no UID tracking), an update to a deleting pod observes the deletion of
  the current pod only (never also the old one when its labels changed), and any DaemonSet in the
  namespace with an invalid selector makes the orphan lookup find nothing (GetPodDaemonSets returns an
  error, where the ReplicaSet lister skips that one ReplicaSet).
* Nodes (addNode / updateNode; there is no delete handler): an added node syncs each DaemonSet that
  should run a pod there; an update whose labels and taints did not change is ignored
  (shouldIgnoreNodeUpdate), otherwise each DaemonSet whose (shouldRun, shouldContinueRunning) differs
  between the old and the new node is synced. Pods left on a deleted node are removed by the pod garbage
  collector, whose pod deletions then wake their DaemonSet.

A `replayed` change (one the cache already reflected when the reconciler restarted) only feeds the
expectations: every DaemonSet is synced after a restart anyway.

Deterministic order: where upstream iterates a lister (in map order), DaemonSets are listed by namespace,
then name.

Expectations: every deletion is reported as ``(key, "namespace/name")`` like the ReplicaSet's, but the
DaemonSet's expectations count deletions without tracking keys (upstream's ``DeletionObserved(dsKey)``):
the consumer must lower the count for each entry, whatever the pod key. So a pod whose deletion timestamp
is set, then updated again, then deleted lowers the count on each of those events, as upstream's does.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Final

from kube.apps import ControllerRevision, DaemonSet
from kube.core import Node, Pod
from kube.labels import SelectorError, selector_from_label_selector
from kube.meta import OwnerReference
from kube.ownership import get_controller_of
from kube.pods import is_pod_ready, pod_key
from messages.observed import ADDED
from reconciler.core.cache import Change
from reconciler.core.daemonset.placement import node_should_run_daemon_pod
from reconciler.core.view import CacheView, Wakeups

__all__ = [
    "API_VERSION",
    "KIND",
    "PREFIX",
    "controller_key",
    "daemonset_key",
    "history_daemonsets",
    "on_controller_revision",
    "on_daemonset",
    "on_node",
    "on_pod",
    "pod_daemonsets",
    "should_ignore_node_update",
    "split_key",
]

KIND: Final = "DaemonSet"
API_VERSION: Final = "apps/v1"
PREFIX: Final = f"{KIND}/"

REVISION_KIND: Final = "ControllerRevision"


def controller_key(namespace: str, name: str) -> str:
    """``DaemonSet/<namespace>/<name>``: the work-queue key (upstream's ``namespace/name``, kind-prefixed)."""
    return f"{PREFIX}{namespace}/{name}"


def split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key[len(PREFIX):].partition("/")
    return namespace, name


def daemonset_key(ds: DaemonSet) -> str:
    return controller_key(ds.metadata.namespace, ds.metadata.name)


# --- DaemonSets -------------------------------------------------------------------------------------------

def on_daemonset(change: Change, wakeups: Wakeups, view: CacheView | None = None) -> None:
    """addDaemonset/updateDaemonset/deleteDaemonset. With `view` (the cache, the change applied), a
    re-creation under the same name is handled as upstream's updateDaemonset with a changed UID, whatever
    order the two objects' events come in (a relist publishes the new DaemonSet before the old one's
    tombstone)."""
    if change.replayed:
        return
    key = controller_key(change.namespace, change.name)
    if change.new is None:
        # deleteDaemonset: DeleteExpectations, then sync (a no-op); unless the name already belongs to a
        # newer DaemonSet, whose expectations these now are
        current = view.named(KIND, change.namespace, change.name) if view is not None else None
        if not (isinstance(current, DaemonSet) and current.metadata.uid != change.uid):
            wakeups.expectations_deleted.append(key)
    elif change.old is None and view is not None and any(
            ds.metadata.name == change.name and ds.metadata.uid != change.uid
            for ds in view.in_namespace(KIND, change.namespace)):
        # updateDaemonset saw the UID change: deleteDaemonset(old) drops the old DaemonSet's expectations now
        wakeups.expectations_deleted.append(key)
    wakeups.enqueue.append(key)  # updateDaemonset syncs on every update, resyncs included


# --- ControllerRevisions ----------------------------------------------------------------------------------

def on_controller_revision(change: Change, view: CacheView, wakeups: Wakeups) -> None:
    """addHistory/updateHistory/deleteHistory. Revisions feed no expectations, so a replayed change does nothing."""
    if change.replayed:
        return
    old, new = change.old, change.new
    if new is None:
        if isinstance(old, ControllerRevision):
            _delete_history(old, view, wakeups)
    elif old is None:
        if isinstance(new, ControllerRevision):
            _add_history(new, view, wakeups)
    elif isinstance(old, ControllerRevision) and isinstance(new, ControllerRevision):
        _update_history(old, new, view, wakeups)


def _add_history(history: ControllerRevision, view: CacheView, wakeups: Wakeups) -> None:
    if history.metadata.deletion_timestamp is not None:
        # seen already being deleted (e.g. after a restart)
        _delete_history(history, view, wakeups)
        return
    if get_controller_of(history.metadata) is not None:
        return  # owned (resolvable or not): upstream only logs it
    _enqueue_all(history_daemonsets(history, view), wakeups)


def _update_history(old: ControllerRevision, cur: ControllerRevision, view: CacheView, wakeups: Wakeups) -> None:
    if cur.metadata.resource_version == old.metadata.resource_version:
        return  # a resync
    cur_ref = get_controller_of(cur.metadata)
    old_ref = get_controller_of(old.metadata)
    ref_changed = cur_ref != old_ref
    if ref_changed and old_ref is not None:
        previous = _resolve(old.metadata.namespace, old_ref, view)
        if previous is not None:
            wakeups.enqueue.append(daemonset_key(previous))
    if cur_ref is not None:
        ds = _resolve(cur.metadata.namespace, cur_ref, view)
        if ds is not None:
            wakeups.enqueue.append(daemonset_key(ds))
        return
    if cur.metadata.labels != old.metadata.labels or ref_changed:
        _enqueue_all(history_daemonsets(cur, view), wakeups)


def _delete_history(history: ControllerRevision, view: CacheView, wakeups: Wakeups) -> None:
    ds = _resolve(history.metadata.namespace, get_controller_of(history.metadata), view)
    if ds is not None:  # nobody cares about an orphan going
        wakeups.enqueue.append(daemonset_key(ds))


# --- Pods -------------------------------------------------------------------------------------------------

def on_pod(change: Change, view: CacheView, wakeups: Wakeups) -> None:
    """addPod/updatePod/deletePod."""
    old, new = change.old, change.new
    if change.replayed:
        _observe_replayed(change, view, wakeups)
    elif new is None:
        if isinstance(old, Pod):
            _delete_pod(old, view, wakeups)
    elif old is None:
        if isinstance(new, Pod):
            _add_pod(new, view, wakeups)
    elif isinstance(old, Pod) and isinstance(new, Pod):
        _update_pod(old, new, view, wakeups)


def _observe_replayed(change: Change, view: CacheView, wakeups: Wakeups) -> None:
    pod = change.new if change.new is not None else change.old
    if not isinstance(pod, Pod):
        return
    ds = _resolve(pod.metadata.namespace, get_controller_of(pod.metadata), view)
    if ds is None:
        return
    key = daemonset_key(ds)
    if change.new is None or pod.metadata.deletion_timestamp is not None:
        wakeups.deletions_observed.append((key, pod_key(pod)))
    elif change.type == ADDED:
        wakeups.creations_observed.append(key)


def _add_pod(pod: Pod, view: CacheView, wakeups: Wakeups) -> None:
    if pod.metadata.deletion_timestamp is not None:
        # a pod already being deleted when first seen (e.g. after a restart) is no creation
        _delete_pod(pod, view, wakeups)
        return
    ref = get_controller_of(pod.metadata)
    if ref is not None:
        ds = _resolve(pod.metadata.namespace, ref, view)
        if ds is not None:
            key = daemonset_key(ds)
            wakeups.creations_observed.append(key)
            wakeups.enqueue.append(key)
        return
    # an orphan: every DaemonSet that might adopt it syncs; no creation is observed for it
    _enqueue_all(pod_daemonsets(pod, view), wakeups)


def _update_pod(old: Pod, cur: Pod, view: CacheView, wakeups: Wakeups) -> None:
    if cur.metadata.resource_version == old.metadata.resource_version:
        return  # a resync: two versions of a pod always differ in resourceVersion
    if cur.metadata.deletion_timestamp is not None:
        # graceful deletion: replace the pod now, not when the kubelet is done with it. Unlike the
        # ReplicaSet, the old pod's controller is not told even if the labels changed.
        _delete_pod(cur, view, wakeups)
        return
    cur_ref = get_controller_of(cur.metadata)
    old_ref = get_controller_of(old.metadata)
    ref_changed = cur_ref != old_ref
    if ref_changed and old_ref is not None:
        previous = _resolve(old.metadata.namespace, old_ref, view)
        if previous is not None:
            wakeups.enqueue.append(daemonset_key(previous))
    if cur_ref is not None:
        ds = _resolve(cur.metadata.namespace, cur_ref, view)
        if ds is None:
            return
        key = daemonset_key(ds)
        wakeups.enqueue.append(key)
        if not is_pod_ready(old) and is_pod_ready(cur) and ds.spec.min_ready_seconds > 0:
            # the pod becomes available minReadySeconds from now; +1 s against clock skew
            wakeups.enqueue_after.append((key, timedelta(seconds=ds.spec.min_ready_seconds + 1)))
        return
    if cur.metadata.labels != old.metadata.labels or ref_changed:
        _enqueue_all(pod_daemonsets(cur, view), wakeups)


def _delete_pod(pod: Pod, view: CacheView, wakeups: Wakeups) -> None:
    ds = _resolve(pod.metadata.namespace, get_controller_of(pod.metadata), view)
    if ds is None:
        return  # nobody waits for an orphan to go
    key = daemonset_key(ds)
    wakeups.deletions_observed.append((key, pod_key(pod)))
    wakeups.enqueue.append(key)


# --- Nodes ------------------------------------------------------------------------------------------------

def on_node(change: Change, view: CacheView, wakeups: Wakeups, *, comparison_operators: bool = False) -> None:
    """addNode/updateNode. A node's deletion wakes nothing: upstream registers no delete handler.
    ``comparison_operators`` is the TaintTolerationComparisonOperators gate placement reads."""
    if change.replayed:
        return
    old, new = change.old, change.new
    if not isinstance(new, Node):
        return
    gate = comparison_operators
    if old is None:
        _enqueue_all((ds for ds in _all_daemonsets(view)
                      if node_should_run_daemon_pod(new, ds, comparison_operators=gate).should_run), wakeups)
    elif isinstance(old, Node) and not should_ignore_node_update(old, new):
        _enqueue_all((ds for ds in _all_daemonsets(view)
                      if node_should_run_daemon_pod(old, ds, comparison_operators=gate)
                      != node_should_run_daemon_pod(new, ds, comparison_operators=gate)), wakeups)


def should_ignore_node_update(old: Node, cur: Node) -> bool:
    """shouldIgnoreNodeUpdate: the labels and the taints are unchanged (all that placement reads, with the name).

    Releases before kubernetes/kubernetes#121669 compared the whole node instead, ignoring only
    resourceVersion and conditions whose set of True types stayed the same (nodeInSameCondition). That let
    more updates through, but the test behind it only compares placements, which read nothing else, so the
    same DaemonSets were synced either way.
    """
    return old.metadata.labels == cur.metadata.labels and old.spec.taints == cur.spec.taints


# --- lookups ----------------------------------------------------------------------------------------------

def _resolve(namespace: str, ref: OwnerReference | None, view: CacheView) -> DaemonSet | None:
    """resolveControllerRef: the cached DaemonSet the reference names, if its uid still matches.

    Only the reference's kind is checked, not its apiVersion, as upstream does."""
    if ref is None or ref.kind != KIND:
        return None
    ds = view.named(KIND, namespace, ref.name)
    return ds if isinstance(ds, DaemonSet) and ds.metadata.uid == ref.uid else None


def pod_daemonsets(pod: Pod, view: CacheView) -> list[DaemonSet]:
    """GetPodDaemonSets (apps/v1 lister): the namespace's DaemonSets whose non-empty selector matches the pod."""
    return _matching(pod.metadata.namespace, pod.metadata.labels, view)


def history_daemonsets(history: ControllerRevision, view: CacheView) -> list[DaemonSet]:
    """GetHistoryDaemonSets (apps/v1 lister): the DaemonSets whose non-empty selector matches the revision."""
    return _matching(history.metadata.namespace, history.metadata.labels, view)


def _matching(namespace: str, labels: dict[str, str], view: CacheView) -> list[DaemonSet]:
    """Nothing for an object without labels. A nil or empty selector matches nothing. One DaemonSet with a
    selector that does not parse makes the whole lookup fail, so nothing is found (the apps/v1 lister
    returns an error there, where the ReplicaSet's and the old extensions/v1beta1 one skip it)."""
    if not labels:
        return []
    found = []
    for ds in view.in_namespace(KIND, namespace):
        try:
            selector = selector_from_label_selector(ds.spec.selector)
        except SelectorError:
            return []
        if not selector.empty() and selector.matches(labels):
            found.append(ds)
    return sorted(found, key=lambda d: d.metadata.name)


def _all_daemonsets(view: CacheView) -> list[DaemonSet]:
    """dsLister.List(labels.Everything()), in (namespace, name) order."""
    return sorted((ds for ds in view.all(KIND) if isinstance(ds, DaemonSet)),
                  key=lambda d: (d.metadata.namespace, d.metadata.name))


def _enqueue_all(daemonsets: Iterable[DaemonSet], wakeups: Wakeups) -> None:
    wakeups.enqueue.extend(daemonset_key(ds) for ds in daemonsets)
