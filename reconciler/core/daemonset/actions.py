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
    Adoption,
    BumpCollisionCount,
    CreateControllerRevision,
    CreatePods,
    DeleteControllerRevision,
    DeletePod,
    PatchControllerRevision,
    PatchPod,
    PodToCreate,
    RecordEvent,
    UpdateStatus,
)
from reconciler.core.audit_targets import Known, event_on, name_in
from reconciler.core.daemonset.handlers import API_VERSION, KIND
from reconciler.core.daemonset.sync import COMPONENT, DaemonSetPlan
from reconciler.core.owner_actions import Common, Planned, adoption, claim_actions, object_reference

_encode = msgspec.json.encode


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
    common = Common(decision_id=0, controller=plan.key, issued_at=issued_at)
    owner = object_reference(KIND, API_VERSION, meta)
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

    def first(uid: str, adopting: set[str]) -> Adoption | None:
        return adoption(KIND, API_VERSION, meta, uid) if uid in adopting else None

    for rev in plan.revision_adopt:
        if rev.metadata.uid in touched_revisions:
            continue
        adopting = adoption(KIND, API_VERSION, meta, rev.metadata.uid)
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
            patch_type="merge", patch=msgspec.Raw(patch), adopt_first=first(rev.metadata.uid, adopting_revisions),
            **common))
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
            adopt_first=first(pod.metadata.uid, adopting_pods), **common))
    actions.extend(claim_actions(KIND, API_VERSION, meta, plan.adopt, plan.release, correlation, common,
                                 touched_pods))
    if plan.creates:
        actions.append(CreatePods(
            key=f"{correlation}/create", namespace=ns, owner=owner, component=COMPONENT,
            pods=[PodToCreate(key=k, pod=msgspec.Raw(_encode(body))) for _, k, body in plan.creates], **common))
        known.names.update((k, name_in(body)) for _, k, body in plan.creates)
    for pod in plan.deletes:
        actions.append(DeletePod(
            key=f"{correlation}/delete/{pod.metadata.uid}", namespace=ns, name=pod.metadata.name,
            uid=pod.metadata.uid, owner=owner, component=COMPONENT,
            adopt_first=first(pod.metadata.uid, adopting_pods), **common))
    for rev in plan.revision_deletes:
        actions.append(DeleteControllerRevision(
            key=f"{correlation}/delete-revision/{rev.metadata.uid}", namespace=ns, name=rev.metadata.name,
            uid=rev.metadata.uid, adopt_first=first(rev.metadata.uid, adopting_revisions), **common))
    for i, event in enumerate(plan.events):
        key = f"{correlation}/event/{i}"
        actions.append(RecordEvent(
            key=key, namespace=ns, involved=owner, type=event.type, reason=event.reason,
            message=event.message, component=COMPONENT, **common))
        known.targets[key] = event_on(key, ns, KIND, meta.namespace, meta.name, meta.uid)
    for bad in plan.warnings:
        key = f"{correlation}/event/{bad.reason}/{bad.field}"
        actions.append(RecordEvent(
            key=key, namespace=ns, involved=owner, type="Warning",
            reason=bad.reason, message=bad.message, component=COMPONENT, **common))
        known.targets[key] = event_on(key, ns, KIND, meta.namespace, meta.name, meta.uid)
    if plan.status is not None and write_status:
        # storeDaemonSetStatus: UpdateStatus of the synced copy (its resourceVersion and metadata, its status
        # with the counts set); after an error only the seven counts, and observedGeneration when the sync got
        # past the expectations check (updateObservedGen: plan.managed), on a fresh read
        actions.append(UpdateStatus(
            key=f"{correlation}/status", kind=KIND, namespace=ns, name=meta.name, uid=meta.uid,
            status=msgspec.Raw(_encode(status_body(plan))), resource_version=meta.resource_version,
            metadata=msgspec.Raw(_encode(codec.to_builtins(meta))),
            status_fields=("desiredNumberScheduled", "currentNumberScheduled", "numberMisscheduled", "numberReady",
                           "updatedNumberScheduled", "numberAvailable", "numberUnavailable",
                           *(("observedGeneration",) if plan.managed else ())),
            **common))
    return Planned(actions, known)
