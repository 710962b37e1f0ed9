"""How a PATCH request changes a stored object: JSON merge patch, JSON patch and strategic merge patch.

Pure functions over JSON-shaped values; the inputs are never mutated. The strategic merge patch
follows k8s.io/apimachinery/pkg/util/strategicpatch (patch.go, `StrategicMergeMapPatch`). Upstream
reads each field's patch strategy from the Go struct tags in k8s.io/api; the sim stores plain dicts,
so the strategies of the kinds it serves are kept in a small table keyed by field path.
"""

from __future__ import annotations

import copy
from typing import Any

Path = tuple[str, ...]


class PatchError(Exception):
    """A patch that is malformed or cannot apply; kube-apiserver answers 422."""


def _json_equal(a: Any, b: Any) -> bool:
    # Python's True == 1, but JSON booleans never equal numbers.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_json_equal, a, b))
    if isinstance(a, int | float):
        return isinstance(b, int | float) and a == b
    return type(a) is type(b) and a == b


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    _merge_into(result, patch)
    return result


def _merge_into(result: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            if not isinstance(current, dict):
                current = result[key] = {}
            _merge_into(current, value)
        else:
            result[key] = copy.deepcopy(value)


def apply_json_patch(target: Any, ops: list[Any]) -> Any:
    """Apply an RFC 6902 JSON patch; the first failing operation aborts the whole patch."""
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for number, op in enumerate(ops):
        doc = _apply_op(doc, op, number)
    return doc


def _apply_op(doc: Any, op: Any, number: int) -> Any:
    if not isinstance(op, dict):
        raise PatchError(f"operation {number}: must be an object, not {op!r}")
    name = op.get("op")
    raw = _member(op, "path", number)
    path = _pointer(raw, number)
    if name == "add":
        return _add(doc, path, copy.deepcopy(_member(op, "value", number)), raw)
    if name == "remove":
        return _remove(doc, path, raw)[0]
    if name == "replace":
        value = copy.deepcopy(_member(op, "value", number))
        if not path:
            return value
        return _add(_remove(doc, path, raw)[0], path, value, raw)
    if name in ("move", "copy"):
        raw_from = _member(op, "from", number)
        source = _pointer(raw_from, number)
        if name == "copy":
            return _add(doc, path, copy.deepcopy(_get(doc, source, raw_from)), raw)
        if len(path) > len(source) and path[: len(source)] == source:
            raise PatchError(f"operation {number}: cannot move {raw_from!r} into its own child {raw!r}")
        doc, value = _remove(doc, source, raw_from)
        return _add(doc, path, value, raw)
    if name == "test":
        expected = _member(op, "value", number)
        if not _json_equal(_get(doc, path, raw), expected):
            raise PatchError(f"test operation {number} failed: value at {raw!r} is not {expected!r}")
        return doc
    raise PatchError(f"operation {number}: unknown op {name!r}")


def _member(op: dict[str, Any], field: str, number: int) -> Any:
    # A present null "value" is legal JSON, so presence is tested rather than truthiness.
    if field not in op:
        raise PatchError(f"operation {number} ({op.get('op')!r}): missing {field!r}")
    return op[field]


def _pointer(raw: Any, number: int) -> list[str]:
    if not isinstance(raw, str) or (raw and not raw.startswith("/")):
        raise PatchError(f"operation {number}: {raw!r} is not a JSON pointer")
    if not raw:
        return []
    tokens = raw[1:].split("/")
    if any("~" in token.replace("~0", "").replace("~1", "") for token in tokens):
        raise PatchError(f"operation {number}: invalid ~ escape in {raw!r}")
    # ~1 first, so that "~01" decodes to "~1" and not "/".
    return [token.replace("~1", "/").replace("~0", "~") for token in tokens]


def _index(token: str, size: int, raw: str) -> int:
    canonical = token.isascii() and token.isdigit() and (token == "0" or not token.startswith("0"))
    if canonical and int(token) < size:
        return int(token)
    raise PatchError(f"path {raw!r} does not exist: no index {token!r} in a list of {size}")


def _get(doc: Any, path: list[str], raw: str) -> Any:
    for token in path:
        if isinstance(doc, dict) and token in doc:
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_index(token, len(doc), raw)]
        else:
            raise PatchError(f"path {raw!r} does not exist")
    return doc


