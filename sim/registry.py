"""Create, update, patch and delete with kube-apiserver's semantics, independent of HTTP.

This is the simulated counterpart of apiserver's generic registry and the per-kind strategies:
system metadata, defaults, validation, optimistic concurrency, the status subresource split,
generation bumps, graceful pod deletion, finalizers and deletion propagation.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from kube import names, times
from kube.times import Clock, utcnow
from sim import defaulting, patching, podspecs, schema, validating
from sim import resources as R
from sim import status as errors
from sim.resources import ApiResource
from sim.store import ADDED, MODIFIED, Entry, ObjectStore

TEMPLATE_GENERATION: Final = "deprecated.daemonset.template.generation"


def _template_generation(obj: dict[str, Any]) -> int:
    """spec.templateGeneration of the internal DaemonSet, which apps/v1 carries in this annotation."""
    try:
        return int(((obj.get("metadata") or {}).get("annotations") or {}).get(TEMPLATE_GENERATION, 0))
    except ValueError:
        return 0


def _set_template_generation(obj: dict[str, Any], value: int) -> None:
    """As the daemonset strategy (1 on create, +1 when the template changes) and the v1 conversion do."""
    obj["metadata"].setdefault("annotations", {})[TEMPLATE_GENERATION] = str(value)


@dataclass
class Decoding:
    """A request's fieldValidation mode (Strict, Warn or Ignore) and the warnings it collected."""

    mode: str = "Warn"
    warnings: list[str] = field(default_factory=list)
    # The body was decoded from JSON, so its values are JSON's own (no tuple, set, date or bytes): sim.podspecs may
    # answer for a pod's spec by its JSON.
    from_json: bool = False


_STATUS_KINDS = {R.PODS, R.NODES, R.NAMESPACES, R.DAEMONSETS, R.REPLICASETS}
_GENERATION_KINDS = {R.DAEMONSETS, R.REPLICASETS}
_EMPTY_STATUS: dict[ApiResource, dict[str, Any]] = {
    R.DAEMONSETS: {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                   "numberReady": 0},
    R.REPLICASETS: {"replicas": 0},
}
_STORAGE_PREFIX = {R.NODES: "minions"}  # etcd keys: /registry/<resource>, but nodes kept their old name
ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"

PATCH_MERGE = "application/merge-patch+json"
PATCH_JSON = "application/json-patch+json"
PATCH_STRATEGIC = "application/strategic-merge-patch+json"
PATCH_APPLY = "application/apply-patch+yaml"


