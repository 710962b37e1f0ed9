"""The resource types the simulated API server serves, and what discovery says about them."""

from __future__ import annotations

from dataclasses import dataclass

STANDARD_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ApiResource:
    plural: str
    singular: str
    kind: str
    group: str  # "" for the core group
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = STANDARD_VERBS

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """The `resource.group` form used in Status messages: `daemonsets.apps`, `pods`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """The `Kind.group` form used in Invalid messages: `DaemonSet.apps`, `Pod`."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


NAMESPACES = ApiResource("namespaces", "namespace", "Namespace", "", "v1", False, ("ns",),
                      subresources=("status", "finalize"))
NODES = ApiResource("nodes", "node", "Node", "", "v1", False, ("no",), subresources=("status",))
PODS = ApiResource("pods", "pod", "Pod", "", "v1", True, ("po",), ("all",),
                subresources=("status", "binding", "eviction"))
EVENTS = ApiResource("events", "event", "Event", "", "v1", True, ("ev",))
DAEMONSETS = ApiResource("daemonsets", "daemonset", "DaemonSet", "apps", "v1", True, ("ds",), ("all",),
                      subresources=("status",))
REPLICASETS = ApiResource("replicasets", "replicaset", "ReplicaSet", "apps", "v1", True, ("rs",), ("all",),
                       subresources=("status", "scale"))
CONTROLLERREVISIONS = ApiResource("controllerrevisions", "controllerrevision", "ControllerRevision",
                               "apps", "v1", True)

ALL: tuple[ApiResource, ...] = (NAMESPACES, NODES, PODS, EVENTS, DAEMONSETS, REPLICASETS, CONTROLLERREVISIONS)
BY_GROUP_VERSION_PLURAL: dict[tuple[str, str, str], ApiResource] = {
    (r.group, r.version, r.plural): r for r in ALL
}
BY_KIND: dict[str, ApiResource] = {r.kind: r for r in ALL}

GROUP_VERSIONS: dict[str, str] = {"": "v1", "apps": "v1"}


def lookup(group: str, version: str, plural: str) -> ApiResource | None:
    return BY_GROUP_VERSION_PLURAL.get((group, version, plural))
