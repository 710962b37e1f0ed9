"""The install on a real control plane (issue 22, part 4): `kubectl apply -k` of an overlay of deploy/ (the one
docs/production.md tells a user to write) on kube-apiserver v1.36 whose kube-controller-manager runs without its
DaemonSet and ReplicaSet controllers.

1. The real API server accepts every object (`kubectl apply --dry-run=server`, which does refuse an invalid one),
   and every kubus pod comes into existence from nothing: the StatefulSets' (made by the StatefulSet controller)
   and the migrate Job's, Running (kwok fakes the containers) under the namespace's enforced `restricted` Pod
   Security Standard, their PodDisruptionBudgets counting them. A Deployment-based install would not: its
   ReplicaSet is made, its pods never are (the bug the StatefulSets fixed).
2. kwok runs no container, so the three services also run here as processes, with the containers' own arguments
   and the environment the overlay's ConfigMap and Secrets give them, against the test's NATS (docs/
   nats-permissions.conf: a least-privilege user each) and PostgreSQL; ingest and the executor with tokens of
   deploy/rbac's ServiceAccounts (`kubectl create token`), the reconciler with no API access at all. A
   ReplicaSet and a DaemonSet converge, and the API server's audit log (which logs every request of kubus-system's
   ServiceAccounts, reads too: conftest's KUBUS_SERVICE_ACCOUNTS) shows none of theirs refused and none beyond what
   the rendered ClusterRoles grant.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml  # type: ignore[import-untyped]

from controlplane.api import Api
from controlplane.processes import ControlPlane
from messages import subjects
from runtime.bus import PARTITIONS_KEY
from runtime.natsserver import binary as nats_binary
from runtime.ports import free_port
from tests import postgres
from tests.controlplane.conftest import KUBUS_SERVICE_ACCOUNTS, NODES, pods, running_and_ready
from tests.simulation import Kubectl, wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SYSTEM = "kubus-system"
STATEFULSETS = {"kubus-ingest": 2, "kubus-reconciler": 3, "kubus-executor": 2}
NATS_CONFIG = REPO / "docs" / "nats-permissions.conf"
NATS_PASSWORDS = {"admin": "admin-pw-1", "ingest": "ingest-pw-2", "reconciler": "reconciler-pw-3",
                  "executor": "executor-pw-4"}
# the service each StatefulSet runs, and the ServiceAccount it calls the API as (None: it never does)
SERVICES = {"kubus-ingest": "kubus-ingest", "kubus-reconciler": None, "kubus-executor": "kubus-executor"}
USER = "system:serviceaccount:kubus-system:"


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


@dataclass
class Install:
    workdir: Path
    overlay: Path
    nats_url: str
    db_url: str
    rendered: list[dict[str, Any]]
    nats: subprocess.Popen[bytes]
    applied: dict[str, str] = field(default_factory=dict)  # what `kubectl apply` printed: dry-run, real

    def find(self, kind: str, name: str) -> dict[str, Any]:
        found = [d for d in self.rendered if d["kind"] == kind and d["metadata"]["name"] == name]
        assert len(found) == 1, f"the overlay renders {len(found)} {kind} {name}"
        return found[0]

    def env_of(self, workload: dict[str, Any], container: str) -> dict[str, str]:
        """The environment the pod's container gets from its envFrom (the overlay's ConfigMap and Secrets)."""
        spec = workload["spec"]["template"]["spec"]
        (c,) = [c for c in spec.get("containers", []) + spec.get("initContainers", []) if c["name"] == container]
        env: dict[str, str] = {}
        for source in c.get("envFrom", []):
            if "configMapRef" in source:
                env.update(self.find("ConfigMap", source["configMapRef"]["name"])["data"])
            else:
                secret = self.find("Secret", source["secretRef"]["name"])
                env.update({k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()})
                env.update(secret.get("stringData", {}))
        return env


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def overlay_text(deploy: str, nats_url: str, db_url: str) -> str:
    """docs/production.md's overlay, with the test's values (literals instead of .env files)."""
    def users(who: str) -> list[str]:
        return [f"KUBUS_NATS_USER=kubus-{who}", f"KUBUS_NATS_PASSWORD={NATS_PASSWORDS[who]}"]

    return yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [deploy],
        "images": [{"name": "ghcr.io/example/kubus", "newName": "registry.example.com/kubus", "newTag": "test"}],
        "configMapGenerator": [{"name": "kubus-config", "behavior": "merge",
                                "literals": [f"KUBUS_NATS_URL={nats_url}", "KUBUS_STREAM_REPLICAS=1"]}],
        "secretGenerator": [
            {"name": "kubus-db", "behavior": "replace", "literals": [f"KUBUS_DB_URL={db_url}"]},
            {"name": "kubus-nats-ingest", "behavior": "replace", "literals": users("ingest")},
            {"name": "kubus-nats-reconciler", "behavior": "replace", "literals": users("reconciler")},
            {"name": "kubus-nats-executor", "behavior": "replace", "literals": users("executor")}]})


@pytest.fixture(scope="module")
def install(controlplane: ControlPlane, kubectl: Kubectl, pg_admin_url: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    """The test's NATS and PostgreSQL, and an overlay of deploy/ pointing at them (rendered, not applied yet);
    at the end everything the overlay made is deleted, kubus-system included."""
    workdir = tmp_path_factory.mktemp("install")
    port = free_port()
    nats_log = open(workdir / "nats.log", "wb")  # noqa: SIM115 - the child's
    nats = subprocess.Popen([nats_binary(), "-c", str(NATS_CONFIG), "-a", "127.0.0.1", "-p", str(port),
                             "-sd", str(workdir / "nats")], stdout=nats_log, stderr=subprocess.STDOUT,
                            env={**os.environ, **{f"KUBUS_{w.upper()}_PASSWORD": pw
                                                  for w, pw in NATS_PASSWORDS.items()}})
    nats_log.close()
    overlay = workdir / "overlay"
    overlay.mkdir()
    try:
        with postgres.fresh_database(pg_admin_url, "kubus_install") as db_url:
            nats_url = f"nats://127.0.0.1:{port}"
            (overlay / "kustomization.yaml").write_text(
                overlay_text(os.path.relpath(REPO / "deploy", overlay), nats_url, db_url))
            rendered = documents(kubectl("kustomize", str(overlay)).stdout)
            wait_for(lambda: listening(port), timeout=15, interval=0.05, what="nats-server to listen")
            yield Install(workdir, overlay, nats_url, db_url, rendered, nats)
            kubectl("delete", "-k", str(overlay), "--ignore-not-found", "--wait=false", timeout=60)
    finally:
        nats.terminate()
        nats.wait(timeout=15)


@pytest.fixture(scope="module")
def applied(install: Install, kubectl: Kubectl) -> Install:
    """`kubectl apply -k overlay`, after a server-side dry run of it. The dry run needs the namespace (the server
    checks that it exists), so the namespace alone is applied first, from the same rendering."""
    kubectl("apply", "-f", "-", input=yaml.safe_dump(install.find("Namespace", SYSTEM)))
    dry = kubectl("apply", "--dry-run=server", "-k", str(install.overlay), timeout=60)
    install.applied["dry-run"], install.applied["dry-run warnings"] = dry.stdout, dry.stderr
    real = kubectl("apply", "-k", str(install.overlay), timeout=60)
    install.applied["apply"], install.applied["apply warnings"] = real.stdout, real.stderr
    return install


def owners(pod: dict[str, Any]) -> list[str]:
    return [o["kind"] for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")]


def test_the_real_api_server_accepts_every_object_of_the_install(applied: Install) -> None:
    lines = applied.applied["dry-run"].splitlines()
    objects = [d for d in applied.rendered if d["kind"] != "Namespace"]
    assert len(lines) == len(objects) + 1, lines  # the namespace: "unchanged (server dry run)"
    created = [line for line in lines if line.endswith(" created (server dry run)")]
    assert len(created) == len(objects), lines
    for kind in ("PodDisruptionBudget", "NetworkPolicy", "StatefulSet", "Job", "ClusterRole"):
        assert any(d["kind"] == kind for d in objects), kind
    # no warning either (kubectl prints the API server's on stderr): a Pod Security one, a deprecated field's
    assert not applied.applied["dry-run warnings"].strip(), applied.applied["dry-run warnings"]
    assert not applied.applied["apply warnings"].strip(), applied.applied["apply warnings"]


def test_a_server_side_dry_run_does_refuse_an_invalid_object(applied: Install, kubectl: Kubectl) -> None:
    """What makes the dry run above worth something: the server validates, and refuses (kubectl exits non-zero)."""
    policy = json.loads(json.dumps(applied.find("NetworkPolicy", "kubus-dns-and-nats")))
    policy["metadata"]["name"] = "kubus-invalid"
    policy["spec"]["egress"][0]["ports"][0]["protocol"] = "XDP"
    refused = kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(policy), check=False)
    assert refused.returncode != 0, refused.stdout
    assert "Unsupported value: \"XDP\"" in refused.stderr, refused.stderr
    # and the namespace's `restricted` Pod Security Standard is enforced: a root pod is refused
    root = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root", "namespace": SYSTEM},
            "spec": {"containers": [{"name": "c", "image": "registry.example.com/kubus:test",
                                     "securityContext": {"runAsUser": 0}}]}}
    refused = kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(root), check=False)
    assert refused.returncode != 0, refused.stdout
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr, refused.stderr
    # a workload whose pods would be refused is accepted, with a warning on stderr (which the install has none of)
    executor = json.loads(json.dumps(applied.find("StatefulSet", "kubus-executor")))
    executor["metadata"]["name"] = "kubus-root"
    executor["spec"]["template"]["spec"]["securityContext"]["runAsUser"] = 0
    warned = kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(executor))
    assert 'Warning: would violate PodSecurity "restricted:latest"' in warned.stderr, warned.stderr


def test_every_kubus_pod_comes_into_existence_from_nothing(applied: Install, controlplane: ControlPlane,
                                                           api: Api) -> None:
    assert not controlplane.config.upstream_controllers  # kube-controller-manager without its two controllers
    namespace = api.get(f"/api/v1/namespaces/{SYSTEM}")
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted", labels

    def all_there() -> list[dict[str, Any]] | None:
        every = pods(api, SYSTEM)
        members = [p for p in every if owners(p) == ["StatefulSet"] and running_and_ready(p)]
        migrate = [p for p in every if owners(p) == ["Job"]
                   and (p.get("status") or {}).get("phase") in ("Running", "Succeeded")]
        return every if len(members) == sum(STATEFULSETS.values()) and len(migrate) == 1 else None

    every = wait_for(all_there, timeout=90, interval=0.2, what="every kubus pod Running (the migrate Job's run)")
    names = sorted(p["metadata"]["name"] for p in every if owners(p) == ["StatefulSet"])
    assert names == sorted(f"{s}-{i}" for s, n in STATEFULSETS.items() for i in range(n)), names
    assert not api.get(f"/apis/apps/v1/namespaces/{SYSTEM}/replicasets")["items"]  # nothing waits on kubus
    for pod in every:
        assert pod["spec"]["nodeName"].startswith("kwok-node-"), pod["spec"]  # scheduled by kube-scheduler
    for name, replicas in STATEFULSETS.items():
        status = wait_for(lambda name=name, replicas=replicas: (
            lambda s: s if s.get("readyReplicas") == replicas else None)(
            api.get(f"/apis/apps/v1/namespaces/{SYSTEM}/statefulsets/{name}").get("status") or {}),
            timeout=60, interval=0.2, what=f"{name}'s status")
        assert status["replicas"] == replicas, status
        # the disruption controller finds each PodDisruptionBudget's pods: its selector matches them
        pdb = wait_for(lambda name=name, replicas=replicas: (
            lambda s: s if s.get("expectedPods") == replicas and s.get("currentHealthy") == replicas else None)(
            api.get(f"/apis/policy/v1/namespaces/{SYSTEM}/poddisruptionbudgets/{name}").get("status") or {}),
            timeout=60, interval=0.2, what=f"the PodDisruptionBudget {name}'s status")
        assert pdb["disruptionsAllowed"] == 1, pdb
    job = wait_for(lambda: (lambda s: s if s.get("succeeded") == 1 else None)(
        api.get(f"/apis/batch/v1/namespaces/{SYSTEM}/jobs/kubus-migrate").get("status") or {}),
        timeout=60, interval=0.2, what="the migrate Job to succeed (kwok completes a Job's pod)")
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["conditions"]), job
    policies = api.get(f"/apis/networking.k8s.io/v1/namespaces/{SYSTEM}/networkpolicies")["items"]
    assert sorted(p["metadata"]["name"] for p in policies) == sorted(
        d["metadata"]["name"] for d in applied.rendered if d["kind"] == "NetworkPolicy")
    # made by kube-controller-manager's StatefulSet and Job controllers: nobody else created a pod here
    entries = [json.loads(line) for line in controlplane.audit_log.read_text().splitlines() if line.strip()]
    creators = {e["user"]["username"] for e in entries if e["verb"] == "create" and e["stage"] == "ResponseComplete"
                and e.get("objectRef", {}).get("resource") == "pods" and e["objectRef"].get("namespace") == SYSTEM
                and not e["objectRef"].get("subresource") and e["responseStatus"]["code"] == 201}
    assert creators == {"system:serviceaccount:kube-system:statefulset-controller",
                        "system:serviceaccount:kube-system:job-controller"}, creators


def test_a_deployment_based_install_would_get_no_pods(applied: Install, api: Api, kubectl: Kubectl,
                                                      namespace: str) -> None:
    """The bug the StatefulSets fixed: ingest as a Deployment gets its ReplicaSet (the Deployment controller is on)
    but no pod, as nobody is the ReplicaSet controller yet (kubus is not running). The same pod template as a
    StatefulSet in the same namespace, applied after it, has its pods Running: the Deployment had its chance."""
    ingest = json.loads(json.dumps(applied.find("StatefulSet", "kubus-ingest")))
    kubectl("create", "serviceaccount", "kubus-ingest", "-n", namespace)  # the pods' (none made without it)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "kubus-ingest", "namespace": namespace},
                  "spec": {"replicas": 2, "selector": ingest["spec"]["selector"],
                           "template": ingest["spec"]["template"]}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(deployment))
    statefulset = {**ingest, "metadata": {"name": "kubus-ingest-sts", "namespace": namespace}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(statefulset))

    def deployment_stalled() -> dict[str, Any] | None:
        status = api.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/kubus-ingest").get("status") or {}
        available = [c for c in status.get("conditions") or [] if c["type"] == "Available"]
        return status if available and available[0]["status"] == "False" else None

    status = wait_for(deployment_stalled, timeout=60, interval=0.2, what="the Deployment's status")
    assert status.get("unavailableReplicas") == 2 and not status.get("availableReplicas"), status
    wait_for(lambda: len([p for p in pods(api, namespace) if running_and_ready(p)]) == 2, timeout=60,
             interval=0.2, what="the StatefulSet's 2 pods Running")
    (replicaset,) = api.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets")["items"]
    assert replicaset["spec"]["replicas"] == 2, replicaset["spec"]
    assert not (replicaset.get("status") or {}).get("observedGeneration"), replicaset["status"]  # nobody saw it
    owned = [p for p in pods(api, namespace) if owners(p) == ["ReplicaSet"]]
    assert not owned, owned
    assert all(owners(p) == ["StatefulSet"] for p in pods(api, namespace))
    # gone before the next test starts kubus, which would otherwise make these pods in a namespace being deleted
    kubectl("delete", "-n", namespace, "deployment/kubus-ingest", "--cascade=foreground", "--wait=true",
            timeout=90)
    wait_for(lambda: not api.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets")["items"], timeout=60,
             interval=0.2, what="the Deployment's ReplicaSet deleted")


# --- the services, as processes with the ServiceAccounts' tokens ------------------------------------------------
@dataclass
class Service:
    name: str  # the StatefulSet's
    proc: subprocess.Popen[bytes]
    log: Path
    port: int

    def ready(self) -> bool:
        assert self.proc.poll() is None, f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def kubeconfig_with_token(plane: ControlPlane, token: str) -> dict[str, Any]:
    assert plane.pki is not None
    ca = base64.b64encode(plane.pki.ca.cert.read_bytes()).decode()
    return {"apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": plane.server, "certificate-authority-data": ca}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}], "current-context": "c"}


def host_env(extra: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KUBUS_") and k != "KUBECONFIG"}
    return {**base, **extra}


def kubus_command(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kubus", *args], capture_output=True, text=True, timeout=120,
                          env=env)


@pytest.fixture(scope="module")
def services(applied: Install, controlplane: ControlPlane, kubectl: Kubectl) -> Iterator[dict[str, Service]]:
    work = applied.workdir / "services"
    work.mkdir()
    home = work / "home"  # no ~/.kube/config of the machine's
    home.mkdir()
    # the migrate Job's container, then the streams by NATS's admin user (the services may not create them)
    job = applied.find("Job", "kubus-migrate")
    migrate = kubus_command(job["spec"]["template"]["spec"]["containers"][0]["args"],
                            host_env({**applied.env_of(job, "migrate"), "HOME": str(home)}))
    assert migrate.returncode == 0, migrate.stderr
    config = applied.env_of(applied.find("StatefulSet", "kubus-reconciler"), "reconciler")
    ensured = kubus_command(["streams", "ensure"], host_env({
        "KUBUS_NATS_URL": config["KUBUS_NATS_URL"], "KUBUS_PARTITIONS": config["KUBUS_PARTITIONS"],
        "KUBUS_STREAM_REPLICAS": config["KUBUS_STREAM_REPLICAS"], "KUBUS_NATS_USER": "kubus-admin",
        "KUBUS_NATS_PASSWORD": NATS_PASSWORDS["admin"], "HOME": str(home)}))
    assert ensured.returncode == 0, ensured.stderr
    running: dict[str, Service] = {}
    try:
        for name, account in SERVICES.items():
            workload = applied.find("StatefulSet", name)
            (container,) = workload["spec"]["template"]["spec"]["containers"]
            port = free_port()
            env = {**applied.env_of(workload, container["name"]), "KUBUS_INSTANCE": f"{name}-0",
                   "KUBUS_DATA_DIR": str(work / name), "KUBUS_METRICS_BIND_ADDRESS": f"127.0.0.1:{port}",
                   "HOME": str(home)}
            if account is not None:
                token = kubectl("create", "token", account, "-n", SYSTEM, "--duration=1h").stdout.strip()
                path = work / f"{name}.kubeconfig"
                path.write_text(yaml.safe_dump(kubeconfig_with_token(controlplane, token)))
                path.chmod(0o600)
                env["KUBECONFIG"] = str(path)
            log = work / f"{name}.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen([sys.executable, "-m", "kubus", *container["args"]], stdout=out,
                                        stderr=subprocess.STDOUT, env=host_env(env))
            running[name] = Service(name, proc, log, port)
        for service in running.values():
            wait_for(service.ready, timeout=90, interval=0.2, what=f"{service.name} to be ready (/readyz)")
        yield running
    finally:
        for service in running.values():
            if service.proc.poll() is None:
                service.proc.send_signal(signal.SIGTERM)
        codes = {}
        for service in running.values():
            try:
                codes[service.name] = service.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                service.proc.kill()
                codes[service.name] = service.proc.wait()
    logs = {s.name: s.tail() for s in running.values()}
    assert codes == dict.fromkeys(running, 0), (codes, logs)
    for name, service in running.items():
        text = service.log.read_text(errors="replace")
        assert "Traceback" not in text, (name, text[-4000:])
        for secret in NATS_PASSWORDS.values():
            assert secret not in text, name


def logs_of(services: dict[str, Service]) -> str:
    return "".join(f"\n--- {name}:\n{s.tail()}" for name, s in services.items())


def rule_grants(rule: dict[str, Any], group: str, resource: str, verb: str, name: str | None) -> bool:
    return ((group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
            and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
            and (verb in rule["verbs"] or "*" in rule["verbs"])
            and (not rule.get("resourceNames") or name in rule["resourceNames"]))


def rules_of(rendered: list[dict[str, Any]], account: str) -> list[dict[str, Any]]:
    """The rules the rendered ClusterRoleBindings give the ServiceAccount."""
    roles = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "ClusterRole"}
    rules: list[dict[str, Any]] = []
    for binding in (d for d in rendered if d["kind"] == "ClusterRoleBinding"):
        if {"kind": "ServiceAccount", "name": account, "namespace": SYSTEM} in binding["subjects"]:
            rules += roles[binding["roleRef"]["name"]]["rules"]
    return rules


def requests_of(plane: ControlPlane, account: str) -> list[dict[str, Any]]:
    """The audit log's entries of the ServiceAccount's requests, one per request (its last stage)."""
    last: dict[str, dict[str, Any]] = {}
    for line in plane.audit_log.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            if entry["user"]["username"] == USER + account:
                last[entry["auditID"]] = entry
    return list(last.values())


def test_the_services_converge_as_their_serviceaccounts_and_are_never_refused(
        services: dict[str, Service], applied: Install, controlplane: ControlPlane, api: Api, kubectl: Kubectl,
        namespace: str) -> None:
    """Every request the executor makes in normal work: a ReplicaSet adopting an orphan (patch), releasing a pod
    relabelled out of its selector (patch) and replacing it, scaling down (delete); a DaemonSet placing a pod on
    each node, rolling to a new image and rolled back (its ControllerRevisions created and patched); their status
    and events."""
    labels = {"app": "web"}
    template = {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}}
    api.post(f"/api/v1/namespaces/{namespace}/pods", {"apiVersion": "v1", "kind": "Pod",
                                                      "metadata": {"name": "orphan", "labels": labels},
                                                      "spec": template["spec"]})
    wait_for(lambda: any(running_and_ready(p) for p in pods(api, namespace)), timeout=60, interval=0.2,
             what="the orphan Running and Ready")
    rs_uid = api.post(f"/apis/apps/v1/namespaces/{namespace}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": labels}, "template": template}})["metadata"]["uid"]
    api.post(f"/apis/apps/v1/namespaces/{namespace}/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
            **template, "metadata": {"labels": {"app": "agent"}}}}})

    def replicaset_at(replicas: int) -> bool:
        rs = api.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets/web")
        status = rs.get("status") or {}
        live = pods(api, namespace, "app=web")
        return (len(live) == replicas and all(running_and_ready(p) for p in live)
                and all([o["uid"] for o in p["metadata"].get("ownerReferences") or []] == [rs_uid] for p in live)
                and status.get("observedGeneration") == rs["metadata"]["generation"]
                and status.get("readyReplicas", 0) == replicas and status.get("replicas", 0) == replicas)

    def daemonset_available(image: str) -> bool:
        ds = api.get(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/agent")
        status = ds.get("status") or {}
        live = pods(api, namespace, "app=agent")
        return (len(live) == NODES and all(running_and_ready(p) for p in live)
                and {p["spec"]["containers"][0]["image"] for p in live} == {image}
                and status.get("observedGeneration") == ds["metadata"]["generation"]
                and status.get("numberAvailable") == status.get("updatedNumberScheduled") == NODES)

    old, new = "registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.9"
    try:
        wait_for(lambda: replicaset_at(3), timeout=90, interval=0.2, what="the ReplicaSet's 3 pods, the orphan's too")
        wait_for(lambda: daemonset_available(old), timeout=90, interval=0.2, what="the DaemonSet's pod on each node")
        kubectl("label", "-n", namespace, "pod/orphan", "app=released", "--overwrite")
        wait_for(lambda: replicaset_at(3) and not api.get(f"/api/v1/namespaces/{namespace}/pods/orphan")[
            "metadata"].get("ownerReferences"), timeout=90, interval=0.2, what="the relabelled pod released, replaced")
        api.request("PATCH", f"/apis/apps/v1/namespaces/{namespace}/replicasets/web/scale",
                    {"spec": {"replicas": 1}}, content_type="application/merge-patch+json")
        kubectl("set", "image", "-n", namespace, "ds/agent", f"pause={new}")
        wait_for(lambda: replicaset_at(1), timeout=90, interval=0.2, what="the ReplicaSet scaled to 1")
        wait_for(lambda: daemonset_available(new), timeout=120, interval=0.2, what="the DaemonSet rolled to 3.9")
        kubectl("rollout", "undo", "-n", namespace, "ds/agent")
        wait_for(lambda: daemonset_available(old), timeout=120, interval=0.2, what="the DaemonSet rolled back")
    except AssertionError as exc:
        raise AssertionError(f"{exc}{logs_of(services)}") from None
    creates = [e for e in requests_of(controlplane, "kubus-executor")
               if e["verb"] == "create" and e["objectRef"].get("resource") == "pods"
               and e["objectRef"].get("namespace") == namespace and e["responseStatus"]["code"] == 201]
    # the executor, as kubus-executor, made every pod here: 2 beside the adopted orphan, its replacement, and one
    # per node at each of the DaemonSet's three templates
    assert len(creates) == 3 + 3 * NODES, creates

    # reads are in the audit log for kubus-system's ServiceAccounts only (the session's control plane's option)
    assert KUBUS_SERVICE_ACCOUNTS in controlplane.config.audit_reads_of
    entries = [json.loads(line) for line in controlplane.audit_log.read_text().splitlines() if line.strip()]
    readers = {e["user"]["username"] for e in entries if e["verb"] in ("get", "list", "watch")}
    assert readers == {USER + "kubus-ingest", USER + "kubus-executor"}, readers
    report = audit_report(applied, controlplane)
    assert report["ingest"]["verbs"] >= {("list", "pods"), ("watch", "pods")}, report
    assert {("create", "pods"), ("patch", "pods"), ("delete", "pods"), ("create", "controllerrevisions"),
            ("patch", "controllerrevisions"), ("update", "replicasets/status"), ("update", "daemonsets/status"),
            ("create", "events")} <= report["executor"]["verbs"], report
    assert not report["ingest"]["refused"] and not report["executor"]["refused"], report
    assert not report["ingest"]["ungranted"] and not report["executor"]["ungranted"], report
    assert not requests_of(controlplane, "kubus-reconciler")  # it never calls the API
    # and could not: bound to nothing
    can = kubectl("auth", "can-i", "--list", f"--as={USER}kubus-reconciler", "-n", namespace).stdout
    assert "pods " not in can and "replicasets" not in can, can

    # a pod's last event on the bus is the API's object without the managedFields the API keeps on it, as
    # kube-controller-manager's informers cache it (ingest/observing.py, without_managed_fields)
    live = pods(api, namespace, "app=web")[0]
    assert live["metadata"]["managedFields"], live["metadata"]
    published = asyncio.run(last_event(applied.nats_url, namespace, "Pod", live["metadata"]["uid"]))
    assert published["name"] == live["metadata"]["name"] and "managedFields" not in published["object"]["metadata"]
    assert published["object"]["metadata"]["ownerReferences"] == live["metadata"]["ownerReferences"]


async def last_event(url: str, namespace: str, kind: str, uid: str) -> dict[str, Any]:
    """The last event of an object on KUBUS_EVENTS, read as NATS's admin user."""
    nc = await nats.connect(url, user="kubus-admin", password=NATS_PASSWORDS["admin"])
    try:
        js = nc.jetstream()
        stream = subjects.stream_name(subjects.EVENTS_STREAM)
        info = await js.stream_info(stream)
        partition = subjects.partition_of(namespace, int((info.config.metadata or {})[PARTITIONS_KEY]))
        msg = await js.get_last_msg(stream, subjects.event_subject(partition, kind, uid))
        event: dict[str, Any] = json.loads(msg.data)
        return event
    finally:
        await nc.close()


