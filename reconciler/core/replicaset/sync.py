"""syncReplicaSet as a pure function: (cache view, expectations, last error, clock) -> a plan.

The plan holds what upstream would do through the API in the same sync: the adoption and release
patches of claimPods, the creates (at most burstReplicas, in one action the executor runs in
slow-start batches) or the deletes chosen by upstream's ranking, the expectations that keep the
next syncs from acting twice, the status to write if anything changed, and when to sync again.

API errors reach it one sync late: the executor reports a failed create or delete, the reconciler
keeps the error for the ReplicaSet and requeues it with backoff, and the next sync sets the
ReplicaFailure condition from that error (upstream does it in the sync that saw the error). Like
upstream's manageReplicasErr, what a sync reports is decided afresh in every sync (see
:func:`reported_error`): a carried error stands only for a sync that would make calls of the same kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

import msgspec

from kube.apps import ReplicaSet, ReplicaSetStatus
from kube.core import Pod
from kube.labels import SelectorError, selector_from_label_selector
from kube.ownership import get_controller_of, new_controller_ref
from kube.pods import PodFacts, pod_key
from messages.keys import ControllerKey
from reconciler.core.claiming import claim_active
from reconciler.core.controller import ManageError
from reconciler.core.expectations import Expectations, expect, held_back
from reconciler.core.podtemplate import NO_LABELS_ERROR, PodFactory
from reconciler.core.ranking import pods_to_delete
from reconciler.core.replicaset.handlers import API_VERSION, KIND
from reconciler.core.replicaset.status import min_next_availability_check, needs_write, replicas_of, status_of
from reconciler.core.view import BadInput, CacheView

BURST_REPLICAS: Final = 500
COMPONENT: Final = "replicaset-controller"


@dataclass
class Plan:
    key: ControllerKey
    rs: ReplicaSet | None = None  # None: the ReplicaSet is gone and its expectations go too
    needs_sync: bool = False
    diff: int = 0
    creates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (idempotency key, pod body)
    deletes: list[Pod] = field(default_factory=list)
    adopt: list[Pod] = field(default_factory=list)
    release: list[Pod] = field(default_factory=list)
    expectations: Expectations | None = None  # new expectations to save, when they change
    status: ReplicaSetStatus | None = None  # to write, observedGeneration set
    failure: ManageError | None = None  # this sync's manageReplicasErr: what the status reports (ReplicaFailure)
    managed: bool = False  # manageReplicas ran
    requeue_after: timedelta | None = None
    warnings: list[BadInput] = field(default_factory=list)
    explain: dict[str, Any] = field(default_factory=dict)

    @property
    def manage_error(self) -> str | None:
        """The message of this sync's manageReplicasErr (None: nothing failed)."""
        return None if self.failure is None else self.failure.message


def sync_replicaset(key: ControllerKey, view: CacheView, expectations: Expectations | None, carried: ManageError | None,
                    now: datetime, key_base: str, burst: int = BURST_REPLICAS,
                    terminating_replicas: bool = True) -> Plan:
    """One sync of `key` ("ReplicaSet/namespace/name"); `key_base` makes its idempotency keys unique.

    `carried` is the API error kubus learned one round late and may report in this sync (see
    :func:`reported_error`): the first error the executors reported for the last completed round of
    creates or deletes, or, while a round is in flight, what the sync that judged the previous one reported.
    """
    namespace, name = key.namespace, key.name
    plan = Plan(key)
    rs = view.named(KIND, namespace, name)
    if not isinstance(rs, ReplicaSet):
        plan.explain = {"reason": "deleted: expectations dropped"}
        return plan
    plan.rs = rs
    plan.needs_sync = expectations is None or expectations.satisfied(now)
    try:
        selector = selector_from_label_selector(rs.spec.selector)
    except SelectorError as exc:
        # upstream logs and gives up on this ReplicaSet until it changes; kubus also says so in an Event
        plan.warnings.append(BadInput("InvalidSelector", f"invalid selector: {exc}", "spec.selector"))
        plan.explain = {"reason": "invalid selector", "error": str(exc)}
        return plan
    # the pods come in no particular order, and nothing below depends on it: adoptions and releases are
    # sorted by name, the ranking's keys end with the uid, the status counts
    claim = claim_active(rs.metadata, selector, view.owned_or_orphan_pods(namespace, rs.metadata.uid))
    plan.adopt, plan.release = sorted(claim.adopt, key=_name), sorted(claim.release, key=_name)
    active = len(claim.claimed)  # (the pods themselves only for the availability check below: rarely)
    replicas = replicas_of(rs)
    plan.diff = active - replicas
    plan.managed = plan.needs_sync and rs.metadata.deletion_timestamp is None
    own = _manage(plan, rs, claim.claimed, view, expectations, now, key_base, burst) if plan.managed else None
    if rs.metadata.deletion_timestamp is not None:
        plan.explain["reason"] = "being deleted: no creates or deletes, status only"
    elif expectations is not None and not plan.needs_sync:
        plan.explain["reason"] = f"{held_back(expectations, now)}: status only"
    plan.failure = reported_error(plan.diff, own, carried, deleting=rs.metadata.deletion_timestamp is not None)
    status = status_of(rs, claim.claimed, len(claim.terminating) if terminating_replicas else None,
                       plan.manage_error, now)
    if needs_write(rs, status) and not plan.adopt:
        # Upstream's claimPods adopts before updateReplicaSetStatus runs, and a failed adoption ends the sync
        # before it: no status of upstream's counts a pod that is not yet its own. The adoption's own event (the
        # pod updated with this controller reference) brings the sync that writes the status counting it; a
        # refused one, the retry that writes it without.
        plan.status = msgspec.structs.replace(status, observed_generation=rs.metadata.generation)
    if rs.spec.min_ready_seconds > 0 and status.ready_replicas != status.available_replicas:
        # a last line of defence against clock skew and queue preemption: look again when the next pod turns
        # available. Current upstream plans it whatever manageReplicas returned (the older guard
        # `manageReplicasErr == nil` went with FindMinNextPodAvailabilityCheck); here it matters more, as the
        # error's rate-limited requeue came before this sync, not after it.
        plan.requeue_after = (min_next_availability_check([facts.pod for facts in claim.claimed],
                                                          rs.spec.min_ready_seconds, now)
                              or timedelta(seconds=rs.spec.min_ready_seconds))
    plan.explain.update({"replicas": replicas, "active": active, "diff": plan.diff,
                         "needs_sync": plan.needs_sync})
    return plan


