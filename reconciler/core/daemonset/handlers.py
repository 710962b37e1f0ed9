"""The DaemonSet controller's event handlers, as pure functions producing wake-ups.

Its own objects' and its pods' handlers are the ones both controllers share (reconciler.core.handling), set
up with the DaemonSet's differences (below); its ControllerRevisions' and its Nodes' are its own.

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

from typing import Final

from kube.apps import ControllerRevision, DaemonSet
from kube.core import Node, Pod
from kube.ownership import get_controller_of
from messages.keys import ControllerKey, ControllerKind
from reconciler.core.cache import Change
from reconciler.core.daemonset.placement import node_should_run_daemon_pod
from reconciler.core.handling import OwnerHandlers
from reconciler.core.view import CacheView, Wakeups

__all__ = [
    "API_VERSION",
    "KIND",
    "all_daemonsets",
    "controller_key",
    "daemonset_key",
    "history_daemonsets",
    "on_controller_revision",
    "on_daemonset",
    "on_node",
    "on_pod",
    "pod_daemonsets",
    "should_ignore_node_update",
]

KIND: Final = ControllerKind.DAEMON_SET.value
API_VERSION: Final = "apps/v1"

REVISION_KIND: Final = "ControllerRevision"


def controller_key(namespace: str, name: str) -> ControllerKey:
    """The DaemonSet's work-queue key (upstream's ``namespace/name``, with the kind: ``DaemonSet/<ns>/<name>``)."""
    return ControllerKey(ControllerKind.DAEMON_SET, namespace, name)


def daemonset_key(ds: DaemonSet) -> ControllerKey:
    return ControllerKey(ControllerKind.DAEMON_SET, ds.metadata.namespace, ds.metadata.name)


# addDaemonset/updateDaemonset/deleteDaemonset, addPod/updatePod/deletePod. One DaemonSet with a selector that
# does not parse makes the whole owner lookup fail, so nothing is found (the apps/v1 lister returns an error
# there, where the ReplicaSet's and the old extensions/v1beta1 one skip it); an update to a deleting pod observes
# the deletion of the current pod only, never also the old one when its labels changed.
HANDLERS: Final = OwnerHandlers(ControllerKind.DAEMON_SET, DaemonSet, invalid_selector_fails_lookup=True,
                                 old_owner_sees_deletion=False)
on_daemonset = HANDLERS.on_owner
on_pod = HANDLERS.on_pod


def pod_daemonsets(pod: Pod, view: CacheView) -> list[DaemonSet]:
    """GetPodDaemonSets (apps/v1 lister): the namespace's DaemonSets whose non-empty selector matches the pod."""
    return HANDLERS.matching(pod, view)


def history_daemonsets(history: ControllerRevision, view: CacheView) -> list[DaemonSet]:
    """GetHistoryDaemonSets (apps/v1 lister): the DaemonSets whose non-empty selector matches the revision."""
    return HANDLERS.matching(history, view)


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
    HANDLERS.enqueue_all(history_daemonsets(history, view), wakeups)


def _update_history(old: ControllerRevision, cur: ControllerRevision, view: CacheView, wakeups: Wakeups) -> None:
    if cur.metadata.resource_version == old.metadata.resource_version:
        return  # a resync
    ds = HANDLERS.follow(old, cur, view, wakeups)
    if ds is not None:
        wakeups.enqueue.append(daemonset_key(ds))


def _delete_history(history: ControllerRevision, view: CacheView, wakeups: Wakeups) -> None:
    ds = HANDLERS.resolve(history.metadata.namespace, get_controller_of(history.metadata), view)
    if ds is not None:  # nobody cares about an orphan going
        wakeups.enqueue.append(daemonset_key(ds))


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
        HANDLERS.enqueue_all((ds for ds in all_daemonsets(view)
                               if node_should_run_daemon_pod(new, ds, comparison_operators=gate).should_run), wakeups)
    elif isinstance(old, Node) and not should_ignore_node_update(old, new):
        HANDLERS.enqueue_all((ds for ds in all_daemonsets(view)
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

def all_daemonsets(view: CacheView) -> list[DaemonSet]:
    """dsLister.List(labels.Everything()), in (namespace, name) order."""
    return sorted((ds for ds in view.all(KIND) if isinstance(ds, DaemonSet)),
                  key=lambda d: (d.metadata.namespace, d.metadata.name))

