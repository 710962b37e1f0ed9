"""Shadow mode: an act of the acting controller that the watch shows before the change that caused it.

kube-controller-manager acts on its own informers. The shadow's watches of Pods, ReplicaSets, DaemonSets and
ControllerRevisions are separate streams, each in the API server's order but not in order with each other: a
ReplicaSet's new pods may show before the ReplicaSet's scale that caused them, a DaemonSet's first pods or first
rolling-step deletions before the DaemonSet's new template or the ControllerRevision it follows. A shadow deciding
on such a view decides on a cluster no controller ever saw (four pods of a three-replica ReplicaSet: it would
delete one), and cannot decide what upstream did before the cause reached it.

An act is *early* when the cache, with it, contradicts the owner the shadow has (the ones below, each of which
upstream's own rules never do from a consistent view). The shadow holds the owner's syncs until an event of the
owner itself, of its revisions or of a node shows (or a window passes), and the comparator counts the early act,
if the shadow never decided it, as equivalent ("seen before its cause"): see docs/shadow.md.

- a ReplicaSet's pod created while the ReplicaSet then has more active pods than its replicas (upstream's
  manageReplicas creates only up to them), or deleted (not for a disruption) while it then has fewer (a
  scale-down the shadow has not seen; a pod deleted by hand is held back too, until upstream's status write
  for it shows);
- a DaemonSet's pod created or deleted while no ControllerRevision of the DaemonSet's template is in the cache (its
  revision, which upstream writes first in the same sync, has not shown yet);
- a DaemonSet's pod created with a revision hash no revision of the DaemonSet's has, or on a node that, as the
  cache has it, should not run it (NodeShouldRunDaemonPod's shouldRun): upstream saw the node's change (a taint
  removed, a label added) that the shadow has not;
- a DaemonSet's Ready pod of the current revision deleted, not for a disruption (no DisruptionTarget condition),
  alone on its node: upstream's rolling update deletes old pods only, so it saw a newer template the shadow has
  not (of two pods on a node, upstream deletes the newer whatever its revision);
- a DaemonSet's pod evicted by the taint-eviction controller (DisruptionTarget, reason DeletionByTaintManager)
  while its node, as the cache has it, has no NoExecute taint the pod does not tolerate: the node's taint, which
  caused it (and makes the DaemonSet controller delete the pod too), has not shown yet;
- an OnDelete DaemonSet's pod deleted, not for a disruption, not failed and alone on its node, while its node,
  as the cache has it, should go on running it (NodeShouldRunDaemonPod): OnDelete never deletes a pod for an
  update, so upstream saw the node change (a NoExecute taint, a label) that the shadow has not; a pod deleted
  by hand is held back too, until the DaemonSet's status write for it shows;
- a DaemonSet's ControllerRevision created, or its number raised, that is not of the DaemonSet's template as the
  cache has it (a rollback's revision bump before the rollback's template).

The hold ends with an event of the owner, of its revisions or of a node; where only a node's change explains the
act (NODE_CAUSE), with a node's event only: the owner's own status write, for the act, may show before it.

Upstream's acts for an owner while the shadow holds it back are recorded as early too: the shadow decides none
of them before it syncs again.

Pure.
"""

from __future__ import annotations

from typing import Final

from kube.apps import ON_DELETE, ControllerRevision, DaemonSet, ReplicaSet
from kube.core import POD_FAILED, Node, Pod
from kube.nodeaffinity import get_target_node_name
from kube.ownership import get_controller_of
from kube.pods import is_pod_active, is_pod_ready
from kube.taints import NO_EXECUTE, find_matching_untolerated_taint
from messages.keys import ControllerKey, ControllerKind
from reconciler.core.cache import Change
from reconciler.core.daemonset.history import match, revision_data
from reconciler.core.daemonset.placement import node_should_run_daemon_pod
from reconciler.core.view import CacheView