def reported_error(diff: int, own: ManageError | None, carried: ManageError | None, *,
                   deleting: bool) -> ManageError | None:
    """This sync's manageReplicasErr, as upstream's syncReplicaSet computes it afresh in every sync.

    Upstream's is the error of the calls this very sync made: nil when manageReplicas made none that
    failed (the diff is 0, or every call succeeded) or did not run (expectations unsatisfied, the
    ReplicaSet being deleted). kubus learns of its calls' errors a round later, so an error known
    without a call (`own`: a template without labels) comes first, and otherwise the `carried` one
    stands in for what this sync's calls would return, but only when this sync would make calls of
    the kind that failed (never at diff 0, nor for deletes after failed creates): so the condition's
    reason, which calculateStatus takes from the diff's sign, always names the calls that failed.
    """
    if own is not None:
        return own
    if deleting or carried is None or not carried.stands_for(diff):
        return None
    return carried


def _manage(plan: Plan, rs: ReplicaSet, active: list[PodFacts], view: CacheView, expectations: Expectations | None,
            now: datetime, key_base: str, burst: int) -> ManageError | None:
    """manageReplicas; returns an error known without calling the API (a template without labels)."""
    if plan.diff < 0:
        count = min(-plan.diff, burst)
        if not rs.spec.template.metadata.labels:
            # createPods refuses before any call: every create is "skipped", so nothing is expected
            plan.expectations = expect(0, 0, now)
            plan.explain["reason"] = f"cannot create {count} pods: {NO_LABELS_ERROR}"
            return ManageError(NO_LABELS_ERROR, creating=True)
        factory = PodFactory(rs.spec.template, rs.metadata.name, new_controller_ref(rs.metadata, API_VERSION, KIND),
                             rs.metadata.namespace)
        plan.creates = [(k, factory.body(k)) for k in (f"{key_base}/create/{i}" for i in range(count))]
        plan.expectations = expect(count, 0, now)
        plan.explain["reason"] = f"too few replicas: creating {count}"
    elif plan.diff > 0:
        count = min(plan.diff, burst)
        related = indirectly_related_pods(rs, view)
        plan.deletes = pods_to_delete(active, related, count, now)
        if len(plan.deletes) == len(active):  # all go, unranked: in name order, the same in every replay
            plan.deletes.sort(key=_name)
        plan.expectations = expect(0, len(plan.deletes), now, frozenset(pod_key(p) for p in plan.deletes))
        plan.explain["reason"] = f"too many replicas: deleting {count}"
        plan.explain["deleting"] = [p.metadata.name for p in plan.deletes]
    else:
        plan.explain["reason"] = "replicas match"
    return None


def _name(pod: Pod) -> str:
    return pod.metadata.name


def indirectly_related_pods(rs: ReplicaSet, view: CacheView) -> list[Pod]:
    """getIndirectlyRelatedPods: pods of every ReplicaSet sharing this one's controller (none if unowned)."""
    ref = get_controller_of(rs.metadata)
    if ref is None:
        return []
    seen: set[str] = set()
    related: list[Pod] = []
    siblings = sorted(view.controlled_by(KIND, rs.metadata.namespace, ref.uid), key=lambda r: r.metadata.name)
    for sibling in siblings:
        try:
            selector = selector_from_label_selector(sibling.spec.selector)
        except SelectorError:
            continue
        for pod in sorted(view.in_namespace("Pod", sibling.metadata.namespace), key=lambda p: p.metadata.name):
            if pod.metadata.uid not in seen and selector.matches(pod.metadata.labels):
                seen.add(pod.metadata.uid)
                related.append(pod)
    return related
