"""The objects an action acts on, one per effect: what the audit trail records beside each outbox row
(table action_targets), so "every action on pod X" is a query, not a scan of encoded payloads.

A CreatePods has one effect per pod, keyed by the pod's idempotency key (the key the executor's
result for that pod carries); every other action has one effect, keyed by the action's key. The
target is the object the action changes, or for a RecordEvent the object the event is about.
"""

from __future__ import annotations

from typing import assert_never

import msgspec

from messages.actions import (
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
)
from store.outbox import Target


class _Meta(msgspec.Struct):
    name: str = ""
    generateName: str = ""


class _Object(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


class _Reference(msgspec.Struct):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""


_object = msgspec.json.Decoder(_Object)
_reference = msgspec.json.Decoder(_Reference)


def _name(raw: msgspec.Raw) -> str:
    try:
        meta = _object.decode(bytes(raw)).metadata
    except msgspec.DecodeError:
        return ""
    return meta.name or meta.generateName


def tag(action: Action) -> str:
    return str(type(action).__struct_config__.tag)


def targets_of(action: Action) -> list[Target]:
    """The action's effects and the object each is on."""
    t = tag(action)
    if isinstance(action, CreatePods):
        return [Target(key=p.key, action=t, kind="Pod", namespace=action.namespace, name=_name(p.pod))
                for p in action.pods]
    if isinstance(action, DeletePod | PatchPod):
        return [Target(key=action.key, action=t, kind="Pod", namespace=action.namespace, name=action.name,
                       uid=action.uid)]
    if isinstance(action, CreateControllerRevision):
        return [Target(key=action.key, action=t, kind="ControllerRevision", namespace=action.namespace,
                       name=_name(action.revision))]
    if isinstance(action, PatchControllerRevision | DeleteControllerRevision):
        return [Target(key=action.key, action=t, kind="ControllerRevision", namespace=action.namespace,
                       name=action.name, uid=action.uid)]
    if isinstance(action, UpdateStatus):
        return [Target(key=action.key, action=t, kind=action.kind, namespace=action.namespace, name=action.name,
                       uid=action.uid)]
    if isinstance(action, BumpCollisionCount):
        return [Target(key=action.key, action=t, kind="DaemonSet", namespace=action.namespace, name=action.name,
                       uid=action.uid)]
    if isinstance(action, RecordEvent):
        try:
            ref = _reference.decode(bytes(action.involved))
        except msgspec.DecodeError:
            ref = _Reference()
        return [Target(key=action.key, action=t, kind=ref.kind, namespace=ref.namespace or action.namespace,
                       name=ref.name, uid=ref.uid or None)]
    assert_never(action)  # a new action type: say above what it acts on
