"""Defence in depth: the executor creates, deletes and patches only what belongs to the controller an action names.

The executor holds credentials that create pods in every namespace, and it applies whatever a well-formed
message on KUBUS_ACTIONS asks. NATS permissions (docs/nats-permissions.conf) decide who may publish there; this
is the second line, for a publisher that may but should not (a compromised reconciler identity, a mistake):
a CreatePods or a CreateControllerRevision is applied only when every object it creates is what its
controller would create, as the reconciler builds it (reconciler/core/podtemplate.py):

- the body's kind and apiVersion are v1 Pod (apps/v1 ControllerRevision), and its namespace, when it says
  one, is the action's;
- the action's namespace is its controller's (`controller` is "Kind/namespace/name", a ReplicaSet or DaemonSet);
- the object's one controller ownerReference names that controller (kind, name, apps/v1), with the uid of
  the controller that exists now;
- its labels match that controller's selector.

A DeletePod or PatchPod (DeleteControllerRevision, PatchControllerRevision) is applied only to an object its
controller controls now (its controller reference names the controller, with the uid it has now), or to an
orphan whose labels match the controller's selector when the action adopts it first (`adopt_first`, or the
adoption patch itself, `owner_check`). An object controlled by another is left to the adoption, which the API
refuses (one controller only) and which then applies nothing, as upstream's claim: a reconciler whose cache is
behind meets that race, and it is no forgery.

How the object is known to be its controller's (issue 25). The action's own uid and resourceVersion prove
nothing: its publisher, the reconciler, sees every object's on the bus. So either:

- the object's last event on KUBUS_STATE (executor/laststate.py: read at the delete, KUBUS_STATE is fed only
  by ingest) is of a version whose controller reference names the controller with the uid it has now: a
  plain delete (no adoption first) then costs no GET, and the DELETE carries `preconditions: {uid,
  resourceVersion}` of exactly that version, so the API deletes that version or nothing. That is the common
  case, and one request to the API per delete, as upstream's delete from its informer's cache;
- or the object is read (one GET) and checked as above, and a delete carries the uid and resourceVersion it
  read (an adoption first: the version the adoption's answer has), closing the window between the read and
  the write. This is the path for everything KUBUS_STATE does not vouch for (no message there, another's or
  an orphan there, a patch, an adoption first, the state unreadable), and after a delete answered 409 on the
  version (the object changed since it was checked: StaleVersion), at most five checks in all
  (executor/consuming.py).

KUBUS_STATE never refuses, and never makes a delete happen that the read would refuse: its "yes" is enforced by
the API server's precondition, and anything else is decided by the read.

The controller is read once per action, and not again while its uid stays the same: apps/v1 selectors are
immutable, so an owner's uid fixes its selector (`Owners` caches it). Anything else is refused with reason
NOT_OWNED before any call that writes; the caller reports every effect failed with the reason and moves the
message to KUBUS_DEAD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgspec

from executor.effects import metadata_of
from executor.errors import api_status
from executor.kubeapi import KubeApi
from executor.laststate import LastStates
from executor.metrics import ExecutorMetrics
from executor.resources import KINDS
from kube.labels import Selector, SelectorError, selector_from_label_selector
from kube.meta import LabelSelector, LabelSelectorRequirement
from messages.actions import (
    Action,
    Adoption,
    CreateControllerRevision,
    CreatePods,
    DeleteControllerRevision,
    DeletePod,
    OwnerCheck,
    PatchControllerRevision,
    PatchPod,
)

# kubus_executor_ownership_checks_total{by}: proven by the object's last state on KUBUS_STATE, no GET (the label
# is the name of the index of KUBUS_STATE this read replaced: dashboards count it)
BY_INDEX: Final = "index"
BY_READ: Final = "read"  # the object read (a GET)
STALE: Final = "stale"  # the version checked was not the live one (409): read again
NOT_OWNED: Final = "NotOwned"  # the reason of the results (and the dead letter) of a refused action
CONTROLLERS: Final = ("ReplicaSet", "DaemonSet")
OWNERS_CACHED: Final = 1024


class NotOwned(Exception):
    """Why an action's objects do not belong to its controller: one line, naming the object and the field."""


