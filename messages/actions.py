"""Commands the reconciler issues (imperative) and the results executors report (past tense).

Each action carries an idempotency key: the executor derives the pod's name from it and treats an
AlreadyExists of a pod carrying the same key as success, so a redelivered create makes no second
pod; deletes carry the pod's uid as a precondition, so a re-created pod of the same name survives.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, TypeAlias

import msgspec

from messages.observed import SCHEMA_VERSION

IDEMPOTENCY_ANNOTATION: Final = "kubus.io/idempotency-key"


class ActionKind(StrEnum):
    """What an action does: its message tag, which a result carries back as ``ActionResult.action``."""

    CREATE_PODS = "create_pods"
    DELETE_POD = "delete_pod"
    PATCH_POD = "patch_pod"
    CREATE_CONTROLLER_REVISION = "create_controller_revision"
    PATCH_CONTROLLER_REVISION = "patch_controller_revision"
    DELETE_CONTROLLER_REVISION = "delete_controller_revision"
    UPDATE_STATUS = "update_status"
    BUMP_COLLISION_COUNT = "bump_collision_count"
    RECORD_EVENT = "record_event"

    @classmethod
    def of(cls, tag: str) -> ActionKind | None:
        """The kind a result's ``action`` names; None for a tag this kubus does not know."""
        return _ACTION_KINDS.get(tag)


_ACTION_KINDS: Final = {kind.value: kind for kind in ActionKind}


class _Action(msgspec.Struct, kw_only=True, frozen=True, tag_field="msg"):
    v: int = SCHEMA_VERSION
    key: str  # unique per effect; the outbox's primary key
    decision_id: int  # the decision row that issued it (audit trail)
    controller: str  # "ReplicaSet/namespace/name"
    issued_at: str


class OwnerCheck(msgspec.Struct, kw_only=True, frozen=True):
    """The controller a PatchPod adopts for: re-read fresh before the patch (upstream's canAdopt)."""

    kind: str  # "ReplicaSet" | "DaemonSet"
    name: str  # in the action's namespace
    uid: str


class Adoption(msgspec.Struct, kw_only=True, frozen=True):
    """An adoption the action depends on (upstream's ClaimPods / ClaimControllerRevisions adopt during the
    claim, before the same sync deletes or patches what it claimed): the executor re-reads the owner, patches
    the controller reference in, and applies the action only once that succeeded. Otherwise the action is
    reported skipped with reason NOT_ADOPTED and the adoption's API answer."""

    owner_check: OwnerCheck
    patch_type: str  # "strategic", as upstream's ownerRefControllerPatch
    patch: msgspec.Raw


NOT_ADOPTED: Final = "NotAdopted"  # the reason of a result whose action waited on an adoption that failed


# `msgspec.Raw | None` cannot be used: msgspec 0.22 decodes only `null` into it and rejects any object
# (msgspec issue #659), so an absent owner is UNSET instead of None, and is left out of the JSON.
OptionalRaw: TypeAlias = msgspec.Raw | msgspec.UnsetType


class PodToCreate(msgspec.Struct, kw_only=True, frozen=True):
    key: str
    pod: msgspec.Raw  # the full Pod body, name included


class CreatePods(_Action, frozen=True, tag=ActionKind.CREATE_PODS.value):
    """Create pods in slow-start batches (1, 2, 4, ...), stopping after a batch with a failure."""

    namespace: str
    pods: list[PodToCreate]
    # the controller's ObjectReference (kind, namespace, name, uid, apiVersion, resourceVersion): when
    # set, each pod's final outcome is recorded as an Event on it, as upstream's RealPodControl does
    owner: OptionalRaw = msgspec.UNSET
    component: str = ""  # the events' source component, e.g. "replicaset-controller"
    # set when the same sync claims orphans: the owner is re-read first (canAdopt's RecheckDeletionTimestamp) and
    # nothing is created if it is gone or being deleted, as upstream's ClaimPods error ends the sync before manage
    after_claim: OwnerCheck | None = None


class DeletePod(_Action, frozen=True, tag=ActionKind.DELETE_POD.value):
    namespace: str
    name: str
    uid: str
    owner: OptionalRaw = msgspec.UNSET  # as CreatePods: SuccessfulDelete / FailedDelete events on it
    component: str = ""
    adopt_first: Adoption | None = None  # an orphan the same sync claimed: adopted before it is deleted
    after_claim: OwnerCheck | None = None  # as CreatePods': the same sync claims other orphans


