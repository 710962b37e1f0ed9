"""The simulated scheduler's pod capacity: `allocatable.pods` is a quantity, as kube-scheduler reads it (issue 22).

kube-apiserver stores a node's `pods: 1000` as "1k" (the sim canonicalises it the same way); the scheduler read it
with int(), fell back to 110 pods a node, and left pods Pending ("Too many pods") on nodes with room for them.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from sim import resources as R
from sim.cluster import SimCluster, SimConfig
from sim.nodes import generate, parse_capacity
from sim.scheduler import DEFAULT_PODS, allowed_pods


@pytest.mark.parametrize(("pods", "allowed"), [
    ("110", 110),
    ("1k", 1000),
    ("1500", 1500),
    ("1500k", 1_500_000),
    ("2Ki", 2048),
    ("1.5k", 1500),
    ("1e3", 1000),
    ("250m", 1),  # Quantity.Value() rounds up
    ("0", 0),
    (250, 250),
    (None, DEFAULT_PODS),  # no pod capacity stated: the sim's default
    ("lots", DEFAULT_PODS),
])
def test_allowed_pods_reads_a_quantity(pods: object, allowed: int) -> None:
    allocatable: dict[str, object] = {"cpu": "4"} if pods is None else {"cpu": "4", "pods": pods}
    assert allowed_pods(allocatable) == allowed


def test_allowed_pods_without_allocatable() -> None:
    assert allowed_pods(None) == DEFAULT_PODS


async def test_500_pods_fit_on_3_nodes_of_1000_pods_each() -> None:
    capacity = parse_capacity("cpu=64,memory=256Gi,pods=1000")
    cluster = SimCluster(SimConfig(nodes=generate(3, capacity=capacity), kubelet=False, seed=1))
    await cluster.start()
    try:
        served = [e.obj["status"]["allocatable"]["pods"] for e in cluster.store.iter(R.NODES)]
        assert served == ["1k"] * 3, "kube-apiserver's canonical form, which the scheduler must read as 1000"
        for i in range(500):
            cluster.registry.create(R.PODS, "default", {
                "metadata": {"name": f"p-{i:03d}"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while True:
            pods = [e.obj for e in cluster.store.iter(R.PODS, "default")]
            unbound = [p for p in pods if not p["spec"].get("nodeName")]
            if not unbound:
                break
            unschedulable = [p for p in unbound if any(c.get("reason") == "Unschedulable"
                                                      for c in (p.get("status") or {}).get("conditions") or [])]
            assert not unschedulable, (f"{len(unschedulable)} pods left Pending, e.g. "
                                       f"{unschedulable[0]['status']['conditions']}")
            assert loop.time() < deadline, f"{len(unbound)} of 500 pods still unbound after 60 s"
            await asyncio.sleep(0.05)  # the scheduler binds in batches; look again
        per_node = Counter(p["spec"]["nodeName"] for p in pods)
        assert len(pods) == 500
        assert sorted(per_node) == ["node-0", "node-1", "node-2"]
        assert max(per_node.values()) - min(per_node.values()) <= 1, per_node  # the least loaded node each time
    finally:
        await cluster.stop()
