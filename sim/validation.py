"""What kube-apiserver (v1.32) rejects with 422 Invalid, worded exactly as it words it.

``validate(kind, obj, old)`` returns apimachinery ``field.Error``s; the
registry turns them into a Status with ``format_invalid_message`` and
``ApiFieldError.cause``. Messages, field paths and the Go formatting of bad
values (``%q`` strings, ``map[string]string{...}``, ``Stringer`` output)
follow upstream because kubectl prints them verbatim. The errors, metadata,
selectors and the small core kinds live here, pods and the apps group in
``sim.validation_apps``, which builds on this module; ``sim.validating`` picks
a kind's rules from the two.

Objects are plain JSON, so a value of the wrong type is reported as an
invalid value instead of raising (kube-apiserver would fail to decode it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from kube.validation import (
    aggregate_message,
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_label_key,
    validate_label_value,
)

__all__ = [
    "DUPLICATE", "FORBIDDEN", "INVALID", "NOT_FOUND", "NOT_SUPPORTED", "REQUIRED", "TOO_LONG",
    "ApiFieldError", "GoValue", "format_invalid_message", "go_quote", "go_value", "legacy_event", "selector_matches",
    "validate_event", "validate_label_selector", "validate_namespace", "validate_node", "validate_object_meta",
    "validate_owner_references",
]

NOT_FOUND = "FieldValueNotFound"
REQUIRED = "FieldValueRequired"
DUPLICATE = "FieldValueDuplicate"
INVALID = "FieldValueInvalid"
NOT_SUPPORTED = "FieldValueNotSupported"
FORBIDDEN = "FieldValueForbidden"
TOO_LONG = "FieldValueTooLong"
_TYPE_TEXT = {NOT_FOUND: "Not found", REQUIRED: "Required value", DUPLICATE: "Duplicate value",
              INVALID: "Invalid value", NOT_SUPPORTED: "Unsupported value", FORBIDDEN: "Forbidden",
              TOO_LONG: "Too long"}
_NO_VALUE = {REQUIRED, FORBIDDEN, TOO_LONG}
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
_GO_ESCAPES = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
               "\t": "\\t", "\v": "\\v"}


@dataclass(frozen=True)
class GoValue:
    """A bad value already rendered as Go prints it (a ``String()`` method, or ``%#v`` of a struct)."""

    text: str


def go_quote(text: str) -> str:
    """strconv.Quote: printable runes stay, the rest become Go escapes."""
    out = []
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(f"\\u{ord(char):04x}" if ord(char) < 0x10000 else f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


def go_value(value: Any) -> str:
    """How field.Error prints a bad value decoded from JSON."""
    if isinstance(value, GoValue):
        return value.text
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return go_string_map(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[]string{" + ", ".join(go_quote(v) for v in value) + "}"
    return json.dumps(value, separators=(",", ":"), default=str)


def go_string_map(labels: dict[str, Any] | None) -> str:
    """``%#v`` of a map[string]string: sorted keys, and ``(nil)`` for an absent map."""
    if labels is None:
        return "map[string]string(nil)"
    pairs = (f"{go_quote(k)}:{go_quote(str(v))}" for k, v in sorted(labels.items()))
    return "map[string]string{" + ", ".join(pairs) + "}"


@dataclass(frozen=True)
class ApiFieldError:
    """apimachinery field.Error as kube-apiserver answers it; ``type`` is the ErrorType (``FieldValueInvalid``),
    also the cause reason.

    Not ``kube.validation.FieldError`` (the controllers' and selectors' errors): this one prints bad values exactly
    as Go does for kubectl (``strconv.Quote``, ``%#v`` of maps, :class:`GoValue`), has the sim's extra kinds
    (duplicate, not found, too long) and gives the Status's causes. The two print control characters, maps and
    whole floats differently, so the sim keeps its own."""

    field: str
    type: str
    detail: str = ""
    value: Any = None

    @classmethod
    def required(cls, field: str, detail: str = "") -> ApiFieldError:
        return cls(field, REQUIRED, detail)

    @classmethod
    def invalid(cls, field: str, value: Any, detail: str) -> ApiFieldError:
        return cls(field, INVALID, detail, value)

    @classmethod
    def forbidden(cls, field: str, detail: str) -> ApiFieldError:
        return cls(field, FORBIDDEN, detail)

    @classmethod
    def duplicate(cls, field: str, value: Any) -> ApiFieldError:
        return cls(field, DUPLICATE, "", value)

    @classmethod
    def not_found(cls, field: str, value: Any) -> ApiFieldError:
        return cls(field, NOT_FOUND, "", value)

    @classmethod
    def not_supported(cls, field: str, value: Any, valid: Sequence[str]) -> ApiFieldError:
        detail = "supported values: " + ", ".join(go_quote(v) for v in valid) if valid else ""
        return cls(field, NOT_SUPPORTED, detail, value)

    @classmethod
    def too_long(cls, field: str, max_length: int) -> ApiFieldError:
        unit = "byte" if max_length == 1 else "bytes"
        return cls(field, TOO_LONG, f"may not be more than {max_length} {unit}")

    def body(self) -> str:
        """ErrorBody(): the message without the field path, as a StatusCause carries it."""
        text = _TYPE_TEXT[self.type]
        if self.type not in _NO_VALUE:
            text += ": " + go_value(self.value)
        return f"{text}: {self.detail}" if self.detail else text

    def error(self) -> str:
        return f"{self.field}: {self.body()}"

    __str__ = error

    def cause(self) -> dict[str, str]:
        return {"reason": self.type, "message": self.body(), "field": self.field}


def format_invalid_message(qualified_kind: str, name: str, errors: Sequence[ApiFieldError]) -> str:
    """errors.NewInvalid's message: ``DaemonSet.apps "x" is invalid: [a, b]``, duplicates dropped."""
    head = f"{qualified_kind} {go_quote(name)} is invalid"
    return f"{head}: {aggregate_message(errors)}" if errors else head


# --- typed access to JSON ------------------------------------------------------------------------

Errors = list[ApiFieldError]
_JSON_TYPES: dict[type, str] = {dict: "object", list: "array", str: "string", int: "integer", bool: "boolean"}


def get(obj: Any, key: str, want: type, path: str, errs: Errors) -> Any:
    """``obj[key]`` if it has JSON type ``want``; None (and an error when present) otherwise."""
    value = obj.get(key) if isinstance(obj, dict) else None
    if value is None or (isinstance(value, want) and not (want is int and isinstance(value, bool))):
        return value
    errs.append(ApiFieldError.invalid(path, value, f"must be of type {_JSON_TYPES[want]}"))
    return None


def items(obj: Any, key: str, path: str, errs: Errors) -> list[tuple[str, Any]]:
    """The entries of a list field with their paths (``spec.containers[0]``)."""
    return [(f"{path}[{i}]", item) for i, item in enumerate(get(obj, key, list, path, errs) or [])]


def string_map(obj: Any, key: str, path: str, errs: Errors) -> dict[str, str] | None:
    mapping = get(obj, key, dict, path, errs)
    if mapping is None:
        return None
    for k, v in mapping.items():
        if not isinstance(v, str):
            errs.append(ApiFieldError.invalid(f"{path}[{k}]", v, "must be of type string"))
    return {k: v for k, v in mapping.items() if isinstance(v, str)}


def nonnegative(obj: Any, key: str, path: str, errs: Errors) -> None:
    value = get(obj, key, int, path, errs)
    if value is not None and value < 0:
        errs.append(ApiFieldError.invalid(path, value, "must be greater than or equal to 0"))


def immutable(new: Any, old: Any, path: str, errs: Errors, shown: Any = None) -> None:
    if new != old:
        errs.append(ApiFieldError.invalid(path, new if shown is None else shown, "field is immutable"))


# --- metadata ------------------------------------------------------------------------------------

NameFn = Callable[[str, bool], list[str]]


def _mask_trailing_dash(name: str) -> str:
    # upstream's maskTrailingDash, which really does drop a character along with the dash
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name


def subdomain_name(name: str, prefix: bool) -> list[str]:
    return validate_dns1123_subdomain(_mask_trailing_dash(name) if prefix else name)


def label_name(name: str, prefix: bool) -> list[str]:
    return validate_dns1123_label(_mask_trailing_dash(name) if prefix else name)


def path_segment_name(name: str, prefix: bool) -> list[str]:
    if not prefix and name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{bad}'" for bad in ("/", "%") if bad in name]


# Label maps and owner reference lists found valid lately. A controller's objects carry the same ones, one object
# after another, and checking them again was a third of a pod's metadata validation (issue 25). Only valid ones are
# kept (an invalid one is checked every time, so no error is shared), and the sets are emptied when full: a bound,
# not a policy. An owner reference list is keyed by its JSON (bodies are JSON: its text tells its values' types).
_VALID_KEPT = 1024
_valid_label_maps: set[tuple[tuple[str, str], ...]] = set()
_valid_owner_references: set[bytes] = set()
_encode = msgspec.json.encode


def _remember_valid(valid: set[Any], key: Any) -> None:
    if len(valid) >= _VALID_KEPT:
        valid.clear()
    valid.add(key)


def validate_labels(labels: dict[str, str] | None, path: str, errs: Errors) -> None:
    if not labels:
        return
    known = tuple(labels.items())
    if known in _valid_label_maps:
        return
    before = len(errs)
    _validate_labels(labels, path, errs)
    if len(errs) == before:
        _remember_valid(_valid_label_maps, known)


def _validate_labels(labels: dict[str, str], path: str, errs: Errors) -> None:
    for key in sorted(labels):
        errs.extend(ApiFieldError.invalid(path, key, msg) for msg in validate_label_key(key))
        errs.extend(ApiFieldError.invalid(path, labels[key], msg) for msg in validate_label_value(labels[key]))


def validate_annotations(annotations: dict[str, str] | None, path: str, errs: Errors) -> None:
    annotations = annotations or {}
    for key in sorted(annotations):
        errs.extend(ApiFieldError.invalid(path, key, msg) for msg in validate_label_key(key.lower()))
    if sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items()) > TOTAL_ANNOTATION_SIZE_LIMIT:
        errs.append(ApiFieldError.too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT))


def validate_finalizer(name: Any, path: str, errs: Errors) -> None:
    if not isinstance(name, str):
        errs.append(ApiFieldError.invalid(path, name, "must be of type string"))
        return
    errs.extend(ApiFieldError.invalid(path, name, msg) for msg in validate_label_key(name))
    if "/" not in name and name not in ("kubernetes", "orphan", "foregroundDeletion"):
        errs.append(ApiFieldError.invalid(path, name, "name is neither a standard finalizer name nor is it "
                                                      "fully qualified"))


def validate_object_meta(obj: dict[str, Any], namespaced: bool, name_fn: NameFn, errs: Errors) -> None:
    """ValidateObjectMeta (core's, with the finalizer rule), under ``metadata``."""
    meta = get(obj, "metadata", dict, "metadata", errs) or {}
    generate = get(meta, "generateName", str, "metadata.generateName", errs)
    if generate:
        errs.extend(ApiFieldError.invalid("metadata.generateName", generate, m) for m in name_fn(generate, True))
    name = get(meta, "name", str, "metadata.name", errs)
    if not name:
        errs.append(ApiFieldError.required("metadata.name", "name or generateName is required"))
    else:
        errs.extend(ApiFieldError.invalid("metadata.name", name, msg) for msg in name_fn(name, False))
    namespace = get(meta, "namespace", str, "metadata.namespace", errs)
    if namespaced and not namespace:
        errs.append(ApiFieldError.required("metadata.namespace"))
    elif namespaced:
        errs.extend(ApiFieldError.invalid("metadata.namespace", namespace, m)
                    for m in validate_dns1123_label(namespace))
    elif namespace:
        errs.append(ApiFieldError.forbidden("metadata.namespace", "not allowed on this type"))
    nonnegative(meta, "generation", "metadata.generation", errs)
    validate_labels(string_map(meta, "labels", "metadata.labels", errs), "metadata.labels", errs)
    annotations = string_map(meta, "annotations", "metadata.annotations", errs)
    validate_annotations(annotations, "metadata.annotations", errs)
    validate_owner_references(meta, "metadata.ownerReferences", errs)
    finalizers = get(meta, "finalizers", list, "metadata.finalizers", errs) or []
    for finalizer in finalizers:
        validate_finalizer(finalizer, "metadata.finalizers", errs)
    if "orphan" in finalizers and "foregroundDeletion" in finalizers:
        errs.append(ApiFieldError.invalid("metadata.finalizers", finalizers,
                                          "finalizer orphan and foregroundDeletion cannot be both set"))


# BannedOwners: the GroupVersionKinds that may not be named as an owner.
BANNED_OWNERS = {("", "v1", "Event")}


def parse_group_version(text: str) -> tuple[str, str] | None:
    """schema.ParseGroupVersion: (group, version), or None for a string with more than one slash."""
    if text in ("", "/"):
        return "", ""
    if text.count("/") > 1:
        return None
    group, _, version = text.rpartition("/")
    return group, version


def _go_bool_pointer(value: Any) -> str:
    # %#v of a *bool field prints the pointer, not the bool; the address is a stand-in
    return "(*bool)(nil)" if value is None else "(*bool)(0xc000000000)"


def go_owner_reference(ref: dict[str, Any]) -> str:
    """``%#v`` of a metav1.OwnerReference (its String() has a pointer receiver, so field.Error cannot use it)."""
    strings = ", ".join(f"{field}:{go_quote(str(ref.get(key) or ''))}" for field, key in (
        ("APIVersion", "apiVersion"), ("Kind", "kind"), ("Name", "name"), ("UID", "uid")))
    return (f"v1.OwnerReference{{{strings}, Controller:{_go_bool_pointer(ref.get('controller'))}, "
            f"BlockOwnerDeletion:{_go_bool_pointer(ref.get('blockOwnerDeletion'))}}}")


def validate_owner_references(meta: dict[str, Any], path: str, errs: Errors) -> None:
    """ValidateOwnerReferences (apimachinery v0.32, pkg/api/validation/objectmeta.go).

    Each reference's errors carry the list's path and a child (``metadata.ownerReferences.uid``),
    not an index: v1.32 passes the list's path to validateOwnerReference. It checks the references
    alone; nothing compares a reference's uid with the object's own.
    """
    listed = meta.get("ownerReferences")
    if listed is None or listed == []:
        return  # absent, null or empty: nothing to check
    try:
        known = _encode(listed) if type(listed) is list else None
    except (TypeError, msgspec.EncodeError):  # not JSON as it stands (not from a request): checked as it is
        known = None
    if known is not None and known in _valid_owner_references:
        return
    before = len(errs)
    _validate_owner_references(meta, path, errs)
    if known is not None and len(errs) == before:
        _remember_valid(_valid_owner_references, known)


def _validate_owner_references(meta: dict[str, Any], path: str, errs: Errors) -> None:
    refs: list[dict[str, Any]] = []
    for item_path, ref in items(meta, "ownerReferences", path, errs):
        if isinstance(ref, dict):
            refs.append(ref)
        else:
            errs.append(ApiFieldError.invalid(item_path, ref, "must be of type object"))
    first_controller = ""
    for ref in refs:
        api_version, kind, name, uid = (get(ref, key, str, f"{path}.{key}", errs) or ""
                                        for key in ("apiVersion", "kind", "name", "uid"))
        group, version = parse_group_version(api_version) or ("", "")  # FromAPIVersionAndKind
        if not version:
            errs.append(ApiFieldError.invalid(f"{path}.apiVersion", api_version, "version must not be empty"))
        if not kind:
            errs.append(ApiFieldError.invalid(f"{path}.kind", kind, "kind must not be empty"))
        if not name:
            errs.append(ApiFieldError.invalid(f"{path}.name", name, "name must not be empty"))
        if not uid:
            errs.append(ApiFieldError.invalid(f"{path}.uid", uid, "uid must not be empty"))
        if (group, version, kind) in BANNED_OWNERS:  # GroupVersionKind.String(): "/v1, Kind=Event"
            errs.append(ApiFieldError.invalid(path, GoValue(go_owner_reference(ref)),
                                              f"{group}/{version}, Kind={kind} is disallowed from being an owner"))
        if get(ref, "controller", bool, f"{path}.controller", errs):
            current = f"{kind}/{name}"
            if not first_controller:
                first_controller = current
                continue
            shown = GoValue("[]v1.OwnerReference{" + ", ".join(go_owner_reference(r) for r in refs) + "}")
            errs.append(ApiFieldError.invalid(
                path, shown, f'Only one reference can have Controller set to true. Found "true" in references '
                             f"for {first_controller} and {current}"))


def validate_object_meta_update(obj: dict[str, Any], old: dict[str, Any], errs: Errors) -> None:
    """ValidateObjectMetaUpdate's immutable fields (the registry restores the system-owned ones first)."""
    meta, old_meta = obj.get("metadata") or {}, old.get("metadata") or {}
    if isinstance(meta, dict) and isinstance(old_meta, dict):
        for key in ("name", "namespace", "uid"):
            immutable(meta.get(key, ""), old_meta.get(key, ""), f"metadata.{key}", errs)


# --- label selectors (metav1) ---------------------------------------------------------------------


def validate_label_selector(selector: Any, path: str, errs: Errors) -> bool:
    """ValidateLabelSelector; True when metav1.LabelSelectorAsSelector would accept the selector too."""
    before = len(errs)
    if selector is None:
        return True
    if not isinstance(selector, dict):
        errs.append(ApiFieldError.invalid(path, selector, "must be of type object"))
        return False
    labels = string_map(selector, "matchLabels", f"{path}.matchLabels", errs)
    validate_labels(labels, f"{path}.matchLabels", errs)
    for epath, expression in items(selector, "matchExpressions", f"{path}.matchExpressions", errs):
        operator = get(expression, "operator", str, f"{epath}.operator", errs) or ""
        values = get(expression, "values", list, f"{epath}.values", errs) or []
        if operator in ("In", "NotIn"):
            if not values:
                errs.append(ApiFieldError.required(f"{epath}.values",
                                                   "must be specified when `operator` is 'In' or 'NotIn'"))
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                errs.append(ApiFieldError.forbidden(f"{epath}.values", "may not be specified when `operator` is "
                                                                       "'Exists' or 'DoesNotExist'"))
        else:
            errs.append(ApiFieldError.invalid(f"{epath}.operator", operator, "not a valid selector operator"))
        key = get(expression, "key", str, f"{epath}.key", errs) or ""
        errs.extend(ApiFieldError.invalid(f"{epath}.key", key, m) for m in validate_label_key(key))
        for j, value in enumerate(values):
            messages = validate_label_value(value) if isinstance(value, str) else ["must be of type string"]
            errs.extend(ApiFieldError.invalid(f"{epath}.values[{j}]", value, m) for m in messages)
    return len(errs) == before


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, Any]) -> bool:
    """A valid selector against a label set; None is labels.Nothing(), ``{}`` labels.Everything()."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if (operator == "In" and not (present and labels[key] in values)) or \
                (operator == "NotIn" and present and labels[key] in values) or \
                (operator == "Exists" and not present) or (operator == "DoesNotExist" and present):
            return False
    return True


def selector_text(selector: Any) -> Any:
    """The generated String() of *metav1.LabelSelector, which field.Error prints for it."""
    if not isinstance(selector, dict):
        return selector
    labels = selector.get("matchLabels") if isinstance(selector.get("matchLabels"), dict) else {}
    expressions = selector.get("matchExpressions")
    expressions = [e for e in expressions if isinstance(e, dict)] if isinstance(expressions, list) else []
    requirements = ""
    for e in expressions:
        values = e.get("values") if isinstance(e.get("values"), list) else []
        requirements += (f"LabelSelectorRequirement{{Key:{e.get('key', '')},Operator:{e.get('operator', '')},"
                         f"Values:[{' '.join(str(v) for v in values)}],}},")
    pairs = "".join(f"{k}: {v}," for k, v in sorted(labels.items()))
    return GoValue(f"&LabelSelector{{MatchLabels:map[string]string{{{pairs}}},"
                   f"MatchExpressions:[]LabelSelectorRequirement{{{requirements}}},}}")


def is_empty_selector(selector: Any) -> bool:
    return isinstance(selector, dict) and not selector.get("matchLabels") and not selector.get("matchExpressions")


# --- the small core kinds -------------------------------------------------------------------------


def validate_namespace(ns: dict[str, Any], errs: Errors) -> None:
    validate_object_meta(ns, False, label_name, errs)
    spec = get(ns, "spec", dict, "spec", errs) or {}
    for finalizer in get(spec, "finalizers", list, "spec.finalizers", errs) or []:
        validate_finalizer(finalizer, "spec.finalizers", errs)


def validate_node(node: dict[str, Any], errs: Errors) -> None:
    validate_object_meta(node, False, subdomain_name, errs)
    spec = get(node, "spec", dict, "spec", errs) or {}
    seen: set[tuple[Any, Any]] = set()
    for path, taint in items(spec, "taints", "spec.taints", errs):
        taint = taint if isinstance(taint, dict) else {}
        key, value, effect = (get(taint, k, str, f"{path}.{k}", errs) or "" for k in ("key", "value", "effect"))
        errs.extend(ApiFieldError.invalid(f"{path}.key", key, msg) for msg in validate_label_key(key))
        if messages := validate_label_value(value):
            errs.append(ApiFieldError.invalid(f"{path}.value", value, ";".join(messages)))
        validate_taint_effect(effect, False, f"{path}.effect", errs)
        if (key, effect) in seen:
            added = "nil" if taint.get("timeAdded") is None else "0xc000000000"  # %#v prints the pointer
            shown = GoValue(f"core.Taint{{Key:{go_quote(key)}, Value:{go_quote(value)}, Effect:{go_quote(effect)}, "
                            f"TimeAdded:(*v1.Time)({added})}}")
            errs.append(ApiFieldError(path, DUPLICATE, "taints must be unique by key and effect pair", shown))
        seen.add((key, effect))


def validate_taint_effect(effect: str, allow_empty: bool, path: str, errs: Errors) -> None:
    if not effect and not allow_empty:
        errs.append(ApiFieldError.required(path))
    elif effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        errs.append(ApiFieldError.not_supported(path, effect, ["NoSchedule", "PreferNoSchedule", "NoExecute"]))


_NAMESPACED_KINDS = {"Pod", "ReplicaSet", "DaemonSet", "Deployment", "StatefulSet", "Job", "Service",
                     "ConfigMap", "Secret", "Event", "ControllerRevision", "PersistentVolumeClaim"}
_CLUSTER_KINDS = {"Node", "Namespace", "PersistentVolume"}


def validate_event(event: dict[str, Any], errs: Errors) -> None:
    """Core/v1 Events get only the legacy checks, then the generic metadata rules."""
    legacy_event(event, errs)
    if not errs:
        validate_object_meta(event, True, path_segment_name, errs)


def legacy_event(event: dict[str, Any], errs: Errors) -> None:
    """legacyValidateEvent, all ValidateEventCreate and ValidateEventUpdate check for core/v1."""
    meta = event.get("metadata") if isinstance(event.get("metadata"), dict) else {}
    namespace = meta.get("namespace") or ""
    involved = get(event, "involvedObject", dict, "involvedObject", errs) or {}
    inv_ns, inv_kind = (get(involved, k, str, f"involvedObject.{k}", errs) or "" for k in ("namespace", "kind"))
    if event.get("eventTime") is None:
        if (inv_ns and namespace != inv_ns) or (not inv_ns and namespace not in ("", "default")):
            errs.append(ApiFieldError.invalid("involvedObject.namespace", inv_ns, "does not match event.namespace"))
    else:
        if not inv_ns and namespace not in ("default", "kube-system"):
            errs.append(ApiFieldError.invalid("involvedObject.namespace", inv_ns, "does not match event.namespace"))
        for key in ("reportingComponent", "reportingInstance", "action"):
            if not event.get(key):
                errs.append(ApiFieldError.required(key))
    if inv_kind in _NAMESPACED_KINDS and not inv_ns:
        errs.append(ApiFieldError.required("involvedObject.namespace", f"required for kind {inv_kind}"))
    elif inv_kind in _CLUSTER_KINDS and inv_ns:
        errs.append(ApiFieldError.invalid("involvedObject.namespace", inv_ns, f"not allowed for kind {inv_kind}"))
    if isinstance(namespace, str):
        errs.extend(ApiFieldError.invalid("namespace", namespace, m) for m in validate_dns1123_subdomain(namespace))
