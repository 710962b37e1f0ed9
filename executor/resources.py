"""REST paths of the kinds actions touch, e.g. ``/apis/apps/v1/namespaces/ns/replicasets/web/status``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

PATCH_TYPES: Final = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
}


@dataclass(frozen=True)
class Kind:
    base: str  # "/api/v1" or "/apis/<group>/<version>"
    plural: str

    def path(self, namespace: str = "", name: str = "", subresource: str = "") -> str:
        """Every kind an action touches is namespaced."""
        parts = [self.base, f"namespaces/{quote(namespace, safe='')}", self.plural]
        if name:
            parts.append(quote(name, safe=""))
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


KINDS: Final = {
    "Pod": Kind("/api/v1", "pods"),
    "Event": Kind("/api/v1", "events"),
    "ReplicaSet": Kind("/apis/apps/v1", "replicasets"),
    "DaemonSet": Kind("/apis/apps/v1", "daemonsets"),
    "ControllerRevision": Kind("/apis/apps/v1", "controllerrevisions"),
}

POD: Final = KINDS["Pod"]
EVENT: Final = KINDS["Event"]
CONTROLLER_REVISION: Final = KINDS["ControllerRevision"]
