"""kube-apiserver's RBAC authorizer over the Roles, ClusterRoles and bindings in the sim's store.

A port of plugin/pkg/auth/authorizer/rbac and pkg/registry/rbac/validation (v1.32): members of
`system:masters` are allowed everything before RBAC is asked (the privileged-group authorizer); anyone
else is allowed when a rule of a role bound to them allows the request. ClusterRoleBindings apply
everywhere; RoleBindings only in their own namespace, to a Role of that namespace or a ClusterRole.
A rule allows when its verbs, apiGroups, resources (`*`, `pods`, `pods/status`, `*/status`) and
resourceNames all match, or for a non-resource request its verbs and nonResourceURLs (`/healthz`,
`/apis/*`). Role aggregation is not implemented. A denial is kube-apiserver's 403, word for word.

``bootstrap_policy`` is the part of kube-apiserver's bootstrap policy every identity relies on:
discovery, the self-reviews, the health endpoints, and `cluster-admin` for `system:masters`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sim import resources as R
from sim import status as errors
from sim.auth import AUTHENTICATED, MASTERS, Attributes, UserInfo
from sim.store import ObjectStore


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _has(values: list[str], wanted: str) -> bool:
    return "*" in values or wanted in values


def rule_allows(attrs: Attributes, rule: dict[str, Any]) -> bool:
    verbs = _strings(rule.get("verbs"))
    if attrs.is_resource:
        combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        names = _strings(rule.get("resourceNames"))
        return (_has(verbs, attrs.verb) and _has(_strings(rule.get("apiGroups")), attrs.api_group)
                and _resource_matches(_strings(rule.get("resources")), combined, attrs.subresource)
                and (not names or attrs.name in names))
    return _has(verbs, attrs.verb) and _url_matches(_strings(rule.get("nonResourceURLs")), attrs.path)


def _resource_matches(resources: list[str], combined: str, subresource: str) -> bool:
    for resource in resources:
        if resource in ("*", combined):
            return True
        # `*/status` covers the status subresource of every resource
        if subresource and len(resource) == len(subresource) + 2 and resource.startswith("*/") \
                and resource.endswith(subresource):
            return True
    return False


def _url_matches(urls: list[str], path: str) -> bool:
    for url in urls:
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url[:-1]):
            return True
    return False


def _subject_applies(subject: Any, user: UserInfo, binding_namespace: str) -> bool:
    if not isinstance(subject, dict):
        return False
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(user.name == name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        # a subject without a namespace is the binding's own namespace's ServiceAccount
        namespace = subject.get("namespace") or binding_namespace
        return bool(namespace) and user.name == f"system:serviceaccount:{namespace}:{name}"
    return False


def _describe_subject(subject: dict[str, Any], binding_namespace: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return f'{subject["kind"]} "{namespace}/{subject.get("name", "")}"'
    return f'{subject.get("kind", "")} "{subject.get("name", "")}"'


class Authorizer:
    def __init__(self, store: ObjectStore):
        self.store = store

    def _rules(self, attrs: Attributes) -> Iterator[tuple[str, list[Any] | None, str | None]]:
        """(source, rules, error) for every binding that applies to the user, as VisitRulesFor walks them."""
        user = attrs.user
        for entry in self.store.iter(R.CLUSTERROLEBINDINGS):
            binding = entry.obj
            ref = binding.get("roleRef") or {}
            for subject in binding.get("subjects") or ():
                if not _subject_applies(subject, user, ""):
                    continue
                source = (f'ClusterRoleBinding "{binding["metadata"]["name"]}" of {ref.get("kind", "")} '
                          f'"{ref.get("name", "")}" to {_describe_subject(subject, "")}')
                rules, error = self._role_rules(ref, "")
                yield source, rules, error
                break
        if not attrs.namespace:
            return
        for entry in self.store.iter(R.ROLEBINDINGS, attrs.namespace):
            binding = entry.obj
            ref = binding.get("roleRef") or {}
            for subject in binding.get("subjects") or ():
                if not _subject_applies(subject, user, attrs.namespace):
                    continue
                source = (f'RoleBinding "{binding["metadata"]["name"]}/{attrs.namespace}" of '
                          f'{ref.get("kind", "")} "{ref.get("name", "")}" to '
                          f"{_describe_subject(subject, attrs.namespace)}")
                rules, error = self._role_rules(ref, attrs.namespace)
                yield source, rules, error
                break

    def _role_rules(self, ref: dict[str, Any], namespace: str) -> tuple[list[Any] | None, str | None]:
        name = ref.get("name", "")
        if ref.get("kind") == "ClusterRole":
            role = self.store.get(R.CLUSTERROLES, "", name)
            missing = f'clusterrole.rbac.authorization.k8s.io "{name}" not found'
        elif ref.get("kind") == "Role" and namespace:
            role = self.store.get(R.ROLES, namespace, name)
            missing = f'role.rbac.authorization.k8s.io "{name}" not found'
        else:
            return None, f'unsupported role reference kind: "{ref.get("kind", "")}"'
        if role is None:
            return None, missing
        rules = role.obj.get("rules")
        return (rules if isinstance(rules, list) else []), None

    def authorize(self, attrs: Attributes) -> Decision:
        if MASTERS in attrs.user.groups:
            return Decision(True, "")
        failures: list[str] = []
        for source, rules, error in self._rules(attrs):
            if error is not None:
                failures.append(error)
                continue
            for rule in rules or ():
                if isinstance(rule, dict) and rule_allows(attrs, rule):
                    return Decision(True, f"RBAC: allowed by {source}")
        if not failures:
            return Decision(False, "")
        aggregate = failures[0] if len(failures) == 1 else "[" + ", ".join(failures) + "]"
        return Decision(False, f"RBAC: {aggregate}")

    def rules_review(self, user: UserInfo, namespace: str) -> dict[str, Any]:
        """SelfSubjectRulesReview (`kubectl auth can-i --list`): every rule bound to the user in the namespace."""
        resource_rules: list[dict[str, Any]] = []
        nonresource_rules: list[dict[str, Any]] = []
        failures: list[str] = []
        for _, rules, error in self._rules(Attributes(user, "", True, "", namespace)):
            if error is not None:
                failures.append(error)
            for rule in rules or ():
                if not isinstance(rule, dict):
                    continue
                if rule.get("nonResourceURLs"):
                    nonresource_rules.append({"verbs": _strings(rule.get("verbs")),
                                              "nonResourceURLs": _strings(rule.get("nonResourceURLs"))})
                else:
                    out = {k: _strings(rule.get(k)) for k in ("verbs", "apiGroups", "resources", "resourceNames")}
                    resource_rules.append({k: v for k, v in out.items() if v or k == "verbs"})
        status: dict[str, Any] = {"resourceRules": resource_rules, "nonResourceRules": nonresource_rules,
                                  "incomplete": bool(failures)}
        if failures:
            status["evaluationError"] = ", ".join(failures)
        return {"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": None}, "spec": {"namespace": namespace} if namespace else {},
                "status": status}

    def impersonate(self, user: UserInfo, headers: Mapping[str, str]) -> UserInfo:
        """apiserver's impersonation filter: `kubectl --as=USER --as-group=GROUP` (Impersonate-User,
        Impersonate-Group) asks for the `impersonate` verb on each identity taken on, then the request is
        authorized as the impersonated user."""
        getall = getattr(headers, "getall", None)
        name = headers.get("Impersonate-User", "")
        groups: list[str] = list(getall("Impersonate-Group", [])) if getall else []
        if not name:
            if groups:
                raise errors.ApiError(500, "InternalError", "Internal error occurred: requested "
                                      f"{groups!r} without impersonating a user")
            return user
        if name.startswith("system:serviceaccount:") and name.count(":") == 3:
            _, _, namespace, sa = name.split(":")
            self.check(Attributes(user, "impersonate", True, "", namespace, "", "", "serviceaccounts", "", sa))
            implied = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
        else:
            self.check(Attributes(user, "impersonate", True, "", "", "", "", "users", "", name))
            implied = []
        for group in groups:
            self.check(Attributes(user, "impersonate", True, "", "", "", "", "groups", "", group))
        taken = [*implied, *groups]
        if name != "system:anonymous" and not {AUTHENTICATED, "system:unauthenticated"} & set(taken):
            taken.append(AUTHENTICATED)
        return UserInfo(name, "", tuple(dict.fromkeys(taken)))

    def check(self, attrs: Attributes) -> None:
        """Raises kube-apiserver's 403 when the request is not allowed."""
        decision = self.authorize(attrs)
        if not decision.allowed:
            raise forbidden(attrs, decision.reason)


