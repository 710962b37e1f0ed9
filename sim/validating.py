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


def validate(kind: str, obj: Any, old: Any = None) -> list[ApiFieldError]:
    """Every ApiFieldError kube-apiserver reports for creating ``obj`` (or updating ``old`` to it)."""
    if not isinstance(obj, dict):
        return [ApiFieldError.invalid("", GoValue("<body>"), "must be a JSON object")]
    errs: Errors = []
    validators: dict[str, Callable[[dict[str, Any], Errors], None]] = {
        "Pod": validation_apps.validate_pod,
        "Namespace": validate_namespace,
        "Node": validate_node,
        "Event": validate_event,
        "DaemonSet": validation_apps.validate_daemonset,
        "ReplicaSet": validation_apps.validate_replicaset,
        "ControllerRevision": validation_apps.validate_controller_revision,
    }
    updates: dict[str, Callable[[dict[str, Any], dict[str, Any], Errors], None]] = {
        "Pod": validation_apps.validate_pod_update,
        "DaemonSet": validation_apps.validate_selector_update,
        "ReplicaSet": validation_apps.validate_selector_update,
        "ControllerRevision": validation_apps.validate_controller_revision_update,
    }
    if kind == "Event" and isinstance(old, dict):
        # an update gets BeforeUpdate's common ObjectMeta checks whatever the legacy checks find,
        # where a create reaches BeforeCreate's only when the legacy checks pass
        validate_object_meta(obj, True, path_segment_name, errs)
        legacy_event(obj, errs)
    elif kind in validators:
        validators[kind](obj, errs)
    else:
        validate_object_meta(obj, True, path_segment_name, errs)
    if isinstance(old, dict):
        validate_object_meta_update(obj, old, errs)
        if kind in updates:
            updates[kind](obj, old, errs)
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
