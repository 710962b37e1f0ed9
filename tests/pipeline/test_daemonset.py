"""The DaemonSet controller end to end, as deployed (nats-server, `kubus sim` with 4 nodes, ingest,
reconcile and execute as processes), driven with kubectl: placement, rollout status, a rolling
update, history and undo. The first wiring of the DaemonSet core; issue 5's full suite (taints,
node changes, failing pods, surge, a killed reconciler) is still to come.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.pipeline import test_replicaset as shared
from tests.pipeline.harness import Pipeline
from tests.simulation import Kubectl

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

# the ReplicaSet module's fixtures (a pipeline per module, a namespace per test, no dead services)
pipeline, kubectl, namespace, services = shared.pipeline, shared.kubectl, shared.namespace, shared.services
apply, until = shared.apply, shared.until


def daemonset(name: str, ns: str, *, image: str = "busybox:1", node_selector: dict[str, str] | None = None
              ) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "agent", "image": image}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def pods(k: Kubectl, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = k.json("get", "pods", "-n", ns)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def pinned_node(pod: dict[str, Any]) -> str:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert len(terms) == 1 and terms[0]["matchFields"][0]["key"] == "metadata.name"
    return str(terms[0]["matchFields"][0]["values"][0])


def settled(k: Kubectl, ns: str, name: str, image: str, nodes: int) -> list[dict[str, Any]] | None:
    """Exactly one Running pod of `image` on each of the `nodes` nodes, and the status saying so."""
    ds = k.json("get", "ds", name, "-n", ns)
    current = pods(k, ns)
    status = ds.get("status", {})
    done = (len(current) == nodes and {p["spec"]["containers"][0]["image"] for p in current} == {image}
            and all(p["status"].get("phase") == "Running" for p in current)
            and status.get("numberAvailable") == nodes and status.get("updatedNumberScheduled") == nodes
            and status.get("observedGeneration") == ds["metadata"]["generation"])
    return current if done else None


def node_names(p: Pipeline) -> list[str]:
    """The cluster's nodes: the sim's node-0..node-3, or the real control plane's 20 kwok nodes."""
    code, body = p.sim.request("GET", "/api/v1/nodes")
    assert code == 200, body
    return sorted(n["metadata"]["name"] for n in body["items"])


@pytest.mark.real
def test_one_pod_per_node_pinned_by_node_affinity(pipeline: Pipeline, kubectl: Kubectl,
                                                  namespace: str, tmp_path: Path) -> None:
    count = len(node_names(pipeline))
    apply(kubectl, tmp_path, daemonset("agent", namespace))
    current = until(pipeline, lambda: settled(kubectl, namespace, "agent", "busybox:1", count), "one agent per node")
    assert sorted(pinned_node(p) for p in current) == node_names(pipeline)
    assert sorted(p["spec"]["nodeName"] for p in current) == node_names(pipeline)
    revisions = kubectl.json("get", "controllerrevisions", "-n", namespace)["items"]
    assert len(revisions) == 1 and revisions[0]["revision"] == 1
    hash_ = revisions[0]["metadata"]["labels"]["controller-revision-hash"]
    assert {p["metadata"]["labels"]["controller-revision-hash"] for p in current} == {hash_}
    status = kubectl.json("get", "ds", "agent", "-n", namespace)["status"]
    assert {k: status[k] for k in ("desiredNumberScheduled", "currentNumberScheduled", "numberReady",
                                   "numberMisscheduled")} == {"desiredNumberScheduled": count,
                                                              "currentNumberScheduled": count, "numberReady": count,
                                                              "numberMisscheduled": 0}
    assert "successfully rolled out" in kubectl("rollout", "status", "ds/agent", "-n", namespace,
                                                "--timeout=30s").stdout


@pytest.mark.real
def test_rolling_update_history_and_undo(pipeline: Pipeline, kubectl: Kubectl,
                                         namespace: str, tmp_path: Path) -> None:
    count = len(node_names(pipeline))
    apply(kubectl, tmp_path, daemonset("agent", namespace))
    until(pipeline, lambda: settled(kubectl, namespace, "agent", "busybox:1", count), "the first rollout")
    kubectl("set", "image", "ds/agent", "agent=busybox:2", "-n", namespace)
    assert "successfully rolled out" in kubectl("rollout", "status", "ds/agent", "-n", namespace,
                                                "--timeout=60s").stdout
    until(pipeline, lambda: settled(kubectl, namespace, "agent", "busybox:2", count), "the update on every node")
    history = kubectl("rollout", "history", "ds/agent", "-n", namespace).stdout
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"]
    kubectl("rollout", "undo", "ds/agent", "-n", namespace)
    until(pipeline, lambda: settled(kubectl, namespace, "agent", "busybox:1", count), "the undo on every node")
    revisions = {r["revision"] for r in kubectl.json("get", "controllerrevisions", "-n", namespace)["items"]}
    assert revisions == {2, 3}  # the first revision is current again, renumbered as upstream does


def test_a_node_selector_matching_no_node_runs_nothing(pipeline: Pipeline, kubectl: Kubectl,
                                                       namespace: str, tmp_path: Path) -> None:
    apply(kubectl, tmp_path, daemonset("gpu", namespace, node_selector={"accelerator": "none-here"}))

    def observed() -> dict[str, Any] | None:
        ds = kubectl.json("get", "ds", "gpu", "-n", namespace)
        return ds if ds.get("status", {}).get("observedGeneration") == 1 else None

    status = until(pipeline, observed, "the DaemonSet observed")["status"]
    assert status.get("desiredNumberScheduled", 0) == 0 and status.get("currentNumberScheduled", 0) == 0
    assert pods(kubectl, namespace) == []
