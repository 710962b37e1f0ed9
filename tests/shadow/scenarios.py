"""The scenarios the shadow runs beside the acting controller: each drives the cluster with kubectl and waits
until the acting controller has converged. Written against kubectl and the API only, so that they run the
same against any acting controller (tests/shadow/harness.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.simulation import Kubectl, wait_for

TIMEOUT = 90.0


def live_pods(kubectl: Kubectl, namespace: str, selector: str) -> list[dict[str, Any]]:
    pods = kubectl.json("get", "pods", "-n", namespace, "-l", selector)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def all_gone_but(kubectl: Kubectl, namespace: str, selector: str, count: int) -> Callable[[], bool]:
    """Exactly `count` pods of the selector, none of them terminating, all Ready."""
    def check() -> bool:
        pods = kubectl.json("get", "pods", "-n", namespace, "-l", selector)["items"]
        return len(pods) == count and all(_ready(p) for p in pods)
    return check


def _ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def apply(kubectl: Kubectl, namespace: str, manifest: dict[str, Any]) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))


def replicaset(name: str, replicas: int, app: str) -> dict[str, Any]:
    labels = {"app": app}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}}


def daemonset(name: str, strategy: dict[str, Any], image: str = "busybox:1.36") -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": labels}, "updateStrategy": strategy,
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": image}]}}}}


def rollout(kubectl: Kubectl, namespace: str, name: str) -> None:
    kubectl("rollout", "status", f"ds/{name}", "-n", namespace, f"--timeout={int(TIMEOUT)}s", timeout=TIMEOUT + 10)


def settle_daemonset(kubectl: Kubectl, namespace: str, name: str, nodes: int, rolling: bool = True) -> None:
    if rolling:  # `rollout status` knows RollingUpdate only
        rollout(kubectl, namespace, name)
    wait_for(all_gone_but(kubectl, namespace, f"app={name}", nodes), timeout=TIMEOUT,
             what=f"DaemonSet {name}'s {nodes} pods, Ready, none terminating")


# --- ReplicaSets ---------------------------------------------------------------------------------------------
def replicaset_create_and_scale(kubectl: Kubectl, namespace: str) -> None:
    apply(kubectl, namespace, replicaset("web", 3, "web"))
    wait_for(all_gone_but(kubectl, namespace, "app=web", 3), timeout=TIMEOUT, what="web's 3 pods")
    kubectl("scale", "rs/web", "--replicas=5", "-n", namespace)
    wait_for(all_gone_but(kubectl, namespace, "app=web", 5), timeout=TIMEOUT, what="web's 5 pods")
    kubectl("scale", "rs/web", "--replicas=2", "-n", namespace)
    wait_for(all_gone_but(kubectl, namespace, "app=web", 2), timeout=TIMEOUT, what="web scaled down to 2")


def replicaset_adoption_and_release(kubectl: Kubectl, namespace: str) -> None:
    apply(kubectl, namespace, replicaset("api", 2, "api"))
    wait_for(all_gone_but(kubectl, namespace, "app=api", 2), timeout=TIMEOUT, what="api's 2 pods")
    kubectl("delete", "rs/api", "--cascade=orphan", "-n", namespace)

    def orphans() -> bool:
        pods = live_pods(kubectl, namespace, "app=api")
        return len(pods) == 2 and not any(p["metadata"].get("ownerReferences") for p in pods)

    wait_for(orphans, timeout=TIMEOUT, what="api's pods orphaned")
    apply(kubectl, namespace, replicaset("api-v2", 2, "api"))  # adopts both: nothing created

    def adopted() -> bool:
        pods = live_pods(kubectl, namespace, "app=api")
        return len(pods) == 2 and all(any(r.get("name") == "api-v2" for r in p["metadata"].get("ownerReferences", []))
                                      for p in pods)

    wait_for(adopted, timeout=TIMEOUT, what="api-v2 to adopt the orphans")
    first = live_pods(kubectl, namespace, "app=api")[0]["metadata"]["name"]
    kubectl("label", "pod", first, "app=released", "--overwrite", "-n", namespace)  # released, and replaced

    def released() -> bool:
        pod = kubectl.json("get", "pod", first, "-n", namespace)
        return not pod["metadata"].get("ownerReferences")

    wait_for(released, timeout=TIMEOUT, what=f"{first} released")
    wait_for(all_gone_but(kubectl, namespace, "app=api", 2), timeout=TIMEOUT, what="api-v2 back at 2 pods")


# --- DaemonSets ----------------------------------------------------------------------------------------------
def daemonset_rollout_and_rollback(kubectl: Kubectl, namespace: str, nodes: int) -> None:
    apply(kubectl, namespace, daemonset("agent", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}))
    settle_daemonset(kubectl, namespace, "agent", nodes)
    kubectl("set", "image", "ds/agent", "c=busybox:1.37", "-n", namespace)
    settle_daemonset(kubectl, namespace, "agent", nodes)
    kubectl("rollout", "undo", "ds/agent", "-n", namespace)
    settle_daemonset(kubectl, namespace, "agent", nodes)


def daemonset_surge(kubectl: Kubectl, namespace: str, nodes: int) -> None:
    apply(kubectl, namespace, daemonset("surge", {"type": "RollingUpdate",
                                                  "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}))
    settle_daemonset(kubectl, namespace, "surge", nodes)
    kubectl("set", "image", "ds/surge", "c=busybox:1.37", "-n", namespace)
    settle_daemonset(kubectl, namespace, "surge", nodes)


def daemonset_on_delete(kubectl: Kubectl, namespace: str, nodes: int) -> list[tuple[str, str, str]]:
    """OnDelete: the new template reaches a node once its pod is deleted, here by kubectl. Returns that deletion,
    as the act the watch shows (controller key, verb, target): who deleted a pod is not in the watch, so the
    report counts it upstream-only (docs/shadow.md, "What cannot be compared")."""
    apply(kubectl, namespace, daemonset("manual", {"type": "OnDelete"}))
    settle_daemonset(kubectl, namespace, "manual", nodes, rolling=False)
    kubectl("set", "image", "ds/manual", "c=busybox:1.37", "-n", namespace)
    pod = live_pods(kubectl, namespace, "app=manual")[0]
    victim, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
    kubectl("delete", "pod", victim, "-n", namespace, "--wait=false")

    def replaced() -> bool:
        pods = live_pods(kubectl, namespace, "app=manual")
        images = [p["spec"]["containers"][0]["image"] for p in pods]
        return victim not in {p["metadata"]["name"] for p in pods} and images.count("busybox:1.37") == 1

    wait_for(replaced, timeout=TIMEOUT, what=f"{victim} replaced by a pod of the new template")
    settle_daemonset(kubectl, namespace, "manual", nodes, rolling=False)
    return [(f"DaemonSet/{namespace}/manual", "delete_pod", node)]


def daemonset_taint(kubectl: Kubectl, namespace: str, nodes: int, node: str) -> None:
    apply(kubectl, namespace, daemonset("tainted", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}))
    settle_daemonset(kubectl, namespace, "tainted", nodes)
    kubectl("taint", "node", node, "dedicated=db:NoExecute")
    settle_daemonset(kubectl, namespace, "tainted", nodes - 1)
    kubectl("taint", "node", node, "dedicated=db:NoExecute-")
    settle_daemonset(kubectl, namespace, "tainted", nodes)


def daemonset_rollout_percent(kubectl: Kubectl, namespace: str, nodes: int) -> None:
    """maxUnavailable 30%: of 4 nodes, 2 at a time (rounded up), as upstream's UnavailableCount."""
    apply(kubectl, namespace, daemonset("pct", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "30%"}}))
    settle_daemonset(kubectl, namespace, "pct", nodes)
    kubectl("set", "image", "ds/pct", "c=busybox:1.37", "-n", namespace)
    settle_daemonset(kubectl, namespace, "pct", nodes)
