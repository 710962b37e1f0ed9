"""A pod template that keeps every field its author wrote.

Why not a plain Struct: msgspec drops unknown fields when it decodes, and a
DaemonSet's or ReplicaSet's ``spec.template`` is full of fields kubus does not
model (volumes, env, resources, securityContext, init containers, fields from
newer Kubernetes versions). Losing any of them would change the pods the
controller creates and the revision hash it computes. msgspec has no
"collect the unknown fields" option, so the template is a small non-Struct
class wired into ``kube.codec`` with ``dec_hook`` and ``enc_hook``:

* it holds the JSON object exactly as decoded (``_raw``), plus typed views
  ``metadata: ObjectMeta`` and ``spec: PodSpec`` built from it with
  ``msgspec.convert``;
* the views are the API: read them, mutate them, or assign new ones;
* encoding lays the current views over the raw JSON (``_overlay``): modelled
  fields come from the views, everything else from the raw JSON, list items
  are paired with their raw counterparts (containers by ``name``, other items
  by index), and a raw value is reused untouched wherever the view still says
  the same thing. An unmodified template therefore re-encodes to an equal
  object, and a modified one keeps its unmodelled fields.

The alternatives were worse: ``msgspec.Raw`` keeps bytes but is not
supported by ``msgspec.convert`` and needs re-parsing for every read, and a
``dict[str, Any]`` spec gives up typing where the controllers need it most.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any

import msgspec

from kube.core import PodSpec
from kube.meta import ObjectMeta

__all__ = ["PodTemplateSpec"]


class _View(msgspec.Struct, kw_only=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


class PodTemplateSpec:
    """core/v1 PodTemplateSpec: typed ``metadata`` and ``spec`` over the lossless JSON."""

    __slots__ = ("_raw", "metadata", "spec")

    def __init__(self, *, metadata: ObjectMeta | None = None, spec: PodSpec | None = None) -> None:
        self._raw: dict[str, Any] = {}
        self.metadata = metadata if metadata is not None else ObjectMeta()
        self.spec = spec if spec is not None else PodSpec()

    @classmethod
    def from_builtins(cls, obj: Any) -> PodTemplateSpec:
        """Build from a decoded JSON object; raises msgspec.ValidationError naming the bad field."""
        view = msgspec.convert(obj, _View)
        template = cls(metadata=view.metadata, spec=view.spec)
        template._raw = _clone(obj)
        return template

    def to_builtins(self) -> dict[str, Any]:
        """The JSON object: the views laid over the raw JSON, unmodelled fields kept."""
        return _overlay(self._raw, _View(metadata=self.metadata, spec=self.spec))

    def to_pod_builtins(self) -> dict[str, Any]:
        """A Pod body with this template's metadata and spec (what GetPodFromTemplate starts from)."""
        return {"apiVersion": "v1", "kind": "Pod", **self.to_builtins()}

    def copy(self) -> PodTemplateSpec:
        """A deep copy: views and raw JSON are independent of the original."""
        return copy.deepcopy(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> PodTemplateSpec:
        other = PodTemplateSpec(metadata=copy.deepcopy(self.metadata, memo), spec=copy.deepcopy(self.spec, memo))
        other._raw = _clone(self._raw)
        return other

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PodTemplateSpec):
            return NotImplemented
        return self.to_builtins() == other.to_builtins()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        unmodelled = sorted(_unmodelled_keys(self._raw, _View(metadata=self.metadata, spec=self.spec)))
        return f"PodTemplateSpec(metadata={self.metadata!r}, spec={self.spec!r}, unmodelled={unmodelled!r})"


@functools.cache
def _fields(cls: type[msgspec.Struct]) -> tuple[msgspec.structs.FieldInfo, ...]:
    """msgspec.structs.fields, once per type: it evaluates the class's annotations on every call."""
    return msgspec.structs.fields(cls)


def _overlay(raw: Any, value: msgspec.Struct) -> dict[str, Any]:
    base = {key: _clone(item) for key, item in raw.items()} if isinstance(raw, Mapping) else {}
    for field in _fields(type(value)):
        current = getattr(value, field.name)
        name = field.encode_name
        is_default = _is_default(current, field)
        if name not in base:
            if not is_default:
                base[name] = msgspec.to_builtins(current)
            continue
        old = base[name]
        if is_default and old is None:
            continue  # an explicit null already means "unset"
        if isinstance(current, msgspec.Struct):
            base[name] = _overlay(old, current)
        elif isinstance(current, list) and any(isinstance(item, msgspec.Struct) for item in current):
            base[name] = _overlay_list(old, current)
        else:
            new = msgspec.to_builtins(current)
            if new != old:
                if is_default:
                    del base[name]
                else:
                    base[name] = new
    return base


def _overlay_list(raw: Any, items: list[Any]) -> list[Any]:
    olds = raw if isinstance(raw, list) else []
    out: list[Any] = []
    for index, item in enumerate(items):
        if isinstance(item, msgspec.Struct):
            out.append(_overlay(_counterpart(olds, index, item), item))
        else:
            out.append(msgspec.to_builtins(item))
    return out


def _counterpart(olds: list[Any], index: int, item: msgspec.Struct) -> Any:
    """The raw list item a typed item came from: same index if the name agrees, else same name."""
    name = getattr(item, "name", None)
    if index < len(olds) and (not name or (isinstance(olds[index], Mapping) and olds[index].get("name") == name)):
        return olds[index]
    if name:
        for old in olds:
            if isinstance(old, Mapping) and old.get("name") == name:
                return old
    return None


def _is_default(current: Any, field: msgspec.structs.FieldInfo) -> bool:
    if field.default is not msgspec.NODEFAULT:
        return bool(current == field.default)
    if field.default_factory is not msgspec.NODEFAULT:
        return bool(current == field.default_factory())
    return False


def _unmodelled_keys(raw: Mapping[str, Any], view: msgspec.Struct, prefix: str = "") -> set[str]:
    names = {field.encode_name: getattr(view, field.name) for field in _fields(type(view))}
    found: set[str] = set()
    for key, item in raw.items():
        if key not in names:
            found.add(prefix + key)
        elif isinstance(names[key], msgspec.Struct) and isinstance(item, Mapping):
            found |= _unmodelled_keys(item, names[key], f"{prefix}{key}.")
    return found


def _clone(value: Any) -> Any:
    # JSON trees only hold dicts, lists and immutable scalars: cheaper than copy.deepcopy.
    if isinstance(value, dict):
        return {key: _clone(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clone(item) for item in value]
    return value
