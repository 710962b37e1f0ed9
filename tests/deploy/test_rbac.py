"""deploy/rbac's ClusterRoles are exactly what ingest/ and executor/ call (issue 16, 2): every API call site of the
executor is found in its source and named in CALLS below, so a new call fails here until the role grants it,
and a rule no call needs fails here too."""

from __future__ import annotations

import ast
from typing import Any, cast

import msgspec
import pytest

from executor import applying, claims, resources
from ingest.kinds import KINDS as INGEST_KINDS
from messages.actions import ActionKind, CreatePods
from tests.deploy.manifests import NAMESPACE, RBAC, ROOT, one, render

pytestmark = pytest.mark.kubectl

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)
OWNERS = {"ReplicaSet": "replicasets", "DaemonSet": "daemonsets"}
VERB_OF = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

# Every `api.call(METHOD, PATH)` of executor/: (file, enclosing function, method, path expression) -> the resources
# it reaches, read from its callers where the kind is a parameter.
CALLS: dict[tuple[str, str, str, str], set[tuple[str, str]]] = {
    # delete_with_preconditions: DeletePod (POD), DeleteControllerRevision (CONTROLLER_REVISION)
    ("applying.py", "delete_with_preconditions", "DELETE", "kind.path(namespace, name)"):
        {("", "pods"), ("apps", "controllerrevisions")},
    # recheck_owner: the owner (ADOPTERS) re-read before an adoption, and before a claiming sync's other actions
    ("claims.py", "recheck_owner", "GET", "KINDS[check.kind].path(namespace, check.name)"):
        {("apps", "replicasets"), ("apps", "daemonsets")},
    # the owner of a CreatePods or CreateControllerRevision, read once per uid (executor/ownership.py)
    ("ownership.py", "get", "GET", "KINDS[kind].path(namespace, name)"):
        {("apps", "replicasets"), ("apps", "daemonsets")},
    # the object a DeletePod, PatchPod, DeleteControllerRevision or PatchControllerRevision touches, read to check
    # that it is the action's controller's (executor/ownership.py)
    ("ownership.py", "_check_touched", "GET", "KINDS[target].path(action.namespace, action.name)"):
        {("", "pods"), ("apps", "controllerrevisions")},
    # patch: PatchPod, PatchControllerRevision, and adoptions of either
    ("applying.py", "patch", "PATCH", "kind.path(namespace, name)"): {("", "pods"), ("apps", "controllerrevisions")},
    ("applying.py", "_create_revision", "POST", "CONTROLLER_REVISION.path(a.namespace)"):
        {("apps", "controllerrevisions")},
    ("applying.py", "_create_revision", "GET", "CONTROLLER_REVISION.path(a.namespace, name)"):
        {("apps", "controllerrevisions")},
    # UpdateStatus of a ReplicaSet or a DaemonSet
    ("applying.py", "_update_status", "PUT", "kind.path(a.namespace, a.name, 'status')"):
        {("apps", "replicasets/status"), ("apps", "daemonsets/status")},
    # _write_status: UpdateStatus's retry, BumpCollisionCount (DaemonSet)
    ("applying.py", "_write_status", "GET", "path"): {("apps", "replicasets"), ("apps", "daemonsets")},
    ("applying.py", "_write_status", "PUT", "f'{path}/status'"):
        {("apps", "replicasets/status"), ("apps", "daemonsets/status")},
    ("creating.py", "create_pod", "POST", "POD.path(namespace)"): {("", "pods")},
    ("creating.py", "create_pod", "GET", "POD.path(namespace, name)"): {("", "pods")},
    ("events.py", "_write", "POST", "EVENT.path(namespace)"): {("", "events")},
    ("events.py", "_write", "PATCH", "EVENT.path(namespace, event.metadata.name)"): {("", "events")},
}

# Not a call of kubus's own: pods and revisions are created with a controller ownerReference whose
# blockOwnerDeletion is true, which kube-apiserver's OwnerReferencesPermissionEnforcement admission allows only to
# whoever may update the owner's finalizers (upstream's roles grant the same).
FINALIZERS: set[Grant] = {("apps", f"{plural}/finalizers", "update") for plural in OWNERS.values()}


class _CallSites(ast.NodeVisitor):
    """Every `X.call("METHOD", path, ...)` of a module, with the innermost function it is in."""

    def __init__(self, file: str):
        self.file = file
        self.functions: list[str] = []
        self.found: set[tuple[str, str, str, str]] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        if (isinstance(node.func, ast.Attribute) and node.func.attr == "call" and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in VERB_OF):
            self.found.add((self.file, self.functions[-1], node.args[0].value, ast.unparse(node.args[1])))
        self.generic_visit(node)


def _calls() -> set[tuple[str, str, str, str]]:
    found = set()
    for path in sorted((ROOT / "executor").glob("*.py")):
        sites = _CallSites(path.name)
        sites.visit(ast.parse(path.read_text()))
        found |= sites.found
    return found


