"""The reconciler's informer-like view of the cluster: a fold of observed events.

`Cache.apply(event, seq)` is synchronous and does no I/O, so a replay is the same fold over a
recorded history. Objects are kept decoded into the `kube` model, by kind and uid, with the
indexes the controllers ask for (namespace, owner uid, node). `seq` is the event's position in
the history stream: an event older than what the cache already holds for that object is ignored,
which lets a reconciler bootstrap from the compacted state and then replay the history after its
last committed position without ever going back in time.
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


@dataclass
class Cache:
    objects: dict[str, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    seqs: dict[str, int] = field(default_factory=dict)  # uid -> stream seq of the event it reflects
    by_namespace: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    quarantined: int = 0

    def get(self, kind: str, uid: str) -> Any:
        return self.objects[kind].get(uid)

    def in_namespace(self, kind: str, namespace: str) -> list[Any]:
        table = self.objects[kind]
        return [table[uid] for uid in self.by_namespace.get((kind, namespace), ())]

    def all(self, kind: str) -> list[Any]:
        return list(self.objects[kind].values())

    def apply(self, event: ObservedEvent, seq: int) -> Change | None:
        """Folds one event in; returns what changed, or None for a stale or unusable event."""
        if event.type == QUARANTINED:
            self.quarantined += 1
            return None
        if seq <= self.seqs.get(event.uid, 0):
            return None  # the cache already reflects this or a later state of the object
        table = self.objects[event.kind]
        old = table.get(event.uid)
        index = (event.kind, event.namespace)
        if event.is_deletion:
            table.pop(event.uid, None)
            self.by_namespace[index].discard(event.uid)
            self.seqs[event.uid] = seq
            return Change(event.kind, event.namespace, event.name, event.uid, old, None)
        new = decode_object(event)
        table[event.uid] = new
        self.by_namespace[index].add(event.uid)
        self.seqs[event.uid] = seq
        return Change(event.kind, event.namespace, event.name, event.uid, old, new)


def decode_object(event: ObservedEvent) -> Any:
    if event.kind == "Namespace":
        head = codec.decode(event.object, _Head)
        meta = head.metadata
        return Namespace(meta.name, meta.uid, dict(meta.annotations or {}), meta.deletion_timestamp is not None)
    model = MODELS.get(event.kind)
    if model is None:
        raise ValueError(f"no model for kind {event.kind}")
    return codec.decode(event.object, model)
