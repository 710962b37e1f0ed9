"""ControllerRefManager.ClaimPods as a pure function: which pods a controller owns, adopts or releases.

Upstream patches during the claim and counts a pod as claimed once its adoption succeeded. Here
the claim returns the patches to send and counts a pod being adopted as claimed right away: when
the patch succeeds the outcome is upstream's, and when it fails (the owner was deleted meanwhile,
someone else adopted the pod) the failed result requeues the controller, whose next sync sees the
pod as it really is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from kube.core import POD_FAILED, POD_SUCCEEDED, Pod
from kube.labels import Selector
from kube.meta import ObjectMeta
from kube.ownership import get_controller_of

_TERMINAL: Final = frozenset({POD_SUCCEEDED, POD_FAILED})


@dataclass
class Claim:
    claimed: list[Pod] = field(default_factory=list)
    adopt: list[Pod] = field(default_factory=list)  # orphans to take (already in `claimed`)
    release: list[Pod] = field(default_factory=list)  # ours, but the selector no longer matches


def claim_pods(controller: ObjectMeta, selector: Selector, pods: Sequence[Pod],
               filters: Sequence[Callable[[Pod], bool]] = ()) -> Claim:
    """ClaimObject for each pod, in order (see controller_ref_manager.go)."""
    claim = Claim()
    deleting = controller.deletion_timestamp is not None
    for pod in pods:
        meta = pod.metadata
        matches = selector.matches(meta.labels) and (not filters or all(f(pod) for f in filters))
        ref = None
        for owner in meta.owner_references:  # get_controller_of, inlined: this runs for every pod
            if owner.controller:
                ref = owner
                break
        if ref is not None:
            if ref.uid != controller.uid:
                continue  # someone else's
            if matches:
                claim.claimed.append(pod)  # ours: claimed even while the controller is being deleted
            elif not deleting:
                claim.release.append(pod)
            continue
        if deleting or not matches or meta.deletion_timestamp is not None:
            continue
        if controller.namespace and controller.namespace != meta.namespace:
            continue
        claim.adopt.append(pod)
        claim.claimed.append(pod)
    return claim


def filter_claimed(controller: ObjectMeta, selector: Selector, pods: Sequence[Pod]) -> list[Pod]:
    """FilterClaimedPods: already ours and still matching, no adoption (terminating pods)."""
    return [p for p in pods
            if (ref := get_controller_of(p.metadata)) is not None and ref.uid == controller.uid
            and selector.matches(p.metadata.labels)]


def claim_active_pods(controller: ObjectMeta, selector: Selector, pods: Sequence[Pod]) -> tuple[Claim, list[Pod]]:
    """syncReplicaSet's three steps over its pods in one pass: FilterActivePods then ClaimPods on
    the active ones, and FilterTerminatingPods then FilterClaimedPods on the terminating ones.

    One pass instead of three: at 10,000 pods each pass costs more in memory traffic than in work.
    """
    claim = Claim()
    terminating: list[Pod] = []
    deleting = controller.deletion_timestamp is not None
    uid = controller.uid
    for pod in pods:
        if pod.status.phase in _TERMINAL:
            continue  # neither active nor terminating
        meta = pod.metadata
        ref = None
        for owner in meta.owner_references:
            if owner.controller:
                ref = owner
                break
        if meta.deletion_timestamp is not None:
            if ref is not None and ref.uid == uid and selector.matches(meta.labels):
                terminating.append(pod)
            continue
        matches = selector.matches(meta.labels)
        if ref is not None:
            if ref.uid != uid:
                continue
            if matches:
                claim.claimed.append(pod)
            elif not deleting:
                claim.release.append(pod)
            continue
        if deleting or not matches or (controller.namespace and controller.namespace != meta.namespace):
            continue
        claim.adopt.append(pod)
        claim.claimed.append(pod)
    return claim, terminating
