"""Validation of pods, pod templates and the apps group (DaemonSet, ReplicaSet, ControllerRevision).

Split from ``sim.validation`` (errors, metadata, selectors, small core kinds) for
size; the rules and wording are upstream's ``core/validation`` and
``apps/validation``. Only what a DaemonSet or ReplicaSet workload plausibly
trips over is checked: pod spec fields outside containers, volumes,
scheduling and policies (security contexts, probes, resources, topology
spread, pod affinity, DNS config, ...) are accepted as they are.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from kube.intstr import is_percent, parse_int64
from kube.validation import regex_error, validate_dns1123_label, validate_label_key, validate_label_value
from sim import podspecs
from sim.validation import (
    ApiFieldError,
    Errors,
    GoValue,
    get,
    go_quote,
    go_string_map,
    immutable,
    is_empty_selector,
    items,
    nonnegative,
    selector_matches,
    selector_text,
    string_map,
    subdomain_name,
    validate_annotations,
    validate_label_selector,
    validate_labels,
    validate_object_meta,
    validate_taint_effect,
)

__all__ = [
    "validate_controller_revision", "validate_controller_revision_update", "validate_daemonset",
    "validate_daemonset_status_update", "validate_pod", "validate_pod_spec", "validate_pod_template",
    "validate_pod_update", "validate_replicaset", "validate_replicaset_status_update", "validate_selector_update",
]

_INT32_MAX = 2**31 - 1
_UPDATABLE_POD_FIELDS = ",".join((
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
))
_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _string(obj: Any, key: str, path: str, errs: Errors) -> str:
    return get(obj, key, str, path, errs) or ""


def _enum(obj: Any, key: str, path: str, valid: list[str], errs: Errors) -> None:
    value = _string(obj, key, path, errs)
    if not value:
        errs.append(ApiFieldError.required(path))
    elif value not in valid:
        errs.append(ApiFieldError.not_supported(path, value, valid))


# --- pods ----------------------------------------------------------------------------------------


def validate_pod(pod: dict[str, Any], errs: Errors, spec_json: bytes | None = None) -> None:
    """`spec_json`: the JSON of the pod's spec without its affinity, when the caller has it (see validate_pod_spec)."""
    validate_object_meta(pod, True, subdomain_name, errs)
    spec = get(pod, "spec", dict, "spec", errs) or {}
    validate_pod_spec(spec, "spec", errs, spec_json)
    for key in ("containers", "initContainers"):
        for path, container in items(spec, key, f"spec.{key}", []):
            image = _dict(container).get("image")
            if isinstance(image, str) and image != image.strip():
                errs.append(ApiFieldError.invalid(f"{path}.image", image,
                                                  "must not have leading or trailing whitespace"))


def validate_pod_template(template: dict[str, Any], path: str, errs: Errors) -> None:
    """ValidatePodTemplateSpec; note upstream's ``<path>.labels``, without ``metadata``."""
    meta = get(template, "metadata", dict, f"{path}.metadata", errs) or {}
    validate_labels(string_map(meta, "labels", f"{path}.labels", errs), f"{path}.labels", errs)
    validate_annotations(string_map(meta, "annotations", f"{path}.annotations", errs), f"{path}.annotations", errs)
    spec = get(template, "spec", dict, f"{path}.spec", errs) or {}
    validate_pod_spec(spec, f"{path}.spec", errs)
    if spec.get("ephemeralContainers"):
        errs.append(ApiFieldError.forbidden(f"{path}.spec.ephemeralContainers",
                                            "ephemeral containers not allowed in pod template"))


