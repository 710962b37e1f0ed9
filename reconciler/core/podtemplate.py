"""GetPodFromTemplate: the pod a controller creates from its template, named from an idempotency key.

Upstream leaves the name to the API server (``generateName: <controller>-`` plus five random
characters). kubus picks the five characters itself, from the action's idempotency key, in the
same alphabet and with the same 58-character prefix limit, so a retried create meets its own pod
(AlreadyExists) instead of making a second one. Everything else is upstream's: the template's
labels, annotations and finalizers, the controller reference, and the template's spec untouched.
"""

from __future__ import annotations

from typing import Any, Final

from kube.meta import OwnerReference
from kube.template import PodTemplateSpec
from kube.validation import validate_dns1123_subdomain
from messages.actions import IDEMPOTENCY_ANNOTATION
from messages.naming import generated_name

__all__ = ["NO_LABELS_ERROR", "PodFactory", "pod_from_template", "pods_prefix"]

NO_LABELS_ERROR: Final = "unable to create pods, no labels"


def pods_prefix(controller_name: str) -> str:
    """getPodsPrefix: ``name-`` when that is a valid generateName, else the bare name."""
    prefix = f"{controller_name}-"
    masked = prefix[:-1] + "a"  # NameIsDNSSubdomain(prefix=true) masks the trailing dash
    return prefix if not validate_dns1123_subdomain(masked) else controller_name


def pod_from_template(template: PodTemplateSpec, controller_name: str, controller_ref: OwnerReference | None,
                      namespace: str, key: str) -> dict[str, Any]:
    """The Pod body to create for idempotency key `key`."""
    return PodFactory(template, controller_name, controller_ref, namespace).body(key)


class PodFactory:
    """GetPodFromTemplate for many pods of one controller: the template is encoded once."""

    def __init__(self, template: PodTemplateSpec, controller_name: str, controller_ref: OwnerReference | None,
                 namespace: str) -> None:
        raw = template.to_builtins()
        template_meta = raw.get("metadata") or {}
        self.prefix = pods_prefix(controller_name)
        self.namespace = namespace
        self.annotations = dict(template_meta.get("annotations") or {})
        self.extra: dict[str, Any] = {}
        if template_meta.get("labels"):
            self.extra["labels"] = dict(template_meta["labels"])
        if template_meta.get("finalizers"):
            self.extra["finalizers"] = list(template_meta["finalizers"])
        if controller_ref is not None:
            self.extra["ownerReferences"] = [{
                "apiVersion": controller_ref.api_version, "kind": controller_ref.kind, "name": controller_ref.name,
                "uid": controller_ref.uid, "controller": True, "blockOwnerDeletion": True}]
        self.spec = raw.get("spec") or {}  # shared by every body: bodies are encoded, never mutated

    def body(self, key: str) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": generated_name(self.prefix, key), "generateName": self.prefix, "namespace": self.namespace,
            "annotations": {**self.annotations, IDEMPOTENCY_ANNOTATION: key}, **self.extra}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": self.spec}
