"""Applying one action to the API: which calls each action makes, and what each answer means.

Every action but CreatePods has one effect and one result. Where upstream treats an answer as
success, so does this (a delete that finds nothing, or finds that the pod we meant was replaced);
anything else the API refuses becomes a failed result with the API's Status, and the reconciler
decides what to do about it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from executor.creating import create_pods
from executor.effects import Delivery, Effect, RetryLater, failed, gave_up, metadata_of, succeeded_with
from executor.errors import TransientError, api_status
from executor.kubeapi import KubeApi
from executor.resources import CONTROLLER_REVISION, EVENT, KINDS, PATCH_TYPES, POD, Kind
from kube import codec
from kube.core import Event, EventSource
from kube.meta import ObjectMeta, ObjectReference, Status
from kube.times import format_time
from messages.actions import (
    FAILED,
    SUCCEEDED,
    CreateControllerRevision,
    CreatePods,
    DeleteControllerRevision,
    DeletePod,
    PatchControllerRevision,
    PatchPod,
    RecordEvent,
    SetAnnotation,
    UpdateStatus,
)

STATUS_UPDATE_RETRIES = 1  # upstream's statusUpdateRetries: one more try after a conflict

_json = msgspec.json.Encoder()


async def apply(delivery: Delivery) -> None:
    """Applies the delivered action and reports its results; raises RetryLater or Interrupted when
    it is left unfinished for a redelivery."""
    action = delivery.action
    if isinstance(action, CreatePods):
        await create_pods(delivery, action)
        return
    try:
        effect = await _HANDLERS[type(action)](delivery, action)
    except TransientError as exc:
        if not delivery.final:
            raise RetryLater(exc) from exc
        effect = gave_up(exc)
    except (codec.DecodeError, msgspec.DecodeError) as exc:
        # a well-formed message whose embedded object is not what its action needs: the reconciler
        # learns of it from a failed result (no call was made)
        effect = Effect(FAILED, reason="BadAction", message=str(exc))
    await delivery.emit(action.key, effect)


async def _delete_pod(d: Delivery, a: DeletePod) -> Effect:
    return await delete_with_uid(d.api, POD, a.namespace, a.name, a.uid)


async def _delete_revision(d: Delivery, a: DeleteControllerRevision) -> Effect:
    return await delete_with_uid(d.api, CONTROLLER_REVISION, a.namespace, a.name, a.uid)


async def delete_with_uid(api: KubeApi, kind: Kind, namespace: str, name: str, uid: str) -> Effect:
    """DELETE with a uid precondition: a same-named object created since is never touched. Not found,
    and a failed precondition (the object we meant is gone), are both successes, as upstream."""
    body = _json.encode({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}})
    reply = await api.call("DELETE", kind.path(namespace, name), body=body)
    if reply.ok:
        return Effect(SUCCEEDED, reply.status, object_uid=uid)
    status = api_status(reply)
    if reply.status == 404:
        return Effect(SUCCEEDED, 404, "NotFound", status.message, uid)
    if reply.status == 409 and "precondition" in status.message.lower():
        return Effect(SUCCEEDED, 409, "Gone", status.message, uid)
    return failed(status)


async def _patch_pod(d: Delivery, a: PatchPod) -> Effect:
    return await patch(d.api, POD, a.namespace, a.name, a.patch_type, bytes(a.patch))


async def _patch_revision(d: Delivery, a: PatchControllerRevision) -> Effect:
    return await patch(d.api, CONTROLLER_REVISION, a.namespace, a.name, a.patch_type, bytes(a.patch))


async def patch(api: KubeApi, kind: Kind, namespace: str, name: str, patch_type: str, body: bytes) -> Effect:
    """PATCH as given; the reconciler puts the uid precondition in the patch itself, as upstream's
    ownerReference patches do."""
    content_type = PATCH_TYPES.get(patch_type)
    if content_type is None:
        return Effect(FAILED, reason="BadAction", message=f"unknown patch type {patch_type!r}; "
                                                          f"expected one of {', '.join(PATCH_TYPES)}")
    reply = await api.call("PATCH", kind.path(namespace, name), body=body, content_type=content_type)
    return succeeded_with(SUCCEEDED, reply.status, reply.data) if reply.ok else failed(api_status(reply))


async def _create_revision(d: Delivery, a: CreateControllerRevision) -> Effect:
    """A create that finds the name taken reports the existing revision's uid: whether it is the same
    revision (a hash collision or a retry) is the reconciler's call, as in upstream's dsc.snapshot."""
    body = bytes(a.revision)
    reply = await d.api.call("POST", CONTROLLER_REVISION.path(a.namespace), body=body)
    if reply.ok:
        return succeeded_with(SUCCEEDED, reply.status, reply.data)
    status = api_status(reply)
    if reply.status == 409 and status.reason == "AlreadyExists":
        name = metadata_of(body).name
        got = await d.api.call("GET", CONTROLLER_REVISION.path(a.namespace, name))
        if got.ok:
            return succeeded_with(FAILED, 409, got.data, "AlreadyExists", status.message)
    return failed(status)


async def _update_status(d: Delivery, a: UpdateStatus) -> Effect:
    """GET, check the uid, set status, PUT /status; a conflict gets one fresh GET and one more PUT."""
    kind = KINDS.get(a.kind)
    if kind is None:
        return _unknown_kind(a.kind)
    path = kind.path(a.namespace, a.name)
    new_status = msgspec.json.decode(a.status)
    conflict: Status | None = None
    for _ in range(1 + STATUS_UPDATE_RETRIES):
        got = await d.api.call("GET", path)
        if not got.ok:
            return failed(api_status(got))
        obj: dict[str, Any] = msgspec.json.decode(got.data)
        uid = obj.get("metadata", {}).get("uid", "")
        if uid != a.uid:
            return Effect(FAILED, reason="Gone", message=f"{a.kind} {a.namespace}/{a.name} now has uid {uid}, "
                                                         f"not {a.uid}: the object this status was for is gone")
        obj["status"] = new_status
        put = await d.api.call("PUT", f"{path}/status", body=_json.encode(obj))
        if put.ok:
            return succeeded_with(SUCCEEDED, put.status, put.data)
        conflict = api_status(put)
        if put.status != 409:
            break
    assert conflict is not None
    return failed(conflict)


async def _record_event(d: Delivery, a: RecordEvent) -> Effect:
    """POSTs a core/v1 Event as client-go's legacy recorder makes it. Its name ends in 16 hex digits
    like upstream's `<name>.<UnixNano in hex>`, but taken from the action's key, so a redelivered
    event meets AlreadyExists instead of appearing twice."""
    involved = codec.decode(bytes(a.involved), ObjectReference)
    namespace = involved.namespace or a.namespace or "default"
    now = format_time(d.now())
    event = Event(
        metadata=ObjectMeta(name=f"{involved.name}.{hashlib.sha256(a.key.encode()).hexdigest()[:16]}",
                            namespace=namespace),
        involved_object=involved, reason=a.reason, message=a.message, type=a.type,
        source=EventSource(component=a.component), reporting_component=a.component,
        first_timestamp=now, last_timestamp=now, count=1)
    reply = await d.api.call("POST", EVENT.path(namespace), body=codec.encode(event))
    if reply.ok:
        return succeeded_with(SUCCEEDED, reply.status, reply.data)
    status = api_status(reply)
    if reply.status == 409 and status.reason == "AlreadyExists":
        return Effect(SUCCEEDED, 409, "AlreadyExists", "recorded by an earlier attempt")
    return failed(status)


async def _set_annotation(d: Delivery, a: SetAnnotation) -> Effect:
    kind = KINDS.get(a.kind)
    if kind is None:
        return _unknown_kind(a.kind)
    body = _json.encode({"metadata": {"annotations": a.annotations}})
    return await patch(d.api, kind, a.namespace, a.name, "merge", body)


def _unknown_kind(kind: str) -> Effect:
    return Effect(FAILED, reason="BadAction", message=f"kind {kind!r} is not one the executor knows; "
                                                      f"expected one of {', '.join(KINDS)}")


_HANDLERS: dict[type, Callable[[Delivery, Any], Awaitable[Effect]]] = {
    DeletePod: _delete_pod,
    PatchPod: _patch_pod,
    CreateControllerRevision: _create_revision,
    PatchControllerRevision: _patch_revision,
    DeleteControllerRevision: _delete_revision,
    UpdateStatus: _update_status,
    RecordEvent: _record_event,
    SetAnnotation: _set_annotation,
}
