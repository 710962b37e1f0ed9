"""The event handlers both controllers share: an owner's own events, and those of the pods it controls.

Upstream's DaemonSet and ReplicaSet controllers register the same handlers on their own informer (add, update,
delete: every event syncs the object, a deletion or a UID change drops its expectations) and on the pod
informer (addPod, updatePod, deletePod: a pod's controller observes its creation and deletion, an orphan wakes
every owner that might adopt it). They differ in two places, which :class:`OwnerHandlers` takes as parameters:
which owners an orphan's labels match (the DaemonSet lister fails the whole lookup on one invalid selector,
the ReplicaSet lister skips that one), and whether an update to a deleting pod whose labels changed also tells
the old labels' owner (the ReplicaSet's updatePod does, the DaemonSet's does not).

A `replayed` change (one the cache already reflected when the reconciler restarted) only feeds the
expectations: every controller is synced after a restart anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar

from kube.apps import DaemonSet, ReplicaSet
from kube.core import Pod
from kube.labels import SelectorError, selector_from_label_selector
from kube.meta import ObjectMeta, OwnerReference
from kube.ownership import get_controller_of
from kube.pods import is_pod_ready, pod_key
from messages.keys import ControllerKey, ControllerKind
from messages.observed import ADDED
from reconciler.core.cache import Change
from reconciler.core.view import CacheView, Wakeups

Owner = TypeVar("Owner", DaemonSet, ReplicaSet)


class _Meta(Protocol):
    @property
    def metadata(self) -> ObjectMeta: ...


Owned = TypeVar("Owned", bound=_Meta)  # a pod, or a DaemonSet's ControllerRevision


@dataclass(frozen=True, slots=True)
class OwnerHandlers(Generic[Owner]):
    """One controller's handlers for its owners' events and their pods'."""

    kind: ControllerKind
    owner_type: type[Owner]
    # the lister's lookup of an object's owners fails on one owner's invalid selector (else it skips that owner)
    invalid_selector_fails_lookup: bool
    # updatePod of a deleting pod whose labels changed: the old labels' owner observes a deletion too
    old_owner_sees_deletion: bool
    # the kind as a plain str, for the cache's lookups and owner references: a StrEnum member compares slower
    # with the str in a key than a str does (a lookup per event)
    kind_name: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind_name", self.kind.value)

    def key(self, owner: Owner) -> ControllerKey:
        # tuple.__new__: what ControllerKey(...) does without its Python-level __new__ (a key is made per event)
        return tuple.__new__(ControllerKey, (self.kind, owner.metadata.namespace, owner.metadata.name))

    def resolve(self, namespace: str, ref: OwnerReference | None, view: CacheView) -> Owner | None:
        """resolveControllerRef: the cached owner the reference names, if its uid still matches.

        Only the reference's kind is checked, not its apiVersion, as upstream does."""
        if ref is None or ref.kind != self.kind_name:
            return None
        owner = view.named(self.kind_name, namespace, ref.name)
        return owner if isinstance(owner, self.owner_type) and owner.metadata.uid == ref.uid else None

    def matching(self, obj: Owned, view: CacheView) -> list[Owner]:
        """The lister's Get<Pod|History><Kind>s: the owners in the object's namespace whose non-empty selector
        matches its labels, in name order. Nothing for an object without labels; a nil or empty selector
        matches nothing."""
        labels = obj.metadata.labels
        if not labels:
            return []
        found = []
        for owner in view.in_namespace(self.kind_name, obj.metadata.namespace):
            try:
                selector = selector_from_label_selector(owner.spec.selector)
            except SelectorError:
                if self.invalid_selector_fails_lookup:
                    return []
                continue
            if not selector.empty() and selector.matches(labels):
                found.append(owner)
        return sorted(found, key=_name)

    def enqueue_all(self, owners: Iterable[Owner], wakeups: Wakeups) -> None:
        wakeups.enqueue.extend(self.key(owner) for owner in owners)

    # --- the owners' own events ---------------------------------------------------------------------------
    def on_owner(self, change: Change, wakeups: Wakeups, view: CacheView | None = None) -> None:
        """add/update/delete of the owner. With `view` (the cache, the change applied), a re-creation under the
        same name is handled as upstream's update with a changed UID, whatever order the two objects' events
        come in (a relist publishes the new object before the old one's tombstone)."""
        if change.replayed:
            return
        key = ControllerKey(self.kind, change.namespace, change.name)
        if change.new is None:
            # delete: DeleteExpectations, then sync (a no-op); unless the name already belongs to a newer
            # object, whose expectations these now are
            current = view.named(self.kind_name, change.namespace, change.name) if view is not None else None
            if not (isinstance(current, self.owner_type) and current.metadata.uid != change.uid):
                wakeups.expectations_deleted.append(key)
        elif change.old is None and view is not None and any(
                owner.metadata.name == change.name and owner.metadata.uid != change.uid
                for owner in view.in_namespace(self.kind_name, change.namespace)):
            # update saw the UID change: delete(old) drops the old object's expectations now
            wakeups.expectations_deleted.append(key)
        wakeups.enqueue.append(key)  # update syncs on every update, resyncs included

    # --- pods ---------------------------------------------------------------------------------------------
    def on_pod(self, change: Change, view: CacheView, wakeups: Wakeups) -> None:
        """addPod/updatePod/deletePod."""
        if _foreign(change.new, change.old, self.kind_name):
            return
        self.on_concerning_pod(change, view, wakeups)

    def on_concerning_pod(self, change: Change, view: CacheView, wakeups: Wakeups) -> None:
        """:meth:`on_pod` for a change already known not to be foreign to this kind (see :func:`pod_handler`)."""
        old, new = change.old, change.new
        if change.replayed:
            self._observe_replayed(change, view, wakeups)
        elif new is None:
            if isinstance(old, Pod):
                self._delete_pod(old, view, wakeups)
        elif old is None:
            if isinstance(new, Pod):
                self._add_pod(new, view, wakeups)
        elif isinstance(old, Pod) and isinstance(new, Pod):
            self._update_pod(old, new, view, wakeups)

    def _observe_replayed(self, change: Change, view: CacheView, wakeups: Wakeups) -> None:
        pod = change.new if change.new is not None else change.old
        if not isinstance(pod, Pod):
            return
        owner = self.resolve(pod.metadata.namespace, get_controller_of(pod.metadata), view)
        if owner is None:
            return
        key = self.key(owner)
        if change.new is None or pod.metadata.deletion_timestamp is not None:
            wakeups.deletions_observed.append((key, pod_key(pod)))
        elif change.type == ADDED:
            wakeups.creations_observed.append(key)

    def _add_pod(self, pod: Pod, view: CacheView, wakeups: Wakeups) -> None:
        if pod.metadata.deletion_timestamp is not None:
            # a pod already being deleted when first seen (e.g. after a restart) is no creation
            self._delete_pod(pod, view, wakeups)
            return
        ref = get_controller_of(pod.metadata)
        if ref is not None:
            owner = self.resolve(pod.metadata.namespace, ref, view)
            if owner is not None:
                key = self.key(owner)
                wakeups.creations_observed.append(key)
                wakeups.enqueue.append(key)
            return
        # an orphan: every owner that might adopt it syncs; no creation is observed for it
        self.enqueue_all(self.matching(pod, view), wakeups)

    def _update_pod(self, old: Pod, cur: Pod, view: CacheView, wakeups: Wakeups) -> None:
        if cur.metadata.resource_version == old.metadata.resource_version:
            return  # a resync: two versions of a pod always differ in resourceVersion
        if cur.metadata.deletion_timestamp is not None:
            # graceful deletion: replace the pod now, not when the kubelet is done with it
            self._delete_pod(cur, view, wakeups)
            if self.old_owner_sees_deletion and cur.metadata.labels != old.metadata.labels:
                self._delete_pod(old, view, wakeups)
            return
        owner = self.follow(old, cur, view, wakeups)
        if owner is None:
            return
        key = self.key(owner)
        wakeups.enqueue.append(key)
        if owner.spec.min_ready_seconds > 0 and not is_pod_ready(old) and is_pod_ready(cur):
            # the pod becomes available minReadySeconds from now; +1 s against clock skew
            wakeups.enqueue_after.append((key, timedelta(seconds=owner.spec.min_ready_seconds + 1)))

    def follow(self, old: Owned, cur: Owned, view: CacheView, wakeups: Wakeups) -> Owner | None:
        """What updatePod (and the DaemonSet's updateHistory) does with the controller reference of an object
        updated from `old` to `cur`: a changed one syncs the old controller; an orphan whose labels or
        reference changed syncs every owner that might adopt it. Returns the current controller when it
        resolves, for the caller to sync."""
        cur_ref = get_controller_of(cur.metadata)
        old_ref = get_controller_of(old.metadata)
        ref_changed = cur_ref != old_ref
        if ref_changed and old_ref is not None:
            previous = self.resolve(old.metadata.namespace, old_ref, view)
            if previous is not None:
                wakeups.enqueue.append(self.key(previous))
        if cur_ref is not None:
            return self.resolve(cur.metadata.namespace, cur_ref, view)
        if cur.metadata.labels != old.metadata.labels or ref_changed:
            self.enqueue_all(self.matching(cur, view), wakeups)
        return None

    def _delete_pod(self, pod: Pod, view: CacheView, wakeups: Wakeups) -> None:
        owner = self.resolve(pod.metadata.namespace, get_controller_of(pod.metadata), view)
        if owner is None:
            return  # nobody waits for an orphan to go
        key = self.key(owner)
        wakeups.deletions_observed.append((key, pod_key(pod)))
        wakeups.enqueue.append(key)


