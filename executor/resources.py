"""REST paths of the kinds actions touch, e.g. ``/apis/apps/v1/namespaces/ns/replicasets/web/status``."""

from __future__ import annotations

import string
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
        path = f"{self.base}/namespaces/{segment(namespace)}/{self.plural}"
        if name:
            path += "/" + segment(name)
        if subresource:
            path += "/" + subresource
        return path


# the characters urllib.parse.quote never escapes: a text of only these, as every valid Kubernetes name is, is its
# own quoting, found without quote's encode to bytes and its calls (a path is built for every API call)
_NEVER_QUOTED: Final = string.ascii_letters + string.digits + "_.-~"


def segment(text: str) -> str:
    """`text` quoted as one path segment (a "/" in it escaped too): `quote(text, safe="")`."""
    return text if not text.rstrip(_NEVER_QUOTED) else quote(text, safe="")


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
