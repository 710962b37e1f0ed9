"""Shadow mode end to end (docs/shadow.md): a shadow kubus beside the acting controller reports total
agreement over the scenarios, and a shadow with one rule changed is caught, naming the object and the rule's
effect.

`acting_cluster` is parametrised by the controller that acts: kubus on `kubus sim` (tests/shadow/harness.py), and the
real kube-controller-manager with its own DaemonSet and ReplicaSet controllers (tests/controlplane/'s control
plane with upstream_controllers=True, one per test: a shadow must not start beside the previous test's
leftovers). On the real one the shadow runs as a ServiceAccount of its own, bound to a read-only ClusterRole, and
the audit log (which logs that ServiceAccount's reads too) shows it made no other request."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from controlplane.building import BuildError, find_or_fail
from controlplane.processes import ControlPlane, ControlPlaneConfig
from tests.shadow import scenarios
from tests.shadow.harness import Acting, KubusActing, Shadow
from tests.simulation import Kubectl, SimProcess, wait_for

pytestmark = pytest.mark.slow

NODES = 4
SHADOW_NAMESPACE = "kubus-shadow"  # the real control plane's shadow ServiceAccount's
SHADOW_USER = f"system:serviceaccount:{SHADOW_NAMESPACE}:shadow"
READS = {"get", "list", "watch"}


class Cluster:
    def __init__(self, kubeconfig: Path, kubectl: Kubectl, acting: Acting, nodes: list[str],
                 shadow_kubeconfig: Path | None = None, audit_log: Path | None = None):
        self.kubeconfig = kubeconfig
        self.kubectl = kubectl
        self.acting = acting
        self.nodes = nodes
        self.shadow_kubeconfig = shadow_kubeconfig or kubeconfig  # whom the shadow runs as
        self.audit_log = audit_log  # the API server's, where there is one


class UpstreamActing:
    """kube-controller-manager with its own DaemonSet and ReplicaSet controllers: acting from the control plane's
    start, so `start` and `stop` do nothing; `logs` is its log."""

    name = "kube-controller-manager"

    def __init__(self, plane: ControlPlane):
        self.plane = plane

    def start(self, kubeconfig: Path) -> None:
        pass

    def stop(self) -> None:
        pass

    def logs(self) -> str:
        return self.plane.logs["kube-controller-manager"].read_text(errors="replace")


def _read_only_kubeconfig(plane: ControlPlane, kubectl: Kubectl, path: Path) -> Path:
    """A kubeconfig for a ServiceAccount bound to a ClusterRole granting get, list and watch only (as
    overlays/shadow leaves kubus), with a token from `kubectl create token`."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "shadow"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": sorted(READS)}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "shadow"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "shadow"},
               "subjects": [{"kind": "ServiceAccount", "name": "shadow", "namespace": SHADOW_NAMESPACE}]}
    kubectl("create", "namespace", SHADOW_NAMESPACE)
    kubectl("create", "serviceaccount", "shadow", "-n", SHADOW_NAMESPACE)
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [role, binding]}))
    token = kubectl("create", "token", "shadow", "-n", SHADOW_NAMESPACE, "--duration=2h").stdout.strip()
    assert plane.pki is not None
    document = yaml.safe_load(plane.kubeconfig.read_text())
    document["users"] = [{"name": "shadow", "user": {"token": token}}]
    for context in document["contexts"]:
        context["context"]["user"] = "shadow"
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path


def _sim(tmp_path: Path) -> Iterator[Cluster]:
    sim = SimProcess(tmp_path, "--nodes", str(NODES), "--kubelet-delay", "0.05")
    acting = KubusActing(tmp_path)
    try:
        acting.start(sim.kubeconfig)
        yield Cluster(sim.kubeconfig, Kubectl(sim.kubeconfig), acting, [f"node-{i}" for i in range(NODES)])
    finally:
        acting.stop()
        sim.stop()


