"""Controller references and the controller-ref manager's adopt/release patches.

The patches are strategic-merge patches with the exact bytes upstream's
``controller_ref_manager.go`` sends (``json.Marshal`` of its patch structs):
adoption writes ``ownerReferences`` before the ``uid`` precondition, release
writes the ``uid`` first. Tests and recorded traffic compare these bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kube.gojson import marshal
from kube.meta import ObjectMeta, OwnerReference

__all__ = ["adopt_patch", "get_controller_of", "is_controlled_by", "new_controller_ref", "release_patch"]


def get_controller_of(meta: ObjectMeta) -> OwnerReference | None:
    """metav1.GetControllerOf: the first owner reference with ``controller: true``."""
    for ref in meta.owner_references:  # a loop, not next(genexpr): called for every event and pod
        if ref.controller:
            return ref
    return None


def is_controlled_by(meta: ObjectMeta, owner_uid: str) -> bool:
    """metav1.IsControlledBy: the controller reference points at ``owner_uid``."""
    ref = get_controller_of(meta)
    return ref is not None and ref.uid == owner_uid


def new_controller_ref(owner: ObjectMeta, api_version: str, kind: str) -> OwnerReference:
    """metav1.NewControllerRef: a reference with ``controller`` and ``blockOwnerDeletion`` set."""
    return OwnerReference(
        api_version=api_version,
        kind=kind,
        name=owner.name,
        uid=owner.uid,
        controller=True,
        block_owner_deletion=True,
    )


def adopt_patch(
    owner: ObjectMeta, api_version: str, kind: str, dependent_uid: str, finalizers: Sequence[str] = ()
) -> bytes:
    """ownerRefControllerPatch: claim ``dependent_uid`` for ``owner``, failing if the UID changed."""
    reference = {
        "apiVersion": api_version,
        "kind": kind,
        "name": owner.name,
        "uid": owner.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    metadata: dict[str, Any] = {"ownerReferences": [reference], "uid": dependent_uid}
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    return marshal({"metadata": metadata}, sort_keys=False)


def release_patch(owner_uid: str, dependent_uid: str, finalizers: Sequence[str] = ()) -> bytes:
    """GenerateDeleteOwnerRefStrategicMergeBytes for one owner: drop its reference from ``dependent_uid``."""
    metadata: dict[str, Any] = {
        "uid": dependent_uid,
        "ownerReferences": [{"$patch": "delete", "uid": owner_uid}],
    }
    if finalizers:
        metadata["$deleteFromPrimitiveList/finalizers"] = list(finalizers)
    return marshal({"metadata": metadata}, sort_keys=False)
