"""Known fields of each kind, and dropping the unknown ones as kube-apiserver's decoder does.

kube-apiserver decodes a request into Go structs, so a field the API does not define disappears
(and, with `fieldValidation=Strict`, fails the request; with the default `Warn` it comes back as
a warning). The sim stores plain JSON, so it needs the same list of fields: it is read once from
the official client's generated models (`openapi_types` and `attribute_map`), which are
generated from kube-apiserver's OpenAPI document and therefore name exactly the API's fields.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import kubernetes.client as models

# A node of the schema: a dict of json field -> child node for objects, ("list", node) and
# ("map", node) for containers, and None for a value kept as written (scalars, IntOrString,
# RawExtension, quantities, times).
SchemaNode = dict[str, Any] | tuple[str, Any] | None

_ROOT_MODELS = {
    "Pod": "V1Pod", "Node": "V1Node", "Namespace": "V1Namespace", "Event": "CoreV1Event",
    "DaemonSet": "V1DaemonSet", "ReplicaSet": "V1ReplicaSet", "ControllerRevision": "V1ControllerRevision",
    "ServiceAccount": "V1ServiceAccount", "Role": "V1Role", "ClusterRole": "V1ClusterRole",
    "RoleBinding": "V1RoleBinding", "ClusterRoleBinding": "V1ClusterRoleBinding",
}
_LIST = re.compile(r"^List\[(.+)\]$|^list\[(.+)\]$")
_MAP = re.compile(r"^Dict\[str, (.+)\]$|^dict\(str, (.+)\)$")


@cache
def _model(name: str) -> SchemaNode:
    cls = getattr(models, name, None)
    if cls is None or not hasattr(cls, "openapi_types"):
        return None
    fields: dict[str, Any] = {}
    _building[name] = fields  # recursive types (JSONSchemaProps) refer back to themselves
    for attr, type_name in cls.openapi_types.items():
        fields[cls.attribute_map[attr]] = _type(type_name)
    del _building[name]
    return fields


_building: dict[str, dict[str, Any]] = {}


def _type(type_name: str) -> SchemaNode:
    match = _LIST.match(type_name)
    if match:
        return ("list", _type(match.group(1) or match.group(2)))
    match = _MAP.match(type_name)
    if match:
        return ("map", _type(match.group(1) or match.group(2)))
    if type_name in _building:
        return _building[type_name]
    if type_name[:1].isupper() and hasattr(models, type_name):
        return _model(type_name)
    return None


def root(kind: str) -> SchemaNode:
    name = _ROOT_MODELS.get(kind)
    return _model(name) if name else None


# The list and map fields Go writes even when empty (no `omitempty` in their json tags).
_ALWAYS_WRITTEN = frozenset({"containers", "nodeSelectorTerms"})


def prune(kind: str, obj: dict[str, Any]) -> list[str]:
    """Removes, in place, fields the kind does not define (returning their paths, `spec.foo`) and
    empty or null lists and maps, which Go's `omitempty` leaves out of what the API returns."""
    schema = root(kind)
    unknown: list[str] = []
    if isinstance(schema, dict) and isinstance(obj, dict):
        _prune_object(obj, schema, None, unknown)
    return unknown


_ABSENT = object()

# Where a value sits, built only as the walk descends and spelled out only for an unknown field: (the parent's
# Path, the key or index, True for a field `.key`, False for an element `[key]`); None is the object itself.
# Formatting each descent's path as a string cost more than the rest of the walk of a typical pod.
Path = tuple[Any, Any, bool] | None


def _spell(path: Path) -> str:
    parts: list[str] = []
    while path is not None:
        path, key, is_field = path
        parts.append(f".{key}" if is_field else f"[{key}]")
    text = "".join(reversed(parts))
    return text[1:] if text.startswith(".") else text


def _prune_object(value: dict[str, Any], schema: dict[str, Any], path: Path, unknown: list[str]) -> None:
    """Prunes the object `value` against its (object) schema: one pass over its fields, which gathers its unknown
    fields (reported in order, before any field below them), its empty containers and the fields to descend into.
    Scalars and values kept as written are skipped first, as they are most fields."""
    drop: list[str] | None = None
    below: list[tuple[str, Any, Any]] | None = None
    for key, child in value.items():
        sub = schema.get(key, _ABSENT)
        if sub is None:
            continue  # a value kept as written
        if sub is _ABSENT:
            if not key.startswith("$"):  # strategic-merge directives are handled by the patcher
                unknown.append(_spell((path, key, True)))
                if drop is None:
                    drop = []
                drop.append(key)
        elif child is None:
            if type(sub) is tuple and key not in _ALWAYS_WRITTEN:
                if drop is None:
                    drop = []
                drop.append(key)  # a null list or map: Go's omitempty leaves it out
        elif type(sub) is tuple:
            if child == [] or child == {}:
                if key not in _ALWAYS_WRITTEN:
                    if drop is None:
                        drop = []
                    drop.append(key)  # an empty list or map, likewise
            elif sub[1] is not None and isinstance(child, (dict, list)):
                if below is None:
                    below = []
                below.append((key, child, sub))
        elif isinstance(child, dict):
            if below is None:
                below = []
            below.append((key, child, sub))
    if drop is not None:
        for key in drop:
            del value[key]
    if below is not None:
        for key, child, sub in below:
            if type(sub) is dict:
                _prune_object(child, sub, (path, key, True), unknown)
            else:
                _prune_container(child, sub, (path, key, True), unknown)


def _prune_container(value: Any, schema: tuple[str, Any], path: Path, unknown: list[str]) -> None:
    """Prunes the elements of a list or map field whose items have a schema (objects, or containers again)."""
    container, item = schema
    if container == "list":
        if not isinstance(value, list):
            return
        elements: Any = enumerate(value)
    elif container == "map" and isinstance(value, dict):
        elements = value.items()
    else:
        return
    if type(item) is dict:
        kept = _kept_as_written(item)
        for key, element in elements:
            if isinstance(element, dict) and not element.keys() <= kept:
                _prune_object(element, item, (path, key, False), unknown)
    elif item is not None:
        for key, element in elements:
            if element is not None:
                _prune_container(element, item, (path, key, False), unknown)


# The fields of each object schema whose values are kept as written, by the schema's identity (schema nodes live as
# long as the process: `_model` keeps them). An object with no other field (a condition, a toleration, an owner
# reference, an IP, `{}`) has nothing to prune, and most elements of a pod's lists are such: one C-level subset test
# instead of a call and a walk of its fields (issue 25).
_kept_by_schema: dict[int, frozenset[str]] = {}


def _kept_as_written(schema: dict[str, Any]) -> frozenset[str]:
    kept = _kept_by_schema.get(id(schema))
    if kept is None:
        kept = _kept_by_schema[id(schema)] = frozenset(key for key, sub in schema.items() if sub is None)
    return kept