HASH_LABEL: Final = "controller-revision-hash"
REVISION_KIND: Final = "ControllerRevision"
_DISRUPTION_TARGET: Final = "DisruptionTarget"
_BY_TAINT: Final = "DeletionByTaintManager"  # the DisruptionTarget reason of the taint-eviction controller
OWNER_CAUSE: Final = "owner"  # an early act's cause shows as an event of its owner or a revision (or a node)
NODE_CAUSE: Final = "node"  # an early act's cause shows as an event of a node only


def early(change: Change, view: CacheView) -> ControllerKey | None:
    """The owner whose pod `change` (applied to `view`) shows an act the shadow cannot have seen the cause of yet,
    or None (see the module's docstring). A replayed change (a restart's catch-up) is never early."""
    found = early_cause(change, view)
    return None if found is None else found[0]


def early_cause(change: Change, view: CacheView) -> tuple[ControllerKey, str] | None:
    """`early`'s owner with the kind of event its cause will show as: NODE_CAUSE where only a node's change
    explains the act (a daemon pod created on a node the cache has refusing it, an OnDelete pod deleted from a
    node the cache has keeping it, a pod evicted for a taint the node does not show), else OWNER_CAUSE (the
    owner's spec or its revision; a node's change may explain some of them too)."""
    if change.replayed:
        return None
    if change.kind == REVISION_KIND:
        key = _revision(change, view)
        return None if key is None else (key, OWNER_CAUSE)
    if change.kind != "Pod":
        return None
    old, new = change.old, change.new
    if not isinstance(old, Pod | None) or not isinstance(new, Pod | None):
        return None
    created = old is None and new is not None and new.metadata.deletion_timestamp is None
    deleted = old is not None and old.metadata.deletion_timestamp is None and (
        new is None or new.metadata.deletion_timestamp is not None)
    pod = new if created else old
    if pod is None or not (created or deleted):
        return None
    ref = get_controller_of(pod.metadata)
    if ref is None:
        return None
    owner = view.named(ref.kind, pod.metadata.namespace, ref.name)
    if isinstance(owner, ReplicaSet) and owner.metadata.uid == ref.uid:
        if deleted and _disrupted(new if new is not None else pod):
            return None  # the taint-eviction controller's, an eviction's: not the ReplicaSet controller's act
        key = _replicaset(owner, created, view)
        return None if key is None else (key, OWNER_CAUSE)
    if isinstance(owner, DaemonSet) and owner.metadata.uid == ref.uid:
        return _daemonset(owner, pod, created, new if new is not None else pod, view)
    return None


def _key(kind: ControllerKind, owner: DaemonSet | ReplicaSet) -> ControllerKey:
    return ControllerKey(kind, owner.metadata.namespace, owner.metadata.name)


def _replicaset(rs: ReplicaSet, created: bool, view: CacheView) -> ControllerKey | None:
    replicas = 1 if rs.spec.replicas is None else rs.spec.replicas
    active = sum(1 for p in view.controlled_by("Pod", rs.metadata.namespace, rs.metadata.uid)
                 if isinstance(p, Pod) and is_pod_active(p))
    ahead = active > replicas if created else active < replicas
    return _key(ControllerKind.REPLICA_SET, rs) if ahead else None


def _disrupted(pod: Pod) -> bool:
    return any(c.type == _DISRUPTION_TARGET and c.status == "True" for c in pod.status.conditions)


def _revision(change: Change, view: CacheView) -> ControllerKey | None:
    """A DaemonSet's revision created, or its number raised, that is not of the DaemonSet's template as the cache
    has it: upstream writes the current revision only (constructHistory), so it saw a newer template (a
    rollback's `kubectl rollout undo` raises an old revision's number before the DaemonSet's update shows)."""
    old, new = change.old, change.new
    if not isinstance(new, ControllerRevision) or not isinstance(old, ControllerRevision | None):
        return None
    if old is not None and old.revision == new.revision:
        return None
    ref = get_controller_of(new.metadata)
    if ref is None:
        return None
    ds = view.named(ref.kind, new.metadata.namespace, ref.name)
    if not isinstance(ds, DaemonSet) or ds.metadata.uid != ref.uid or match(ds, new):
        return None
    return _key(ControllerKind.DAEMON_SET, ds)


