"""A ReplicaSet plan as action commands: what the executor is asked to do, with idempotency keys.

Every key starts with the decision's correlation id, so each effect is named once, forever: a
redelivered command is recognised by the executor, a re-published one by JetStream.
"""

from __future__ import annotations

import msgspec

from kube import codec
from messages.actions import (
    Action,
    CreatePods,
    DeletePod,
    PodToCreate,
    RecordEvent,
    UpdateStatus,
)
from reconciler.core.audit_targets import Known, event_on, name_in
from reconciler.core.owner_actions import Common, Planned, adoption, claim_actions, object_reference
from reconciler.core.replicaset.handlers import API_VERSION, KIND
from reconciler.core.replicaset.sync import COMPONENT, Plan

_encode = msgspec.json.encode


def status_body(plan: Plan) -> dict[str, object]:
    """The status as the API shows it: `replicas` is the one count that is never omitted."""
    body: dict[str, object] = codec.to_builtins(plan.status)
    body.setdefault("replicas", 0)
    return body


def plan_actions(plan: Plan, correlation: str, issued_at: str, write_status: bool) -> Planned:
    rs = plan.rs
    if rs is None:
        return Planned([], Known())
    meta = rs.metadata
    common = Common(decision_id=0, controller=plan.key, issued_at=issued_at)
    owner = object_reference(KIND, API_VERSION, meta)
    actions: list[Action] = []
    known = Known()
    adopting = {pod.metadata.uid for pod in plan.adopt}
    deleted = {pod.metadata.uid for pod in plan.deletes}
    actions.extend(claim_actions(KIND, API_VERSION, meta, plan.adopt, plan.release, correlation, common, deleted))
    if plan.creates:
        actions.append(CreatePods(
            key=f"{correlation}/create", namespace=meta.namespace, owner=owner, component=COMPONENT,
            pods=[PodToCreate(key=k, pod=msgspec.Raw(_encode(body))) for k, body in plan.creates], **common))
        known.names.update((k, name_in(body)) for k, body in plan.creates)
    for pod in plan.deletes:
        uid = pod.metadata.uid
        actions.append(DeletePod(
            key=f"{correlation}/delete/{uid}", namespace=pod.metadata.namespace, name=pod.metadata.name,
            uid=uid, owner=owner, component=COMPONENT,
            adopt_first=adoption(KIND, API_VERSION, meta, uid) if uid in adopting else None, **common))
    if plan.status is not None and write_status:
        # updateReplicaSetStatus: UpdateStatus of the synced copy (its resourceVersion and metadata), and
        # after an error the whole newStatus on a fresh read
        actions.append(UpdateStatus(
            key=f"{correlation}/status", kind=KIND, namespace=meta.namespace, name=meta.name, uid=meta.uid,
            status=msgspec.Raw(_encode(status_body(plan))), resource_version=meta.resource_version,
            metadata=msgspec.Raw(_encode(codec.to_builtins(meta))), **common))
    for bad in plan.warnings:
        key = f"{correlation}/event/{bad.reason}"
        actions.append(RecordEvent(
            key=key, namespace=meta.namespace, involved=owner, type="Warning",
            reason=bad.reason, message=bad.message, component=COMPONENT, **common))
        known.targets[key] = event_on(key, meta.namespace, KIND, meta.namespace, meta.name, meta.uid)
    return Planned(actions, known)
