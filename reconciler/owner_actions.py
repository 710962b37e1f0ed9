"""Action pieces both controllers issue for the pods they own: the envelope, the object events are
recorded against, and the claim patches (adopt with an owner re-check, release)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import msgspec

from kube.core import Pod
from kube.meta import ObjectMeta
from kube.ownership import adopt_patch, release_patch
from messages.actions import OwnerCheck, PatchPod

_encode = msgspec.json.encode


class Common(TypedDict):
    decision_id: int
    controller: str
    issued_at: str


def object_reference(kind: str, api_version: str, meta: ObjectMeta) -> msgspec.Raw:
    """What events are recorded against (the recorder's GetReference of the controller)."""
    return msgspec.Raw(_encode({"kind": kind, "namespace": meta.namespace, "name": meta.name, "uid": meta.uid,
                                "apiVersion": api_version, "resourceVersion": meta.resource_version}))


def claim_actions(kind: str, api_version: str, meta: ObjectMeta, adopt: Sequence[Pod], release: Sequence[Pod],
                  correlation: str, common: Common) -> list[PatchPod]:
    """ControllerRefManager's patches: adoption only after the executor re-read the owner."""
    check = OwnerCheck(kind=kind, name=meta.name, uid=meta.uid)
    actions = [PatchPod(
        key=f"{correlation}/adopt/{pod.metadata.uid}", namespace=pod.metadata.namespace, name=pod.metadata.name,
        uid=pod.metadata.uid, patch_type="strategic",
        patch=msgspec.Raw(adopt_patch(meta, api_version, kind, pod.metadata.uid)), owner_check=check, **common)
        for pod in adopt]
    actions.extend(PatchPod(
        key=f"{correlation}/release/{pod.metadata.uid}", namespace=pod.metadata.namespace, name=pod.metadata.name,
        uid=pod.metadata.uid, patch_type="strategic", patch=msgspec.Raw(release_patch(meta.uid, pod.metadata.uid)),
        **common) for pod in release)
    return actions
