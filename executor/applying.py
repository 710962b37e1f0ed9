"""Applying one action to the API: which calls each action makes, and what each answer means.

Every action but CreatePods has one effect and one result. Where upstream treats an answer as
success, so does this (a delete that finds nothing, or finds that the pod we meant was replaced);
anything else the API refuses becomes a failed result with the API's Status, and the reconciler
decides what to do about it (a PatchPod answered 404 or 422 is one such failure: upstream's release
ignores those, and so may the reconciler).

A PatchPod or PatchControllerRevision with an `owner_check` is an adoption: as upstream's
ControllerRefManager runs canAdopt (RecheckDeletionTimestamp around a fresh GET of the ReplicaSet or
DaemonSet) before patching the ownerReference in, the owner is read first and the patch refused when it
is gone or being deleted. An action with `adopt_first` deletes or patches an orphan its sync claimed:
the adoption (owner re-check, patch) is made first, and the action is applied only if it succeeded, as
upstream's claim adopts synchronously; otherwise it is reported skipped (NOT_ADOPTED). A CreatePods or
DeletePod with `after_claim` belongs to a sync that claims orphans: it is applied only if the owner, read
fresh, may still adopt (executor/claims.py), as a failed claim ends upstream's sync. A DeletePod with
an `owner` records SuccessfulDelete / FailedDelete on it (see executor/events.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from executor.claims import claim_failed, recheck_owner
from executor.creating import create_pods
from executor.delivery import Delivery
from executor.effects import (
    Effect,
    RetryLater,
    StaleVersion,
    failed,
    gave_up,
    head_of,
    object_subject,
    succeeded_with,
)
from executor.errors import TransientError, api_status
from executor.events import build_event, delete_event, event_name, event_namespace, record_pod_events
from executor.kubeapi import KubeApi
from executor.resources import CONTROLLER_REVISION, KINDS, PATCH_TYPES, POD, Kind
from kube import codec
from kube.meta import ObjectReference, Status
from messages.actions import (
    FAILED,
    NOT_ADOPTED,
    SKIPPED,
    SUCCEEDED,
    Action,
    BumpCollisionCount,
    CreateControllerRevision,
    CreatePods,
    DeleteControllerRevision,
    DeletePod,
    PatchControllerRevision,
    PatchPod,
    RecordEvent,
    UpdateStatus,
    status_with_fields,
)

STATUS_UPDATE_RETRIES = 1  # upstream's statusUpdateRetries: one more try, on a fresh read, after a failed write

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
    subject = subject_of(action)
    if isinstance(action, RecordEvent) and effect.object_name:  # a repeat counted onto an earlier Event
        subject = object_subject(subject.split("/", 1)[0], effect.object_name)
    await delivery.emit(action.key, effect, subject)
    if isinstance(action, DeletePod):
        await record_pod_events(delivery.events, delivery.api, delivery.now, action.owner, action.component,
                                action.namespace, [(action.key, delete_event(effect, action.name))])


def subject_of(action: Action) -> str:
    """The object a single-effect action is on, as ActionResult.subject names it."""
    if isinstance(action, CreateControllerRevision):
        return object_subject(action.namespace, head_of(action.revision).name)
    if isinstance(action, RecordEvent):
        try:
            involved = codec.decode(bytes(action.involved), ObjectReference)
        except (codec.DecodeError, msgspec.DecodeError):
            return ""
        return object_subject(event_namespace(involved, action.namespace), event_name(involved.name, action.key))
    if isinstance(action, CreatePods):  # each pod's result names its pod
        return action.namespace
    return object_subject(action.namespace, action.name)


async def _delete_pod(d: Delivery, a: DeletePod) -> Effect:
    if (not_claimed := await claim_failed(d.api, a.namespace, a.after_claim, a.uid)) is not None:
        return not_claimed
    not_adopted, version = await adopted_first(d.api, POD, a, proven_version(d, a.uid))
    if not_adopted is not None:
        return not_adopted
    return await delete_with_preconditions(d.api, POD, a.namespace, a.name, a.uid, version, d.last_proof)


async def _delete_revision(d: Delivery, a: DeleteControllerRevision) -> Effect:
    not_adopted, version = await adopted_first(d.api, CONTROLLER_REVISION, a, proven_version(d, a.uid))
    if not_adopted is not None:
        return not_adopted
    return await delete_with_preconditions(d.api, CONTROLLER_REVISION, a.namespace, a.name, a.uid, version,
                                           d.last_proof)


def proven_version(d: Delivery, uid: str) -> str:
    """The resourceVersion the ownership check proved the object its controller's at ("" when unchecked, or
    the object was gone or another when read: the uid precondition alone then)."""
    return d.proven.resource_version if d.proven is not None and d.proven.uid == uid else ""


async def adopted_first(api: KubeApi, kind: Kind,
                        a: DeletePod | PatchPod | PatchControllerRevision | DeleteControllerRevision,
                        version: str = "") -> tuple[Effect | None, str]:
    """The adoption the action waits on (`adopt_first`), as upstream's claim adopts before the sync touches
    what it claimed: (None, the object's resourceVersion) when there is none (`version`, as given) or it
    succeeded (the adoption's answer's: the version that is the controller's now; a redelivery adopts again,
    which changes nothing); otherwise the action is not applied, and its result says why: skipped,
    NOT_ADOPTED, with the adoption's answer (the owner gone or being deleted, the object gone (404) or another
    controller's (422))."""
    adoption = a.adopt_first
    if adoption is None:
        return None, version
    refused = await recheck_owner(api, a.namespace, adoption.owner_check)
    if refused is None:
        done = await patch(api, kind, a.namespace, a.name, adoption.patch_type, bytes(adoption.patch))
        if done.outcome == SUCCEEDED:
            return None, done.resource_version if done.object_uid == a.uid else ""
        refused = done
    return Effect(SKIPPED, refused.code, NOT_ADOPTED,
                  f"not adopted, so not applied: {refused.reason + ': ' if refused.reason else ''}{refused.message}",
                  a.uid, api_message=refused.error), ""


async def delete_with_preconditions(api: KubeApi, kind: Kind, namespace: str, name: str, uid: str,
                                    resource_version: str = "", last_proof: bool = True) -> Effect:
    """DELETE with a uid precondition, so a same-named object created since is never touched, and with the
    resourceVersion the ownership check proved its controller's (executor/ownership.py), so the object deleted
    is the very version checked. Not found, and a failed uid precondition (the object we meant is gone), are
    both successes, as upstream. A failed resourceVersion precondition (the object changed since it was
    checked) raises StaleVersion, for a fresh check, unless this was the `last_proof`: then it is a failure
    (the API's Conflict), which the reconciler meets as any failed delete."""
    preconditions = {"uid": uid}
    if resource_version:
        preconditions["resourceVersion"] = resource_version
    body = _json.encode({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": preconditions})
    reply = await api.call("DELETE", kind.path(namespace, name), body=body)
    if reply.ok:
        return Effect(SUCCEEDED, reply.status, object_uid=uid)
    status = api_status(reply)
    if reply.status == 404:
        return Effect(SUCCEEDED, 404, "NotFound", status.message, uid)
    if reply.status == 409 and failed_precondition(status.message) == "UID":
        return Effect(SUCCEEDED, 409, "Gone", status.message, uid)
    if resource_version and reply.status == 409 and failed_precondition(status.message) == "ResourceVersion" \
            and not last_proof:
        raise StaleVersion(status)
    return failed(status)


def failed_precondition(message: str) -> str:
    """Which precondition a Conflict's message says failed: "UID", "ResourceVersion", or "" (none). kube-apiserver
    words it two ways, both naming the field: rest.BeforeDelete's "the UID in the precondition (..) does not
    match ..." (the check before the write), storage's "Precondition failed: UID in precondition: .." (in the
    write's own transaction). The uid is checked first in both."""
    lowered = message.lower()
    if "precondition" not in lowered:
        return ""
    if "uid in" in lowered:
        return "UID"
    if "resourceversion in" in lowered:
        return "ResourceVersion"
    return "UID"  # a precondition failure naming neither: a uid was the only one sent before issue 25


async def _patch_pod(d: Delivery, a: PatchPod) -> Effect:
    return await _patch_owned(d.api, POD, a)


async def _patch_owned(api: KubeApi, kind: Kind, a: PatchPod | PatchControllerRevision) -> Effect:
    """A patch that is an adoption (`owner_check`: the owner re-read first) or waits on one (`adopt_first`)."""
    if a.owner_check is not None:
        refused = await recheck_owner(api, a.namespace, a.owner_check)
        if refused is not None:
            return refused
    not_adopted, _ = await adopted_first(api, kind, a)
    if not_adopted is not None:
        return not_adopted
    return await patch(api, kind, a.namespace, a.name, a.patch_type, bytes(a.patch))


async def _patch_revision(d: Delivery, a: PatchControllerRevision) -> Effect:
    return await _patch_owned(d.api, CONTROLLER_REVISION, a)


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
        name = head_of(body).name
        got = await d.api.call("GET", CONTROLLER_REVISION.path(a.namespace, name))
        if got.ok:
            return succeeded_with(FAILED, 409, got.data, "AlreadyExists", status.message)
    return failed(status)


async def _update_status(d: Delivery, a: UpdateStatus) -> Effect:
    """As upstream's updateReplicaSetStatus / storeDaemonSetStatus: PUT /status of the synced object (its
    resourceVersion and metadata, `status` set) with no GET first; after any error, one fresh GET, a uid
    check, `status_fields` of `status` set on it (all of it when none are named), and one more PUT
    (statusUpdateRetries). An action without the synced object's resourceVersion and metadata reads first."""
    kind = KINDS.get(a.kind)
    if kind is None:
        return _unknown_kind(a.kind)
    new_status: dict[str, Any] = msgspec.json.decode(a.status)

    def set_status(obj: dict[str, Any]) -> Effect | None:
        obj["status"] = status_with_fields(obj.get("status") or {}, new_status, a.status_fields)
        return None

    if not a.resource_version or isinstance(a.metadata, msgspec.UnsetType):  # issued before they were carried
        return await _write_status(d, kind, a.kind, a.namespace, a.name, a.uid, set_status, "status")
    body = _synced_status_body(kind, a, msgspec.json.decode(a.metadata), new_status)
    put = await d.api.call("PUT", kind.path(a.namespace, a.name, "status"), body=_json.encode(body))
    if put.ok:
        return succeeded_with(SUCCEEDED, put.status, put.data)
    # upstream retries after any error, not only a conflict: the GET's answer, or the second PUT's, is final
    return await _write_status(d, kind, a.kind, a.namespace, a.name, a.uid, set_status, "status",
                               attempts=STATUS_UPDATE_RETRIES)


def _synced_status_body(kind: Kind, a: UpdateStatus, metadata: dict[str, Any],
                        status: dict[str, Any]) -> dict[str, Any]:
    """The synced object as a status PUT needs it: its metadata as the reconciler saw it (kube-apiserver
    stores the body's labels, annotations, ownerReferences, finalizers and generateName; rest.BeforeUpdate
    restores generation, creationTimestamp and the deletion fields; managedFields come from the stored
    object), its resourceVersion as the precondition, its uid as a storage precondition, and the status.
    No spec: the apps status strategies' PrepareForUpdate replaces it with the stored one."""
    metadata.update(name=a.name, namespace=a.namespace, uid=a.uid, resourceVersion=a.resource_version)
    return {"apiVersion": kind.base.removeprefix("/apis/").removeprefix("/api/"), "kind": a.kind,
            "metadata": metadata, "status": status}


async def _bump_collision_count(d: Delivery, a: BumpCollisionCount) -> Effect:
    """GET the DaemonSet, check the uid and that collisionCount is still `seen`, PUT it one higher."""
    def bump(obj: dict[str, Any]) -> Effect | None:
        status = obj.setdefault("status", {})
        live = status.get("collisionCount") or 0
        if live != a.seen:
            return Effect(SKIPPED, 200, "AlreadyBumped", f"collisionCount is {live}, not {a.seen}: already bumped",
                          a.uid)
        status["collisionCount"] = live + 1
        return None

    return await _write_status(d, KINDS["DaemonSet"], "DaemonSet", a.namespace, a.name, a.uid, bump, "bump")


async def _write_status(d: Delivery, kind: Kind, kind_name: str, namespace: str, name: str, uid: str,
                        change: Callable[[dict[str, Any]], Effect | None], what: str,
                        attempts: int = 1 + STATUS_UPDATE_RETRIES) -> Effect:
    """GET, check the uid, `change` the object (or stop with its Effect), PUT /status; a conflict gets
    one more fresh GET and PUT while `attempts` last (upstream's statusUpdateRetries)."""
    path = kind.path(namespace, name)
    conflict: Status | None = None
    for _ in range(attempts):
        got = await d.api.call("GET", path)
        if not got.ok:
            return failed(api_status(got))
        obj: dict[str, Any] = msgspec.json.decode(got.data)
        live_uid = obj.get("metadata", {}).get("uid", "")
        if live_uid != uid:
            return Effect(FAILED, reason="Gone", message=f"{kind_name} {namespace}/{name} now has uid {live_uid}, "
                                                         f"not {uid}: the object this {what} was for is gone")
        stop = change(obj)
        if stop is not None:
            return stop
        put = await d.api.call("PUT", f"{path}/status", body=_json.encode(obj))
        if put.ok:
            return succeeded_with(SUCCEEDED, put.status, put.data)
        conflict = api_status(put)
        if put.status != 409:
            break
    assert conflict is not None
    return failed(conflict)


async def _record_event(d: Delivery, a: RecordEvent) -> Effect:
    """Records a core/v1 Event as client-go's legacy recorder makes it, through the process's
    EventCorrelator (a repeat is counted onto the earlier Event, which the result then names); named
    from the action's key, so a redelivered event is recorded once."""
    involved = codec.decode(bytes(a.involved), ObjectReference)
    event = build_event(involved, namespace=a.namespace, type=a.type, reason=a.reason, message=a.message,
                        component=a.component, key=a.key, now=d.now())
    return await d.events.post(d.api, event)


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
    BumpCollisionCount: _bump_collision_count,
    RecordEvent: _record_event,
}