def _add(doc: Any, path: list[str], value: Any, raw: str) -> Any:
    if not path:
        return value
    parent, last = _get(doc, path[:-1], raw), path[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            parent.insert(_index(last, len(parent) + 1, raw), value)
    else:
        raise PatchError(f"path {raw!r} does not exist: its parent is not an object or a list")
    return doc


def _remove(doc: Any, path: list[str], raw: str) -> tuple[Any, Any]:
    if not path:
        raise PatchError("cannot remove the whole document")
    parent, last = _get(doc, path[:-1], raw), path[-1]
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(last, len(parent), raw))
    raise PatchError(f"path {raw!r} does not exist")


_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder/"
_DELETE_FROM = "$deleteFromPrimitiveList/"
_SET = ""  # merge strategy without a merge key: the list is a set of primitives

# Path -> merge key of a `patchStrategy:"merge"` list. None marks a field stored verbatim.
# Paths do not step into list elements: "spec.containers.env" is the env of any container.
Strategies = dict[Path, str | None]


def _table(groups: dict[str, str | None]) -> Strategies:
    return {tuple(path.split(".")): key for path, key in groups.items()}


def _object_meta(prefix: str) -> Strategies:
    return _table({f"{prefix}.ownerReferences": "uid", f"{prefix}.finalizers": _SET})


def _pod_spec(prefix: str) -> Strategies:
    keys: dict[str, str | None] = {
        "volumes": "name", "imagePullSecrets": "name", "hostAliases": "ip", "schedulingGates": "name",
        "topologySpreadConstraints": "topologyKey", "resourceClaims": "name"}
    container = {"env": "name", "ports": "containerPort", "volumeMounts": "mountPath", "volumeDevices": "devicePath"}
    for containers in ("containers", "initContainers", "ephemeralContainers"):
        keys[containers] = "name"
        keys |= {f"{containers}.{field}": key for field, key in container.items()}
    return _table({f"{prefix}.{field}": key for field, key in keys.items()})


_WORKLOAD = {**_object_meta("metadata"), **_object_meta("spec.template.metadata"),
             **_pod_spec("spec.template.spec"), ("status", "conditions"): "type"}
_GENERIC = _object_meta("metadata")
_BY_KIND: dict[str, Strategies] = {
    "Pod": {**_GENERIC, **_pod_spec("spec"),
            **_table({"status.conditions": "type", "status.podIPs": "ip", "status.hostIPs": "ip"})},
    "Node": {**_GENERIC, **_table({"spec.podCIDRs": _SET, "status.conditions": "type",
                                   "status.addresses": "type"})},
    "Namespace": {**_GENERIC, ("status", "conditions"): "type"},
    "DaemonSet": _WORKLOAD,
    "ReplicaSet": _WORKLOAD,
    # data is a RawExtension: the DaemonSet controller stores a patch holding "$patch" in it.
    "ControllerRevision": {**_GENERIC, ("data",): None},
}


def apply_strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any], kind: str) -> dict[str, Any]:
    """Apply a Kubernetes strategic merge patch to an object of the given kind.

    Kinds without a table (a /scale subresource, say) merge with only the ObjectMeta strategies.
    """
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    merged = _Strategic(_BY_KIND.get(kind, _GENERIC)).merge_map(copy.deepcopy(target), copy.deepcopy(patch), ())
    return {} if merged is None else merged


def _shape(item: Any) -> str:
    return "list" if isinstance(item, list) else "map" if isinstance(item, dict) else "scalar"


def _identity(item: Any, key: str) -> Any:
    return item.get(key) if key and isinstance(item, dict) else item


def _position(item: Any, order: list[Any], key: str) -> int | None:
    wanted = _identity(item, key)
    return next((i for i, other in enumerate(order) if _json_equal(_identity(other, key), wanted)), None)