def _upstream(tmp_path: Path) -> Iterator[Cluster]:
    try:
        build = find_or_fail()
    except BuildError as exc:
        pytest.fail(str(exc), pytrace=False)
    plane = ControlPlane(build, ControlPlaneConfig(nodes=NODES, data_dir=tmp_path / "controlplane",
                                                   upstream_controllers=True,
                                                   audit_reads_of=(f"system:serviceaccounts:{SHADOW_NAMESPACE}",)))
    plane.start()
    try:
        kubectl = Kubectl(plane.kubeconfig, str(build.binary("kubectl")))
        shadow_kubeconfig = _read_only_kubeconfig(plane, kubectl, tmp_path / "shadow.kubeconfig")
        yield Cluster(plane.kubeconfig, kubectl, UpstreamActing(plane), list(plane.node_names),
                      shadow_kubeconfig, plane.audit_log)
    finally:
        plane.stop()


@pytest.fixture(params=["kubus-on-sim", pytest.param("kube-controller-manager",
                                                     marks=pytest.mark.hang_limit(600, setup=240))])
# not `cluster`: tests/conftest.py parametrises that name for the sim/real suites
def acting_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster with its acting controller running: an acting kubus on `kubus sim`, or a real control plane
    whose kube-controller-manager runs its own DaemonSet and ReplicaSet controllers."""
    yield from (_sim if request.param == "kubus-on-sim" else _upstream)(tmp_path)


@pytest.fixture
def shadow(acting_cluster: Cluster, tmp_path: Path) -> Iterator[Shadow]:
    shadow = Shadow(tmp_path)
    shadow.start(acting_cluster.shadow_kubeconfig)
    yield shadow
    shadow.stop()


def _shadow_requests(acting_cluster: Cluster) -> list[dict[str, object]]:
    """The audit log's entries of the shadow's user, one per request (its last stage so far: a watch still open
    has only ResponseStarted)."""
    assert acting_cluster.audit_log is not None
    entries = [json.loads(line) for line in acting_cluster.audit_log.read_text().splitlines() if line.strip()]
    return list({e["auditID"]: e for e in entries if e["user"]["username"] == SHADOW_USER}.values())


def _assert_read_only(acting_cluster: Cluster) -> None:
    """On the real control plane: the shadow asked, and asked nothing but get, list and watch."""
    if acting_cluster.audit_log is None:
        return
    requests = _shadow_requests(acting_cluster)
    assert any(e["verb"] == "watch" for e in requests), f"no watch of the shadow's in the audit log: {requests[:5]}"
    writes = [(e["verb"], e.get("requestURI")) for e in requests if e["verb"] not in READS]
    assert not writes, f"the shadow ({SHADOW_USER}) made requests other than get, list and watch: {writes[:20]}"


def _explain(shadow: Shadow, acting_cluster: Cluster, report: dict[str, object]) -> str:
    return (f"{json.dumps(report, indent=1, default=str)[:20000]}\n--- shadow log ---\n{shadow.logs()[-5000:]}"
            f"\n--- {acting_cluster.acting.name} log ---\n{acting_cluster.acting.logs()[-3000:]}")


def test_the_scenarios_agree(acting_cluster: Cluster, shadow: Shadow, tmp_path: Path) -> None:
    """ReplicaSet create, scale up and down, adoption and release; DaemonSet rollout with maxUnavailable, a
    rollback, maxSurge, OnDelete, a NoExecute taint: the shadow would have done what the acting controller
    did, or an equivalent member of its tie class, against kubus on the sim and against kube-controller-manager
    alike. The one difference allowed is the pod kubectl deleted, which the watch cannot tell from a
    controller's deletion (docs/shadow.md, "What cannot be compared")."""
    kubectl = acting_cluster.kubectl
    kubectl("create", "namespace", "shadowed")
    scenarios.replicaset_create_and_scale(kubectl, "shadowed")
    scenarios.replicaset_adoption_and_release(kubectl, "shadowed")
    nodes = len(acting_cluster.nodes)
    scenarios.daemonset_rollout_and_rollback(kubectl, "shadowed", nodes)
    scenarios.daemonset_surge(kubectl, "shadowed", nodes)
    by_hand = scenarios.daemonset_on_delete(kubectl, "shadowed", nodes)
    tainted_node = acting_cluster.nodes[1]
    scenarios.daemonset_taint(kubectl, "shadowed", nodes, tainted_node)
    report = shadow.settled()
    _assert_read_only(acting_cluster)  # first: it holds whatever the report says
    why = _explain(shadow, acting_cluster, report)
    objects = {o["controller"]: o for o in report["objects"]}
    for name in ("ReplicaSet/shadowed/web", "ReplicaSet/shadowed/api-v2", "DaemonSet/shadowed/agent",
                 "DaemonSet/shadowed/surge", "DaemonSet/shadowed/manual", "DaemonSet/shadowed/tainted"):
        assert objects[name]["agreed"] > 0, why
    # the pod kubectl deleted, which the watch cannot tell from a controller's deletion, is upstream-only; or, where
    # it showed while the shadow held the DaemonSet back (its new revision before its new template), early
    found = [(d["controller"], a["verb"], a["target"]) for d in report["divergences"] for a in d["upstream_only"]]
    held = [(e["controller"], e["upstream"]["verb"], e["upstream"]["target"]) for e in report["equivalent"]
            if e["rule"].startswith("seen before its cause") and e["kubus"] == e["upstream"]]
    assert all(found.count(act) + held.count(act) >= by_hand.count(act) for act in by_hand), why
    # the shadow's comparator task counts each closed window once, every half window, as the report does
    for kind, side in (("upstream-only", "upstream_only"), ("kubus-only", "kubus_only")):
        _wait_for_counter(shadow, kind, sum(len(d[side]) for d in report["divergences"]))
    # nothing reached the API from the shadow: it runs no executor, and its store queued no action
    assert "kubus.executor" not in shadow.logs()
    assert _outbox_rows(shadow) == 0
    (tmp_path / "report.txt").write_text(shadow.text_report())  # the comparator's noise, for docs/shadow.md
    # the shadow's decisions replay byte for byte from its history: `kubus replay --explain` shows what it decided
    shadow.stop()
    replay = subprocess.run([sys.executable, "-m", "kubus", "replay", "--diff", "--data-dir", str(shadow.data_dir),
                             "--prefix", "shadow"], capture_output=True, text=True, timeout=300)
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-3000:]
    # total agreement, but for the pod kubectl deleted (upstream-only, or seen before its cause above), against
    # kubus on the sim and against kube-controller-manager alike
    assert sorted(found) == sorted(act for act in by_hand if act not in held), why
    assert not any(d["kubus_only"] for d in report["divergences"]), why


