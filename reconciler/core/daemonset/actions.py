"""A DaemonSet plan as action commands, in upstream's order, with idempotency keys.

Every key starts with the decision's correlation id, so each effect is named once: a redelivered
command is recognised by the executor, a re-published one by JetStream.
"""

from __future__ import annotations

import msgspec

from kube import codec
from kube.ownership import release_patch
from messages.actions import (
    Action,
    BumpCollisionCount,
    CreateControllerRevision,
    DeleteControllerRevision,
    PatchControllerRevision,
    PatchPod,
)
from reconciler.core.audit_targets import Known
from reconciler.core.daemonset.handlers import API_VERSION, KIND
from reconciler.core.daemonset.sync import COMPONENT, DaemonSetPlan
from reconciler.core.owner_actions import Issuer, Planned

# storeDaemonSetStatus's fields set on a fresh read after an error (observedGeneration too when the sync raised it)
_COUNTS = ("desiredNumberScheduled", "currentNumberScheduled", "numberMisscheduled", "numberReady",
           "updatedNumberScheduled", "numberAvailable", "numberUnavailable")


def status_body(plan: DaemonSetPlan) -> dict[str, object]:
    """The status as the API shows it: the four counts upstream never omits are always sent."""
    body: dict[str, object] = codec.to_builtins(plan.status)
    for required in ("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady"):
        body.setdefault(required, 0)
    return body


def plan_actions(plan: DaemonSetPlan, correlation: str, issued_at: str, write_status: bool) -> Planned:
    ds = plan.ds
    if ds is None:
        return Planned([], Known())
    meta = ds.metadata
    issuer = Issuer.of(KIND, API_VERSION, meta, str(plan.key), correlation, issued_at, COMPONENT)
    common = issuer.common
    ns = meta.namespace
    actions: list[Action] = []
    known = Known()
    # orphans this sync claims and then patches or deletes are adopted by that action first (adopt_first):
    # upstream's claim has adopted them before it touches them
    adopting_revisions = {rev.metadata.uid for rev in plan.revision_adopt}
    touched_revisions = {rev.metadata.uid for rev, _ in plan.revision_patches} | {
        rev.metadata.uid for rev in plan.revision_deletes}
    adopting_pods = {pod.metadata.uid for pod in plan.adopt}
    touched_pods = {pod.metadata.uid for pod in plan.deletes} | {pod.metadata.uid for pod, _ in plan.pod_relabels}

    for rev in plan.revision_adopt:
        if rev.metadata.uid in touched_revisions:
            continue
        adopting = issuer.adoption(rev.metadata.uid)
        actions.append(PatchControllerRevision(
            key=f"{correlation}/adopt-revision/{rev.metadata.uid}", namespace=ns, name=rev.metadata.name,
            uid=rev.metadata.uid, patch_type=adopting.patch_type, patch=adopting.patch,
            owner_check=adopting.owner_check, **common))
    for rev in plan.revision_release:
        actions.append(PatchControllerRevision(
            key=f"{correlation}/release-revision/{rev.metadata.uid}", namespace=ns, name=rev.metadata.name,
            uid=rev.metadata.uid, patch_type="strategic",
            patch=msgspec.Raw(release_patch(meta.uid, rev.metadata.uid)), **common))
    for i, (rev, patch) in enumerate(plan.revision_patches):
        actions.append(PatchControllerRevision(
            key=f"{correlation}/patch-revision/{i}", namespace=ns, name=rev.metadata.name, uid=rev.metadata.uid,
            patch_type="merge", patch=msgspec.Raw(patch),
            adopt_first=issuer.adopting_first(rev.metadata.uid, adopting_revisions), **common))
    for rev, body in zip(plan.revision_creates, plan.revision_bodies, strict=True):
        key = f"{correlation}/create-revision/{rev.metadata.name}"
        actions.append(CreateControllerRevision(key=key, namespace=ns, revision=msgspec.Raw(body), **common))
        known.names[key] = rev.metadata.name or rev.metadata.generate_name
    if plan.collision_count is not None:
        actions.append(BumpCollisionCount(
            key=f"{correlation}/collision-count/{plan.collision_count}", namespace=ns, name=meta.name,
            uid=meta.uid, seen=plan.collision_count - 1, **common))
    for pod, patch in plan.pod_relabels:
        actions.append(PatchPod(
            key=f"{correlation}/relabel/{pod.metadata.uid}", namespace=ns, name=pod.metadata.name,
            uid=pod.metadata.uid, patch_type="merge", patch=msgspec.Raw(patch),
            adopt_first=issuer.adopting_first(pod.metadata.uid, adopting_pods), **common))
    actions.extend(issuer.claims(plan.adopt, plan.release, touched_pods))
    # the sync's other creates and deletes wait on its claims too: upstream's ClaimControllerRevisions or ClaimPods
    # fails the whole sync when canAdopt finds the DaemonSet gone or being deleted
    # (TestDontDoAnythingIfBeingDeletedRace)
    claiming = bool(plan.adopt or plan.revision_adopt)
    if plan.creates:
        actions.append(issuer.create_pods(plan.creates, known, claiming))
    actions.extend(issuer.delete_pod(pod, adopting_pods, claiming) for pod in plan.deletes)
    for rev in plan.revision_deletes:
        actions.append(DeleteControllerRevision(
            key=f"{correlation}/delete-revision/{rev.metadata.uid}", namespace=ns, name=rev.metadata.name,
            uid=rev.metadata.uid, adopt_first=issuer.adopting_first(rev.metadata.uid, adopting_revisions), **common))
    actions.extend(issuer.event(f"{correlation}/event/{i}", event.type, event.reason, event.message, known)
                   for i, event in enumerate(plan.events))
    actions.extend(issuer.event(f"{correlation}/event/{bad.reason}/{bad.field}", "Warning", bad.reason, bad.message,
                                known) for bad in plan.warnings)
    if plan.status is not None and write_status:
        # storeDaemonSetStatus: UpdateStatus of the synced copy (its resourceVersion and metadata, its status
        # with the counts set); after an error only the seven counts, and observedGeneration when the sync got
        # past the expectations check (updateObservedGen: plan.managed), on a fresh read
        actions.append(issuer.update_status(
            status_body(plan), (*_COUNTS, *(("observedGeneration",) if plan.managed else ()))))
    return Planned(actions, known)