def _rank(item: Any, order: list[Any], key: str) -> int:
    position = _position(item, order, key)
    return len(order) if position is None else position


def _normalize_order(merged: list[Any], order: list[Any], server: list[Any], key: str) -> list[Any]:
    """Order as upstream's normalizeElementOrder: items named in `order` follow it, the others
    follow the live list, and the two runs interleave where the live list relates them."""
    named = sorted((item for item in merged if _position(item, order, key) is not None),
                   key=lambda item: _rank(item, order, key))
    rest = sorted((item for item in merged if _position(item, order, key) is None),
                  key=lambda item: _rank(item, server, key))
    result: list[Any] = []
    while named and rest:
        live_rest, live_named = _position(rest[0], server, key), _position(named[0], server, key)
        # Upstream only lets a server-only item go first when both are in the live list.
        take = rest if live_rest is not None and live_named is not None and live_rest < live_named else named
        result.append(take.pop(0))
    return result + rest + named


def _require_key(items: list[Any], key: str) -> None:
    for item in items:
        if not isinstance(item, dict):
            raise PatchError(f"list element {item!r} is not an object; merge key {key!r} expected")
        if key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {key}")


class _Strategic:
    def __init__(self, strategies: Strategies) -> None:
        self.strategies = strategies

    def merge_map(self, original: dict[str, Any], patch: dict[str, Any], path: Path) -> dict[str, Any] | None:
        """Merge `patch` into `original` (both private copies, changed in place); None deletes the map."""
        if _DIRECTIVE in patch:
            directive = patch.pop(_DIRECTIVE)
            if directive == "replace":
                return self.merge_map({}, patch, path)
            if directive == "delete":
                return None
            # Upstream refuses "merge" on a map; it means what a plain map does, so it is accepted.
            if directive != "merge":
                raise PatchError(f"unknown patch type: {directive!r} in map: {patch!r}")
        if _RETAIN_KEYS in patch:
            self._retain_keys(original, patch)
        for directive_key in [key for key in patch if key.startswith(_SET_ORDER)]:
            self._set_element_order(original, patch, directive_key, path)
        deletions: list[tuple[str, list[Any]]] = []
        for key, value in patch.items():
            if key.startswith(_DELETE_FROM):
                field = key[len(_DELETE_FROM):]
                if not field or not isinstance(value, list):
                    raise PatchError(f"invalid {key!r}: must name a field and hold a list")
                deletions.append((field, value))
                continue
            if key.startswith("$"):
                raise PatchError(f"unknown strategic merge patch directive {key!r}")
            sub = (*path, key)
            current = original.get(key)
            if value is None:
                merged: Any = None
            elif sub in self.strategies and self.strategies[sub] is None:
                merged = value
            elif isinstance(current, dict) and isinstance(value, dict):
                merged = self.merge_map(current, value, sub)
            elif isinstance(current, list) and isinstance(value, list):
                merged = self.merge_list(current, value, sub)
            else:
                merged = self.fresh(value, sub)
            self._store(original, sub, merged)
        # Applied after the additions so that a patch both listing and deleting an item deletes it.
        for field, values in deletions:
            if isinstance(live := original.get(field), list):
                kept = [item for item in live if not any(_json_equal(item, v) for v in values)]
                self._store(original, (*path, field), kept)
        return original

    def _store(self, original: dict[str, Any], path: Path, value: Any) -> None:
        # Merging lists are all omitempty in k8s.io/api, so kube-apiserver never serves one emptied.
        if value is None or (value == [] and self.strategies.get(path) is not None):
            original.pop(path[-1], None)
        else:
            original[path[-1]] = value

    def fresh(self, value: Any, path: Path) -> Any:
        """A patch value with nothing to merge into: directives applied, nulls dropped."""
        if isinstance(value, dict):
            return self.merge_map({}, value, path)
        if isinstance(value, list):
            return self.merge_list([], value, path)
        return value

    def merge_list(self, original: list[Any], patch: list[Any], path: Path) -> list[Any]:
        key = self.strategies.get(path)
        if key is None:
            # An atomic list is replaced; a directive element means nothing there and must not be stored.
            return [self.fresh(item, path) for item in patch if not (isinstance(item, dict) and _DIRECTIVE in item)]
        shapes = {_shape(item) for item in (*original, *patch)}
        if "list" in shapes:
            raise PatchError(f"{'.'.join(path)}: lists of lists are not supported")
        if len(shapes) > 1:
            raise PatchError(f"{'.'.join(path)}: list element types are not identical")
        if key == _SET:
            if "map" in shapes:
                raise PatchError(f"{'.'.join(path)}: cannot merge lists without merge key")
            both = [*original, *patch]
            merged = [item for i, item in enumerate(both) if _position(item, both[:i], key) is None]
            return _normalize_order(merged, patch, original, key)
        if "scalar" in shapes:
            raise PatchError(f"{'.'.join(path)}: elements must be objects with merge key {key!r}")
        original, patch = self._list_directives(original, patch, key, path)
        merged = list(original)
        for item in patch:
            index = _position(item, merged, key)
            if index is None:
                merged.append(self.fresh(item, path))
            else:
                merged[index] = self.merge_map(merged[index], item, path) or {}
        return _normalize_order(merged, patch, original, key)

    def _list_directives(
        self, original: list[Any], patch: list[Any], key: str, path: Path
    ) -> tuple[list[Any], list[Any]]:
        """Apply `$patch` elements of a merging list; return the live list and the plain patch elements."""
        plain: list[Any] = []
        replace = False
        for item in patch:
            directive = item.get(_DIRECTIVE)
            if _DIRECTIVE not in item:
                plain.append(item)
            elif directive == "delete":
                _require_key([item], key)
                original = [o for o in original if not _json_equal(_identity(o, key), item[key])]
            elif directive == "replace":
                replace = True
            elif directive == "merge":
                raise PatchError("merging lists cannot yet be specified in the patch")
            else:
                raise PatchError(f"unknown patch type: {directive!r} in map: {item!r}")
        _require_key(plain, key)
        if replace:
            return [self.fresh(item, path) for item in plain], []
        return original, plain

    def _retain_keys(self, original: dict[str, Any], patch: dict[str, Any]) -> None:
        keep = patch.pop(_RETAIN_KEYS)
        if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
            raise PatchError("$retainKeys must be a list of field names")
        for key, value in patch.items():
            if value is not None and not key.startswith((_DELETE_FROM, _SET_ORDER)) and key not in keep:
                raise PatchError(f"$retainKeys {keep!r} does not list {key!r}, which the patch sets")
        for key in [key for key in original if key not in keep]:
            del original[key]

    def _set_element_order(self, original: dict[str, Any], patch: dict[str, Any], directive: str, path: Path) -> None:
        order = patch.pop(directive)
        field = directive[len(_SET_ORDER):]
        if not field or not isinstance(order, list):
            raise PatchError(f"invalid {directive!r}: must name a field and hold a list")
        sub = (*path, field)
        key = self.strategies.get(sub)
        current, incoming = original.get(field), patch.get(field)
        # Order means nothing for an atomic list, and a null patch value deletes the list anyway.
        if key is None or (field in patch and incoming is None) or (current is None and incoming is None):
            return
        if not isinstance(current, list | None) or not isinstance(incoming, list | None):
            raise PatchError(f"{'.'.join(sub)}: {directive!r} applies to a list")
        if key:
            _require_key([*order, *(i for i in incoming or [] if not (isinstance(i, dict) and _DIRECTIVE in i))], key)
        at = 0
        for item in incoming or []:
            if isinstance(item, dict) and _DIRECTIVE in item:
                continue
            while at < len(order) and not _json_equal(_identity(item, key), _identity(order[at], key)):
                at += 1
            if at == len(order):
                raise PatchError(f"the order in patch list {incoming!r} doesn't match {directive} list {order!r}")
            at += 1
        merged = current if incoming is None else self.merge_list(current or [], incoming, sub)
        self._store(original, sub, _normalize_order(merged or [], order, current or [], key))
        patch.pop(field, None)