# The only refusals an idempotent controller meets in normal work, each by a request RBAC allowed (the audit
# entry's authorization decision is "allow"; a 401, a 403 of RBAC or any other 4xx fails the test):
#   404 on delete or get of a pod, patch of a pod: it is gone already (deleted by someone else, or by this
#       executor's earlier try of a redelivered action); the delete's purpose is met, the re-read learns it
#   409 on create of a pod or a ControllerRevision: AlreadyExists, a redelivered create meeting its own object
#       (its name comes from the action's idempotency key); on delete of a pod: its uid precondition failed, a
#       new pod of the same name; on update of a status: a stale resourceVersion, retried after a fresh get
#   403 with the cause NamespaceTerminating (admission, not authorization): a create in a namespace being
#       deleted, which upstream's controllers meet too and ignore without an event
ALLOWED_4XX: dict[int, set[tuple[str, str]]] = {
    404: {("delete", "pods"), ("get", "pods"), ("patch", "pods"), ("get", "controllerrevisions"),
          ("delete", "controllerrevisions")},
    409: {("create", "pods"), ("create", "controllerrevisions"), ("delete", "pods"), ("delete", "controllerrevisions"),
          ("update", "replicasets/status"), ("update", "daemonsets/status")},
}


def allowed_refusal(entry: dict[str, Any], resource: str) -> bool:
    status = entry.get("responseStatus") or {}
    code = status.get("code", 0)
    if code < 400:
        return True
    if code == 403:
        causes = (status.get("details") or {}).get("causes") or []
        return entry["verb"] == "create" and [c.get("reason") for c in causes] == ["NamespaceTerminating"]
    return (entry["verb"], resource) in ALLOWED_4XX.get(code, set())


