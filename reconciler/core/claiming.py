"""ControllerRefManager.ClaimPods as a pure function: which pods a controller owns, adopts or releases.

Upstream patches during the claim and counts a pod as claimed once its adoption succeeded. Here
the claim returns the patches to send and counts a pod being adopted as claimed right away: when
the patch succeeds the outcome is upstream's, and when it fails (the owner was deleted meanwhile,
someone else adopted the pod) the failed result requeues the controller, whose next sync sees the
pod as it really is.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kube.core import Pod
from kube.labels import Selector
from kube.meta import ObjectMeta
from kube.pods import PodFacts, pod_facts


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


def claim_pod_facts(controller: ObjectMeta, selector: Selector, pods: Sequence[PodFacts]) -> Claim:
    """claim_pods (without filters) over the pods' facts, in their order: the controller uid and the labels
    read once per pod version."""
    claim = claim_facts(controller, selector, pods)
    return Claim([facts.pod for facts in claim.claimed], claim.adopt, claim.release)


@dataclass
class FactsClaim:
    """claim_facts' outcome: the claimed pods as their facts (the DaemonSet's sync reads nothing else)."""

    claimed: list[PodFacts] = field(default_factory=list)
    adopt: list[Pod] = field(default_factory=list)  # orphans to take (already in `claimed`)
    release: list[Pod] = field(default_factory=list)  # ours, but the selector no longer matches


def claim_facts(controller: ObjectMeta, selector: Selector, pods: Sequence[PodFacts]) -> FactsClaim:
    """claim_pod_facts, the claimed pods kept as their facts (the DaemonSet's claim, over thousands of pods
    in every sync)."""
    claim = FactsClaim()
    claimed = claim.claimed
    deleting = controller.deletion_timestamp is not None
    uid = sys.intern(controller.uid)  # PodFacts.controller_uid is interned: compared by identity when equal
    pairs = selector.label_pairs  # matches(labels) is `pairs <= labels.items()` when not None
    matches = selector.matches
    # the selector's answer by labels dict: the cache gives pods with equal labels one shared dict (a
    # DaemonSet's pods have one or two), so it is worked out once per dict (every dict stays alive meanwhile,
    # held by `pods`, so no id is reused)
    matched_by_labels: dict[int, bool] = {}
    for facts in pods:
        owner = facts.controller_uid
        labels = facts.labels
        matched = matched_by_labels.get(id(labels))
        if matched is None:
            matched = matched_by_labels[id(labels)] = pairs <= labels.items() if pairs is not None else matches(labels)
        if owner is not None:
            if owner != uid:
                continue  # someone else's
            if matched:
                claimed.append(facts)  # ours: claimed even while the controller is being deleted
            elif not deleting:
                claim.release.append(facts.pod)
            continue
        if deleting or not matched or facts.deleting:
            continue
        pod = facts.pod
        if controller.namespace and controller.namespace != pod.metadata.namespace:
            continue
        claim.adopt.append(pod)
        claimed.append(facts)
    return claim


@dataclass
class ActiveClaim:
    """claim_active's outcome: the claimed pods as their facts (the status counts read them)."""

    claimed: list[PodFacts] = field(default_factory=list)
    adopt: list[Pod] = field(default_factory=list)  # orphans to take (already in `claimed`)
    release: list[Pod] = field(default_factory=list)  # ours, but the selector no longer matches
    terminating: list[Pod] = field(default_factory=list)  # ours, matching, being deleted, not terminal


def claim_active_pods(controller: ObjectMeta, selector: Selector, pods: Sequence[Pod]) -> tuple[Claim, list[Pod]]:
    """syncReplicaSet's three steps over its pods in one pass: FilterActivePods then ClaimPods on
    the active ones, and FilterTerminatingPods then FilterClaimedPods on the terminating ones."""
    claim = claim_active(controller, selector, [pod_facts(p) for p in pods])
    return Claim([f.pod for f in claim.claimed], claim.adopt, claim.release), claim.terminating


def claim_active(controller: ObjectMeta, selector: Selector, pods: Sequence[PodFacts]) -> ActiveClaim:
    """claim_active_pods over the pods' facts (the reconciler's cache keeps them, see Cache.pod_facts).

    One pass instead of three, over facts read once per pod version: a ReplicaSet syncs over and over
    with thousands of pods, most of them unchanged since its last sync.
    """
    claim = ActiveClaim()
    claimed, terminating = claim.claimed, claim.terminating
    deleting = controller.deletion_timestamp is not None
    uid = sys.intern(controller.uid)  # PodFacts.controller_uid is interned: compared by identity when equal
    pairs = selector.label_pairs  # matches(labels) is `pairs <= labels.items()` when not None
    matches = selector.matches
    # the selector's answer for the last labels dict seen: the cache gives pods with equal labels one shared dict
    # (a ReplicaSet's thousands of pods have one or a few), so it is worked out about once per dict
    last_labels: dict[str, str] | None = None
    last_matched = False
    for facts in pods:
        if facts[2]:  # terminal: neither active nor terminating
            continue
        labels = facts[4]
        if labels is last_labels:
            matched = last_matched
        else:
            matched = pairs <= labels.items() if pairs is not None else matches(labels)
            last_labels, last_matched = labels, matched
        owner = facts[1]
        if facts[3]:  # being deleted
            if owner == uid and matched:
                terminating.append(facts[0])
            continue
        if owner is not None:
            if owner != uid:
                continue
            if matched:
                claimed.append(facts)
            elif not deleting:
                claim.release.append(facts[0])
            continue
        pod = facts[0]
        if deleting or not matched or (controller.namespace and controller.namespace != pod.metadata.namespace):
            continue
        claim.adopt.append(pod)
        claimed.append(facts)
    return claim