def _granted(role: dict[str, Any]) -> set[Grant]:
    """(group, resource, verb) per grant; a rule limited to resourceNames grants `resource[name]`."""
    grants = set()
    for rule in role["rules"]:
        assert set(rule) - {"resourceNames"} == {"apiGroups", "resources", "verbs"}, \
            f"{role['metadata']['name']}: {rule}"
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, res, verb), f"{role['metadata']['name']} has a wildcard: {rule}"
                    for name in rule.get("resourceNames") or [None]:
                        grants.add((group, res if name is None else f"{res}[{name}]", verb))
    return grants


@pytest.fixture(scope="module")
def rbac() -> list[dict[str, Any]]:
    return render(RBAC)


def test_every_executor_call_site_is_in_the_table() -> None:
    found = _calls()
    assert found == set(CALLS), (f"executor/ calls the API where CALLS does not say (add them, and grant them in "
                                 f"deploy/rbac/executor.yaml): {sorted(found - set(CALLS))}; CALLS lists calls "
                                 f"that are gone: {sorted(set(CALLS) - found)}")


def test_the_table_covers_the_kinds_and_actions_the_executor_knows() -> None:
    reached = {(group, res.split("/")[0]) for targets in CALLS.values() for group, res in targets}
    known = {(kind.base.removeprefix("/apis/").removeprefix("/api/").rpartition("/")[0], kind.plural)
             for kind in resources.KINDS.values()}
    assert reached == known
    assert set(claims.ADOPTERS) == set(OWNERS)
    handled = {cast(type[msgspec.Struct], cls).__struct_config__.tag for cls in (*applying._HANDLERS, CreatePods)}
    assert handled == {kind.value for kind in ActionKind}, "an action kind the executor does not apply"


def test_the_executor_role_grants_exactly_its_calls(rbac: list[dict[str, Any]]) -> None:
    needed = {(group, res, VERB_OF[method]) for (_, _, method, _), targets in CALLS.items() for group, res in targets}
    needed |= FINALIZERS
    granted = _granted(one(rbac, "ClusterRole", "kubus-executor"))
    assert granted == needed, f"granted but not called: {sorted(granted - needed)}; " \
                              f"called but not granted: {sorted(needed - granted)}"


def test_the_ingest_role_lists_and_watches_its_kinds_and_reads_kube_system(rbac: list[dict[str, Any]]) -> None:
    groups = {"CoreV1Api": "", "AppsV1Api": "apps"}
    needed = {(groups[spec.api], f"{spec.kind.lower()}s", verb) for spec in INGEST_KINDS.values()
              for verb in ("list", "watch")}
    assert all(spec.list_call.startswith("list_") for spec in INGEST_KINDS.values())
    # and one namespace read: the cluster's identity, kube-system's uid (ingest/identity.py)
    identity = ("", "namespaces[kube-system]", "get")
    assert _granted(one(rbac, "ClusterRole", "kubus-ingest")) == needed | {identity}


def test_each_role_is_bound_to_its_service_and_the_reconciler_to_nothing(rbac: list[dict[str, Any]]) -> None:
    bindings = [d for d in rbac if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert {d["kind"] for d in rbac if d["kind"].endswith("Role")} == {"ClusterRole"}
    bound = {}
    for b in bindings:
        assert b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": b["metadata"]["name"]}
        (subject,) = b["subjects"]
        assert subject["kind"] == "ServiceAccount" and subject["namespace"] == NAMESPACE
        bound[subject["name"]] = b["roleRef"]["name"]
    assert bound == {"kubus-ingest": "kubus-ingest", "kubus-executor": "kubus-executor"}
    assert one(rbac, "ServiceAccount", "kubus-reconciler")["automountServiceAccountToken"] is False


def test_the_roles_are_within_upstreams_controller_roles() -> None:
    """Nothing beyond what kube-controller-manager's own daemon-set and replicaset controllers may do (their
    bootstrap roles, controller_policy.go), so running kubus grants no power the control plane did not have."""
    upstream: set[Grant] = set()
    for group in ("apps", "extensions"):
        upstream |= {(group, "daemonsets", v) for v in ("get", "list", "watch")}
        upstream |= {(group, r, "update") for r in ("daemonsets/status", "daemonsets/finalizers",
                                                     "replicasets", "replicasets/status", "replicasets/finalizers")}
        upstream |= {(group, "replicasets", v) for v in ("get", "list", "watch")}
    upstream |= {("", "nodes", v) for v in ("list", "watch")}
    upstream |= {("", "pods", v) for v in ("list", "watch", "create", "delete", "patch")}
    upstream |= {("", "pods/binding", "create")}
    upstream |= {("apps", "controllerrevisions", v) for v in ("get", "list", "watch", "create", "delete", "update",
                                                              "patch")}
    upstream |= {(g, "events", v) for g in ("", "events.k8s.io") for v in ("create", "update", "patch")}
    ours = set()
    for role in ("kubus-ingest", "kubus-executor"):
        ours |= _granted(one(render(RBAC), "ClusterRole", role))
    # two exceptions: the executor's GET of a pod whose create found the name taken (upstream's controllers read it
    # from their informer's cache instead), and ingest's read of kube-system, the cluster's identity
    # (ingest/identity.py)
    assert ours - upstream == {("", "pods", "get"), ("", "namespaces[kube-system]", "get")}


def test_the_manifests_say_where_the_roles_come_from() -> None:
    text = (RBAC / "kustomization.yaml").read_text()
    assert "controller_policy.go" in text