@dataclass(frozen=True)
class Owner:
    kind: str
    namespace: str
    name: str
    uid: str
    selector: Selector


@dataclass(frozen=True, slots=True)
class Proven:
    """The version of the object a delete or patch touches that the check found its controller's (or, adopted
    first, an orphan it may adopt): a delete's preconditions."""

    uid: str
    resource_version: str


class Owners:
    """The controllers actions named, by uid: one GET per controller, not per action or per object (a
    selector never changes under one uid). A controller deleted and created again has another uid, and is
    read again. `states`, when given, saves the GET of a deleted object (executor/laststate.py)."""

    def __init__(self, api: KubeApi, states: LastStates | None = None,
                 metrics: ExecutorMetrics | None = None) -> None:
        self.api = api
        self.states = states
        self.metrics = metrics
        self._by_key: dict[tuple[str, str, str], Owner] = {}

    def checked(self, by: str) -> None:
        if self.metrics is not None:
            self.metrics.ownership_check(by)

    async def get(self, kind: str, namespace: str, name: str, uid: str) -> Owner:
        """The controller `kind` `namespace`/`name`, re-read unless the cached one has `uid`; NotOwned when it
        does not exist."""
        key = (kind, namespace, name)
        cached = self._by_key.get(key)
        if cached is not None and cached.uid == uid:
            return cached
        reply = await self.api.call("GET", KINDS[kind].path(namespace, name))
        if reply.status == 404:
            raise NotOwned(f"its controller {kind} {namespace}/{name} does not exist")
        if not reply.ok:  # fail closed: the reconciler records the failure and tries again with a new action
            raise NotOwned(f"reading its controller {kind} {namespace}/{name} to check ownership answered "
                           f"{reply.status}: {api_status(reply).message}")
        owner = _owner_of(kind, namespace, name, reply.data)
        if len(self._by_key) >= OWNERS_CACHED:
            self._by_key.pop(next(iter(self._by_key)))
        self._by_key[key] = owner
        return owner


def _owner_of(kind: str, namespace: str, name: str, data: bytes) -> Owner:
    obj = msgspec.json.decode(data)
    spec = obj.get("spec") or {}
    raw = spec.get("selector")
    try:
        selector = selector_from_label_selector(None if raw is None else LabelSelector(
            match_labels=dict(raw.get("matchLabels") or {}),
            match_expressions=[LabelSelectorRequirement(key=e.get("key", ""), operator=e.get("operator", ""),
                                                        values=list(e.get("values") or []))
                               for e in raw.get("matchExpressions") or []]))
    except SelectorError as exc:
        raise NotOwned(f"its controller {kind} {namespace}/{name} has an invalid selector: {exc}") from None
    return Owner(kind, namespace, name, str((obj.get("metadata") or {}).get("uid") or ""), selector)


def controller_of(action: Action) -> tuple[str, str, str]:
    """The (kind, namespace, name) of the action's `controller` key; NotOwned when it is not one."""
    parts = action.controller.split("/")
    if len(parts) != 3 or parts[0] not in CONTROLLERS or not parts[2]:
        raise NotOwned(f"controller {action.controller!r} is not ReplicaSet/<namespace>/<name> or "
                       "DaemonSet/<namespace>/<name>")
    return parts[0], parts[1], parts[2]


Touching = DeletePod | PatchPod | DeleteControllerRevision | PatchControllerRevision


