"""`kubus replay --set / --spec / --drop / --add-node`: the same history, with one thing changed.

The changes apply to the events the replay folds into its cache (bootstraps included), from the first
one on: a DaemonSet or ReplicaSet with a different spec, a node with other labels or taints, a node
that never existed, a node that was always there. The rest of the history is what it was: the cluster
does not react to the changed decisions (no pod the new decisions create ever shows up), so what a
what-if shows is the decisions that would follow, tick by tick, from the same observations.

A `--set` path is dotted, with brackets for keys that hold dots (``metadata.labels[kubernetes.io/os]``)
and numbers for list items (``spec.template.spec.containers.0.image``); the value is YAML
(``3``, ``"25%"``, ``[a, b]``, ``{}``, ``null``). The path, and the keys of an object given as the value,
are checked against the kind's model (kube/, the JSON names): a field the model does not have would change
nothing, so it is refused, naming the nearest one it has. In a pod template, where kubus keeps every field
its author wrote, the fields of the Kubernetes API's PodSpec and Container it does not model are known too,
and what lies below them is taken as written.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import msgspec
import msgspec.inspect as mi
import yaml  # type: ignore[import-untyped]

from kube.apps import ControllerRevision, DaemonSet, ReplicaSet
from kube.core import Affinity, Container, Node, Pod, PodSpec
from kube.meta import ObjectMeta
from kube.template import PodTemplateSpec
from kube.times import format_time
from messages import codec
from messages.observed import ADDED, ObservedEvent
from reconciler.core.stepping import Payload

CONTROLLER_KINDS = ("DaemonSet", "ReplicaSet")
_PATH_PART = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")


class WhatIfError(ValueError):
    """A change that cannot be understood (the message says which and why)."""


@dataclass(frozen=True)
class NamedObject:
    """An object named on the command line (``--controller``, a ``--set`` target): its kind, or the kinds
    it may be when the name leaves that open, its namespace and its name."""

    kinds: tuple[str, ...]
    namespace: str
    name: str

    def matches(self, event: ObservedEvent) -> bool:
        return event.kind in self.kinds and event.name == self.name and event.namespace == self.namespace

    def __str__(self) -> str:
        kind = self.kinds[0] if len(self.kinds) == 1 else "/".join(self.kinds)
        return f"{kind}/{self.namespace + '/' if self.namespace else ''}{self.name}"


def parse_target(text: str) -> NamedObject:
    """``KIND/NAMESPACE/NAME``, ``Node/NAME`` or ``NAMESPACE/NAME`` (a DaemonSet or a ReplicaSet)."""
    parts = text.split("/")
    if len(parts) == 2 and parts[0] == "Node":
        return NamedObject(("Node",), "", parts[1])
    if len(parts) == 2 and all(parts):
        return NamedObject(CONTROLLER_KINDS, parts[0], parts[1])
    if len(parts) == 3 and all(parts):
        return NamedObject((parts[0],), parts[1], parts[2])
    raise WhatIfError(f"{text!r}: expected NAMESPACE/NAME, KIND/NAMESPACE/NAME or Node/NAME")


def parse_path(text: str) -> list[str]:
    parts: list[str] = []
    position = 0
    for match in _PATH_PART.finditer(text):
        between = text[position:match.start()]
        if between not in ("", "."):
            raise WhatIfError(f"{text!r}: cannot read the path at {between!r}")
        parts.append(match.group(1) if match.group(1) is not None else match.group(2))
        position = match.end()
    if not parts or text[position:]:
        raise WhatIfError(f"{text!r}: not a path (e.g. spec.updateStrategy.rollingUpdate.maxUnavailable)")
    return parts


@dataclass(frozen=True)
class SetValue:
    target: NamedObject
    path: list[str]
    value: Any


def parse_set(text: str, controller: NamedObject | None) -> SetValue:
    """``[TARGET:]PATH=VALUE``; without a target, the --controller object."""
    assignment, _, _ = text.partition("=")
    if "=" not in text or not assignment:
        raise WhatIfError(f"--set {text!r}: expected PATH=VALUE")
    value_text = text[len(assignment) + 1:]
    target_text, colon, path_text = assignment.rpartition(":")
    if colon and "/" in target_text:
        target = parse_target(target_text)
    else:
        if controller is None:
            raise WhatIfError(f"--set {text!r}: which object? Name it (Node/NAME:PATH=VALUE) or give --controller")
        target, path_text = controller, assignment
    try:
        value = yaml.safe_load(value_text) if value_text else ""
    except yaml.YAMLError as exc:
        raise WhatIfError(f"--set {text!r}: the value is not YAML: {exc}") from None
    path = parse_path(path_text)
    return SetValue(check_path(target, path, value, text), path, value)


# --- checking a path against the kind's model ---------------------------------------------------------------
MODELS: Final[dict[str, type[msgspec.Struct]]] = {
    "DaemonSet": DaemonSet, "ReplicaSet": ReplicaSet, "Node": Node, "Pod": Pod,
    "ControllerRevision": ControllerRevision}

# The Kubernetes API's fields (v1.32) of the types in a pod template that kubus keeps as written without modelling
# them: they change the template, so its hash and the pods made from it.
KEPT_IN_TEMPLATES: Final[dict[type, frozenset[str]]] = {
    PodSpec: frozenset({
        "volumes", "ephemeralContainers", "activeDeadlineSeconds", "dnsPolicy", "serviceAccountName",
        "serviceAccount", "automountServiceAccountToken", "hostPID", "hostIPC", "shareProcessNamespace",
        "securityContext", "imagePullSecrets", "hostname", "subdomain", "hostAliases", "priorityClassName",
        "priority", "dnsConfig", "readinessGates", "runtimeClassName", "enableServiceLinks", "preemptionPolicy",
        "overhead", "topologySpreadConstraints", "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates",
        "resourceClaims", "resources"}),
    Container: frozenset({
        "command", "args", "workingDir", "ports", "envFrom", "env", "resources", "resizePolicy", "volumeMounts",
        "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle", "terminationMessagePath",
        "terminationMessagePolicy", "imagePullPolicy", "securityContext", "stdin", "stdinOnce", "tty"}),
    Affinity: frozenset({"podAffinity", "podAntiAffinity"}),
}
_TEMPLATE: Final = mi.type_info(msgspec.defstruct("PodTemplate", [("metadata", ObjectMeta), ("spec", PodSpec)]))
_KEPT: Final = mi.AnyType()  # below a kept field: anything


@dataclass(frozen=True)
class _Miss:
    """Where a path (or a value's keys) leaves the model: at the last part of `at`, which is none of `known`."""

    at: tuple[str, ...]
    known: tuple[str, ...] = ()
    why: str = ""  # what the part runs into instead, when that is not an object (a list, a plain value)


def _strip(t: mi.Type) -> tuple[mi.Type, bool]:
    """The type without its None (a union of plain values: any plain value); whether it is a pod template."""
    if isinstance(t, mi.UnionType):
        inner = [u for u in t.types if not isinstance(u, mi.NoneType)]
        structured = [u for u in inner if isinstance(u, mi.StructType | mi.ListType | mi.DictType | mi.CustomType)]
        t = structured[0] if len(structured) == 1 else (inner[0] if len(inner) == 1 else mi.AnyType())
    if isinstance(t, mi.CustomType) and t.cls is PodTemplateSpec:
        return _TEMPLATE, True
    return t, False


def _fields(t: mi.Type, kept: bool) -> dict[str, mi.Type] | None:
    """The fields of an object type by their JSON name (None: not an object with fixed fields)."""
    if not isinstance(t, mi.StructType):
        return None
    named = {f.encode_name: f.type for f in t.fields}
    if kept:
        named.update(dict.fromkeys(KEPT_IN_TEMPLATES.get(t.cls, ()), _KEPT))
    return named


def _walk(t: mi.Type, path: Sequence[str], kept: bool = False) -> tuple[mi.Type, bool] | _Miss:
    """The type at the end of `path` (and whether it lies in a pod template), or where the path leaves the model."""
    for depth, part in enumerate(path):
        t, template = _strip(t)
        kept = kept or template
        at = tuple(path[:depth + 1])
        if isinstance(t, mi.AnyType):
            return t, kept
        named = _fields(t, kept)
        if named is not None:
            if part not in named:
                return _Miss(at, tuple(sorted(named)))
            t = named[part]
        elif isinstance(t, mi.DictType):
            t = t.value_type
        elif isinstance(t, mi.ListType):
            if not part.isdigit():
                return _Miss(at, why="a list: its items are numbered (0, 1, ...)")
            t = t.item_type
        else:
            return _Miss(at, why="a plain value, without fields")
    return t, kept


def _check_value(t: mi.Type, kept: bool, value: Any, path: tuple[str, ...]) -> _Miss | None:
    """The keys of an object given as the value, against the type: the first that leaves the model."""
    t, template = _strip(t)
    kept = kept or template
    named = _fields(t, kept)
    items: list[tuple[str, Any, mi.Type]] = []
    if named is not None and isinstance(value, dict):
        for key, item in value.items():
            if key not in named:
                return _Miss((*path, str(key)), tuple(sorted(named)))
            items.append((str(key), item, named[key]))
    elif isinstance(t, mi.DictType) and isinstance(value, dict):
        items = [(str(k), v, t.value_type) for k, v in value.items()]
    elif isinstance(t, mi.ListType) and isinstance(value, list):
        items = [(str(i), v, t.item_type) for i, v in enumerate(value)]
    for key, item, sub in items:
        miss = _check_value(sub, kept, item, (*path, key))
        if miss is not None:
            return miss
    return None


def _check(kind: str, path: list[str], value: Any) -> _Miss | None:
    found = _walk(mi.type_info(MODELS[kind]), path)
    if isinstance(found, _Miss):
        return found
    t, kept = found
    return _check_value(t, kept, value, tuple(path))


def check_path(target: NamedObject, path: list[str], value: Any, text: str) -> NamedObject:
    """The target a `--set` of `path` to `value` applies to: the kinds of `target` whose model has the path (a
    name that may be a DaemonSet or a ReplicaSet narrowed to the kind that has it); a WhatIfError naming the path,
    the kind and the nearest known path when none has it."""
    for kind in target.kinds:
        if kind not in MODELS:
            nearest = difflib.get_close_matches(kind, list(MODELS), n=1)
            hint = f"nearest: {nearest[0]}" if nearest else f"it reads {', '.join(sorted(MODELS))}"
            raise WhatIfError(f"--set {text!r}: kubus reads no kind {kind!r} ({hint})")
    misses = {kind: _check(kind, path, value) for kind in target.kinds}
    fits = tuple(k for k in target.kinds if misses[k] is None)
    if fits:
        return target if fits == target.kinds else NamedObject(fits, target.namespace, target.name)
    found = {k: m for k, m in misses.items() if m is not None}
    deepest = max(len(m.at) for m in found.values())
    furthest = {k: m for k, m in found.items() if len(m.at) == deepest}  # the kinds that had most of the path
    at = next(iter(furthest.values())).at
    kinds = " or ".join(f"a {k}" for k in furthest)
    why = next((m.why for m in furthest.values() if m.why), "")
    if why:
        raise WhatIfError(f"--set {text!r}: {_dotted(at[:-1])} of {kinds} is {why}")
    known = sorted({name for m in furthest.values() for name in m.known})
    nearest = difflib.get_close_matches(at[-1], known, n=1)
    hint = f"nearest: {_dotted([*at[:-1], nearest[0]])}" if nearest else f"known there: {', '.join(known)}"
    raise WhatIfError(f"--set {text!r}: {kinds} has no field {_dotted(at)} that kubus reads ({hint})")


def _dotted(path: Sequence[str]) -> str:
    return "".join(f"[{p}]" if "." in p else (p if i == 0 else f".{p}") for i, p in enumerate(path))


def _assign(obj: Any, path: Sequence[str], value: Any, where: str) -> None:
    for i, key in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(obj, list):
            obj = obj[_index(key, obj, where)]
            continue
        if not isinstance(obj, dict):
            raise WhatIfError(f"{where}: {'.'.join(path[:i])} is not an object")
        if obj.get(key) is None:
            obj[key] = [] if nxt.isdigit() else {}
        obj = obj[key]
    last = path[-1]
    if isinstance(obj, list):
        index = int(last) if last.isdigit() else -1
        if index == len(obj):
            obj.append(value)
        else:
            obj[_index(last, obj, where)] = value
    elif isinstance(obj, dict):
        if value is None:
            obj.pop(last, None)
        else:
            obj[last] = value
    else:
        raise WhatIfError(f"{where}: {'.'.join(path[:-1])} is not an object")


def _index(key: str, items: list[Any], where: str) -> int:
    if not key.isdigit() or int(key) >= len(items):
        raise WhatIfError(f"{where}: {key!r} is not an index of a list of {len(items)}")
    return int(key)


@dataclass
class WhatIf:
    sets: list[SetValue] = field(default_factory=list)
    specs: dict[NamedObject, dict[str, Any]] = field(default_factory=dict)  # the object's spec replaced
    drops: list[NamedObject] = field(default_factory=list)  # objects whose events never happened
    add_nodes: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (name, labels)
    changed: int = 0  # events changed so far
    seen: dict[NamedObject, set[str]] = field(default_factory=dict)  # a target -> the kinds of its events changed

    def __bool__(self) -> bool:
        return bool(self.sets or self.specs or self.drops or self.add_nodes)

    def describe(self) -> list[str]:
        lines = [f"{self._named(s.target)}: {_dotted(s.path)} = {_json(s.value)}" for s in self.sets]
        lines += [f"{self._named(t)}: spec replaced" for t in self.specs]
        lines += [f"{t}: dropped" for t in self.drops]
        lines += [f"Node/{name}: added" + (f" with labels {labels}" if labels else "")
                  for name, labels in self.add_nodes]
        return lines

    def _named(self, target: NamedObject) -> str:
        """The target as the replay found it: of the kind its events had (a name that may be a DaemonSet or a
        ReplicaSet is one of them), or said to be absent."""
        kinds = self.seen.get(target)
        if not kinds:
            return f"{target} (no event of it replayed: nothing changed)"
        return str(NamedObject(tuple(k for k in target.kinds if k in kinds), target.namespace, target.name))

    # --- events -------------------------------------------------------------------------------------------
    def event(self, event: ObservedEvent) -> ObservedEvent | None:
        if any(t.matches(event) for t in self.drops):
            return None
        sets = [s for s in self.sets if s.target.matches(event)]
        targets = [t for t in self.specs if t.matches(event)]
        spec = self.specs[targets[0]] if targets else None
        if not sets and spec is None:
            return event
        for target in [*(s.target for s in sets), *targets]:
            self.seen.setdefault(target, set()).add(event.kind)
        try:
            obj = msgspec.json.decode(event.object)
        except msgspec.DecodeError:
            return event
        if not isinstance(obj, dict):
            return event
        if spec is not None:
            obj["spec"] = msgspec.json.decode(msgspec.json.encode(spec))
        for change in sets:
            _assign(obj, change.path, msgspec.json.decode(msgspec.json.encode(change.value)),
                    f"--set {change.target}:{'.'.join(change.path)}")
        self.changed += 1
        return msgspec.structs.replace(event, object=msgspec.Raw(msgspec.json.encode(obj)))

    def events(self, events: list[tuple[ObservedEvent, int]]) -> list[tuple[ObservedEvent, int]]:
        changed: list[tuple[ObservedEvent, int]] = []
        for event, seq in events:
            new = self.event(event)
            if new is not None:
                changed.append((new, seq))
        return changed

    def payload(self, payload: Payload) -> Payload | None:
        if isinstance(payload, bytes):
            try:
                payload = codec.decode_observed(payload)
            except (codec.BadMessage, codec.NewerSchema):  # the replay's select decides about it
                return payload
        return self.event(payload)

    def extra_objects(self, at: datetime) -> list[ObservedEvent]:
        """The added nodes, Ready, as ADDED events."""
        created = format_time(at)
        events = []
        for name, labels in self.add_nodes:
            uid = f"what-if-node-{name}"
            node = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "uid": uid, "resourceVersion": "1", "creationTimestamp": created,
                                 "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels}},
                    "spec": {},
                    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                               "lastHeartbeatTime": created, "lastTransitionTime": created}]}}
            events.append(ObservedEvent(kind="Node", type=ADDED, name=name, uid=uid, resource_version="1",
                                        observed_at=created, ingest="what-if",
                                        object=msgspec.Raw(msgspec.json.encode(node))))
        return events