class PatchPod(_Action, frozen=True, tag=ActionKind.PATCH_POD.value):
    namespace: str
    name: str
    uid: str
    patch_type: str  # "strategic" | "merge" | "json"
    patch: msgspec.Raw
    # an adoption: the owner is read fresh first, and the patch refused if it is gone or being deleted
    owner_check: OwnerCheck | None = None
    adopt_first: Adoption | None = None  # another patch of an orphan the same sync claimed


class CreateControllerRevision(_Action, frozen=True, tag=ActionKind.CREATE_CONTROLLER_REVISION.value):
    namespace: str
    revision: msgspec.Raw


class PatchControllerRevision(_Action, frozen=True, tag=ActionKind.PATCH_CONTROLLER_REVISION.value):
    namespace: str
    name: str
    uid: str
    patch_type: str
    patch: msgspec.Raw
    owner_check: OwnerCheck | None = None  # an adoption (RecheckDeletionTimestamp), as PatchPod's
    adopt_first: Adoption | None = None


class DeleteControllerRevision(_Action, frozen=True, tag=ActionKind.DELETE_CONTROLLER_REVISION.value):
    namespace: str
    name: str
    uid: str
    adopt_first: Adoption | None = None


class UpdateStatus(_Action, frozen=True, tag=ActionKind.UPDATE_STATUS.value):
    """Write status through /status as upstream's controllers do (updateReplicaSetStatus,
    storeDaemonSetStatus): PUT the synced object, at its `resource_version`, with `status` set and no read
    first; after any error, GET it fresh and PUT it once more with `status_fields` of `status` set on it.

    The PUT carries the synced object's `metadata`: neither apps status strategy resets metadata from the
    stored object (no ResetObjectMetaForStatus), so labels, annotations, ownerReferences, finalizers and
    generateName are stored as the body has them. A message without `resource_version` or `metadata`
    (issued before they existed) reads the object first, and retries once after a conflict.
    """

    kind: str  # "ReplicaSet" | "DaemonSet"
    namespace: str
    name: str
    uid: str
    status: msgspec.Raw
    resource_version: str = ""  # the synced (cached) object's: the first PUT's optimistic-concurrency token
    metadata: OptionalRaw = msgspec.UNSET  # the synced object's ObjectMeta, sent with the status as it is
    # the fields of `status` set on a fresh read (DaemonSet: the seven counts, and observedGeneration when
    # the sync raised it); empty: the whole status is `status` (ReplicaSet: rs.Status = newStatus)
    status_fields: tuple[str, ...] = ()


def status_with_fields(live: dict[str, object], new: dict[str, object], fields: tuple[str, ...]) -> dict[str, object]:
    """What an UpdateStatus's retry on a fresh read writes: `live` with `fields` set as `new` has them (one
    `new` leaves out is zero, so it goes too, as Go's omitempty leaves it out); all of `new` when no fields
    are named (the executor's write and a synthetic world's apply the same rule)."""
    if not fields:
        return new
    out = dict(live)
    for name in fields:
        if name in new:
            out[name] = new[name]
        else:
            out.pop(name, None)
    return out


class BumpCollisionCount(_Action, frozen=True, tag=ActionKind.BUMP_COLLISION_COUNT.value):
    """A DaemonSet's revision name is taken by another revision: as upstream's dsc.snapshot, read the
    DaemonSet fresh and write its status with collisionCount one higher. Only when the live count is
    still `seen`: a redelivered or repeated bump then changes nothing (it is reported skipped)."""

    namespace: str
    name: str
    uid: str
    seen: int  # the collisionCount the sync saw (an absent one is 0)


class RecordEvent(_Action, frozen=True, tag=ActionKind.RECORD_EVENT.value):
    namespace: str
    involved: msgspec.Raw  # an ObjectReference
    type: str  # Normal | Warning
    reason: str
    message: str
    component: str


Action = (CreatePods | DeletePod | PatchPod | CreateControllerRevision | PatchControllerRevision
          | DeleteControllerRevision | UpdateStatus | BumpCollisionCount | RecordEvent)

SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
SKIPPED: Final = "skipped"  # not attempted: slow start stopped after a failed batch, or an event spam-filtered


class ActionResult(msgspec.Struct, kw_only=True, frozen=True, tag_field="msg", tag="result"):
    v: int = SCHEMA_VERSION
    key: str  # the action's key, or a pod's key within a CreatePods
    action_key: str  # the action's key
    action: str  # the action's tag (ActionKind.of reads it)
    decision_id: int
    controller: str
    outcome: str
    code: int = 0  # the API's HTTP status, 0 when no call was made
    reason: str = ""
    message: str = ""
    object_uid: str = ""
    resource_version: str = ""
    executor: str = ""
    attempts: int = 1
    finished_at: str
    subject: str = ""  # "namespace/name" of the object the effect was on ("name" when cluster-scoped)
