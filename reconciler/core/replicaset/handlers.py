"""The ReplicaSet controller's event handlers (addRS/updateRS/deleteRS, addPod/updatePod/deletePod).

Each turns one cache change into wake-ups: keys to sync now or after a delay, and the creations
and deletions its expectations observe. They are the handlers both controllers share
(reconciler.core.handling), with the ReplicaSet's lister (an invalid selector skips that one ReplicaSet)
and its updatePod (a deleting pod whose labels changed is also a deletion for the old labels' owner).
A `replayed` change (one the cache already reflected when the reconciler restarted) only feeds the
expectations: every ReplicaSet is synced after a restart anyway.
"""

from __future__ import annotations

from typing import Final

from kube.apps import ReplicaSet
from kube.core import Pod
from messages.keys import ControllerKey, ControllerKind
from reconciler.core.handling import OwnerHandlers
from reconciler.core.view import CacheView

KIND: Final = ControllerKind.REPLICA_SET.value
API_VERSION: Final = "apps/v1"


def controller_key(namespace: str, name: str) -> ControllerKey:
    """The ReplicaSet's work-queue key (``ReplicaSet/<namespace>/<name>`` as a string)."""
    return ControllerKey(ControllerKind.REPLICA_SET, namespace, name)


# addRS/updateRS/deleteRS, addPod/updatePod/deletePod. A ReplicaSet whose selector does not parse is skipped by
# the owner lookup; an update to a deleting pod whose labels changed is a deletion for the old labels' owner too.
HANDLERS: Final = OwnerHandlers(ControllerKind.REPLICA_SET, ReplicaSet, invalid_selector_fails_lookup=False,
                                 old_owner_sees_deletion=True)
on_replicaset = HANDLERS.on_owner
on_pod = HANDLERS.on_pod


def pod_replicasets(pod: Pod, view: CacheView) -> list[ReplicaSet]:
    """GetPodReplicaSets: the namespace's ReplicaSets whose (valid, non-empty) selector matches."""
    return HANDLERS.matching(pod, view)


def all_replicasets(view: CacheView) -> list[ReplicaSet]:
    """rsLister.List(labels.Everything()), in (namespace, name) order."""
    return sorted((rs for rs in view.all(KIND) if isinstance(rs, ReplicaSet)),
                  key=lambda r: (r.metadata.namespace, r.metadata.name))

