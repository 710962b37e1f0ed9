"""The objects an action acts on, one per effect: what the audit trail records beside each outbox row
(table action_targets), so "every action on pod X" is a query, not a scan of encoded payloads.

A CreatePods has one effect per pod, keyed by the pod's idempotency key (the key the executor's
result for that pod carries); every other action has one effect, keyed by the action's key. The
target is the object the action changes, or for a RecordEvent the object the event is about.

The reconciler knows the objects whose names sit inside an action's encoded body (a pod to create, a
revision to create, an event's involved object) when it plans them, and hands them in (`known`), so its
commit never decodes what it has just encoded; an action read back from elsewhere (an imported history, a
migration's backfill) is decoded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, assert_never

import msgspec

from kube.codec import decode_head
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """An object an outbox row acts on, for the audit trail (table action_targets): one per effect."""

    key: str  # the effect's idempotency key: a pod's key within a CreatePods, else the action's key
    action: str  # the action's tag, e.g. create_pods
    kind: str
    namespace: str  # "" for cluster-scoped objects
    name: str  # "" when the action does not name it
    uid: str | None = None  # the uid the action is conditioned on; None for creates


class _Reference(msgspec.Struct):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""


_reference = msgspec.json.Decoder(_Reference)


def _name(raw: msgspec.Raw) -> str:
    try:
        meta = decode_head(raw).metadata
    except msgspec.DecodeError:
        return ""
    return meta.name or meta.generate_name


def tag(action: Action) -> str:
    return _tag(type(action))


def _tag(cls: type[Action]) -> str:
    return str(cls.__struct_config__.tag)


# --- what a planner knows of the objects it encodes (what targets_of would otherwise decode) ---------------
@dataclass(slots=True)
class Known:
    """What a planner knew of the objects it encoded into its actions: the names of the pods and revisions it
    creates (by effect key; the rest of their targets is the action's), and the objects its events are about."""

    names: dict[str, str] = field(default_factory=dict)
    targets: dict[str, Target] = field(default_factory=dict)


def name_in(body: Mapping[str, Any]) -> str:
    """The name of the object a create's body carries, as targets_of reads it from the encoded body."""
    meta = body.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "")


def event_on(key: str, namespace: str, kind: str, involved_namespace: str, name: str, uid: str) -> Target:
    """The object a RecordEvent is about (its `involved` reference), in the event's namespace when it has none."""
    return Target(key=key, action=_tag(RecordEvent), kind=kind, namespace=involved_namespace or namespace,
                  name=name, uid=uid or None)


def targets_of(action: Action, known: Known | None = None) -> list[Target]:
    """The action's effects and the object each is on; what `known` does not say of the objects inside
    encoded bodies is decoded."""
    t = tag(action)
    names: Mapping[str, str] = {} if known is None else known.names
    if isinstance(action, CreatePods):
        return [Target(key=p.key, action=t, kind="Pod", namespace=action.namespace,
                       name=names[p.key] if p.key in names else _name(p.pod))
                for p in action.pods]
    if isinstance(action, DeletePod | PatchPod):
        return [Target(key=action.key, action=t, kind="Pod", namespace=action.namespace, name=action.name,
                       uid=action.uid)]
    if isinstance(action, CreateControllerRevision):
        name = names[action.key] if action.key in names else _name(action.revision)
        return [Target(key=action.key, action=t, kind="ControllerRevision", namespace=action.namespace, name=name)]
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
        if known is not None and (target := known.targets.get(action.key)) is not None:
            return [target]
        try:
            ref = _reference.decode(bytes(action.involved))
        except msgspec.DecodeError:
            ref = _Reference()
        return [Target(key=action.key, action=t, kind=ref.kind, namespace=ref.namespace or action.namespace,
                       name=ref.name, uid=ref.uid or None)]
    assert_never(action)  # a new action type: say above what it acts on
