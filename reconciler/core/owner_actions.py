"""Action pieces both controllers issue for the pods they own: the envelope, the object events are
recorded against, and the claim patches (adopt with an owner re-check, release)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple, TypedDict

import msgspec

from kube.core import Pod
from kube.meta import ObjectMeta
from kube.ownership import adopt_patch, release_patch
from messages.actions import Action, Adoption, OwnerCheck, PatchPod
from reconciler.core.audit_targets import Known

_encode = msgspec.json.encode


class Planned(NamedTuple):
    """A plan's actions, with what it knew of the objects they carry encoded (the pods and revisions they
    create, the object their events are about): their audit targets need no decoding."""

    actions: list[Action]
    known: Known


class Common(TypedDict):
    decision_id: int
    controller: str
    issued_at: str


def object_reference(kind: str, api_version: str, meta: ObjectMeta) -> msgspec.Raw:
    """What events are recorded against (the recorder's GetReference of the controller)."""
    return msgspec.Raw(_encode({"kind": kind, "namespace": meta.namespace, "name": meta.name, "uid": meta.uid,
                                "apiVersion": api_version, "resourceVersion": meta.resource_version}))


def adoption(kind: str, api_version: str, meta: ObjectMeta, uid: str) -> Adoption:
    """The controller (`meta`) adopting the object with `uid`: an owner re-check, then the patch."""
    return Adoption(owner_check=OwnerCheck(kind=kind, name=meta.name, uid=meta.uid), patch_type="strategic",
                    patch=msgspec.Raw(adopt_patch(meta, api_version, kind, uid)))


def claim_actions(kind: str, api_version: str, meta: ObjectMeta, adopt: Sequence[Pod], release: Sequence[Pod],
                  correlation: str, common: Common, touched: Collection[str] = ()) -> list[PatchPod]:
    """ControllerRefManager's patches: adoption only after the executor re-read the owner. The orphans
    whose uids are `touched` (deleted or patched by the same plan) are adopted by that action itself
    (`adopt_first`), so that nothing touches them before they are ours."""
    actions = []
    for pod in adopt:
        if pod.metadata.uid in touched:
            continue
        adopting = adoption(kind, api_version, meta, pod.metadata.uid)
        actions.append(PatchPod(
            key=f"{correlation}/adopt/{pod.metadata.uid}", namespace=pod.metadata.namespace, name=pod.metadata.name,
            uid=pod.metadata.uid, patch_type=adopting.patch_type, patch=adopting.patch,
            owner_check=adopting.owner_check, **common))
    actions.extend(PatchPod(
        key=f"{correlation}/release/{pod.metadata.uid}", namespace=pod.metadata.namespace, name=pod.metadata.name,
        uid=pod.metadata.uid, patch_type="strategic", patch=msgspec.Raw(release_patch(meta.uid, pod.metadata.uid)),
        **common) for pod in release)
    return actions
