"""The reconciler's informer-like view of the cluster: a fold of observed events.

`Cache.apply(event, seq)` is synchronous and does no I/O, so a replay is the same fold over a
recorded history. Objects are kept decoded into the `kube` model, by kind and uid, with the
indexes the controllers ask for (namespace, name, controller uid, orphans per namespace). `seq` is
the event's position in the history stream: an event older than what the cache already holds for
that object does not change the cache, which lets a reconciler bootstrap from the compacted state
and then replay the history after its last committed position without ever going back in time.
Such an event still comes back as a `replayed` change: the controllers' expectations must observe
the creations and deletions that happened after their last commit, even though the cache already
shows them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import msgspec

from kube import codec
from kube.apps import ControllerRevision, DaemonSet, ReplicaSet
from kube.core import Node, Pod
from kube.meta import ObjectMeta
from kube.ownership import get_controller_of
from messages.observed import QUARANTINED, ObservedEvent

MODELS: dict[str, type[Any]] = {
    "Pod": Pod, "Node": Node, "DaemonSet": DaemonSet, "ReplicaSet": ReplicaSet,
    "ControllerRevision": ControllerRevision,
}


class _Head(msgspec.Struct, kw_only=True):
    metadata: ObjectMeta


@dataclass
class Namespace:
    """Namespaces are modelled only as far as the pipeline's stand-in decision needs."""

    name: str
    uid: str
    annotations: dict[str, str]
    deleting: bool


@dataclass(frozen=True)
class Change:
    """What one applied event changed: the kube objects before and after (None when absent)."""

    kind: str
    namespace: str
    name: str
    uid: str
    old: Any
    new: Any
    type: str = ""  # the event's type (ADDED, MODIFIED, ...)
    replayed: bool = False  # the cache already held a later state: only expectations may use it


@dataclass
class Cache:
    objects: dict[str, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    seqs: dict[str, int] = field(default_factory=dict)  # uid -> stream seq of the event it reflects
    by_namespace: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    by_name: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (kind, ns, name) -> uid
    # (kind, namespace, controller uid) -> uids: owner references never cross namespaces
    by_controller: dict[tuple[str, str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    orphans: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))  # (kind, ns)
    quarantined: int = 0

    def get(self, kind: str, uid: str) -> Any:
        return self.objects[kind].get(uid)

    def named(self, kind: str, namespace: str, name: str) -> Any:
        uid = self.by_name.get((kind, namespace, name))
        return None if uid is None else self.objects[kind].get(uid)

    def in_namespace(self, kind: str, namespace: str) -> list[Any]:
        table = self.objects[kind]
        return [table[uid] for uid in self.by_namespace.get((kind, namespace), ())]

    def controlled_by(self, kind: str, namespace: str, controller_uid: str) -> list[Any]:
        table = self.objects[kind]
        return [table[uid] for uid in self.by_controller.get((kind, namespace, controller_uid), ())]

    def owned_or_orphans(self, kind: str, namespace: str, controller_uid: str) -> list[Any]:
        """FilterPodsByOwner(includeOrphans=true): controlled by the uid, or by nothing at all, in `namespace`.

        An object in another namespace naming the uid as its controller is not returned: upstream
        looks in the owner's namespace only (owner references never cross namespaces)."""
        table = self.objects[kind]
        return [table[uid] for uid in (*self.by_controller.get((kind, namespace, controller_uid), ()),
                                       *self.orphans.get((kind, namespace), ()))]

    def all(self, kind: str) -> list[Any]:
        return list(self.objects[kind].values())

    def apply(self, event: ObservedEvent, seq: int) -> Change | None:
        """Folds one event in; returns what changed, or None for a stale or unusable event."""
        if event.type == QUARANTINED:
            self.quarantined += 1
            return None
        if seq <= self.seqs.get(event.uid, 0):
            # the cache already reflects this or a later state of the object
            obj = decode_object(event)
            old, new = (obj, None) if event.is_deletion else (None, obj)
            return Change(event.kind, event.namespace, event.name, event.uid, old, new, event.type, True)
        table = self.objects[event.kind]
        old = table.get(event.uid)
        if old is not None:
            self._unindex(event.kind, event.uid, old)
        self.seqs[event.uid] = seq
        if event.is_deletion:
            table.pop(event.uid, None)
            final = old if old is not None else _decode_final_state(event)
            return Change(event.kind, event.namespace, event.name, event.uid, final, None, event.type)
        new = decode_object(event)
        table[event.uid] = new
        self._index(event.kind, event.uid, new)
        return Change(event.kind, event.namespace, event.name, event.uid, old, new, event.type)

    def _index(self, kind: str, uid: str, obj: Any) -> None:
        if isinstance(obj, Namespace):
            self.by_namespace[(kind, "")].add(uid)
            return
        meta = obj.metadata
        self.by_namespace[(kind, meta.namespace)].add(uid)
        self.by_name[(kind, meta.namespace, meta.name)] = uid
        ref = get_controller_of(meta)
        if ref is None:
            self.orphans[(kind, meta.namespace)].add(uid)
        else:
            self.by_controller[(kind, meta.namespace, ref.uid)].add(uid)

    def _unindex(self, kind: str, uid: str, obj: Any) -> None:
        if isinstance(obj, Namespace):
            self.by_namespace[(kind, "")].discard(uid)
            return
        meta = obj.metadata
        self.by_namespace[(kind, meta.namespace)].discard(uid)
        if self.by_name.get((kind, meta.namespace, meta.name)) == uid:
            del self.by_name[(kind, meta.namespace, meta.name)]
        ref = get_controller_of(meta)
        if ref is None:
            self.orphans[(kind, meta.namespace)].discard(uid)
        else:
            owned = self.by_controller.get((kind, meta.namespace, ref.uid))
            if owned is not None:
                owned.discard(uid)
                if not owned:
                    del self.by_controller[(kind, meta.namespace, ref.uid)]


def _decode_final_state(event: ObservedEvent) -> Any:
    """A deletion of an object the cache never held: its last state, as the event carries it."""
    try:
        return decode_object(event)
    except (msgspec.DecodeError, ValueError):
        return None


def decode_object(event: ObservedEvent) -> Any:
    if event.kind == "Namespace":
        head = codec.decode(event.object, _Head)
        meta = head.metadata
        return Namespace(meta.name, meta.uid, dict(meta.annotations or {}), meta.deletion_timestamp is not None)
    model = MODELS.get(event.kind)
    if model is None:
        raise ValueError(f"no model for kind {event.kind}")
    return codec.decode(event.object, model)
