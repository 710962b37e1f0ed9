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

    def __post_init__(self) -> None:
        # the hash the generated __hash__ computes, once: resources key the store's tables, indexes and queues, so
        # every read and write hashed all ten fields again (tuples do not keep their hash)
        object.__setattr__(self, "_hash", hash((self.plural, self.singular, self.kind, self.group, self.version,
                                                self.namespaced, self.short_names, self.categories,
                                                self.subresources, self.verbs)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[no-any-return, attr-defined]

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

# What `kubus sim --authz rbac` serves besides: identities, RBAC objects and the two self-reviews.
# Without --authz they are not served at all, so discovery and every kind's behaviour stay as they were.
RBAC_GROUP = "rbac.authorization.k8s.io"
SERVICEACCOUNTS = ApiResource("serviceaccounts", "serviceaccount", "ServiceAccount", "", "v1", True, ("sa",),
                              subresources=("token",))
ROLES = ApiResource("roles", "role", "Role", RBAC_GROUP, "v1", True)
CLUSTERROLES = ApiResource("clusterroles", "clusterrole", "ClusterRole", RBAC_GROUP, "v1", False)
ROLEBINDINGS = ApiResource("rolebindings", "rolebinding", "RoleBinding", RBAC_GROUP, "v1", True)
CLUSTERROLEBINDINGS = ApiResource("clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", RBAC_GROUP,
                                  "v1", False)
SELFSUBJECTACCESSREVIEWS = ApiResource("selfsubjectaccessreviews", "selfsubjectaccessreview",
                                       "SelfSubjectAccessReview", "authorization.k8s.io", "v1", False,
                                       verbs=("create",))
SELFSUBJECTRULESREVIEWS = ApiResource("selfsubjectrulesreviews", "selfsubjectrulesreview", "SelfSubjectRulesReview",
                                      "authorization.k8s.io", "v1", False, verbs=("create",))
SELFSUBJECTREVIEWS = ApiResource("selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview",
                                 "authentication.k8s.io", "v1", False, verbs=("create",))
AUTH: tuple[ApiResource, ...] = (SERVICEACCOUNTS, ROLES, CLUSTERROLES, ROLEBINDINGS, CLUSTERROLEBINDINGS,
                                 SELFSUBJECTACCESSREVIEWS, SELFSUBJECTRULESREVIEWS, SELFSUBJECTREVIEWS)
# answered by the authorizer, never stored
REVIEWS: tuple[ApiResource, ...] = (SELFSUBJECTACCESSREVIEWS, SELFSUBJECTRULESREVIEWS, SELFSUBJECTREVIEWS)
AUTH_GROUP_VERSIONS: dict[str, str] = {**GROUP_VERSIONS, "authentication.k8s.io": "v1",
                                       "authorization.k8s.io": "v1", RBAC_GROUP: "v1"}
_AUTH_BY_GROUP_VERSION_PLURAL = {**BY_GROUP_VERSION_PLURAL, **{(r.group, r.version, r.plural): r for r in AUTH}}


def served(authz: bool) -> tuple[ApiResource, ...]:
    return ALL + AUTH if authz else ALL


def group_versions(authz: bool) -> dict[str, str]:
    return AUTH_GROUP_VERSIONS if authz else GROUP_VERSIONS


def lookup(group: str, version: str, plural: str, authz: bool = False) -> ApiResource | None:
    return (_AUTH_BY_GROUP_VERSION_PLURAL if authz else BY_GROUP_VERSION_PLURAL).get((group, version, plural))