def format_time(t: datetime) -> str:
    # kube.times keeps the last UTC second's text (a busy sim stamps a pod's creation, binding, start and deletion
    # within a few seconds); another zone, or a naive datetime (local time), as before
    return times.format_time(t) if t.tzinfo is UTC else t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Registry:
    def __init__(self, store: ObjectStore, clock: Clock = utcnow, seed: int | None = None):
        self.store = store
        self.clock = clock
        self._rng = random.Random(seed)

    # --- helpers --------------------------------------------------------------------------------
    def now(self) -> str:
        return format_time(self.clock())

    def new_uid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def get(self, resource: ApiResource, namespace: str, name: str) -> Entry:
        entry = self.store.get(resource, namespace, name)
        if entry is None:
            raise errors.not_found(resource, name)
        return entry

    def _check_namespace(self, resource: ApiResource, namespace: str, name: str) -> None:
        if not resource.namespaced:
            return
        ns = self.store.get(R.NAMESPACES, "", namespace)
        if ns is None:
            raise errors.namespace_not_found(namespace)
        if ns.obj["metadata"].get("deletionTimestamp"):
            raise errors.namespace_terminating(resource, name, namespace)

    def _validate(self, resource: ApiResource, obj: dict[str, Any], old: dict[str, Any] | None,
                  pod_spec_json: bytes | None = None) -> None:
        problems = validating.validate(resource.kind, obj, old, pod_spec_json)
        if problems:
            name = obj.get("metadata", {}).get("name") or obj.get("metadata", {}).get("generateName", "")
            raise errors.invalid(resource, name, problems)

    @staticmethod
    def _decode(resource: ApiResource, obj: dict[str, Any], decoding: Decoding | None) -> None:
        """What decoding into Go structs does: unknown fields and empty omitempty fields vanish."""
        unknown = schema.prune(resource.kind, obj)
        if not unknown or decoding is None:
            return
        messages = [f'unknown field "{path}"' for path in unknown]
        if decoding.mode == "Strict":
            raise errors.bad_request(f'{resource.kind} in version "{resource.version}" cannot be handled as a '
                                     f"{resource.kind}: strict decoding error: " + ", ".join(messages))
        if decoding.mode == "Warn":
            decoding.warnings.extend(messages)

    # --- create ---------------------------------------------------------------------------------
    def create(self, resource: ApiResource, namespace: str, obj: dict[str, Any],
               decoding: Decoding | None = None, *, validate: bool = True, uid: str | None = None) -> Entry:
        """A create as kube-apiserver's registry does it. ``validate=False`` skips only the kind's
        validation (sim.unvalidated: an object written before validation tightened); ``uid`` is the sim's own
        choice of uid for an object it seeds (the seeded generator is drawn from all the same)."""
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        _check_type(resource, obj)
        from_json = decoding is not None and decoding.from_json
        # the JSON of the prepared spec without its affinity, for the validation's memory of pod specs
        spec_json = podspecs.prepare(obj.get("spec")) if resource is R.PODS and from_json else None
        if spec_json is not None:
            # the rest of the spec is pruned already: the prune walks only the affinity, the pod's own field, at
            # the spec's place (so its unknown fields are reported in the same order), unless it is a DaemonSet's
            # pin, which it would leave as it is
            spec = obj["spec"]
            walked = "affinity" in spec and podspecs.pinned_node(spec["affinity"]) is None
            obj["spec"] = {"affinity": spec["affinity"]} if walked else {}
            self._decode(resource, obj, decoding)
            obj["spec"] = spec
        else:
            self._decode(resource, obj, decoding)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if resource.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request("the namespace of the provided object does not match "
                                         "the namespace sent on the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        if spec_json is not None:
            defaulting.default_pod_status(obj)  # the spec is defaulted already
        else:
            obj = defaulting.default_object(resource.kind, obj)
        meta = obj["metadata"]
        self._prepare_for_create(resource, obj)
        generate = meta.get("generateName")
        if not meta.get("name") and generate:
            meta["name"] = self._generated_name(resource, namespace, generate)
        if validate:
            self._validate(resource, obj, None, spec_json)
        elif not meta.get("name"):
            raise errors.ApiError(422, "Invalid", f"{resource.qualified_kind} is invalid: metadata.name: "
                                                  "Required value: name or generateName is required")
        name = meta["name"]
        self._check_namespace(resource, namespace, name)
        if self.store.get(resource, namespace if resource.namespaced else "", name) is not None:
            raise errors.already_exists(resource, name)
        generated = self.new_uid()
        meta["uid"] = uid or generated
        meta["creationTimestamp"] = self.now()
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "managedFields"):
            meta.pop(key, None)
        return self.store.put(resource, _ordered(obj), ADDED)

    def name_for_create(self, resource: ApiResource, namespace: str, obj: Any) -> str:
        """The name a create of ``obj`` would get: its own, or one made from its generateName.

        What admission sees: validating admission runs after the registry generated the name.
        """
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            return ""
        name, prefix = meta.get("name"), meta.get("generateName")
        if isinstance(name, str) and name:
            return name
        if isinstance(prefix, str) and prefix:
            return self._generated_name(resource, namespace, prefix)
        return ""

    def _generated_name(self, resource: ApiResource, namespace: str, prefix: str) -> str:
        prefix = prefix[:names.MAX_GENERATED_NAME_LENGTH]
        ns = namespace if resource.namespaced else ""
        for _ in range(names.NAME_ATTEMPTS):
            name = prefix + "".join(self._rng.choice(names.ALPHABET) for _ in range(names.RANDOM_LENGTH))
            if self.store.get(resource, ns, name) is None:
                return name
        return name  # a genuine collision: create answers AlreadyExists, as kube-apiserver would

    def _prepare_for_create(self, resource: ApiResource, obj: dict[str, Any]) -> None:
        if resource in _GENERATION_KINDS:
            obj["metadata"]["generation"] = 1
            obj["status"] = dict(_EMPTY_STATUS[resource])
            if resource is R.DAEMONSETS:
                _set_template_generation(obj, max(1, _template_generation(obj)))
        elif resource is R.PODS:
            # the pod strategy keeps only what the defaulter computed (phase, qosClass)
            status = obj.get("status") or {}
            obj["status"] = {k: status[k] for k in ("phase", "qosClass") if k in status}
            obj["status"].setdefault("phase", "Pending")
        elif resource is R.NAMESPACES:
            obj["status"] = {"phase": "Active"}

    # --- update ---------------------------------------------------------------------------------
    def update(self, resource: ApiResource, namespace: str, name: str, obj: dict[str, Any],
               subresource: str | None = None, decoding: Decoding | None = None, *, prune: bool = True) -> Entry:
        """A PUT as kube-apiserver's registry does it. ``prune=False`` is for a body known to hold nothing that
        decoding would drop (the sim's kubelet's status: known fields, no empty list), which is not walked again."""
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise errors.bad_request("the body of the request must be an object with metadata")
        _check_type(resource, obj)
        if prune:
            self._decode(resource, obj, decoding)
        meta = obj["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name "
                                     f"on the URL ({name})")
        if resource.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request("the namespace of the provided object does not match the "
                                     "namespace sent on the request")
        current = self.get(resource, namespace, name)
        rv = meta.get("resourceVersion")
        if rv and rv != str(current.rv):
            raise errors.stale_object(resource, name)
        uid = meta.get("uid")
        if uid and uid != current.obj["metadata"].get("uid"):  # a PUT's uid is a storage precondition
            raise _precondition_failed(resource, namespace, name, "UID", uid, current.obj["metadata"]["uid"])
        return self._write_update(resource, current, obj, subresource)

    def _write_update(self, resource: ApiResource, current: Entry, obj: dict[str, Any],
                      subresource: str | None) -> Entry:
        old = current.obj
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        if subresource != "status":
            obj = defaulting.default_object(resource.kind, obj)
        meta = obj["metadata"]
        old_meta = old["metadata"]
        body_metadata = subresource == "status" and resource in _GENERATION_KINDS
        if subresource == "status" and not body_metadata:
            status = obj.get("status")
            obj = current.shallow()  # only the metadata changes below, and the status is replaced
            if status is not None:
                obj["status"] = status
            meta = obj["metadata"]
        else:
            if body_metadata:
                # rsStatusStrategy / daemonSetStatusStrategy PrepareForUpdate: the stored spec; the metadata is
                # the body's (neither calls metav1.ResetObjectMetaForStatus), restored below as BeforeUpdate does
                if "spec" in old:
                    obj["spec"] = current.clone()["spec"]
                else:
                    obj.pop("spec", None)
                # the status is the body's, all of it; the counts Go never omits are there even when zero
                status = obj.get("status")
                obj["status"] = {**_EMPTY_STATUS[resource], **(status if isinstance(status, dict) else {})}
            elif resource in _STATUS_KINDS and "status" in old:
                obj["status"] = old["status"]
            elif resource in _STATUS_KINDS:
                obj.pop("status", None)
            if not meta.get("uid"):  # rest.BeforeUpdate: the existing uid when none is given
                meta["uid"] = old_meta["uid"]
            for key in ("creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
            if resource.namespaced:
                meta["namespace"] = old_meta["namespace"]
            meta["name"] = old_meta["name"]
            if resource in _GENERATION_KINDS and obj.get("spec") != old.get("spec"):
                meta["generation"] = old_meta.get("generation", 0) + 1
            if resource is R.DAEMONSETS:
                changed = (obj.get("spec") or {}).get("template") != (old.get("spec") or {}).get("template")
                # a status write keeps it: the annotation is the internal spec.templateGeneration, the stored one
                _set_template_generation(obj, _template_generation(old) + 1 if changed else _template_generation(old))
        meta.pop("selfLink", None)
        meta.pop("managedFields", None)
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
            if added:
                raise errors.ApiError(
                    422, "Invalid",
                    f'{resource.qualified_kind} "{old_meta["name"]}" is invalid: metadata.finalizers: Forbidden: '
                    f"no new finalizers can be added if the object is being deleted, found new finalizers "
                    "[]string{" + ", ".join(f'"{f}"' for f in sorted(added)) + "}",
                    {"name": old_meta["name"], "kind": resource.kind,
                     "causes": [{"reason": "FieldValueForbidden", "field": "metadata.finalizers",
                                 "message": "Forbidden: no new finalizers can be added if the object is being "
                                            "deleted"}]})
        if body_metadata:
            problems = validating.validate_status_update(resource.kind, obj, old)
            if problems:
                raise errors.invalid(resource, old_meta["name"], problems)
        elif subresource != "status":  # a status write cannot change what the spec validation checks
            self._validate(resource, obj, old)
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        obj = _ordered(obj)
        if obj == old:
            return current  # kube-apiserver skips writes that change nothing: no new resourceVersion
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and \
                not (resource is R.PODS and meta.get("deletionGracePeriodSeconds")):
            removed = self.store.remove(resource, meta.get("namespace", ""), meta["name"])
            assert removed is not None
            return removed
        return self.store.put(resource, obj, MODIFIED, old)

    # --- patch ----------------------------------------------------------------------------------
    def patch(self, resource: ApiResource, namespace: str, name: str, patch_type: str, body: Any,
              subresource: str | None = None, decoding: Decoding | None = None) -> Entry:
        current = self.get(resource, namespace, name)
        target = current.clone()
        try:
            if patch_type == PATCH_MERGE:
                patched = patching.apply_merge_patch(target, body)
            elif patch_type == PATCH_JSON:
                if not isinstance(body, list):
                    raise errors.bad_request("json patch must be a JSON array of operations")
                patched = patching.apply_json_patch(target, body)
            elif patch_type == PATCH_STRATEGIC:
                if not isinstance(body, dict):
                    raise errors.bad_request("strategic merge patch must be a JSON object")
                patched = patching.apply_strategic_merge_patch(target, body, resource.kind)
            else:
                raise errors.ApiError(415, "UnsupportedMediaType",
                                      f"the server does not support patch type {patch_type!r}; "
                                      f"use {PATCH_MERGE}, {PATCH_JSON} or {PATCH_STRATEGIC}")
        except patching.PatchError as exc:
            raise errors.ApiError(422, "Invalid", str(exc)) from exc
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise errors.ApiError(422, "Invalid", "the patch removed the object's metadata")
        self._decode(resource, patched, decoding)
        meta = patched["metadata"]
        rv = meta.get("resourceVersion")
        if rv and rv != str(current.rv):
            raise errors.stale_object(resource, name)
        # a patched uid is no precondition: validation refuses it as immutable (422), as upstream does
        if meta.get("name", name) != name:
            raise errors.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on "
                                     f"the URL ({name})")
        return self._write_update(resource, current, patched, subresource)

    # --- delete ---------------------------------------------------------------------------------
    def delete(self, resource: ApiResource, namespace: str, name: str,
               options: dict[str, Any] | None = None) -> Entry:
        options = options or {}
        current = self.get(resource, namespace, name)
        meta = current.obj["metadata"]
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise _delete_precondition_failed(resource, namespace, name, "UID", pre["uid"], meta.get("uid", ""))
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
            raise _delete_precondition_failed(resource, namespace, name, "ResourceVersion", pre["resourceVersion"],
                                              meta.get("resourceVersion", ""))
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise errors.ApiError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: '
                                                  f'propagationPolicy: Unsupported value: "{policy}"')
        grace = self._grace_period(resource, current.obj, options.get("gracePeriodSeconds"))
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Orphan" and ORPHAN_FINALIZER not in finalizers:
            finalizers.append(ORPHAN_FINALIZER)
        elif policy == "Foreground" and FOREGROUND_FINALIZER not in finalizers:
            finalizers.append(FOREGROUND_FINALIZER)
        if policy in ("Orphan", "Foreground") and not self.store.dependents_of(meta.get("uid", "")):
            finalizers = [f for f in finalizers if f not in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)]
        if resource is R.NAMESPACES:
            # the namespace controller (sim.gc) empties it and then removes it
            return self._mark_deleting(resource, current, 0, finalizers)
        if grace == 0 and not finalizers:
            removed = self.store.remove(resource, namespace if resource.namespaced else "", name)
            assert removed is not None
            return removed
        return self._mark_deleting(resource, current, grace, finalizers)

    def _grace_period(self, resource: ApiResource, obj: dict[str, Any], requested: Any) -> int:
        if resource is not R.PODS:
            return 0
        spec, status = obj.get("spec", {}), obj.get("status", {})
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0  # nothing runs that needs time to stop
        grace = requested if isinstance(requested, int) else spec.get("terminationGracePeriodSeconds", 30)
        current = obj["metadata"].get("deletionGracePeriodSeconds")
        if current is not None:
            grace = min(grace, current)  # a second delete may only shorten the grace period
        return max(int(grace), 0)

    def _mark_deleting(self, resource: ApiResource, current: Entry, grace: int,
                       finalizers: list[str]) -> Entry:
        obj = current.shallow()  # the metadata changes; a namespace's status is replaced
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds", 0) <= grace and \
                meta.get("finalizers", []) == finalizers:
            return current
        meta["deletionTimestamp"] = format_time(self.clock() + timedelta(seconds=grace))
        meta["deletionGracePeriodSeconds"] = grace
        if finalizers:
            meta["finalizers"] = finalizers
        if resource is R.NAMESPACES:
            obj["status"] = {**obj.setdefault("status", {}), "phase": "Terminating"}
        return self.store.put(resource, _ordered(obj), MODIFIED, current.obj)


