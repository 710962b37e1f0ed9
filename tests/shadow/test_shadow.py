"""Shadow mode end to end (docs/shadow.md): a shadow kubus beside the acting controller reports total
agreement over the scenarios, and a shadow with one rule changed is caught, naming the object and the rule's
effect.

`acting` is the controller that acts: kubus on `kubus sim` today (tests/shadow/harness.py); the real
kube-controller-manager is to be added as another parameter (docs/shadow.md says what it takes)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.shadow import scenarios
from tests.shadow.harness import Acting, KubusActing, Shadow
from tests.simulation import Kubectl, SimProcess, wait_for

pytestmark = pytest.mark.slow

NODES = 4


class Cluster:
    def __init__(self, kubeconfig: Path, kubectl: Kubectl, acting: Acting):
        self.kubeconfig = kubeconfig
        self.kubectl = kubectl
        self.acting = acting


# not `cluster`: tests/conftest.py parametrises that name for the sim/real suites
@pytest.fixture(params=["kubus-on-sim"])
def acting_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster with its acting controller running."""
    sim = SimProcess(tmp_path, "--nodes", str(NODES), "--kubelet-delay", "0.05")
    acting = KubusActing(tmp_path)
    try:
        acting.start(sim.kubeconfig)
        yield Cluster(sim.kubeconfig, Kubectl(sim.kubeconfig), acting)
    finally:
        acting.stop()
        sim.stop()


@pytest.fixture
def shadow(acting_cluster: Cluster, tmp_path: Path) -> Iterator[Shadow]:
    shadow = Shadow(tmp_path)
    shadow.start(acting_cluster.kubeconfig)
    yield shadow
    shadow.stop()


def _explain(shadow: Shadow, acting_cluster: Cluster, report: dict[str, object]) -> str:
    return (f"{json.dumps(report, indent=1, default=str)[:20000]}\n--- shadow log ---\n{shadow.logs()[-5000:]}"
            f"\n--- {acting_cluster.acting.name} log ---\n{acting_cluster.acting.logs()[-3000:]}")


def test_the_scenarios_agree(acting_cluster: Cluster, shadow: Shadow, tmp_path: Path) -> None:
    """ReplicaSet create, scale up and down, adoption and release; DaemonSet rollout with maxUnavailable, a
    rollback, maxSurge, OnDelete, a NoExecute taint: the shadow would have done what the acting controller
    did, or an equivalent member of its tie class."""
    kubectl = acting_cluster.kubectl
    kubectl("create", "namespace", "shadowed")
    scenarios.replicaset_create_and_scale(kubectl, "shadowed")
    scenarios.replicaset_adoption_and_release(kubectl, "shadowed")
    scenarios.daemonset_rollout_and_rollback(kubectl, "shadowed", NODES)
    scenarios.daemonset_surge(kubectl, "shadowed", NODES)
    by_hand = scenarios.daemonset_on_delete(kubectl, "shadowed", NODES)
    scenarios.daemonset_taint(kubectl, "shadowed", NODES, "node-1")
    report = shadow.settled()
    # the one difference: the pod kubectl deleted, which the watch cannot tell from a controller's deletion
    found = [(d["controller"], a["verb"], a["target"]) for d in report["divergences"] for a in d["upstream_only"]]
    assert found == by_hand, _explain(shadow, acting_cluster, report)
    assert not any(d["kubus_only"] for d in report["divergences"]), _explain(shadow, acting_cluster, report)
    objects = {o["controller"]: o for o in report["objects"]}
    for name in ("ReplicaSet/shadowed/web", "ReplicaSet/shadowed/api-v2", "DaemonSet/shadowed/agent",
                 "DaemonSet/shadowed/surge", "DaemonSet/shadowed/manual", "DaemonSet/shadowed/tainted"):
        assert objects[name]["agreed"] > 0, _explain(shadow, acting_cluster, report)
    # the shadow's comparator task counts each closed window once, every half window
    wait_for(lambda: shadow.metric("kubus_shadow_divergences_total", kind="upstream-only") == len(by_hand),
             timeout=30, what="the divergence counter")
    assert shadow.metric("kubus_shadow_divergences_total", kind="kubus-only") == 0
    # nothing reached the API from the shadow: it runs no executor, and its store queued no action
    assert "kubus.executor" not in shadow.logs()
    assert _outbox_rows(shadow) == 0
    (tmp_path / "report.txt").write_text(shadow.text_report())  # the comparator's noise, for docs/shadow.md
    # the shadow's decisions replay byte for byte from its history: `kubus replay --explain` shows what it decided
    shadow.stop()
    replay = subprocess.run([sys.executable, "-m", "kubus", "replay", "--diff", "--data-dir", str(shadow.data_dir),
                             "--prefix", "shadow"], capture_output=True, text=True, timeout=300)
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-3000:]


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
    shadow.start(acting_cluster.kubeconfig)
    try:
        kubectl = acting_cluster.kubectl
        kubectl("create", "namespace", "mutated")
        scenarios.daemonset_rollout_percent(kubectl, "mutated", NODES)
        report = shadow.settled()
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
