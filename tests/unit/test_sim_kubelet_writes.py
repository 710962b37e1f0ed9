"""The sim's kubelet writes statuses that decoding would leave as they are, so they are not pruned (issue 25).

A kubelet writes a Go PodStatus: known fields, and no empty list (omitempty). The sim's kubelet builds its status
from the stored one and fields of its own, and drops a list it left empty itself; the registry then skips the prune
of that body. Every status the kubelet stored must therefore be what the prune makes of it: checked here on every
kubelet write of pods whose lives reach each of its status writes, the container-less and condition-less ones
included (where the prune would drop `containerStatuses: []` and `conditions: []`).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sim import resources as R
from sim import schema
from sim.cluster import SimCluster, SimConfig
from sim.kubelet import ANNOTATION_NEVER_READY
from sim.nodes import generate
from sim.store import HistoryEvent
from sim.unvalidated import create_unvalidated
from tests.simulation import until


def _pod(name: str, annotations: dict[str, str] | None = None, finalizers: list[str] | None = None,
         containers: int = 1) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "annotations": annotations or {}}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": f"c{i}", "image": "busybox"} for i in range(containers)]}}


def _phase(cluster: SimCluster, name: str) -> str | None:
    entry = cluster.store.get(R.PODS, "default", name)
    return None if entry is None else (entry.obj.get("status") or {}).get("phase")


async def test_every_kubelet_status_is_what_the_prune_makes_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = SimCluster(SimConfig(nodes=generate(2), kubelet_delay=0, termination_seconds=0.05, seed=5))
    await cluster.start()
    writes: list[HistoryEvent] = []
    pruned: list[str] = []
    real_prune = schema.prune

    def counting(kind: str, obj: dict[str, Any]) -> list[str]:
        pruned.append(kind)
        return real_prune(kind, obj)

    try:
        registry = cluster.registry
        registry.create(R.PODS, "default", _pod("running"))
        registry.create(R.PODS, "default", _pod("two", containers=2))
        registry.create(R.PODS, "default", _pod("never-ready", {ANNOTATION_NEVER_READY: "true"}))
        registry.create(R.PODS, "default", _pod("held", finalizers=["example.com/hold"]))
        create_unvalidated(registry, _pod("empty", containers=0))  # no containers: no container statuses
        registry.create(R.PODS, "default", _pod("bare"))
        await until("the pods Running", lambda: all(
            _phase(cluster, name) == "Running" for name in ("running", "two", "never-ready", "held", "empty", "bare")))
        # a client's status without conditions or containers: the kubelet's failure then leaves both lists empty
        bare = registry.get(R.PODS, "default", "bare").obj["metadata"]
        registry.update(R.PODS, "default", "bare", {"metadata": {"name": "bare", "namespace": "default",
                                                                 "resourceVersion": bare["resourceVersion"]},
                                                    "status": {"phase": "Running", "hostIP": "10.0.0.9"}},
                        subresource="status")
        # from here on, only the kubelet writes a pod's status
        cluster.store.add_listener(lambda event: event.resource is R.PODS and event.type == "MODIFIED" and
                                   event.old is not None and event.old.get("status") != event.entry.obj.get("status")
                                   and writes.append(event))
        monkeypatch.setattr(schema, "prune", counting)
        cluster.kubelets.fail_pod("default", "running")
        cluster.kubelets.fail_pod("default", "bare")
        cluster.kubelets.fail_pod("default", "empty")
        registry.delete(R.PODS, "default", "held", {})  # its kubelet reports it Succeeded before it goes
        await until("the held pod terminal", lambda: _phase(cluster, "held") == "Succeeded")
    finally:
        await cluster.stop()
    assert len(writes) == 4, [(e.name, e.entry.obj.get("status")) for e in writes]
    for event in writes:
        stored = event.entry.obj
        as_decoded = copy.deepcopy(stored)
        assert real_prune("Pod", as_decoded) == []
        assert as_decoded == stored, event.name
    assert "Pod" not in pruned  # the kubelet's writes were not pruned again
    statuses = {event.name: event.entry.obj["status"] for event in writes}
    assert "containerStatuses" not in statuses["empty"] and statuses["empty"]["phase"] == "Failed"
    assert "conditions" not in statuses["bare"] and "containerStatuses" not in statuses["bare"]
    assert [c["name"] for c in statuses["running"]["containerStatuses"]] == ["c0"]


async def test_the_kubelets_first_status_of_each_pod_is_what_the_prune_makes_of_it() -> None:
    """The Running status (`_start`), for pods with containers, without, and never ready."""
    cluster = SimCluster(SimConfig(nodes=generate(2), kubelet_delay=0, seed=6))
    await cluster.start()
    started: list[HistoryEvent] = []
    cluster.store.add_listener(lambda event: event.resource is R.PODS and
                               (event.entry.obj.get("status") or {}).get("phase") == "Running" and
                               started.append(event))
    try:
        cluster.registry.create(R.PODS, "default", _pod("one"))
        cluster.registry.create(R.PODS, "default", _pod("never-ready", {ANNOTATION_NEVER_READY: "true"}, containers=3))
        create_unvalidated(cluster.registry, _pod("empty", containers=0))
        await until("three pods Running", lambda: len(started) == 3)
    finally:
        await cluster.stop()
    for event in started:
        as_decoded = copy.deepcopy(event.entry.obj)
        assert schema.prune("Pod", as_decoded) == []
        assert as_decoded == event.entry.obj, event.name
    by_name = {event.name: event.entry.obj["status"] for event in started}
    assert "containerStatuses" not in by_name["empty"]
    assert len(by_name["never-ready"]["containerStatuses"]) == 3
    assert {c["type"]: c["status"] for c in by_name["never-ready"]["conditions"]}["Ready"] == "False"