def pod_handler(owners: Sequence[OwnerHandlers[Any]]) -> Callable[[Change, CacheView, Wakeups], None]:
    """The pod handlers of several controllers as one: each owner's :meth:`OwnerHandlers.on_pod`, in the order
    given, for the pod changes that concern its kind.

    Run one by one, every controller would read the pod's controller references for itself (:func:`_foreign`), and
    every pod event would cost a call per controller though nearly every pod concerns one of them. Here the
    references of the old and new states are read once per change, and only the handlers of the kinds they concern
    run: the same handlers, in the same order, with the same wake-ups, as :func:`_foreign` decides for each."""
    owners = tuple(owners)

    def on_pod(change: Change, view: CacheView, wakeups: Wakeups) -> None:
        kinds = _concerned_kinds(change.new, change.old)
        for owner in owners:
            if kinds is None or owner.kind_name in kinds:
                owner.on_concerning_pod(change, view, wakeups)

    return on_pod


def _foreign(new: Any, old: Any, kind: str) -> bool:
    """Whether a pod's change is nothing to the controller of `kind`. Every path of on_pod acts only through the
    controller reference of the old or new state (`resolve`, which looks no further when the kind is another's),
    or on the labels of an orphan (a new state without a controller, or an added pod without one): so a pod of the
    other controller (most of them) costs this test instead of the handler's walk to the same nothing."""
    kinds = _concerned_kinds(new, old)
    return kinds is not None and kind not in kinds


def _concerned_kinds(new: Any, old: Any) -> tuple[str | None, str | None] | None:
    """The controller kinds a pod's change concerns: those of its new and old states' controller references (None
    where a state is absent or has none); None for every kind when the new state has no controller (an orphan,
    whose labels every kind matches)."""
    new_kind = None
    if new is not None:
        new_kind = _controller_kind(new)
        if new_kind is None:
            return None
    return new_kind, None if old is None else _controller_kind(old)


def _controller_kind(obj: Any) -> str | None:
    for ref in obj.metadata.owner_references:  # get_controller_of, inlined: a kind is all that is read
        if ref.controller:
            return str(ref.kind)
    return None


def _name(owner: DaemonSet | ReplicaSet) -> str:
    return owner.metadata.name
