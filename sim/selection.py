"""Which objects a list or watch returns: namespace, label selector and field selector.

The field selectors per kind are the ones kube-apiserver registers (`GetAttrs` / field label
conversion functions); any other field is refused with 400, as upstream does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kube.fields import FieldSelectorError, parse_field_selector
from kube.labels import parse_selector
from kube.selection import SelectorError
from sim import resources as R
from sim import status as errors
from sim.resources import ApiResource

FieldGetter = Callable[[dict[str, Any]], str]


def _path(*keys: str) -> FieldGetter:
    def get(obj: dict[str, Any]) -> str:
        value: Any = obj
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
            if value is None:
                return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return get


_COMMON: dict[str, FieldGetter] = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}
_FIELDS: dict[ApiResource, dict[str, FieldGetter]] = {
    R.PODS: {
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": lambda o: "true" if o.get("spec", {}).get("hostNetwork") else "false",
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    },
    R.NODES: {"spec.unschedulable": lambda o: "true" if o.get("spec", {}).get("unschedulable") else "false"},
    R.NAMESPACES: {"status.phase": _path("status", "phase")},
    R.REPLICASETS: {"status.replicas": _path("status", "replicas")},
    R.EVENTS: {
        **{f"involvedObject.{f}": _path("involvedObject", f)
           for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _path("source", "component"),
        "type": _path("type"),
    },
}


@dataclass(frozen=True)
class Filter:
    namespace: str | None
    labels: Any  # kube.labels.Selector, or None for everything
    fields: Any  # kube.labels.FieldSelector, or None
    getters: Mapping[str, FieldGetter]

    def matches(self, obj: dict[str, Any]) -> bool:
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.labels is not None and not self.labels.matches(meta.get("labels") or {}):
            return False
        if self.fields is not None:
            values = {name: get(obj) for name, get in self.getters.items()}
            if not self.fields.matches(values):
                return False
        return True

    @property
    def trivial(self) -> bool:
        return self.labels is None and self.fields is None


def build_filter(resource: ApiResource, namespace: str | None, label_selector: str | None,
                 field_selector: str | None) -> Filter:
    labels = None
    if label_selector:
        try:
            labels = parse_selector(label_selector)
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from exc  # the parser words it as labels.Parse does
        if labels.empty():
            labels = None
    getters = {**_COMMON, **_FIELDS.get(resource, {})}
    fields = None
    if field_selector:
        try:
            fields = parse_field_selector(field_selector)
        except FieldSelectorError as exc:
            raise errors.bad_request(str(exc)) from exc
        for term in fields.requirements():
            if term.field not in getters:
                raise errors.bad_request(f"field label not supported: {term.field}")
        if fields.empty():
            fields = None
    return Filter(namespace, labels, fields, getters)