# The errors of pod specs validated lately, by path and the spec's JSON without its affinity: a ReplicaSet's or
# DaemonSet's pods share one spec (their template's), which the sim validated again for every pod it created (issue
# 25). The errors are a function of the spec and path alone, and frozen, so the same spec's are the first one's. A
# DaemonSet pins each of its pods to its node by a node affinity, the one field that differs from pod to pod: that
# is validated for every pod, between the errors the rest of the spec has before it and those it has after it (in
# the order of ValidatePodSpec's checks, which read no other field with the affinity).
_SPEC_ERRORS: dict[tuple[str, bytes], tuple[tuple[ApiFieldError, ...], tuple[ApiFieldError, ...]]] = {}
_SPEC_ERRORS_KEPT = 64
_encode = msgspec.json.encode


def validate_pod_spec(spec: dict[str, Any], path: str, errs: Errors, rest_json: bytes | None = None) -> None:
    """ValidatePodSpec's checks (those the sim makes) of `spec` at `path`, appended to `errs`. `rest_json` is the
    JSON of `spec` without its affinity when the caller has it already: sim.podspecs remembers it with a created
    pod's spec, which this would otherwise encode again for every pod (~25 k instructions of a DaemonSet pod)."""
    if rest_json is not None:
        key = (path, rest_json)
    else:
        rest = {k: v for k, v in spec.items() if k != "affinity"} if "affinity" in spec else spec
        try:
            key = (path, _encode(rest))
        except (TypeError, msgspec.EncodeError):  # not JSON as it stands (not from a request): validated as it is
            _validate_pod_spec(spec, path, errs)
            return
    found = _SPEC_ERRORS.get(key)
    if found is None:
        before: Errors = []
        after: Errors = []
        _validate_before_affinity(spec, path, before)
        _validate_after_affinity(spec, path, after)
        found = _SPEC_ERRORS[key] = (tuple(before), tuple(after))
        if len(_SPEC_ERRORS) > _SPEC_ERRORS_KEPT:
            del _SPEC_ERRORS[next(iter(_SPEC_ERRORS))]  # the oldest
    errs.extend(found[0])
    _validate_node_affinity(spec, f"{path}.affinity.nodeAffinity", errs)
    errs.extend(found[1])


def _validate_pod_spec(spec: dict[str, Any], path: str, errs: Errors) -> None:
    _validate_before_affinity(spec, path, errs)
    _validate_node_affinity(spec, f"{path}.affinity.nodeAffinity", errs)
    _validate_after_affinity(spec, path, errs)


