"""A ReplicaSet plan as action commands: what the executor is asked to do, with idempotency keys.

Every key starts with the decision's correlation id, so each effect is named once, forever: a
redelivered command is recognised by the executor, a re-published one by JetStream.
"""

from __future__ import annotations

from typing import TypedDict

import msgspec

from kube import codec
from kube.apps import ReplicaSet
from kube.ownership import adopt_patch, release_patch
from messages.actions import (
    Action,
    CreatePods,
    DeletePod,
    OwnerCheck,
    PatchPod,
    PodToCreate,
    RecordEvent,
    UpdateStatus,
)
from reconciler.core.replicaset.handlers import API_VERSION, KIND
from reconciler.core.replicaset.sync import COMPONENT, Plan

_encode = msgspec.json.encode


class _Common(TypedDict):
    decision_id: int
    controller: str
    issued_at: str


def object_reference(rs: ReplicaSet) -> msgspec.Raw:
    """What events are recorded against (the recorder's GetReference of the ReplicaSet)."""
    meta = rs.metadata
    return msgspec.Raw(_encode({"kind": KIND, "namespace": meta.namespace, "name": meta.name, "uid": meta.uid,
                                "apiVersion": API_VERSION, "resourceVersion": meta.resource_version}))


def status_body(plan: Plan) -> dict[str, object]:
    """The status as the API shows it: `replicas` is the one count that is never omitted."""
    body: dict[str, object] = codec.to_builtins(plan.status)
    body.setdefault("replicas", 0)
    return body


def plan_actions(plan: Plan, correlation: str, issued_at: str, write_status: bool) -> list[Action]:
    rs = plan.rs
    if rs is None:
        return []
    meta = rs.metadata
    common = _Common(decision_id=0, controller=plan.key, issued_at=issued_at)
    owner = object_reference(rs)
    actions: list[Action] = []
    check = OwnerCheck(kind=KIND, name=meta.name, uid=meta.uid)
    for pod in plan.adopt:
        actions.append(PatchPod(
            key=f"{correlation}/adopt/{pod.metadata.uid}", namespace=pod.metadata.namespace, name=pod.metadata.name,
            uid=pod.metadata.uid, patch_type="strategic",
            patch=msgspec.Raw(adopt_patch(meta, API_VERSION, KIND, pod.metadata.uid)), owner_check=check, **common))
    for pod in plan.release:
        actions.append(PatchPod(
            key=f"{correlation}/release/{pod.metadata.uid}", namespace=pod.metadata.namespace,
            name=pod.metadata.name, uid=pod.metadata.uid, patch_type="strategic",
            patch=msgspec.Raw(release_patch(meta.uid, pod.metadata.uid)), **common))
    if plan.creates:
        actions.append(CreatePods(
            key=f"{correlation}/create", namespace=meta.namespace, owner=owner, component=COMPONENT,
            pods=[PodToCreate(key=k, pod=msgspec.Raw(_encode(body))) for k, body in plan.creates], **common))
    for pod in plan.deletes:
        actions.append(DeletePod(
            key=f"{correlation}/delete/{pod.metadata.uid}", namespace=pod.metadata.namespace, name=pod.metadata.name,
            uid=pod.metadata.uid, owner=owner, component=COMPONENT, **common))
    if plan.status is not None and write_status:
        actions.append(UpdateStatus(
            key=f"{correlation}/status", kind=KIND, namespace=meta.namespace, name=meta.name, uid=meta.uid,
            status=msgspec.Raw(_encode(status_body(plan))), **common))
    for bad in plan.warnings:
        actions.append(RecordEvent(
            key=f"{correlation}/event/{bad.reason}", namespace=meta.namespace, involved=owner, type="Warning",
            reason=bad.reason, message=bad.message, component=COMPONENT, **common))
    return actions
