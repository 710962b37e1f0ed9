"""What the controllers' pure core may read from the reconciler's cache, and the work it hands back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from kube.pods import PodFacts
from messages.keys import ControllerKey

if TYPE_CHECKING:
    from reconciler.core.cache import Journal


class CacheView(Protocol):
    """Read-only lookups over the informer-like cache (reconciler.core.cache.Cache implements it)."""

    def named(self, kind: str, namespace: str, name: str) -> Any: ...

    def in_namespace(self, kind: str, namespace: str) -> list[Any]: ...

    def controlled_by(self, kind: str, namespace: str, controller_uid: str) -> list[Any]: ...

    def owned_or_orphans(self, kind: str, namespace: str, controller_uid: str) -> list[Any]: ...

    def owned_or_orphan_pods(self, namespace: str, controller_uid: str) -> list[PodFacts]:
        """owned_or_orphans("Pod", ...) as the pods' facts (kube.pods.pod_facts), in the same order."""
        ...

    def all(self, kind: str) -> list[Any]: ...

    def get(self, kind: str, uid: str) -> Any: ...

    def journal(self, kind: str, namespace: str) -> Journal:
        """The changes to `kind` in `namespace` ("" for nodes) from now on (reconciler.core.cache.Journal)."""
        ...

    def pod_facts_of(self, uid: str) -> PodFacts | None:
        """The cached pod's facts, None when the cache holds no such pod."""
        ...


@dataclass(slots=True)
class Wakeups:
    """What event handlers ask for: keys to sync now or later, and expectations to lower."""

    enqueue: list[ControllerKey] = field(default_factory=list)
    enqueue_after: list[tuple[ControllerKey, timedelta]] = field(default_factory=list)
    creations_observed: list[ControllerKey] = field(default_factory=list)  # one entry per observed creation
    deletions_observed: list[tuple[ControllerKey, str]] = field(default_factory=list)  # (key, "ns/name" of the pod)
    expectations_deleted: list[ControllerKey] = field(default_factory=list)


@dataclass
class BadInput:
    """A Warning Event for the controller and a log line: bad input named by its field."""

    reason: str
    message: str
    field: str
