"""Which of kube-apiserver's validation rules (v1.32) a write gets, by kind: ``validate(kind, obj, old)`` for
creates and updates, ``validate_status_update`` for status writes. The rules are the core kinds' and the
shared ones in ``sim.validation`` and the pods' and apps group's in ``sim.validation_apps``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim import validation_apps
from sim.validation import (
    ApiFieldError,
    Errors,
    GoValue,
    legacy_event,
    path_segment_name,
    validate_event,
    validate_namespace,
    validate_node,
    validate_object_meta,
    validate_object_meta_update,
)

__all__ = ["validate", "validate_status_update"]


def _validate_rules(obj: dict[str, Any], errs: Errors) -> None:
    """ValidatePolicyRule: verbs always; apiGroups and resources for resource rules; not both kinds."""
    rules = obj.get("rules")
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        path = f"rules[{i}]"
        if not isinstance(rule, dict):
            errs.append(ApiFieldError.invalid(path, GoValue("<rule>"), "must be an object"))
            continue
        if not rule.get("verbs"):
            errs.append(ApiFieldError.required(f"{path}.verbs", "verbs must contain at least one value"))
        if rule.get("nonResourceURLs"):
            if obj.get("kind") == "Role":
                errs.append(ApiFieldError.invalid(f"{path}.nonResourceURLs", GoValue(str(rule["nonResourceURLs"])),
                                                  "namespaced rules cannot apply to non-resource URLs"))
            if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
                errs.append(ApiFieldError.invalid(f"{path}.nonResourceURLs", GoValue(str(rule["nonResourceURLs"])),
                                                  "rules cannot apply to both regular resources and non-resource "
                                                  "URLs"))
            continue
        if not rule.get("apiGroups"):
            errs.append(ApiFieldError.required(f"{path}.apiGroups", "resource rules must supply at least one api "
                                                                     "group"))
        if not rule.get("resources"):
            errs.append(ApiFieldError.required(f"{path}.resources", "resource rules must supply at least one "
                                                                    "resource"))


def _validate_role(namespaced: bool) -> Callable[[dict[str, Any], Errors], None]:
    def check(obj: dict[str, Any], errs: Errors) -> None:
        validate_object_meta(obj, namespaced, path_segment_name, errs)
        _validate_rules(obj, errs)
    return check


def _validate_binding(namespaced: bool) -> Callable[[dict[str, Any], Errors], None]:
    def check(obj: dict[str, Any], errs: Errors) -> None:
        validate_object_meta(obj, namespaced, path_segment_name, errs)
        ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), dict) else {}
        assert isinstance(ref, dict)
        kinds = ["ClusterRole", "Role"] if namespaced else ["ClusterRole"]
        if ref.get("apiGroup") != "rbac.authorization.k8s.io":
            errs.append(ApiFieldError.not_supported("roleRef.apiGroup", ref.get("apiGroup", ""),
                                                    ["rbac.authorization.k8s.io"]))
        if ref.get("kind") not in kinds:
            errs.append(ApiFieldError.not_supported("roleRef.kind", ref.get("kind", ""), kinds))
        if not ref.get("name"):
            errs.append(ApiFieldError.required("roleRef.name"))
        subjects = obj.get("subjects")
        for i, subject in enumerate(subjects if isinstance(subjects, list) else []):
            if not isinstance(subject, dict) or not subject.get("name"):
                errs.append(ApiFieldError.required(f"subjects[{i}].name"))
                continue
            if subject.get("kind") not in ("ServiceAccount", "User", "Group"):
                errs.append(ApiFieldError.not_supported(f"subjects[{i}].kind", subject.get("kind", ""),
                                                        ["ServiceAccount", "User", "Group"]))
            elif subject["kind"] == "ServiceAccount" and not namespaced and not subject.get("namespace"):
                errs.append(ApiFieldError.required(f"subjects[{i}].namespace"))
    return check


def _validate_binding_update(obj: dict[str, Any], old: dict[str, Any], errs: Errors) -> None:
    if obj.get("roleRef") != old.get("roleRef"):
        ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), dict) else {}
        assert isinstance(ref, dict)
        shown = (f'rbac.RoleRef{{APIGroup:"{ref.get("apiGroup", "")}", Kind:"{ref.get("kind", "")}", '
                 f'Name:"{ref.get("name", "")}"}}')
        errs.append(ApiFieldError.invalid("roleRef", GoValue(shown), "cannot change roleRef"))


# Each kind's rules, built once: they were built (four closures and two dicts) on every write (issue 25).
_VALIDATORS: dict[str, Callable[[dict[str, Any], Errors], None]] = {
    "Namespace": validate_namespace,
    "Node": validate_node,
    "Event": validate_event,
    "DaemonSet": validation_apps.validate_daemonset,
    "ReplicaSet": validation_apps.validate_replicaset,
    "ControllerRevision": validation_apps.validate_controller_revision,
    "Role": _validate_role(True),
    "ClusterRole": _validate_role(False),
    "RoleBinding": _validate_binding(True),
    "ClusterRoleBinding": _validate_binding(False),
}
_UPDATES: dict[str, Callable[[dict[str, Any], dict[str, Any], Errors], None]] = {
    "Pod": validation_apps.validate_pod_update,
    "DaemonSet": validation_apps.validate_selector_update,
    "ReplicaSet": validation_apps.validate_selector_update,
    "ControllerRevision": validation_apps.validate_controller_revision_update,
    "RoleBinding": _validate_binding_update,
    "ClusterRoleBinding": _validate_binding_update,
}


def validate(kind: str, obj: Any, old: Any = None, pod_spec_json: bytes | None = None) -> list[ApiFieldError]:
    """Every ApiFieldError kube-apiserver reports for creating ``obj`` (or updating ``old`` to it). A pod's
    ``pod_spec_json`` is its spec's JSON without the affinity, when the caller has it (sim.podspecs)."""
    if not isinstance(obj, dict):
        return [ApiFieldError.invalid("", GoValue("<body>"), "must be a JSON object")]
    errs: Errors = []
    if kind == "Event" and isinstance(old, dict):
        # an update gets BeforeUpdate's common ObjectMeta checks whatever the legacy checks find,
        # where a create reaches BeforeCreate's only when the legacy checks pass
        validate_object_meta(obj, True, path_segment_name, errs)
        legacy_event(obj, errs)
    elif kind == "Pod":
        validation_apps.validate_pod(obj, errs, pod_spec_json)
    elif kind in _VALIDATORS:
        _VALIDATORS[kind](obj, errs)
    else:
        validate_object_meta(obj, True, path_segment_name, errs)
    if isinstance(old, dict):
        validate_object_meta_update(obj, old, errs)
        if kind in _UPDATES:
            _UPDATES[kind](obj, old, errs)
    return errs


def validate_status_update(kind: str, obj: Any, old: dict[str, Any]) -> list[ApiFieldError]:
    """A status write of a ReplicaSet or DaemonSet: rest.BeforeUpdate's common ObjectMeta checks, then the
    status strategy's ValidateUpdate (ValidateObjectMetaUpdate and the status rules; never the spec's)."""
    if not isinstance(obj, dict):
        return [ApiFieldError.invalid("", GoValue("<body>"), "must be a JSON object")]
    errs: Errors = []
    validate_object_meta(obj, True, path_segment_name, errs)
    validate_object_meta_update(obj, old, errs)
    statuses: dict[str, Callable[[dict[str, Any], dict[str, Any], Errors], None]] = {
        "DaemonSet": validation_apps.validate_daemonset_status_update,
        "ReplicaSet": validation_apps.validate_replicaset_status_update,
    }
    statuses[kind](obj, old, errs)
    return errs
