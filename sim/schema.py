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
    if isinstance(schema, dict):
        _prune(obj, schema, "", unknown)
    return unknown


_ABSENT = object()


def _prune(value: Any, schema: SchemaNode, path: str, unknown: list[str]) -> None:
    """Prunes `value` at `path` against `schema`: one pass over each object's fields, which gathers its unknown
    fields (reported in order, before any field below them), its empty containers and the fields to descend into."""
    if schema is None:
        return
    if isinstance(schema, tuple):
        container, item = schema
        if item is None:
            return
        if container == "list" and isinstance(value, list):
            for i, element in enumerate(value):
                if element is not None:
                    _prune(element, item, f"{path}[{i}]", unknown)
        elif container == "map" and isinstance(value, dict):
            for key, element in value.items():
                if element is not None:
                    _prune(element, item, f"{path}[{key}]", unknown)
        return
    if not isinstance(value, dict):
        return
    drop: list[str] = []
    below: list[tuple[str, Any, SchemaNode]] = []
    for key, child in value.items():
        sub = schema.get(key, _ABSENT)
        if sub is _ABSENT:
            if not key.startswith("$"):  # strategic-merge directives are handled by the patcher
                unknown.append(f"{path}.{key}" if path else key)
                drop.append(key)
        elif sub is None or child is None:
            if child is None and isinstance(sub, tuple) and key not in _ALWAYS_WRITTEN:
                drop.append(key)  # a null list or map: Go's omitempty leaves it out
        elif isinstance(sub, tuple) and (child == [] or child == {}):
            if key not in _ALWAYS_WRITTEN:
                drop.append(key)  # an empty list or map, likewise
        elif isinstance(child, (dict, list)):
            below.append((key, child, sub))
    for key in drop:
        del value[key]
    for key, child, sub in below:
        _prune(child, sub, f"{path}.{key}" if path else key, unknown)