async def check(owners: Owners, action: Action, *, use_state: bool = True) -> Proven | None:
    """Raises NotOwned when an object `action` creates, deletes or patches does not belong to its controller
    (module docstring); TransientError when the API did not answer (from KubeApi.call). Status writes and
    events are not checked here (they name their controller's own object, or describe it). For a delete or
    patch, the version of the object found controlled by the action's controller (None when the object is
    gone or has another uid, or the action adopts it and the API decides), consulting its last state on
    KUBUS_STATE first when `use_state`."""
    if isinstance(action, CreatePods | DeletePod) and action.after_claim is not None:
        kind, _, name = controller_of(action)
        claim = action.after_claim
        if (claim.kind, claim.name) != (kind, name):
            raise NotOwned(f"after_claim re-reads {claim.kind} {claim.name!r}, not the action's {action.controller}")
    if isinstance(action, Touching):
        return await _check_touched(owners, action, use_state)
    if isinstance(action, CreatePods):
        bodies = [(p.key, bytes(p.pod)) for p in action.pods]
        want_kind, want_version = "Pod", "v1"
    elif isinstance(action, CreateControllerRevision):
        bodies = [(action.key, bytes(action.revision))]
        want_kind, want_version = "ControllerRevision", "apps/v1"
    else:
        return None
    kind, namespace, name = controller_of(action)
    if action.namespace != namespace:
        raise NotOwned(f"namespace {action.namespace!r} is not its controller {action.controller}'s")
    uid = ""
    decoded: list[tuple[str, dict[str, Any]]] = []
    for key, body in bodies:
        try:
            obj = msgspec.json.decode(body)
        except msgspec.DecodeError:
            obj = None
        if not isinstance(obj, dict):
            raise NotOwned(f"{key}: the body is not a JSON object")
        what = f"{want_kind} {_name(obj)!r} ({key})"
        if obj.get("kind") != want_kind or obj.get("apiVersion") != want_version:
            raise NotOwned(f"{what}: kind {obj.get('kind')!r} apiVersion {obj.get('apiVersion')!r} is not "
                           f"{want_version} {want_kind}")
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        if meta.get("namespace") not in (None, "", action.namespace):
            raise NotOwned(f"{what}: metadata.namespace {meta.get('namespace')!r} is not the action's "
                           f"{action.namespace!r}")
        refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, dict) and r.get("controller")]
        if len(refs) != 1:
            raise NotOwned(f"{what}: metadata.ownerReferences has {len(refs)} controller references, not one to "
                           f"{action.controller}")
        ref = refs[0]
        if (ref.get("kind"), ref.get("name"), ref.get("apiVersion")) != (kind, name, "apps/v1"):
            raise NotOwned(f"{what}: its controller reference is {ref.get('kind')} {ref.get('name')!r} "
                           f"({ref.get('apiVersion')}), not the action's {action.controller}")
        if uid and ref.get("uid") != uid:
            raise NotOwned(f"{what}: its controller reference's uid {ref.get('uid')!r} differs from the action's "
                           f"other objects' {uid!r}")
        uid = str(ref.get("uid") or "")
        decoded.append((what, meta))
    if not decoded:
        return None
    owner = await owners.get(kind, namespace, name, uid)
    if owner.uid != uid:
        raise NotOwned(f"{decoded[0][0]}: its controller reference's uid {uid!r} is not {action.controller}'s "
                       f"({owner.uid!r})")
    for what, meta in decoded:
        labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
        assert isinstance(labels, dict)
        if not owner.selector.matches({str(k): str(v) for k, v in labels.items()}):
            raise NotOwned(f"{what}: metadata.labels {labels} do not match {action.controller}'s selector")
    return None


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return ""
    return str(meta.get("name") or meta.get("generateName") or "")