def forbidden_message(attrs: Attributes) -> str:
    """responsewriters.forbiddenMessage."""
    user = attrs.user.name
    if not attrs.is_resource:
        return f'User "{user}" cannot {attrs.verb} path "{attrs.path}"'
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.api_group}" {where}'


def forbidden(attrs: Attributes, reason: str) -> errors.ApiError:
    """responsewriters.Forbidden: apierrors.NewForbidden over the request's group and resource."""
    why = forbidden_message(attrs)
    if reason:
        why = f"{why}: {reason}"
    details: dict[str, Any] = {}
    if not attrs.is_resource or not attrs.resource:
        return errors.ApiError(403, "Forbidden", f"forbidden: {why}", details)
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    head = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    if attrs.name:
        details["name"] = attrs.name
    if attrs.api_group:
        details["group"] = attrs.api_group
    details["kind"] = attrs.resource
    return errors.ApiError(403, "Forbidden", f"{head} is forbidden: {why}", details)


# --- the bootstrap policy every identity relies on ------------------------------------------------------------
_BOOTSTRAP_META = {"labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                   "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}}


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, **_BOOTSTRAP_META}, "rules": rules}


def _cluster_binding(name: str, groups: list[str]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, **_BOOTSTRAP_META},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups]}


def bootstrap_policy() -> list[tuple[R.ApiResource, dict[str, Any]]]:
    """kube-apiserver's bootstrap roles that discovery, the self-reviews and the health checks need."""
    public = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
    return [
        (R.CLUSTERROLES, _cluster_role("cluster-admin", [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]}])),
        (R.CLUSTERROLES, _cluster_role("system:discovery", [
            {"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                                 "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]}])),
        (R.CLUSTERROLES, _cluster_role("system:basic-user", [
            {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews",
                                                                  "selfsubjectrulesreviews"], "verbs": ["create"]},
            {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}])),
        (R.CLUSTERROLES, _cluster_role("system:public-info-viewer", [{"nonResourceURLs": public, "verbs": ["get"]}])),
        (R.CLUSTERROLEBINDINGS, _cluster_binding("cluster-admin", [MASTERS])),
        (R.CLUSTERROLEBINDINGS, _cluster_binding("system:discovery", ["system:authenticated"])),
        (R.CLUSTERROLEBINDINGS, _cluster_binding("system:basic-user", ["system:authenticated"])),
        (R.CLUSTERROLEBINDINGS, _cluster_binding("system:public-info-viewer",
                                                 ["system:authenticated", "system:unauthenticated"])),
    ]


