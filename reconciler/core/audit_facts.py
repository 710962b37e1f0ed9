"""What the audit trail keeps of an observed object for `kubus audit timeline` (observed_events.owner and .facts,
docs/audit.md): its controller, and a few facts by kind, read from the object as the reconciler's cache decoded it
(the store decodes an event only when the cache did not: store.events.facts_of).

    Pod                     node (spec.nodeName, else the node its affinity pins it to), revision (its
                            controller-revision-hash or pod-template-hash label), ready_since (the Ready condition's
                            lastTransitionTime as written, while Ready; else None), deleting (deletionTimestamp set)
    DaemonSet, ReplicaSet   generation, min_ready_seconds
    ControllerRevision      revision (its number), hash (its controller-revision-hash label)
"""

from __future__ import annotations

from typing import Any, Final

from kube.apps import ControllerRevision, DaemonSet, ReplicaSet
from kube.core import CONDITION_TRUE, Pod
from kube.meta import ObjectMeta
from kube.nodeaffinity import get_target_node_name
from kube.ownership import get_controller_of
from kube.pods import get_pod_ready_condition

DAEMONSET_HASH_LABEL: Final = "controller-revision-hash"  # apps.DefaultDaemonSetUniqueLabelKey
TEMPLATE_HASH_LABEL: Final = "pod-template-hash"  # a Deployment's ReplicaSets' pods

Facts = tuple[str | None, dict[str, Any] | None]
NONE: Final[Facts] = (None, None)


def _owner(meta: ObjectMeta) -> str | None:
    ref = get_controller_of(meta)
    return f"{ref.kind}/{ref.name}" if ref is not None and ref.kind and ref.name else None


def object_facts(obj: Any) -> Facts:
    """(its controller as "Kind/name", None without one; its facts by kind, above); NONE for other kinds."""
    if isinstance(obj, Pod):
        labels = obj.metadata.labels
        ready = get_pod_ready_condition(obj)
        return _owner(obj.metadata), {
            "node": get_target_node_name(obj),
            "revision": labels.get(DAEMONSET_HASH_LABEL) or labels.get(TEMPLATE_HASH_LABEL),
            "ready_since": (ready.last_transition_time or None) if ready is not None and
            ready.status == CONDITION_TRUE else None,
            "deleting": obj.metadata.deletion_timestamp is not None}
    if isinstance(obj, DaemonSet | ReplicaSet):
        return _owner(obj.metadata), {"generation": obj.metadata.generation,
                                      "min_ready_seconds": obj.spec.min_ready_seconds}
    if isinstance(obj, ControllerRevision):
        return _owner(obj.metadata), {"revision": obj.revision, "hash": obj.metadata.labels.get(DAEMONSET_HASH_LABEL)}
    return NONE
