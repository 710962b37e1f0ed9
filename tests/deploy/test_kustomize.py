"""deploy/ renders, and every workload in it is locked down, probed, sized, budgeted and fenced (issue 16, 2)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.manifests import DEPLOY, NAMESPACE, RBAC, WORKLOADS, containers, one, pod_specs, render

pytestmark = pytest.mark.kubectl

# every kubus service is a StatefulSet: a Deployment's pods are made by the ReplicaSet controller, which is kubus
# itself once kube-controller-manager runs without it (docs/production.md, "Why StatefulSets")
SERVICES = {"ingest": "StatefulSet", "reconciler": "StatefulSet", "executor": "StatefulSet"}
CONTAINER_SECURITY = {
    "runAsNonRoot": True,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render(DEPLOY)


def _workload(docs: list[dict[str, Any]], component: str) -> dict[str, Any]:
    return one(docs, SERVICES[component], f"kubus-{component}")


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env") or ()}


def test_deploy_and_its_rbac_render_and_the_rbac_is_the_same_in_both(docs: list[dict[str, Any]]) -> None:
    rbac = render(RBAC)
    kinds = sorted({d["kind"] for d in rbac})
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Namespace", "ServiceAccount"]
    for doc in rbac:
        assert doc in docs, f"deploy/ renders {doc['kind']} {doc['metadata']['name']} differently from deploy/rbac"
    for doc in docs:
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]
    assert {d["metadata"]["name"] for d in rbac if d["kind"] == "ServiceAccount"} == {
        "kubus-ingest", "kubus-reconciler", "kubus-executor"}


def test_every_pod_and_container_is_locked_down(docs: list[dict[str, Any]]) -> None:
    seen = 0
    for where, spec in pod_specs(docs):
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0, where
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"), where
        for _, c in containers(spec):
            assert {k: c["securityContext"].get(k) for k in CONTAINER_SECURITY} == CONTAINER_SECURITY, \
                f"{where} container {c['name']}"
            assert c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"], \
                f"{where} container {c['name']} has no memory request and limit"
            assert c["resources"]["requests"]["cpu"], f"{where} container {c['name']} has no cpu request"
            # a read-only root: whatever a kubus process writes goes to an emptyDir
            mounts = {m["mountPath"] for m in c.get("volumeMounts") or ()}
            assert {"/tmp", "/var/lib/kubus"} <= mounts, f"{where} container {c['name']}: {mounts}"
            seen += 1
    assert seen == 6  # ingest, reconciler, executor, migrate, and the two wait-for-schema init containers


def test_every_service_is_probed_on_its_metrics_port(docs: list[dict[str, Any]]) -> None:
    config = one(docs, "ConfigMap", "kubus-config")["data"]
    # on every interface of the pod (the kubelet probes the pod's IP), not the services' default, loopback
    host, _, text = config["KUBUS_METRICS_BIND_ADDRESS"].rpartition(":")
    assert host in ("", "0.0.0.0"), config["KUBUS_METRICS_BIND_ADDRESS"]
    port = int(text)
    for component in SERVICES:
        spec = _workload(docs, component)["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in c["ports"], component
        # runtime/serving.py's paths
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}, component
        assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}, component
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}, component


def test_each_service_runs_its_command_as_its_own_identity(docs: list[dict[str, Any]]) -> None:
    commands = {"ingest": "ingest", "reconciler": "reconcile", "executor": "execute"}
    for component, command in commands.items():
        spec = _workload(docs, component)["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        assert c["args"][0] == command, component
        assert spec["serviceAccountName"] == f"kubus-{component}", component
        # --instance is the pod's name: stable across restarts for the StatefulSet's reconcilers
        assert _env(c)["KUBUS_INSTANCE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}, component
        refs = {r.get("secretRef", {}).get("name") for r in c["envFrom"]}
        assert f"kubus-nats-{component}" in refs, component
        # the executor opens no database: it gets no database credentials
        assert ("kubus-db" in refs) == (component != "executor"), component
    reconcilers = _workload(docs, "reconciler")
    assert reconcilers["spec"]["serviceName"] == "kubus-reconciler"
    assert one(docs, "Service", "kubus-reconciler")["spec"]["clusterIP"] == "None"
    # no API access: not even a token in the pod
    assert reconcilers["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_the_schema_comes_first(docs: list[dict[str, Any]]) -> None:
    job = one(docs, "Job", "kubus-migrate")
    spec = job["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["args"] == ["db", "upgrade"]
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    # the services that open the store wait until `kubus db current` says the schema is theirs
    for component in ("ingest", "reconciler"):
        (init,) = _workload(docs, component)["spec"]["template"]["spec"]["initContainers"]
        assert "kubus db current" in " ".join(init["command"]), component


def test_every_reference_resolves(docs: list[dict[str, Any]]) -> None:
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    images = set()
    for where, spec in pod_specs(docs):
        assert ("ServiceAccount", spec["serviceAccountName"]) in names, where
        for _, c in containers(spec):
            images.add(c["image"])
            for ref in c.get("envFrom") or ():
                if "configMapRef" in ref:
                    assert ("ConfigMap", ref["configMapRef"]["name"]) in names, where
                else:
                    assert ("Secret", ref["secretRef"]["name"]) in names, where
    assert len(images) == 1, f"one image for every container, not {images}"


def test_disruption_budgets_and_network_policies(docs: list[dict[str, Any]]) -> None:
    for component in SERVICES:
        pdb = one(docs, "PodDisruptionBudget", f"kubus-{component}")
        labels = _workload(docs, component)["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items(), component
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    deny = one(docs, "NetworkPolicy", "kubus-default-deny")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}

    def egress_ports(component: str) -> set[int]:
        ports = set()
        for p in policies:
            sel = p["spec"]["podSelector"]
            applies = (sel.get("matchLabels") == {"app.kubernetes.io/name": "kubus"} or any(
                component in e["values"] for e in sel.get("matchExpressions") or ()))
            if applies and p["spec"].get("egress"):
                ports |= {port["port"] for rule in p["spec"]["egress"] for port in rule["ports"]}
        return ports

    # the reconcilers reach NATS and PostgreSQL, never the API server; the executor never the database
    assert egress_ports("reconciler") == {53, 4222, 5432}
    assert egress_ports("executor") == {53, 4222, 443, 6443}
    assert egress_ports("ingest") == {53, 4222, 5432, 443, 6443}


def test_no_kubus_pod_depends_on_kubus_to_exist(docs: list[dict[str, Any]]) -> None:
    """kube-controller-manager runs without its DaemonSet and ReplicaSet controllers beside kubus, so a workload
    whose pods those controllers make (a Deployment's ReplicaSet, a ReplicaSet, a DaemonSet) would never get its
    first pod on a fresh cluster, nor get it back once lost: every kubus pod comes from a StatefulSet or a Job."""
    made_by_kubus = {"Deployment", "ReplicaSet", "DaemonSet"}
    workloads = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in (*WORKLOADS, *made_by_kubus)}
    assert {kind for kind, _ in workloads} <= {"StatefulSet", "Job"}, sorted(workloads)
    for component in SERVICES:
        statefulset = _workload(docs, component)["spec"]
        # start them together: leases (reconcilers) and the work queue (executors) share the work, not start order
        assert statefulset["podManagementPolicy"] == "Parallel", component
        governing = one(docs, "Service", statefulset["serviceName"])["spec"]
        assert governing["clusterIP"] == "None", component
        assert governing["selector"].items() <= statefulset["template"]["metadata"]["labels"].items(), component