def parse_add_node(text: str) -> tuple[str, dict[str, str]]:
    """``NAME`` or ``NAME:LABEL=VALUE,LABEL=VALUE``."""
    name, _, rest = text.partition(":")
    labels: dict[str, str] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise WhatIfError(f"--add-node {text!r}: labels are LABEL=VALUE, comma-separated")
        labels[key] = value
    if not name:
        raise WhatIfError(f"--add-node {text!r}: which node name?")
    return name, labels


def load_spec(path: str, target: NamedObject | None) -> tuple[NamedObject, dict[str, Any]]:
    """`--spec FILE`: a YAML object (a whole DaemonSet/ReplicaSet manifest, or its spec alone)."""
    if target is None:
        raise WhatIfError("--spec needs --controller: whose spec does it replace?")
    try:
        with open(path, encoding="utf-8") as handle:
            loaded = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as exc:
        raise WhatIfError(f"--spec {path}: {exc}") from None
    if not isinstance(loaded, dict):
        raise WhatIfError(f"--spec {path}: not a YAML object")
    spec = loaded.get("spec") if "spec" in loaded and ("kind" in loaded or "metadata" in loaded) else loaded
    if not isinstance(spec, dict):
        raise WhatIfError(f"--spec {path}: no spec object in it")
    kind = loaded.get("kind")
    if isinstance(kind, str) and kind in CONTROLLER_KINDS and len(target.kinds) > 1:
        target = NamedObject((kind,), target.namespace, target.name)
    return target, spec


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()