def audit_report(applied: Install, plane: ControlPlane) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for who, account in (("ingest", "kubus-ingest"), ("executor", "kubus-executor")):
        rules = rules_of(applied.rendered, account)
        verbs, refused, ungranted = set(), [], []
        for entry in requests_of(plane, account):
            ref = entry.get("objectRef")
            code = (entry.get("responseStatus") or {}).get("code", 0)
            decision = (entry.get("annotations") or {}).get("authorization.k8s.io/decision")
            if ref is None:
                ungranted.append((entry["verb"], entry["requestURI"], code))  # a non-resource URL
                continue
            resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            verbs.add((entry["verb"], resource))
            if not any(rule_grants(r, ref.get("apiGroup", ""), resource, entry["verb"], ref.get("name"))
                       for r in rules):
                ungranted.append((entry["verb"], resource, ref.get("name"), code))
            if decision != "allow" or not allowed_refusal(entry, resource):
                refused.append((entry["verb"], entry["requestURI"], code, decision,
                                (entry.get("responseStatus") or {}).get("message", "")[:200]))
        report[who] = {"verbs": verbs, "refused": refused, "ungranted": ungranted}
    return report


def test_the_audit_check_flags_a_request_no_rule_grants_and_a_refusal() -> None:
    """The checks above on entries made up for them: what no rule grants, and a refusal, are each reported."""
    rendered = documents((REPO / "deploy" / "rbac" / "executor.yaml").read_text())
    rules = rules_of(rendered, "kubus-executor")
    assert rule_grants(rules[0], "", "pods", "create", "p")
    assert not any(rule_grants(r, "", "pods", "update", "p") for r in rules)  # PUT a pod: not the executor's
    assert not any(rule_grants(r, "apps", "replicasets", "update", "web") for r in rules)
    ingest = rules_of(documents((REPO / "deploy" / "rbac" / "ingest.yaml").read_text()), "kubus-ingest")
    assert any(rule_grants(r, "", "namespaces", "get", "kube-system") for r in ingest)
    assert not any(rule_grants(r, "", "namespaces", "get", "default") for r in ingest)  # resourceNames

    def entry(verb: str, code: int, reason: str = "") -> dict[str, Any]:
        causes = [{"reason": reason}] if reason else []
        return {"verb": verb, "responseStatus": {"code": code, "details": {"causes": causes}}}

    assert allowed_refusal(entry("create", 201), "pods")
    assert allowed_refusal(entry("create", 409), "pods") and allowed_refusal(entry("delete", 404), "pods")
    assert allowed_refusal(entry("create", 403, "NamespaceTerminating"), "pods")
    assert not allowed_refusal(entry("create", 403), "pods")  # RBAC's
    assert not allowed_refusal(entry("create", 422), "pods")
    assert not allowed_refusal(entry("list", 404), "pods")