def _validate_before_affinity(spec: dict[str, Any], path: str, errs: Errors) -> None:
    volumes = _validate_volumes(spec, f"{path}.volumes", errs)
    containers = items(spec, "containers", f"{path}.containers", errs)
    if not containers:
        errs.append(ApiFieldError.required(f"{path}.containers"))
    names: set[str] = set()
    for cpath, container in containers:
        _validate_container(_dict(container), cpath, volumes, names, errs)
    for cpath, container in items(spec, "initContainers", f"{path}.initContainers", errs):
        _validate_container(_dict(container), cpath, volumes, names, errs)
    _enum(spec, "restartPolicy", f"{path}.restartPolicy", ["Always", "OnFailure", "Never"], errs)
    _enum(spec, "dnsPolicy", f"{path}.dnsPolicy", ["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
          errs)
    validate_labels(string_map(spec, "nodeSelector", f"{path}.nodeSelector", errs), f"{path}.nodeSelector", errs)


def _validate_after_affinity(spec: dict[str, Any], path: str, errs: Errors) -> None:
    for key in ("serviceAccountName", "nodeName"):
        if value := _string(spec, key, f"{path}.{key}", errs):
            errs.extend(ApiFieldError.invalid(f"{path}.{key}", value, m) for m in subdomain_name(value, False))
    deadline = get(spec, "activeDeadlineSeconds", int, f"{path}.activeDeadlineSeconds", errs)
    if deadline is not None and not 1 <= deadline <= _INT32_MAX:
        errs.append(ApiFieldError.invalid(f"{path}.activeDeadlineSeconds", deadline,
                                          f"must be between 1 and {_INT32_MAX}, inclusive"))
    for key in ("hostname", "subdomain"):
        if value := _string(spec, key, f"{path}.{key}", errs):
            errs.extend(ApiFieldError.invalid(f"{path}.{key}", value, m) for m in validate_dns1123_label(value))
    for tpath, toleration in items(spec, "tolerations", f"{path}.tolerations", errs):
        _validate_toleration(_dict(toleration), tpath, errs)


def _validate_volumes(spec: dict[str, Any], path: str, errs: Errors) -> set[str]:
    names: set[str] = set()
    for vpath, volume in items(spec, "volumes", path, errs):
        volume, found = _dict(volume), []
        sources = [key for key, value in volume.items() if key != "name" and value is not None]
        if not sources:
            found.append(ApiFieldError.required(vpath, "must specify a volume type"))
        elif len(sources) > 1:
            found.append(ApiFieldError.forbidden(f"{vpath}.{sources[1]}", "may not specify more than 1 volume type"))
        name = _string(volume, "name", f"{vpath}.name", errs)
        if not name:
            found.append(ApiFieldError.required(f"{vpath}.name"))
        found.extend(ApiFieldError.invalid(f"{vpath}.name", name, m) for m in validate_dns1123_label(name) if name)
        if name in names:
            found.append(ApiFieldError.duplicate(f"{vpath}.name", name))
        if not found:
            names.add(name)
        errs.extend(found)
    return names


def _validate_container(container: dict[str, Any], path: str, volumes: set[str], names: set[str],
                        errs: Errors) -> None:
    name = _string(container, "name", f"{path}.name", errs)
    if not name:
        errs.append(ApiFieldError.required(f"{path}.name"))
    else:
        errs.extend(ApiFieldError.invalid(f"{path}.name", name, m) for m in validate_dns1123_label(name))
    if not _string(container, "image", f"{path}.image", errs):
        errs.append(ApiFieldError.required(f"{path}.image"))
    _enum(container, "terminationMessagePolicy", f"{path}.terminationMessagePolicy",
          ["File", "FallbackToLogsOnError"], errs)
    for ppath, port in items(container, "ports", f"{path}.ports", errs):
        number = get(port, "containerPort", int, f"{ppath}.containerPort", errs)
        if not number:
            errs.append(ApiFieldError.required(f"{ppath}.containerPort"))
        for key, value in (("containerPort", number), ("hostPort", get(port, "hostPort", int, ppath, errs))):
            if value and not 1 <= value <= 65535:
                errs.append(ApiFieldError.invalid(f"{ppath}.{key}", value, "must be between 1 and 65535, inclusive"))
        _enum(port, "protocol", f"{ppath}.protocol", ["SCTP", "TCP", "UDP"], errs)
    for epath, env in items(container, "env", f"{path}.env", errs):
        if not _string(env, "name", f"{epath}.name", errs):
            errs.append(ApiFieldError.required(f"{epath}.name"))
    for mpath, mount in items(container, "volumeMounts", f"{path}.volumeMounts", errs):
        volume = _string(mount, "name", f"{mpath}.name", errs)
        if not volume:
            errs.append(ApiFieldError.required(f"{mpath}.name"))
        if volume not in volumes:
            errs.append(ApiFieldError.not_found(f"{mpath}.name", volume))
        if not _string(mount, "mountPath", f"{mpath}.mountPath", errs):
            errs.append(ApiFieldError.required(f"{mpath}.mountPath"))
    _enum(container, "imagePullPolicy", f"{path}.imagePullPolicy", ["Always", "IfNotPresent", "Never"], errs)
    if name and name in names:
        errs.append(ApiFieldError.duplicate(f"{path}.name", name))
    names.add(name)


def _validate_toleration(toleration: dict[str, Any], path: str, errs: Errors) -> None:
    key, operator, value, effect = (_string(toleration, k, f"{path}.{k}", errs)
                                    for k in ("key", "operator", "value", "effect"))
    seconds = get(toleration, "tolerationSeconds", int, f"{path}.tolerationSeconds", errs)
    if key:
        errs.extend(ApiFieldError.invalid(f"{path}.key", key, m) for m in validate_label_key(key))
    if not key and operator != "Exists":
        errs.append(ApiFieldError.invalid(f"{path}.operator", operator, "operator must be Exists when `key` is "
                                          'empty, which means "match all values and all keys"'))
    if seconds is not None and effect != "NoExecute":
        errs.append(ApiFieldError.invalid(f"{path}.effect", effect,
                                          "effect must be 'NoExecute' when `tolerationSeconds` is set"))
    if operator in ("", "Equal"):
        errs.extend(ApiFieldError.invalid(f"{path}.operator", value, m) for m in validate_label_value(value))
    elif operator == "Exists":
        if value:
            # %#v of the internal struct; a set tolerationSeconds prints as a pointer address
            shown = GoValue(f"core.Toleration{{Key:{go_quote(key)}, Operator:{go_quote(operator)}, "
                            f"Value:{go_quote(value)}, Effect:{go_quote(effect)}, TolerationSeconds:(*int64)"
                            f"({'nil' if seconds is None else '0xc000000000'})}}")
            errs.append(ApiFieldError.invalid(f"{path}.operator", shown,
                                              "value must be empty when `operator` is 'Exists'"))
    else:
        errs.append(ApiFieldError.not_supported(f"{path}.operator", operator, ["Equal", "Exists"]))
    if effect:
        validate_taint_effect(effect, True, f"{path}.effect", errs)


def _validate_node_affinity(spec: dict[str, Any], path: str, errs: Errors) -> None:
    node = podspecs.pinned_node(spec.get("affinity"))
    if node is not None:  # a DaemonSet's pin: only its node's name can be invalid (the checks below, in short)
        errs.extend(ApiFieldError.invalid(f"{path}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
                                          "[0].matchFields[0].values[0]", node, m) for m in subdomain_name(node, False))
        return
    affinity = get(spec, "affinity", dict, path.rpartition(".")[0], errs) or {}
    node_affinity = get(affinity, "nodeAffinity", dict, path, errs) or {}
    required_path = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    required = get(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", dict, required_path, errs)
    if required is not None:
        terms = items(required, "nodeSelectorTerms", f"{required_path}.nodeSelectorTerms", errs)
        if not terms:
            errs.append(ApiFieldError.required(f"{required_path}.nodeSelectorTerms",
                                               "must have at least one node selector term"))
        for tpath, term in terms:
            _validate_node_selector_term(_dict(term), tpath, errs)
    preferred_path = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    for ppath, preferred in items(node_affinity, "preferredDuringSchedulingIgnoredDuringExecution",
                                  preferred_path, errs):
        weight = get(preferred, "weight", int, f"{ppath}.weight", errs) or 0
        if not 1 <= weight <= 100:
            errs.append(ApiFieldError.invalid(f"{ppath}.weight", weight, "must be in the range 1-100"))
        term = get(preferred, "preference", dict, f"{ppath}.preference", errs) or {}
        _validate_node_selector_term(term, f"{ppath}.preference", errs)


def _validate_node_selector_term(term: dict[str, Any], path: str, errs: Errors) -> None:
    for epath, requirement in items(term, "matchExpressions", f"{path}.matchExpressions", errs):
        operator = _string(requirement, "operator", f"{epath}.operator", errs)
        values = get(requirement, "values", list, f"{epath}.values", errs) or []
        if operator in ("In", "NotIn") and not values:
            errs.append(ApiFieldError.required(f"{epath}.values", "must be specified when `operator` is 'In' or "
                                                                  "'NotIn'"))
        elif operator in ("Exists", "DoesNotExist") and values:
            errs.append(ApiFieldError.forbidden(f"{epath}.values", "may not be specified when `operator` is "
                                                                   "'Exists' or 'DoesNotExist'"))
        elif operator in ("Gt", "Lt") and len(values) != 1:
            errs.append(ApiFieldError.required(f"{epath}.values", "must be specified single value when "
                                                                  "`operator` is 'Lt' or 'Gt'"))
        elif operator not in _NODE_OPERATORS:
            errs.append(ApiFieldError.invalid(f"{epath}.operator", operator, "not a valid selector operator"))
        key = _string(requirement, "key", f"{epath}.key", errs)
        errs.extend(ApiFieldError.invalid(f"{epath}.key", key, m) for m in validate_label_key(key))
    for fpath, requirement in items(term, "matchFields", f"{path}.matchFields", errs):
        operator = _string(requirement, "operator", f"{fpath}.operator", errs)
        values = get(requirement, "values", list, f"{fpath}.values", errs) or []
        if operator in ("In", "NotIn") and len(values) != 1:
            errs.append(ApiFieldError.required(f"{fpath}.values", "must be only one value when `operator` is 'In' "
                                                                  "or 'NotIn' for node field selector"))
        elif operator not in ("In", "NotIn"):
            errs.append(ApiFieldError.invalid(f"{fpath}.operator", operator, "not a valid selector operator"))
        key = _string(requirement, "key", f"{fpath}.key", errs)
        if key != "metadata.name":
            errs.append(ApiFieldError.invalid(f"{fpath}.key", key, "not a valid field selector key"))
            continue
        for j, value in enumerate(values):
            messages = subdomain_name(value, False) if isinstance(value, str) else ["must be of type string"]
            errs.extend(ApiFieldError.invalid(f"{fpath}.values[{j}]", value, m) for m in messages)


def validate_pod_update(pod: dict[str, Any], old: dict[str, Any], errs: Errors) -> None:
    """ValidatePodUpdate: only images, activeDeadlineSeconds and added tolerations may change."""
    spec, old_spec = pod.get("spec"), old.get("spec")
    if not isinstance(spec, dict) or not isinstance(old_spec, dict):
        return
    for key in ("containers", "initContainers"):
        new_list, old_list = spec.get(key) or [], old_spec.get(key) or []
        if isinstance(new_list, list) and isinstance(old_list, list) and len(new_list) != len(old_list):
            errs.append(ApiFieldError.forbidden(f"spec.{key}", "pod updates may not add or remove containers"))
            return
    deadline, old_deadline = spec.get("activeDeadlineSeconds"), old_spec.get("activeDeadlineSeconds")
    if isinstance(deadline, int) and not 0 <= deadline <= _INT32_MAX:
        errs.append(ApiFieldError.invalid("spec.activeDeadlineSeconds", deadline,
                                          f"must be between 0 and {_INT32_MAX}, inclusive"))
        return
    if isinstance(deadline, int) and isinstance(old_deadline, int) and old_deadline < deadline:
        errs.append(ApiFieldError.invalid("spec.activeDeadlineSeconds", deadline,
                                          "must be less than or equal to previous value"))
        return
    if deadline is None and old_deadline is not None:
        errs.append(ApiFieldError.invalid("spec.activeDeadlineSeconds", None,
                                          "must not update from a positive integer to nil value"))
    new_tolerations = [_semantic(t) for t in _dicts(spec.get("tolerations"))]
    for toleration in _dicts(old_spec.get("tolerations")):
        wanted = {k: v for k, v in _semantic(toleration).items() if k != "tolerationSeconds"}
        if not any({k: v for k, v in t.items() if k != "tolerationSeconds"} == wanted for t in new_tolerations):
            errs.append(ApiFieldError.forbidden("spec.tolerations",
                                                "existing toleration can not be modified except its tolerationSeconds"))
            break
    munged = json.loads(json.dumps(spec))
    for key in ("containers", "initContainers"):
        for container, old_container in zip(_dicts(munged.get(key)), _dicts(old_spec.get(key)), strict=False):
            container["image"] = old_container.get("image")
    for key in ("activeDeadlineSeconds", "tolerations", "schedulingGates"):
        munged[key] = old_spec.get(key)
    grace, old_grace = munged.get("terminationGracePeriodSeconds"), old_spec.get("terminationGracePeriodSeconds")
    if isinstance(old_grace, int) and old_grace < 0 and grace == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    if _semantic(munged) != _semantic(old_spec):
        errs.append(ApiFieldError.forbidden("spec", f"pod updates may not change fields other than "
                                                    f"{_UPDATABLE_POD_FIELDS}\n{_spec_diff(old_spec, munged)}"))


def _semantic(value: Any) -> Any:
    """equality.Semantic's view of JSON: null, "" and empty lists are Go zero values, equal to absent."""
    if isinstance(value, dict):
        return {k: _semantic(v) for k, v in value.items() if v is not None and v != "" and v != []}
    if isinstance(value, list):
        return [_semantic(item) for item in value]
    return value


def _spec_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    """A readable stand-in for the cmp.Diff text upstream appends (its exact layout is not reproduced)."""
    lines = ["  core.PodSpec{"]
    old, new = _semantic(old), _semantic(new)
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            go_name = key[:1].upper() + key[1:]
            lines.append(f"- \t{go_name}: {json.dumps(old.get(key), sort_keys=True)},")
            lines.append(f"+ \t{go_name}: {json.dumps(new.get(key), sort_keys=True)},")
    return "\n".join([*lines, "  }"])


def validate_selector_update(obj: dict[str, Any], old: dict[str, Any], errs: Errors) -> None:
    """apps/v1 forbids changing a DaemonSet's or ReplicaSet's selector."""
    new, previous = _dict(obj.get("spec")).get("selector"), _dict(old.get("spec")).get("selector")
    if _semantic(new) != _semantic(previous):
        immutable(new, previous, "spec.selector", errs, shown=selector_text(new))


# --- apps ----------------------------------------------------------------------------------------


def _template_parts(spec: dict[str, Any], errs: Errors) -> tuple[dict[str, Any], dict[str, Any] | None,
                                                                dict[str, Any]]:
    template = get(spec, "template", dict, "spec.template", errs) or {}
    labels = _dict(template.get("metadata")).get("labels")
    return template, labels if isinstance(labels, dict) else None, _dict(template.get("spec"))


def _template_workload_rules(pod_spec: dict[str, Any], kind: str, errs: Errors) -> None:
    restart = pod_spec.get("restartPolicy")
    if restart != "Always":
        shown = restart if isinstance(restart, str) else ""
        errs.append(ApiFieldError.not_supported("spec.template.spec.restartPolicy", shown, ["Always"]))
    if pod_spec.get("activeDeadlineSeconds") is not None:
        errs.append(ApiFieldError.forbidden("spec.template.spec.activeDeadlineSeconds",
                                            f"activeDeadlineSeconds in {kind} is not Supported"))


def _mismatch(labels: dict[str, Any] | None) -> ApiFieldError:
    return ApiFieldError.invalid("spec.template.metadata.labels", GoValue(go_string_map(labels)),
                                 "`selector` does not match template `labels`")


def validate_daemonset(ds: dict[str, Any], errs: Errors) -> None:
    validate_object_meta(ds, True, subdomain_name, errs)
    spec = get(ds, "spec", dict, "spec", errs) or {}
    selector = spec.get("selector")
    valid = validate_label_selector(selector, "spec.selector", errs)
    template, labels, pod_spec = _template_parts(spec, errs)
    # A missing selector is labels.Nothing(): it matches no template, which is the error upstream shows.
    if valid and not selector_matches(selector, labels or {}):
        errs.append(_mismatch(labels))
    if is_empty_selector(selector):
        errs.append(ApiFieldError.invalid("spec.selector", selector_text(selector),
                                          "empty selector is invalid for daemonset"))
    validate_pod_template(template, "spec.template", errs)
    _template_workload_rules(pod_spec, "DaemonSet", errs)
    nonnegative(spec, "minReadySeconds", "spec.minReadySeconds", errs)
    _validate_update_strategy(spec, errs)
    nonnegative(spec, "revisionHistoryLimit", "spec.revisionHistoryLimit", errs)
    for key in ("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady",
                "observedGeneration", "updatedNumberScheduled", "numberAvailable", "numberUnavailable",
                "collisionCount"):
        nonnegative(ds.get("status"), key, f"status.{key}", errs)


def _validate_update_strategy(spec: dict[str, Any], errs: Errors) -> None:
    path = "spec.updateStrategy"
    strategy = get(spec, "updateStrategy", dict, path, errs) or {}
    kind = strategy.get("type")
    if kind == "OnDelete":
        return
    if kind != "RollingUpdate":
        pointer = "nil" if strategy.get("rollingUpdate") is None else "0xc000000000"
        shown = GoValue(f"apps.DaemonSetUpdateStrategy{{Type:{go_quote(kind if isinstance(kind, str) else '')}, "
                        f"RollingUpdate:(*apps.RollingUpdateDaemonSet)({pointer})}}")
        errs.append(ApiFieldError.not_supported(path, shown, ["RollingUpdate", "OnDelete"]))
        return
    rolling = get(strategy, "rollingUpdate", dict, f"{path}.rollingUpdate", errs)
    if rolling is None:
        errs.append(ApiFieldError.required(f"{path}.rollingUpdate"))
        return
    path += ".rollingUpdate"
    values = {key: rolling.get(key, 0) for key in ("maxUnavailable", "maxSurge")}
    for key, value in values.items():
        _validate_int_or_percent(value, f"{path}.{key}", errs)
    for key, value in values.items():
        if is_percent(value) and int(value[:-1]) > 100:
            errs.append(ApiFieldError.invalid(f"{path}.{key}", GoValue(value), "must not be greater than 100%"))
    has_unavailable, has_surge = (_int_or_percent_value(value) != 0 for value in values.values())
    if has_unavailable and has_surge:
        errs.append(ApiFieldError.invalid(f"{path}.maxSurge", GoValue(str(values["maxSurge"])),
                                          "may not be set when maxUnavailable is non-zero"))
    elif not has_unavailable and not has_surge:
        errs.append(ApiFieldError.required(f"{path}.maxUnavailable", "cannot be 0 when maxSurge is 0"))


def _validate_int_or_percent(value: Any, path: str, errs: Errors) -> None:
    """ValidatePositiveIntOrPercent; an IntOrString prints through its String() method, unquoted."""
    if isinstance(value, str):
        if not is_percent(value):
            message = "a valid percent string must be a numeric string followed by an ending '%'"
            errs.append(ApiFieldError.invalid(path, GoValue(value), regex_error(message, "[0-9]+%", "1%", "93%")))
    elif isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            errs.append(ApiFieldError.invalid(path, value, "must be greater than or equal to 0"))
    else:
        errs.append(ApiFieldError.invalid(path, value, "must be an integer or percentage (e.g '5%')"))


def _int_or_percent_value(value: Any) -> int:
    if is_percent(value):
        return int(value[:-1])
    if isinstance(value, str):
        return parse_int64(value) or 0  # IntValue() of a string is Atoi, 0 when it fails
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def validate_replicaset(rs: dict[str, Any], errs: Errors) -> None:
    validate_object_meta(rs, True, subdomain_name, errs)
    spec = get(rs, "spec", dict, "spec", errs) or {}
    nonnegative(spec, "replicas", "spec.replicas", errs)
    nonnegative(spec, "minReadySeconds", "spec.minReadySeconds", errs)
    selector = spec.get("selector")
    if selector is None:
        errs.append(ApiFieldError.required("spec.selector"))
    valid = validate_label_selector(selector, "spec.selector", errs)
    if is_empty_selector(selector):
        errs.append(ApiFieldError.invalid("spec.selector", selector_text(selector),
                                          "empty selector is invalid for deployment"))
    if not valid:
        # upstream stops here: the template is not validated against a selector it cannot parse
        errs.append(ApiFieldError.invalid("spec.selector", selector_text(selector), "invalid label selector"))
    else:
        template, labels, pod_spec = _template_parts(spec, errs)
        if not is_empty_selector(selector) and not selector_matches(selector, labels or {}):
            errs.append(_mismatch(labels))
        validate_pod_template(template, "spec.template", errs)
        _template_workload_rules(pod_spec, "ReplicaSet", errs)
    for key in ("replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas", "observedGeneration"):
        nonnegative(rs.get("status"), key, f"status.{key}", errs)


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, dict) else {}


def _status_counts(obj: dict[str, Any], keys: tuple[str, ...], errs: Errors) -> dict[str, int]:
    """The status counts (absent: 0, as a Go int32), each checked ValidateNonnegativeField."""
    status = _status(obj)
    for key in keys:
        nonnegative(status, key, f"status.{key}", errs)
    counts = {key: status.get(key) for key in keys}
    return {key: value if isinstance(value, int) and not isinstance(value, bool) else 0
            for key, value in counts.items()}


def validate_replicaset_status_update(rs: dict[str, Any], old: dict[str, Any], errs: Errors) -> None:
    """ValidateReplicaSetStatusUpdate's ValidateReplicaSetStatus (its ObjectMeta part is the caller's)."""
    counts = _status_counts(rs, ("replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas",
                                 "observedGeneration"), errs)
    status = _status(rs)
    if status.get("terminatingReplicas") is not None:
        nonnegative(status, "terminatingReplicas", "status.terminatingReplicas", errs)
    for key in ("fullyLabeledReplicas", "readyReplicas", "availableReplicas"):
        if counts[key] > counts["replicas"]:
            errs.append(ApiFieldError.invalid(f"status.{key}", counts[key], "cannot be greater than status.replicas"))
    if counts["availableReplicas"] > counts["readyReplicas"]:
        errs.append(ApiFieldError.invalid("status.availableReplicas", counts["availableReplicas"],
                                          "cannot be greater than readyReplicas"))


def validate_daemonset_status_update(ds: dict[str, Any], old: dict[str, Any], errs: Errors) -> None:
    """ValidateDaemonSetStatusUpdate's validateDaemonSetStatus, and collisionCount never decremented
    (apivalidation.IsDecremented: dropping a count the stored object has is decrementing it)."""
    _status_counts(ds, ("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady",
                        "observedGeneration", "updatedNumberScheduled", "numberAvailable", "numberUnavailable",
                        "collisionCount"), errs)
    new_count, old_count = _status(ds).get("collisionCount"), _status(old).get("collisionCount")
    if old_count is not None and (new_count is None or (isinstance(new_count, int) and new_count < old_count)):
        errs.append(ApiFieldError.invalid("status.collisionCount", new_count or 0, "cannot be decremented"))


def validate_controller_revision(revision: dict[str, Any], errs: Errors) -> None:
    validate_object_meta(revision, True, subdomain_name, errs)
    if revision.get("data") is None:
        errs.append(ApiFieldError.required("data", "data is mandatory"))
    nonnegative(revision, "revision", "revision", errs)


def validate_controller_revision_update(revision: dict[str, Any], old: dict[str, Any], errs: Errors) -> None:
    data = revision.get("data")
    if data != old.get("data"):
        raw = ", ".join(f"0x{byte:02x}" for byte in json.dumps(data, separators=(",", ":")).encode())
        shown = GoValue(f"runtime.RawExtension{{Raw:[]byte{{{raw}}}, Object:runtime.Object(nil)}}")
        immutable(data, old.get("data"), "data", errs, shown=shown)
