"""Least privilege end to end: the pipeline against `kubus sim --authz rbac`, each service under its own
ServiceAccount's token with only the ClusterRoles of kubus's RBAC manifests (issue 16, item 4).

The manifests are deploy/rbac's (`kubectl apply -k`). The identities get tokens from `kubectl create token`,
and `kubus ingest` and `kubus execute` each run with a kubeconfig of its own: the same server and CA as the
admin's, its own token. `kubus reconcile` takes no kubeconfig at all: it never calls the API (its
ServiceAccount has no binding). A ReplicaSet converges and a DaemonSet rolls from one image to the next with
no 403 anywhere; then a role missing one verb makes the executor's creates fail loudly (event, condition,
result), saying which verb on which resource was refused.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.pipeline import test_replicaset as shared
from tests.pipeline.harness import Pipeline
from tests.simulation import Kubectl

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "rbac"
SYSTEM = "kubus-system"
IDENTITIES = {"ingest": "kubus-ingest", "execute": "kubus-executor"}  # the services that call the API
SERVICES = ("ingest", "reconcile", "execute")
OLD, NEW = "busybox:1", "busybox:2"
until, converged, settled = shared.until, shared.converged, shared.settled
_names = itertools.count()


def apply_rbac(kubectl: Kubectl) -> None:
    kubectl("apply", "-k", str(REPO / "deploy" / "rbac"))


def service_kubeconfig(admin: Path, token: str, path: Path) -> None:
    """The admin's kubeconfig with the ServiceAccount's token instead of the admin's."""
    config = yaml.safe_load(admin.read_text())
    config["users"][0]["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    workdir = tmp_path_factory.mktemp("least-privilege")
    configs = {service: workdir / f"{service}.kubeconfig" for service in IDENTITIES}
    p = Pipeline(workdir, "--authz", "rbac", "--termination-seconds", "0.2",
                 args_for={service: ["--kubeconfig", str(path)] for service, path in configs.items()})

    def up() -> bool:
        p.supervise()
        try:
            nodes = p.sql("select count(distinct name) from observed_events where kind = 'Node'")[0][0]
        except sqlite3.OperationalError:  # no database, or no schema, yet
            return False
        return nodes == 4 and " consuming " in (p.workdir / "execute.log").read_text()

    try:
        admin = Kubectl(p.sim.kubeconfig)
        apply_rbac(admin)
        for service, account in IDENTITIES.items():
            token = admin("create", "token", account, "-n", SYSTEM, "--duration=2h").stdout.strip()
            service_kubeconfig(p.sim.kubeconfig, token, configs[service])
        p.start_all()
        until(p, up, "the services to start under their own identities", timeout=60)
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def kubectl(pipeline: Pipeline) -> Kubectl:
    return Kubectl(pipeline.sim.kubeconfig)


@pytest.fixture
def namespace(kubectl: Kubectl) -> str:
    name = f"least-{next(_names)}"
    kubectl("create", "namespace", name)
    return name


def refusals(p: Pipeline) -> list[str]:
    """Every line of the services' logs that reports a 401 or 403."""
    found = []
    for service in SERVICES:
        for line in (p.workdir / f"{service}.log").read_text().splitlines():
            # the line's own time left out: its milliseconds were ",403" once (a clean-clone CI run)
            message = re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", "", line)
            if re.search(r"forbidden|unauthorized|\b40[13]\b", message, re.I):
                found.append(f"{service}: {line}")
    return found


def refused_results(p: Pipeline) -> list[tuple[Any, ...]]:
    return p.sql("select action, code, message from action_results where code in (401, 403)")


def daemonset(name: str, namespace: str, image: str) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": labels},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "agent", "image": image}]}}}}


def rolled_out(p: Pipeline, namespace: str, name: str, image: str) -> list[dict[str, Any]] | None:
    code, ds = p.sim.request("GET", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")
    assert code == 200, ds
    pods = [pod for pod in p.pods(namespace) if shared.controller_uid(pod) == ds["metadata"]["uid"]]
    status = ds.get("status") or {}
    done = (len(pods) == 4 and all(shared.is_ready(pod) and not pod["metadata"].get("deletionTimestamp")
                                   and pod["spec"]["containers"][0]["image"] == image for pod in pods)
            and status.get("observedGeneration") == ds["metadata"]["generation"]
            and status.get("updatedNumberScheduled") == 4 and status.get("numberAvailable") == 4)
    return pods if done else None


def test_services_run_as_their_service_accounts(pipeline: Pipeline, kubectl: Kubectl) -> None:
    """Each service's kubeconfig is its ServiceAccount, with exactly the rights of its ClusterRole."""
    for service, account in IDENTITIES.items():
        token = yaml.safe_load((pipeline.workdir / f"{service}.kubeconfig").read_text())["users"][0]["user"]["token"]
        whoami = kubectl("--token", token, "auth", "whoami").stdout
        assert re.search(rf"^Username\s+system:serviceaccount:{SYSTEM}:{account}$", whoami, re.M), whoami

    def can(account: str, *args: str) -> bool:
        result = kubectl("auth", "can-i", *args, "--as", f"system:serviceaccount:{SYSTEM}:{account}", check=False)
        return result.stdout.strip() == "yes"

    assert can("kubus-ingest", "watch", "pods", "-A") and not can("kubus-ingest", "create", "pods", "-n", "x")
    assert can("kubus-executor", "create", "pods", "-n", "x") and not can("kubus-executor", "list", "pods", "-A")
    assert can("kubus-executor", "update", "daemonsets", "--subresource=status", "-n", "x")
    assert not can("kubus-executor", "update", "daemonsets", "-n", "x")
    assert not can("kubus-reconciler", "get", "pods", "-n", "x")


def test_replicaset_and_daemonset_rollout_with_least_privilege(pipeline: Pipeline, kubectl: Kubectl,
                                                                namespace: str, tmp_path: Path) -> None:
    """A ReplicaSet converges, scales down, and a DaemonSet rolls to a new image: nothing is refused."""
    shared.apply(kubectl, tmp_path, shared.replicaset("web", namespace, 3))
    converged(pipeline, namespace, "web", 3, ceiling=3, timeout=60)
    kubectl("scale", "rs/web", "-n", namespace, "--replicas=1")
    converged(pipeline, namespace, "web", 1, timeout=60)
    shared.apply(kubectl, tmp_path, daemonset("agent", namespace, OLD))
    until(pipeline, lambda: rolled_out(pipeline, namespace, "agent", OLD), "the DaemonSet on every node", 60)
    old_uids = {pod["metadata"]["uid"] for pod in rolled_out(pipeline, namespace, "agent", OLD) or []}
    shared.apply(kubectl, tmp_path, daemonset("agent", namespace, NEW))
    pods = until(pipeline, lambda: rolled_out(pipeline, namespace, "agent", NEW), "the rolling update", 90)
    assert not old_uids & {pod["metadata"]["uid"] for pod in pods}
    revisions = kubectl.json("get", "controllerrevisions", "-n", namespace)["items"]
    assert sorted(r["revision"] for r in revisions) == [1, 2]
    settled(pipeline, namespace, "web", timeout=30)
    assert refused_results(pipeline) == []
    assert refusals(pipeline) == [], "\n".join(refusals(pipeline))


def test_a_role_missing_one_verb_fails_loudly(pipeline: Pipeline, kubectl: Kubectl, namespace: str,
                                              tmp_path: Path) -> None:
    """Without `create` on pods the executor's creates are refused, and the refusal names the verb and the
    resource where a user looks: the ReplicaSet's FailedCreate event and ReplicaFailure condition, and the
    action's result in the audit trail. Once the verb is back, the ReplicaSet converges."""
    role = kubectl.json("get", "clusterrole", "kubus-executor")
    original = [dict(rule) for rule in role["rules"]]
    for rule in role["rules"]:
        if rule.get("resources") == ["pods"] and rule.get("apiGroups") == [""]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "create"]
    assert role["rules"] != original
    role["metadata"] = {"name": "kubus-executor"}
    kubectl("replace", "-f", "-", input=yaml.safe_dump(role))
    try:
        shared.apply(kubectl, tmp_path, shared.replicaset("starved", namespace, 2))
        expected = (f'pods is forbidden: User "system:serviceaccount:{SYSTEM}:kubus-executor" cannot create '
                    f'resource "pods" in API group "" in the namespace "{namespace}"')

        def refused() -> list[tuple[Any, ...]] | None:
            rows = [r for r in refused_results(pipeline) if r[0] == "create_pods"]
            return rows or None

        rows = until(pipeline, refused, "the executor's refused creates", timeout=60)
        assert all(code == 403 and expected in (message or "") for _, code, message in rows), rows
        events = until(pipeline, lambda: shared.events_of(kubectl, namespace, "starved", "FailedCreate"),
                       "a FailedCreate event", timeout=30)
        assert expected in events[0]["message"], events
        condition = until(pipeline, lambda: shared.replica_failure(pipeline, namespace, "starved"),
                          "the ReplicaFailure condition", timeout=30)
        assert condition["reason"] == "FailedCreate" and expected in condition["message"], condition
        assert kubectl.json("get", "pods", "-n", namespace)["items"] == []
    finally:
        role["rules"] = original
        kubectl("replace", "-f", "-", input=yaml.safe_dump(role))
    # with the verb back, the ReplicaSet converges: nothing was lost
    converged(pipeline, namespace, "starved", 2, timeout=90)
