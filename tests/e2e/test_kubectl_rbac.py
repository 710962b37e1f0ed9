"""`kubus sim --authz rbac` driven by the real kubectl: authentication, ServiceAccount tokens and RBAC.

Every expectation is what kube-apiserver (v1.32, `--authorization-mode=RBAC`, `--anonymous-auth=false`)
answers: the 401 body, the 403 messages word for word, what `kubectl auth can-i` and `kubectl auth
whoami` print.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.simulation import Kubectl, SimProcess

pytestmark = pytest.mark.kubectl

_ids = iter(range(10_000))
UNAUTHORIZED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    proc = SimProcess(tmp_path_factory.mktemp("rbac-sim"), "--nodes", "2", "--kubelet-delay", "0.05",
                      "--termination-seconds", "0.2", "--seed", "11", "--authz", "rbac")
    yield proc
    code = proc.stop()
    assert code == 0, f"kubus sim exited with {code}:\n{proc.log_path.read_text()}"


@pytest.fixture
def namespace(sim: SimProcess) -> Iterator[str]:
    name = f"rbac-{next(_ids)}"
    code, body = sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert code == 201, body
    yield name
    sim.request("DELETE", f"/api/v1/namespaces/{name}")


def apply(kubectl: Kubectl, *objects: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def role(name: str, namespace: str | None, *rules: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role" if namespace else "ClusterRole",
            "metadata": meta, "rules": list(rules)}


def binding(name: str, namespace: str | None, role_kind: str, role_name: str, sa_namespace: str,
            sa: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding" if namespace else "ClusterRoleBinding", "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_namespace}]}


def rule(groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        out["resourceNames"] = names
    return out


def pod(name: str, namespace: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                       "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}})


def service_account(kubectl: Kubectl, namespace: str, name: str = "bot") -> str:
    """Creates the ServiceAccount and returns a token for it from `kubectl create token`."""
    assert kubectl("create", "serviceaccount", name, "-n", namespace).stdout.strip() == \
        f"serviceaccount/{name} created"
    token = kubectl("create", "token", name, "-n", namespace).stdout.strip()
    assert token.count(".") == 2, token  # a JWT
    return token


class As:
    """kubectl run with a ServiceAccount's token (the kubeconfig still gives the server and its CA)."""

    def __init__(self, kubectl: Kubectl, token: str):
        self.kubectl, self.token = kubectl, token

    def __call__(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("--token", self.token, *args, input=input, check=check)

    def refused(self, *args: str, input: str | None = None) -> str:
        result = self(*args, input=input, check=False)
        assert result.returncode != 0, result.stdout
        return result.stderr.strip()


def user(namespace: str, name: str = "bot") -> str:
    return f"system:serviceaccount:{namespace}:{name}"


# --- authentication ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/api/v1/pods", "/api", "/healthz", "/apis/apps/v1/namespaces/default/daemonsets"])
def test_anonymous_requests_get_401(sim: SimProcess, path: str) -> None:
    """Without credentials, or with a token the sim never issued, every API path answers kube-apiserver's 401."""
    assert sim.request("GET", path, anonymous=True) == (401, UNAUTHORIZED)
    assert sim.request("GET", path, token="not-a-token") == (401, UNAUTHORIZED)
    assert sim.request("GET", path, token="eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl") == (401, UNAUTHORIZED)


def test_kubectl_with_a_bad_token_is_told_to_log_in(kubectl: Kubectl) -> None:
    result = As(kubectl, "bogus").refused("get", "pods")
    assert "error: You must be logged in to the server" in result, result


def test_admin_kubeconfig(sim: SimProcess, kubectl: Kubectl) -> None:
    """The kubeconfig (0600: it holds the admin's token) is an HTTPS cluster-admin in system:masters."""
    assert sim.url.startswith("https://")
    assert stat.S_IMODE(sim.kubeconfig.stat().st_mode) == 0o600
    whoami = kubectl("auth", "whoami").stdout
    assert re.search(r"^Username\s+kubernetes-admin$", whoami, re.M), whoami
    assert re.search(r"^Groups\s+\[system:masters system:authenticated\]$", whoami, re.M), whoami
    assert kubectl("auth", "can-i", "*", "*").stdout.strip() == "yes"
    assert len(kubectl.json("get", "nodes")["items"]) == 2
    kinds = {line.split()[-1] for line in kubectl("api-resources", "--no-headers").stdout.splitlines()}
    assert {"ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding",
            "SelfSubjectAccessReview", "SelfSubjectReview"} <= kinds


def test_service_account_token(sim: SimProcess, kubectl: Kubectl, namespace: str) -> None:
    """`kubectl create token` mints a token that authenticates as the ServiceAccount, with its groups; it stops
    working once the ServiceAccount is deleted."""
    token = service_account(kubectl, namespace)
    sa = As(kubectl, token)
    whoami = sa("auth", "whoami").stdout
    assert re.search(rf"^Username\s+{user(namespace)}$", whoami, re.M), whoami
    groups = f"[system:serviceaccounts system:serviceaccounts:{namespace} system:authenticated]"
    assert re.search(rf"^Groups\s+{re.escape(groups)}$", whoami, re.M), whoami
    uid = kubectl.json("get", "sa", "bot", "-n", namespace)["metadata"]["uid"]
    assert re.search(rf"^UID\s+{uid}$", whoami, re.M), whoami
    code, review = sim.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                               {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, token=token)
    assert code == 201 and review["status"]["userInfo"]["username"] == user(namespace), review
    kubectl("delete", "sa", "bot", "-n", namespace)
    assert sim.request("GET", "/api", token=token) == (401, UNAUTHORIZED)


def test_token_requests_that_fail(kubectl: Kubectl, namespace: str) -> None:
    missing = kubectl("create", "token", "nobody", "-n", namespace, check=False)
    assert 'serviceaccounts "nobody" not found' in missing.stderr, missing.stderr
    kubectl("create", "sa", "short", "-n", namespace)
    short = kubectl("create", "token", "short", "-n", namespace, "--duration=60s", check=False)
    assert "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes" \
        in short.stderr, short.stderr


# --- authorization ------------------------------------------------------------------------------------------
def test_role_allows_get_but_not_delete(sim: SimProcess, kubectl: Kubectl, namespace: str) -> None:
    """A Role with get/list on pods: reads work, a delete, a watch and a create get kube-apiserver's 403."""
    token = service_account(kubectl, namespace)
    sa = As(kubectl, token)
    kubectl("create", "-f", "-", input=pod("web", namespace))
    who = user(namespace)
    assert sa.refused("get", "pod", "web", "-n", namespace) == (
        f'Error from server (Forbidden): pods "web" is forbidden: User "{who}" cannot get resource "pods" '
        f'in API group "" in the namespace "{namespace}"')
    apply(kubectl, role("pod-reader", namespace, rule([""], ["pods"], ["get", "list"])),
          binding("bot-reads", namespace, "Role", "pod-reader", namespace, "bot"))
    assert sa("get", "pod", "web", "-n", namespace, "-o", "name").stdout.strip() == "pod/web"
    assert sa("get", "pods", "-n", namespace, "-o", "name").stdout.strip() == "pod/web"
    assert sa.refused("delete", "pod", "web", "-n", namespace) == (
        f'Error from server (Forbidden): pods "web" is forbidden: User "{who}" cannot delete resource "pods" '
        f'in API group "" in the namespace "{namespace}"')
    assert sa.refused("create", "-f", "-", input=pod("other", namespace)) == (
        f'Error from server (Forbidden): error when creating "STDIN": pods is forbidden: User "{who}" cannot '
        f'create resource "pods" in API group "" in the namespace "{namespace}"')
    code, body = sim.request("GET", f"/api/v1/namespaces/{namespace}/pods?watch=true", token=token)
    assert code == 403
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": f'pods is forbidden: User "{who}" cannot watch resource "pods" in API group "" '
                               f'in the namespace "{namespace}"',
                    "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403}
    assert sa.refused("get", "pods", "-A") == (
        f'Error from server (Forbidden): pods is forbidden: User "{who}" cannot list resource "pods" in API '
        f'group "" at the cluster scope')
    assert kubectl.json("get", "pod", "web", "-n", namespace)["metadata"]["name"] == "web"  # nothing deleted


def test_can_i_answers_from_the_same_authorizer(kubectl: Kubectl, namespace: str) -> None:
    token = service_account(kubectl, namespace)
    sa = As(kubectl, token)
    apply(kubectl, role("pod-reader", namespace, rule([""], ["pods"], ["get"])),
          binding("bot-reads", namespace, "Role", "pod-reader", namespace, "bot"))
    assert sa("auth", "can-i", "get", "pods", "-n", namespace).stdout.strip() == "yes"
    no = sa("auth", "can-i", "delete", "pods", "-n", namespace, check=False)
    assert (no.returncode, no.stdout.strip()) == (1, "no")
    assert sa("auth", "can-i", "get", "pods", "-n", "default", check=False).stdout.strip() == "no"
    assert sa("auth", "can-i", "get", "/healthz").stdout.strip() == "yes"  # system:public-info-viewer
    assert sa("auth", "can-i", "get", "/metrics", check=False).stdout.strip() == "no"
    # the admin asks on the ServiceAccount's behalf by impersonating it; the ServiceAccount may not impersonate
    assert kubectl("auth", "can-i", "get", "pods", "-n", namespace, "--as", user(namespace)).stdout.strip() == "yes"
    assert kubectl("auth", "can-i", "list", "pods", "-n", namespace, "--as", user(namespace),
                   check=False).stdout.strip() == "no"
    assert sa.refused("get", "pods", "-n", namespace, "--as", "someone") == (
        f'Error from server (Forbidden): users "someone" is forbidden: User "{user(namespace)}" cannot '
        'impersonate resource "users" in API group "" at the cluster scope')
    listed = sa("auth", "can-i", "--list", "-n", namespace).stdout
    assert re.search(r"^pods\s+\[\]\s+\[\]\s+\[get\]$", listed, re.M), listed


def test_cluster_role_bound_in_one_namespace(kubectl: Kubectl, namespace: str) -> None:
    """A ClusterRole bound by a RoleBinding grants only in the binding's namespace; by a ClusterRoleBinding,
    everywhere; cluster-scoped kinds are refused `at the cluster scope` until then."""
    token = service_account(kubectl, namespace)
    sa = As(kubectl, token)
    other = f"{namespace}-other"
    kubectl("create", "namespace", other)
    try:
        apply(kubectl, role(f"{namespace}-rs-reader", None, rule(["apps"], ["replicasets"], ["get", "list"]),
                            rule([""], ["nodes"], ["list"])),
              binding("rs-readers", namespace, "ClusterRole", f"{namespace}-rs-reader", namespace, "bot"))
        assert sa("get", "rs", "-n", namespace).returncode == 0
        assert sa.refused("get", "rs", "-n", other) == (
            f'Error from server (Forbidden): replicasets.apps is forbidden: User "{user(namespace)}" cannot list '
            f'resource "replicasets" in API group "apps" in the namespace "{other}"')
        assert sa.refused("get", "nodes") == (
            f'Error from server (Forbidden): nodes is forbidden: User "{user(namespace)}" cannot list resource '
            '"nodes" in API group "" at the cluster scope')
        apply(kubectl, binding(f"{namespace}-rs-readers", None, "ClusterRole", f"{namespace}-rs-reader",
                               namespace, "bot"))
        assert sa("get", "rs", "-n", other).returncode == 0
        assert sa("get", "nodes", "-o", "name").stdout.split() == ["node/node-0", "node/node-1"]
    finally:
        kubectl("delete", "clusterrolebinding", f"{namespace}-rs-readers", "--ignore-not-found")
        kubectl("delete", "clusterrole", f"{namespace}-rs-reader", "--ignore-not-found")
        kubectl("delete", "namespace", other, "--wait=false")


def test_resource_names(kubectl: Kubectl, namespace: str) -> None:
    """resourceNames allow the named objects only, and never a list (which names none)."""
    token = service_account(kubectl, namespace)
    sa = As(kubectl, token)
    kubectl("create", "-f", "-", input=pod("allowed", namespace))
    kubectl("create", "-f", "-", input=pod("secret", namespace))
    apply(kubectl, role("one-pod", namespace, rule([""], ["pods"], ["get", "list"], ["allowed"])),
          binding("one-pod", namespace, "Role", "one-pod", namespace, "bot"))
    assert sa("get", "pod", "allowed", "-n", namespace, "-o", "name").stdout.strip() == "pod/allowed"
    assert 'pods "secret" is forbidden' in sa.refused("get", "pod", "secret", "-n", namespace)
    assert "pods is forbidden" in sa.refused("get", "pods", "-n", namespace)
    # a list narrowed to one name by a field selector is a request for that name
    named = sa("get", "pods", "-n", namespace, "--field-selector", "metadata.name=allowed", "-o", "name")
    assert named.stdout.strip() == "pod/allowed"


def test_subresources(sim: SimProcess, kubectl: Kubectl, namespace: str) -> None:
    """`pods/status` and `daemonsets/status` are rules of their own: the status may be written, the object not."""
    token = service_account(kubectl, namespace)
    kubectl("create", "-f", "-", input=pod("p", namespace))
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d", "namespace": namespace},
          "spec": {"selector": {"matchLabels": {"app": "d"}},
                   "template": {"metadata": {"labels": {"app": "d"}},
                                "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}}
    kubectl("create", "-f", "-", input=json.dumps(ds))
    apply(kubectl, role("status-writer", namespace, rule([""], ["pods/status"], ["patch"]),
                        rule(["apps"], ["daemonsets/status"], ["update"]), rule(["apps"], ["daemonsets"], ["get"])),
          binding("status-writer", namespace, "Role", "status-writer", namespace, "bot"))
    merge = "application/merge-patch+json"
    patch = {"metadata": {"labels": {"x": "y"}}}
    code, _ = sim.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/p/status", patch, merge, token=token)
    assert code == 200
    code, body = sim.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/p", patch, merge, token=token)
    assert (code, body["message"]) == (403, f'pods "p" is forbidden: User "{user(namespace)}" cannot patch '
                                            f'resource "pods" in API group "" in the namespace "{namespace}"')
    path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets/d"
    code, current = sim.request("GET", path, token=token)
    assert code == 200
    code, body = sim.request("PUT", f"{path}/status", current, token=token)
    assert code == 200, body
    code, body = sim.request("PUT", path, current, token=token)
    assert code == 403
    assert body["message"] == (f'daemonsets.apps "d" is forbidden: User "{user(namespace)}" cannot update resource '
                               f'"daemonsets" in API group "apps" in the namespace "{namespace}"')
    assert body["details"] == {"name": "d", "group": "apps", "kind": "daemonsets"}
    code, body = sim.request("PATCH", f"{path}/status", patch, merge, token=token)
    assert (code, body["message"]) == (403, f'daemonsets.apps "d" is forbidden: User "{user(namespace)}" cannot '
                                            f'patch resource "daemonsets/status" in API group "apps" in the '
                                            f'namespace "{namespace}"')


def test_wildcards_and_a_binding_to_a_missing_role(sim: SimProcess, kubectl: Kubectl, namespace: str) -> None:
    """`*/status` and `*` verbs match; a binding whose role does not exist grants nothing, and the 403 says why."""
    token = service_account(kubectl, namespace)
    sa = As(kubectl, token)
    kubectl("create", "-f", "-", input=pod("p", namespace))
    apply(kubectl, binding("dangling", namespace, "Role", "not-there", namespace, "bot"))
    assert sa.refused("get", "pod", "p", "-n", namespace).endswith(
        f'in the namespace "{namespace}": RBAC: role.rbac.authorization.k8s.io "not-there" not found')
    apply(kubectl, role("statuses", namespace, rule(["*"], ["*/status"], ["*"])),
          binding("statuses", namespace, "Role", "statuses", namespace, "bot"))
    code, _ = sim.request("GET", f"/api/v1/namespaces/{namespace}/pods/p/status", token=token)
    assert code == 200
    assert 'pods "p" is forbidden' in sa.refused("get", "pod", "p", "-n", namespace)


def test_non_resource_urls(sim: SimProcess, kubectl: Kubectl, namespace: str) -> None:
    token = service_account(kubectl, namespace)
    assert As(kubectl, token)("get", "--raw", "/healthz").stdout == "ok"
    code, body = sim.request("GET", "/metrics", token=token)
    assert code == 403
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": f'forbidden: User "{user(namespace)}" cannot get path "/metrics"',
                    "reason": "Forbidden", "details": {}, "code": 403}


def test_rbac_objects_validate(kubectl: Kubectl, namespace: str) -> None:
    """A binding's roleRef cannot change; a rule needs verbs."""
    apply(kubectl, binding("b", namespace, "Role", "r1", namespace, "bot"))
    changed = kubectl("apply", "-f", "-", check=False,
                      input=json.dumps(binding("b", namespace, "Role", "r2", namespace, "bot")))
    assert "roleRef: Invalid value" in changed.stderr and "cannot change roleRef" in changed.stderr, changed.stderr
    bad = kubectl("apply", "-f", "-", check=False, input=json.dumps(role("r", namespace, rule([""], ["pods"], []))))
    assert "rules[0].verbs: Required value: verbs must contain at least one value" in bad.stderr, bad.stderr