def _delete_precondition_failed(resource: ApiResource, namespace: str, name: str, field: str, want: str,
                                got: str) -> errors.ApiError:
    """A DELETE's failed uid or resourceVersion precondition, as kube-apiserver's generic store answers it: its
    rest.BeforeDelete checks them on the object it just read, before the write, naming the resource by its kind
    (`Pod`, `ReplicaSet.apps`). Verified against the real kube-apiserver v1.36 by tests/controlplane/
    test_kubus_on_controlplane.py. The storage's own check (_precondition_failed) answers only a change racing
    the delete; the namespace registry words its own."""
    if resource is R.NAMESPACES:
        return _precondition_failed(resource, namespace, name, field, want, got)
    why = ("deleted and then recreated" if field == "UID" else "modified")
    return errors.ApiError(
        409, "Conflict",
        f'Operation cannot be fulfilled on {resource.qualified_kind} "{name}": the {field} in the precondition '
        f"({want}) does not match the {field} in record ({got}). The object might have been {why}",
        {"name": name, "kind": resource.kind, **({"group": resource.group} if resource.group else {})})


def _precondition_failed(resource: ApiResource, namespace: str, name: str, field: str, want: str,
                         got: str) -> errors.ApiError:
    """A failed uid or resourceVersion precondition: etcd3's InvalidObjError wrapped in a Conflict.

    The namespace registry checks its own preconditions, so its message has no storage part.
    """
    why = f"Precondition failed: {field} in precondition: {want}, {field} in object meta: {got}"
    if resource is not R.NAMESPACES:
        key = "/".join(["/registry", _STORAGE_PREFIX.get(resource, resource.plural),
                        *([namespace] if resource.namespaced else []), name])
        why = f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: {why}"
    return errors.conflict(resource, name, why)


def _check_type(resource: ApiResource, obj: dict[str, Any]) -> None:
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if kind and kind != resource.kind:
        raise errors.bad_request(f"the kind of the object ({kind}) does not match the kind of the "
                                 f"resource ({resource.kind})")
    if api_version and api_version != resource.api_version:
        raise errors.bad_request(f"the API version in the data ({api_version}) does not match the "
                                 f"expected API version ({resource.api_version})")


_TOP_ORDER = ("kind", "apiVersion", "metadata", "spec", "status")


def _ordered(obj: dict[str, Any]) -> dict[str, Any]:
    """kube-apiserver's field order at the top level, so output reads as users expect."""
    out = {k: obj[k] for k in _TOP_ORDER if k in obj}
    for k, v in obj.items():
        if k not in out:
            out[k] = v
    return out
