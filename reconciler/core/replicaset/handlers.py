"""The ReplicaSet controller's event handlers (addRS/updateRS/deleteRS, addPod/updatePod/deletePod).

Each turns one cache change into wake-ups: keys to sync now or after a delay, and the creations
and deletions its expectations observe. A `replayed` change (one the cache already reflected when
the reconciler restarted) only feeds the expectations: every ReplicaSet is synced after a restart
anyway.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from kube.apps import ReplicaSet
from kube.core import Pod
from kube.labels import SelectorError, selector_from_label_selector
from kube.meta import OwnerReference
from kube.ownership import get_controller_of
from kube.pods import is_pod_ready, pod_key
from messages.observed import ADDED
from reconciler.core.cache import Change
from reconciler.core.view import CacheView, Wakeups

KIND: Final = "ReplicaSet"
API_VERSION: Final = "apps/v1"
PREFIX: Final = f"{KIND}/"


def controller_key(namespace: str, name: str) -> str:
    return f"{PREFIX}{namespace}/{name}"


def split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key[len(PREFIX):].partition("/")
    return namespace, name


def on_replicaset(change: Change, wakeups: Wakeups, view: CacheView | None = None) -> None:
    """addRS/updateRS/deleteRS. With `view` (the cache, the change applied), a re-creation under the same
    name is handled as upstream's updateRS with a changed UID, whatever order the two objects' events
    come in (a relist publishes the new ReplicaSet before the old one's tombstone)."""
    if change.replayed:
        return
    key = controller_key(change.namespace, change.name)
    if change.new is None:
        # deleteRS: DeleteExpectations, then sync (a no-op); unless the name already belongs to a newer
        # ReplicaSet, whose expectations these now are
        current = view.named(KIND, change.namespace, change.name) if view is not None else None
        if not (isinstance(current, ReplicaSet) and current.metadata.uid != change.uid):
            wakeups.expectations_deleted.append(key)
    elif change.old is None and view is not None and any(
            rs.metadata.name == change.name and rs.metadata.uid != change.uid
            for rs in view.in_namespace(KIND, change.namespace)):
        # updateRS saw the UID change: deleteRS(old) drops the old ReplicaSet's expectations now
        wakeups.expectations_deleted.append(key)
    wakeups.enqueue.append(key)  # updateRS syncs on every update, resyncs included


def on_pod(change: Change, view: CacheView, wakeups: Wakeups) -> None:
    old, new = change.old, change.new
    if change.replayed:
        _observe_replayed(change, view, wakeups)
    elif new is None:
        if old is not None:
            _delete_pod(old, view, wakeups)
    elif old is None:
        _add_pod(new, view, wakeups)
    else:
        _update_pod(old, new, view, wakeups)


def _observe_replayed(change: Change, view: CacheView, wakeups: Wakeups) -> None:
    pod = change.new if change.new is not None else change.old
    if not isinstance(pod, Pod):
        return
    rs = _resolve(pod.metadata.namespace, get_controller_of(pod.metadata), view)
    if rs is None:
        return
    key = controller_key(rs.metadata.namespace, rs.metadata.name)
    if change.new is None or pod.metadata.deletion_timestamp is not None:
        wakeups.deletions_observed.append((key, pod_key(pod)))  # counted once per pod key
    elif change.type == ADDED:
        wakeups.creations_observed.append(key)


def _add_pod(pod: Pod, view: CacheView, wakeups: Wakeups) -> None:
    if pod.metadata.deletion_timestamp is not None:
        # a pod already being deleted when first seen (e.g. after a restart) is no creation
        _delete_pod(pod, view, wakeups)
        return
    ref = get_controller_of(pod.metadata)
    if ref is not None:
        rs = _resolve(pod.metadata.namespace, ref, view)
        if rs is not None:
            key = controller_key(rs.metadata.namespace, rs.metadata.name)
            wakeups.creations_observed.append(key)
            wakeups.enqueue.append(key)
        return
    # an orphan: every ReplicaSet that might adopt it syncs; no creation is observed for it
    wakeups.enqueue.extend(controller_key(rs.metadata.namespace, rs.metadata.name)
                           for rs in pod_replicasets(pod, view))


def _update_pod(old: Pod, cur: Pod, view: CacheView, wakeups: Wakeups) -> None:
    if cur.metadata.resource_version == old.metadata.resource_version:
        return  # a resync: two versions of a pod always differ in resourceVersion
    labels_changed = cur.metadata.labels != old.metadata.labels
    if cur.metadata.deletion_timestamp is not None:
        # graceful deletion: replace the pod now, not when the kubelet is done with it
        _delete_pod(cur, view, wakeups)
        if labels_changed:
            _delete_pod(old, view, wakeups)
        return
    cur_ref = get_controller_of(cur.metadata)
    old_ref = get_controller_of(old.metadata)
    ref_changed = cur_ref != old_ref
    if ref_changed and old_ref is not None:
        previous = _resolve(old.metadata.namespace, old_ref, view)
        if previous is not None:
            wakeups.enqueue.append(controller_key(previous.metadata.namespace, previous.metadata.name))
    if cur_ref is not None:
        rs = _resolve(cur.metadata.namespace, cur_ref, view)
        if rs is None:
            return
        key = controller_key(rs.metadata.namespace, rs.metadata.name)
        wakeups.enqueue.append(key)
        if not is_pod_ready(old) and is_pod_ready(cur) and rs.spec.min_ready_seconds > 0:
            # the pod becomes available minReadySeconds from now; +1 s against clock skew
            wakeups.enqueue_after.append((key, timedelta(seconds=rs.spec.min_ready_seconds + 1)))
        return
    if labels_changed or ref_changed:
        wakeups.enqueue.extend(controller_key(rs.metadata.namespace, rs.metadata.name)
                               for rs in pod_replicasets(cur, view))


def _delete_pod(pod: Pod, view: CacheView, wakeups: Wakeups) -> None:
    rs = _resolve(pod.metadata.namespace, get_controller_of(pod.metadata), view)
    if rs is None:
        return  # nobody waits for an orphan to go
    key = controller_key(rs.metadata.namespace, rs.metadata.name)
    wakeups.deletions_observed.append((key, pod_key(pod)))
    wakeups.enqueue.append(key)


def _resolve(namespace: str, ref: OwnerReference | None, view: CacheView) -> ReplicaSet | None:
    """resolveControllerRef: the cached ReplicaSet the reference names, if its uid still matches."""
    if ref is None or ref.kind != KIND:
        return None
    rs = view.named(KIND, namespace, ref.name)
    return rs if isinstance(rs, ReplicaSet) and rs.metadata.uid == ref.uid else None


def pod_replicasets(pod: Pod, view: CacheView) -> list[ReplicaSet]:
    """GetPodReplicaSets: the namespace's ReplicaSets whose (valid, non-empty) selector matches."""
    labels = pod.metadata.labels
    if not labels:
        return []
    found = []
    for rs in view.in_namespace(KIND, pod.metadata.namespace):
        try:
            selector = selector_from_label_selector(rs.spec.selector)
        except SelectorError:
            continue
        if not selector.empty() and selector.matches(labels):
            found.append(rs)
    return sorted(found, key=lambda r: r.metadata.name)