def _wait_for_counter(shadow: Shadow, kind: str, total: int) -> None:
    wait_for(lambda: shadow.metric("kubus_shadow_divergences_total", kind=kind) == total, timeout=30,
             what=f"the {kind} divergence counter at {total}")


def _outbox_rows(shadow: Shadow) -> int:
    import sqlite3

    with sqlite3.connect(shadow.data_dir / "kubus.db") as db:
        return int(db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0])


@pytest.mark.parametrize("mutation", ["max-unavailable-rounded-down"])
def test_a_changed_rule_is_caught(acting_cluster: Cluster, tmp_path: Path, mutation: str) -> None:
    """A shadow whose maxUnavailable percentage rounds down (30% of 4 nodes: 1, where upstream takes 2) is
    caught: the report names the DaemonSet and says upstream deleted more old pods in a step than kubus
    would have, and the divergence counter rises."""
    shadow = Shadow(tmp_path, mutation=mutation)
    shadow.start(acting_cluster.shadow_kubeconfig)
    try:
        kubectl = acting_cluster.kubectl
        kubectl("create", "namespace", "mutated")
        scenarios.daemonset_rollout_percent(kubectl, "mutated", len(acting_cluster.nodes))
        report = shadow.settled()
        _assert_read_only(acting_cluster)
        assert not report["agreement"], _explain(shadow, acting_cluster, report)
        divergences = [d for d in report["divergences"] if d["controller"] == "DaemonSet/mutated/pct"]
        assert divergences, _explain(shadow, acting_cluster, report)
        assert any(a["verb"] == "delete_pod" for d in divergences for a in d["upstream_only"]), \
            _explain(shadow, acting_cluster, report)
        assert all(d["replay"].startswith("kubus replay --controller DaemonSet/mutated/pct --explain")
                   for d in divergences)
        assert any("delete_pod" in d["effect"] for d in divergences)
        wait_for(lambda: shadow.metric("kubus_shadow_divergences_total", controller="DaemonSet",
                                       kind="upstream-only") > 0, timeout=30, what="the divergence counter")
        code, _ = shadow.report()
        assert code == 3  # ran, and the answer is no (runtime/exitcodes.py)
        (tmp_path / "report.txt").write_text(shadow.text_report("-o", "wide"))
    finally:
        shadow.stop()
