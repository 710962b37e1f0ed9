"""Helpers for the ReplicaSet controller's tests: a cache fed like the reconciler feeds it, and pods of a ReplicaSet.

`Cluster` folds observed events into a `reconciler.core.cache.Cache` with increasing stream sequences, as
the reconciler's shell does, and hands back the `(change, seq, msg_id)` triples `Controllers.observe`
takes. Every object's JSON goes through `kube.codec`, so the cache holds what it would in production.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from kube import codec
from kube.apps import ReplicaSet
from kube.core import POD_RUNNING, Pod
from kube.testing import PodBuilder, pod
from messages.observed import ADDED, DELETED, MODIFIED, ObservedEvent
from reconciler.core.cache import Cache, Change

NOW = datetime(2026, 3, 15, 12, 0, 0, tzinfo=UTC)


def observed(obj: Any, event_type: str = ADDED) -> ObservedEvent:
    """The ingest message for one watch event of `obj`."""
    meta = obj.metadata
    return ObservedEvent(kind=obj.kind, type=event_type, namespace=meta.namespace, name=meta.name, uid=meta.uid,
                         resource_version=meta.resource_version or "1", observed_at="2026-03-15T12:00:00.000000Z",
                         ingest="test", object=msgspec.Raw(codec.encode(obj)))


class Cluster:
    """A cache and the stream position of the next event."""

    def __init__(self, *objects: Any) -> None:
        self.cache = Cache()
        self.seq = 0
        for obj in objects:
            self.add(obj)

    def apply(self, obj: Any, event_type: str, seq: int | None = None) -> tuple[Change, int, str]:
        event = observed(obj, event_type)
        if seq is None:
            self.seq += 1
            seq = self.seq
        change = self.cache.apply(event, seq)
        assert change is not None
        return change, seq, event.msg_id

    def add(self, obj: Any) -> tuple[Change, int, str]:
        return self.apply(obj, ADDED)

    def update(self, obj: Any) -> tuple[Change, int, str]:
        return self.apply(obj, MODIFIED)

    def delete(self, obj: Any, event_type: str = DELETED) -> tuple[Change, int, str]:
        return self.apply(obj, event_type)


def cache_of(*objects: Any) -> Cache:
    return Cluster(*objects).cache


def owned_pod(name: str, rs: ReplicaSet, *, phase: str = POD_RUNNING) -> PodBuilder:
    """Upstream's newPod: the ReplicaSet's selector labels, its controller reference, in its namespace."""
    labels = dict(rs.spec.selector.match_labels) if rs.spec.selector is not None else {}
    return pod(name).ns(rs.metadata.namespace).labels(labels).owned_by(rs).phase(phase)


def orphan_pod(name: str, rs: ReplicaSet, *, phase: str = POD_RUNNING) -> PodBuilder:
    labels = dict(rs.spec.selector.match_labels) if rs.spec.selector is not None else {}
    return pod(name).ns(rs.metadata.namespace).labels(labels).phase(phase)


def names(pods: list[Pod]) -> list[str]:
    return [p.metadata.name for p in pods]
