"""sim.auth's request attributes and sim.rbac's rule matching, against kube-apiserver's semantics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sim import resources as R
from sim.auth import Attributes, Authenticator, UserInfo, request_info
from sim.rbac import Authorizer, forbidden, rule_allows
from sim.registry import Registry
from sim.status import ApiError
from sim.store import ObjectStore

BOB = UserInfo("bob", "", ("dev", "system:authenticated"))
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("method, path, query, expected", [
    ("GET", "/api/v1/namespaces/ns/pods/p", {}, ("get", "ns", "", "pods", "", "p")),
    ("GET", "/api/v1/namespaces/ns/pods", {}, ("list", "ns", "", "pods", "", "")),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, ("watch", "ns", "", "pods", "", "")),
    ("GET", "/api/v1/pods", {"fieldSelector": "metadata.name==p,spec.nodeName=n"}, ("list", "", "", "pods", "", "p")),
    ("DELETE", "/apis/apps/v1/namespaces/ns/daemonsets", {}, ("deletecollection", "ns", "apps", "daemonsets", "", "")),
    ("PUT", "/apis/apps/v1/namespaces/ns/daemonsets/d/status", {},
     ("update", "ns", "apps", "daemonsets", "status", "d")),
    ("POST", "/api/v1/namespaces/ns/serviceaccounts/sa/token", {},
     ("create", "ns", "", "serviceaccounts", "token", "sa")),
    # a namespace is in its own namespace; its status and finalize are subresources, not kinds
    ("GET", "/api/v1/namespaces/ns", {}, ("get", "ns", "", "namespaces", "", "ns")),
    ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "ns", "", "namespaces", "finalize", "ns")),
    ("GET", "/api/v1/nodes", {}, ("list", "", "", "nodes", "", "")),
])
def test_request_info(method: str, path: str, query: dict[str, str], expected: tuple[str, ...]) -> None:
    attrs = request_info(BOB, method, path, query)
    assert attrs.is_resource
    assert (attrs.verb, attrs.namespace, attrs.api_group, attrs.resource, attrs.subresource, attrs.name) == expected


@pytest.mark.parametrize("path", ["/api", "/api/v1", "/apis", "/apis/apps/v1", "/healthz", "/version", "/openapi/v2"])
def test_non_resource_paths(path: str) -> None:
    attrs = request_info(BOB, "GET", path, {})
    assert (attrs.is_resource, attrs.verb, attrs.path) == (False, "get", path)


def res(verb: str, resource: str, sub: str = "", name: str = "", group: str = "") -> Attributes:
    return Attributes(BOB, verb, True, "", "ns", group, "v1", resource, sub, name)


@pytest.mark.parametrize("rule, attrs, allowed", [
    ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, res("get", "pods"), True),
    ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, res("list", "pods"), False),
    ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, res("deletecollection", "pods"), True),
    ({"apiGroups": ["apps"], "resources": ["pods"], "verbs": ["get"]}, res("get", "pods"), False),
    ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]}, res("get", "daemonsets", group="apps"), True),
    # a subresource is matched only as resource/subresource, `*/sub` or `*`
    ({"apiGroups": [""], "resources": ["pods"], "verbs": ["update"]}, res("update", "pods", "status"), False),
    ({"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update"]}, res("update", "pods", "status"), True),
    ({"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update"]}, res("update", "pods"), False),
    ({"apiGroups": [""], "resources": ["*/status"], "verbs": ["update"]}, res("update", "pods", "status"), True),
    ({"apiGroups": [""], "resources": ["*/status"], "verbs": ["update"]}, res("update", "pods", "eviction"), False),
    ({"apiGroups": [""], "resources": ["*"], "verbs": ["update"]}, res("update", "pods", "status"), True),
    # resourceNames: only named requests
    ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["a"]},
     res("get", "pods", name="a"), True),
    ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["a"]},
     res("get", "pods", name="b"), False),
    ({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"], "resourceNames": ["a"]}, res("list", "pods"), False),
    # non-resource URLs: exact, or a prefix ending in *
    ({"nonResourceURLs": ["/healthz"], "verbs": ["get"]}, Attributes(BOB, "get", False, "/healthz"), True),
    ({"nonResourceURLs": ["/healthz"], "verbs": ["get"]}, Attributes(BOB, "get", False, "/healthz/etcd"), False),
    ({"nonResourceURLs": ["/healthz*"], "verbs": ["get"]}, Attributes(BOB, "get", False, "/healthz/etcd"), True),
    ({"nonResourceURLs": ["/healthz"], "verbs": ["get"]}, Attributes(BOB, "post", False, "/healthz"), False),
    ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, Attributes(BOB, "get", False, "/healthz"), False),
])
def test_rule_allows(rule: dict[str, Any], attrs: Attributes, allowed: bool) -> None:
    assert rule_allows(attrs, rule) is allowed


def _binding(kind: str, namespace: str | None, role_kind: str, role: str, subject: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{role}-binding"}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [subject]}


@pytest.fixture
def registry() -> Registry:
    reg = Registry(ObjectStore(), lambda: NOW, seed=1)
    for ns in ("a", "b"):
        reg.create(R.NAMESPACES, "", {"metadata": {"name": ns}})
    reg.create(R.CLUSTERROLES, "", {"metadata": {"name": "reader"},
                                    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
    return reg


def test_bindings_scope_and_subjects(registry: Registry) -> None:
    """A RoleBinding grants in its namespace only; a ServiceAccount subject without a namespace is the
    binding's; Group subjects match the user's groups."""
    authz = Authorizer(registry.store)
    sa = UserInfo("system:serviceaccount:a:bot", "", ("system:serviceaccounts", "system:authenticated"))
    registry.create(R.ROLEBINDINGS, "a", _binding("RoleBinding", "a", "ClusterRole", "reader",
                                                  {"kind": "ServiceAccount", "name": "bot"}))
    in_a = Attributes(sa, "get", True, "", "a", "", "v1", "pods", "", "p")
    in_b = Attributes(sa, "get", True, "", "b", "", "v1", "pods", "", "p")
    decision = authz.authorize(in_a)
    assert decision.allowed
    assert decision.reason == ('RBAC: allowed by RoleBinding "reader-binding/a" of ClusterRole "reader" to '
                               'ServiceAccount "a/bot"')
    assert not authz.authorize(in_b).allowed
    registry.create(R.CLUSTERROLEBINDINGS, "", _binding("ClusterRoleBinding", None, "ClusterRole", "reader",
                                                        {"kind": "Group", "name": "dev",
                                                         "apiGroup": "rbac.authorization.k8s.io"}))
    assert authz.authorize(Attributes(BOB, "get", True, "", "b", "", "v1", "pods", "", "p")).allowed
    assert not authz.authorize(in_b).allowed  # the SA is not in group dev


def test_forbidden_bodies() -> None:
    sa = UserInfo("system:serviceaccount:ns:sa")
    listing = forbidden(Attributes(sa, "list", True, "", "", "apps", "v1", "daemonsets"), "")
    assert (listing.code, listing.reason) == (403, "Forbidden")
    assert listing.details == {"group": "apps", "kind": "daemonsets"}
    assert listing.message == ('daemonsets.apps is forbidden: User "system:serviceaccount:ns:sa" cannot list resource '
                               '"daemonsets" in API group "apps" at the cluster scope')
    status = forbidden(Attributes(sa, "update", True, "", "ns", "apps", "v1", "replicasets", "status", "r"),
                       'RBAC: role.rbac.authorization.k8s.io "x" not found')
    assert status.message == ('replicasets.apps "r" is forbidden: User "system:serviceaccount:ns:sa" cannot update '
                              'resource "replicasets/status" in API group "apps" in the namespace "ns": RBAC: '
                              'role.rbac.authorization.k8s.io "x" not found')


def test_service_account_tokens(registry: Registry) -> None:
    """A token authenticates its ServiceAccount until it expires or the ServiceAccount is replaced."""
    authn = Authenticator(registry.store, "admin-token")
    sa = registry.create(R.SERVICEACCOUNTS, "a", {"metadata": {"name": "bot"}}).obj
    answer = authn.token_request(sa, {"spec": {}}, NOW)
    token = answer["status"]["token"]
    assert answer["spec"]["expirationSeconds"] == 3600
    assert answer["status"]["expirationTimestamp"] == "2026-01-01T01:00:00Z"
    user = authn.authenticate({"Authorization": f"Bearer {token}"}, NOW)
    assert (user.name, user.uid, user.groups) == ("system:serviceaccount:a:bot", sa["metadata"]["uid"],
                                                  ("system:serviceaccounts", "system:serviceaccounts:a",
                                                   "system:authenticated"))
    assert authn.authenticate({"Authorization": "Bearer admin-token"}, NOW).groups == ("system:masters",
                                                                                      "system:authenticated")
    with pytest.raises(ApiError, match="Unauthorized"):
        authn.authenticate({"Authorization": f"Bearer {token}"}, NOW + timedelta(hours=1))
    tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    with pytest.raises(ApiError, match="Unauthorized"):
        authn.authenticate({"Authorization": f"Bearer {tampered}"}, NOW)
    other_audience = authn.token_request(sa, {"spec": {"audiences": ["vault"]}}, NOW)["status"]["token"]
    with pytest.raises(ApiError, match="Unauthorized"):
        authn.authenticate({"Authorization": f"Bearer {other_audience}"}, NOW)
    registry.delete(R.SERVICEACCOUNTS, "a", "bot", {})
    registry.create(R.SERVICEACCOUNTS, "a", {"metadata": {"name": "bot"}})  # same name, new uid
    with pytest.raises(ApiError, match="Unauthorized"):
        authn.authenticate({"Authorization": f"Bearer {token}"}, NOW)