def review(attrs: Attributes, decision: Decision, spec: dict[str, Any]) -> dict[str, Any]:
    """The SelfSubjectAccessReview answered: the spec as asked, the status as decided."""
    status: dict[str, Any] = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    return {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}


def review_attributes(user: UserInfo, spec: Any) -> Attributes:
    """The Attributes a SelfSubjectAccessReview's spec asks about."""
    if not isinstance(spec, dict):
        raise errors.bad_request("spec of a SelfSubjectAccessReview must be an object")
    resource, nonresource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if isinstance(resource, dict) == isinstance(nonresource, dict):
        message = "resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or " \
                  "resourceAttributes must be specified"
        raise errors.ApiError(422, "Invalid", f"SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: "
                                              f"spec.{message}",
                              {"group": "authorization.k8s.io", "kind": "SelfSubjectAccessReview",
                               "causes": [{"reason": "FieldValueInvalid", "field": "spec.resourceAttributes",
                                           "message": message}]})
    if isinstance(resource, dict):
        def text(key: str) -> str:
            value = resource.get(key)
            return value if isinstance(value, str) else ""
        return Attributes(user, text("verb"), True, "", text("namespace"), text("group"), text("version"),
                          text("resource"), text("subresource"), text("name"))
    assert isinstance(nonresource, dict)
    return Attributes(user, str(nonresource.get("verb") or ""), False, str(nonresource.get("path") or ""))
