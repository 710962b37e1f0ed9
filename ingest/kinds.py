"""The kinds ingest watches: their model, scope, and the official client's list call for each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from kube.apps import ControllerRevision, DaemonSet, ReplicaSet
from kube.core import Node, Pod


@dataclass(frozen=True)
class KindSpec:
    kind: str
    model: type[Any]  # the kube model an object must decode into, or it is quarantined
    namespaced: bool
    api: str  # the official client's API class, e.g. "CoreV1Api"
    list_call: str  # its method that lists (and, with watch=True, watches) across namespaces


KINDS: Final[dict[str, KindSpec]] = {spec.kind: spec for spec in (
    KindSpec("Node", Node, False, "CoreV1Api", "list_node"),
    KindSpec("Pod", Pod, True, "CoreV1Api", "list_pod_for_all_namespaces"),
    KindSpec("DaemonSet", DaemonSet, True, "AppsV1Api", "list_daemon_set_for_all_namespaces"),
    KindSpec("ReplicaSet", ReplicaSet, True, "AppsV1Api", "list_replica_set_for_all_namespaces"),
    KindSpec("ControllerRevision", ControllerRevision, True, "AppsV1Api",
             "list_controller_revision_for_all_namespaces"),
)}

DEFAULT_KINDS: Final = tuple(KINDS)


def spec_of(kind: str) -> KindSpec:
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"ingest cannot watch {kind!r}; it knows {', '.join(KINDS)}") from None