def _daemonset(ds: DaemonSet, pod: Pod, created: bool, last: Pod, view: CacheView
               ) -> tuple[ControllerKey, str] | None:
    revisions = [r for r in view.controlled_by(REVISION_KIND, ds.metadata.namespace, ds.metadata.uid)
                 if isinstance(r, ControllerRevision)]
    data = revision_data(ds)
    current = next((r for r in revisions if match(ds, r, data)), None)
    key = _key(ControllerKind.DAEMON_SET, ds)
    if current is None:
        return key, OWNER_CAUSE  # the revision of the template upstream acts on has not shown
    hash_ = pod.metadata.labels.get(HASH_LABEL, "")
    if created:
        known = {r.metadata.labels.get(HASH_LABEL, "") for r in revisions}
        if hash_ and hash_ not in known:
            return key, OWNER_CAUSE
        return (key, NODE_CAUSE) if _node_refuses(pod, ds, view) else None
    disrupted = _disrupted(last)
    if _evicted_by_taint(last) and not _node_evicts(pod, view):
        return key, NODE_CAUSE
    if disrupted or _has_company(pod, ds, view):
        return None  # an eviction's; or one of two daemon pods on a node, the newer of which upstream deletes
    current_hash = current.metadata.labels.get(HASH_LABEL, "")
    if hash_ and hash_ == current_hash and is_pod_ready(pod):
        return key, OWNER_CAUSE
    if ds.spec.update_strategy.type == ON_DELETE and last.status.phase != POD_FAILED and _node_keeps(pod, ds, view):
        return key, NODE_CAUSE
    return None


def _has_company(pod: Pod, ds: DaemonSet, view: CacheView) -> bool:
    """Another pod of `ds`, not being deleted, is on `pod`'s node (podsShouldBeOnNode keeps the oldest of them)."""
    return any(isinstance(p, Pod) and p.metadata.uid != pod.metadata.uid and p.metadata.deletion_timestamp is None
               and p.spec.node_name == pod.spec.node_name
               for p in view.controlled_by("Pod", ds.metadata.namespace, ds.metadata.uid))


def _node_refuses(pod: Pod, ds: DaemonSet, view: CacheView) -> bool:
    """The pod's node, as the cache has it, should not run `ds`'s pod (NodeShouldRunDaemonPod's shouldRun: a taint
    not tolerated, a selector or affinity that does not match). A node the cache does not have contradicts nothing."""
    node = view.named("Node", "", get_target_node_name(pod) or "") if get_target_node_name(pod) else None
    return isinstance(node, Node) and not node_should_run_daemon_pod(node, ds).should_run


def _node_keeps(pod: Pod, ds: DaemonSet, view: CacheView) -> bool:
    """The pod's node, as the cache has it, should go on running `ds`'s pod (NodeShouldRunDaemonPod's
    shouldContinueRunning: no untolerated NoExecute taint, the selector and affinity still match)."""
    node = view.named("Node", "", pod.spec.node_name) if pod.spec.node_name else None
    return isinstance(node, Node) and node_should_run_daemon_pod(node, ds).should_continue_running


def _evicted_by_taint(pod: Pod) -> bool:
    return any(c.type == _DISRUPTION_TARGET and c.status == "True" and c.reason == _BY_TAINT
               for c in pod.status.conditions)


def _node_evicts(pod: Pod, view: CacheView) -> bool:
    """The pod's node, as the cache has it, has a NoExecute taint the pod does not tolerate (or is gone)."""
    node = view.named("Node", "", pod.spec.node_name) if pod.spec.node_name else None
    if not isinstance(node, Node):
        return True  # no node to contradict: the deletion may well be for its going
    return find_matching_untolerated_taint(node.spec.taints, pod.spec.tolerations,
                                           lambda taint: taint.effect == NO_EXECUTE) is not None