async def _check_touched(owners: Owners, action: Touching, use_state: bool) -> Proven | None:
    """A delete or patch touches an object of its controller: one whose controller reference names it (kind,
    name and the uid it has now), or, when the action adopts it first (`adopt_first`, or a patch with an
    `owner_check`, which is the adoption), an orphan whose labels match its selector. A plain delete of an
    object whose last state on KUBUS_STATE is of a version its controller controls is proven by it (no GET);
    anything else reads the object once (a GET): one that is gone, or has another uid than the action's, is
    left to the action, whose uid precondition touches nothing then."""
    kind, namespace, name = controller_of(action)
    if action.namespace != namespace:
        raise NotOwned(f"namespace {action.namespace!r} is not its controller {action.controller}'s")
    adopter = _adopter(action)
    if adopter is not None and (adopter.kind, adopter.name) != (kind, name):
        raise NotOwned(f"it adopts for {adopter.kind} {adopter.name!r}, not for the action's {action.controller}")
    target = "Pod" if isinstance(action, DeletePod | PatchPod) else "ControllerRevision"
    if use_state and adopter is None and isinstance(action, DeletePod | DeleteControllerRevision):
        proven = await _by_state(owners, action, target, kind, name)
        if proven is not None:
            owners.checked(BY_INDEX)
            return proven
    owners.checked(BY_READ)
    what = f"{target} {action.namespace}/{action.name}"
    reply = await owners.api.call("GET", KINDS[target].path(action.namespace, action.name))
    if reply.status == 404:
        return None
    if not reply.ok:  # fail closed, as for the controller's read
        raise NotOwned(f"reading {what} to check ownership answered {reply.status}: {api_status(reply).message}")
    meta = metadata_of(reply.data)
    if meta.uid != action.uid:
        return None
    proven = Proven(meta.uid, meta.resource_version)
    refs = [r for r in meta.owner_references if r.controller]
    if not refs:
        if adopter is None:
            raise NotOwned(f"{what} has no controller, and the action does not adopt it for {action.controller}")
        owner = await owners.get(kind, namespace, name, adopter.uid)
        if not owner.selector.matches(dict(meta.labels)):
            raise NotOwned(f"{what}: metadata.labels {dict(meta.labels)} do not match {action.controller}'s "
                           "selector: it may not be adopted")
        return proven
    ref = refs[0]
    if adopter is not None and (ref.kind, ref.name, ref.uid) != (kind, name, adopter.uid):
        return None  # another's: the adoption is refused by the API (422, one controller only), and nothing applied
    if (ref.kind, ref.name) != (kind, name):
        raise NotOwned(f"{what} is controlled by {ref.kind} {ref.name!r}, not by the action's {action.controller}")
    owner = await owners.get(kind, namespace, name, ref.uid)
    if owner.uid != ref.uid:
        raise NotOwned(f"{what}: its controller reference's uid {ref.uid!r} is not {action.controller}'s "
                       f"({owner.uid!r})")
    return proven


async def _by_state(owners: Owners, action: DeletePod | DeleteControllerRevision, target: str, kind: str,
                    name: str) -> Proven | None:
    """The version of the object's last state on KUBUS_STATE, when at that version it is controlled by the
    action's controller (kind, name and the uid the controller has now); None (read the object) otherwise,
    never a refusal: only the read refuses. The delete carries that version as its precondition, so a state
    behind the cluster deletes nothing (409) and the object is read then."""
    if owners.states is None:
        return None
    entry = await owners.states.controlled(target, action.namespace, action.uid)
    if entry is None or (entry.namespace, entry.name) != (action.namespace, action.name):
        return None
    if (entry.controller_kind, entry.controller_name) != (kind, name):
        return None
    try:
        owner = await owners.get(kind, action.namespace, name, entry.controller_uid)
    except NotOwned:
        return None
    if owner.uid != entry.controller_uid:
        return None
    return Proven(entry.uid, entry.resource_version)


def _adopter(action: Touching) -> OwnerCheck | None:
    """The controller the action adopts the object for before it touches it, if it does."""
    adoption: Adoption | None = action.adopt_first
    if adoption is not None:
        return adoption.owner_check
    if isinstance(action, PatchPod | PatchControllerRevision):
        return action.owner_check
    return None
