"""The sim's writes of a pod's life share what they do not change with the stored object (issue 25).

Binding a pod, its kubelet's status write, marking it deleted and removing it each decoded the whole stored pod
(`Entry.clone`) to change a few fields: four JSON decodes per pod, about a tenth of the sim's CPU in the ReplicaSet
benchmark. They now copy only the top level and the metadata (`Entry.shallow`) and replace the parts they change.
That is safe only while no stored object is ever mutated, which the second half of each test checks: every object
the store held (every watch event's) still equals the bytes it was encoded to when it was written.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from sim import resources as R
from sim import store as store_module
from sim.cluster import SimCluster, SimConfig
from sim.nodes import generate
from sim.store import HistoryEvent
from tests.simulation import until

PODS = 20


def _pod(i: int, finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"p-{i:02d}", "labels": {"app": "web"}, "annotations": {"a": "b"}}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@pytest.mark.parametrize("finalizers", [None, ["example.com/hold"]], ids=["graceful", "finalizer"])
async def test_a_pods_life_decodes_no_stored_pod_and_changes_none(
        monkeypatch: pytest.MonkeyPatch, finalizers: list[str] | None) -> None:
    cluster = SimCluster(SimConfig(nodes=generate(2), kubelet_delay=0, termination_seconds=0.05, seed=3))
    await cluster.start()
    events: list[HistoryEvent] = []
    cluster.store.add_listener(events.append)
    try:
        for i in range(PODS):
            cluster.registry.create(R.PODS, "default", _pod(i, finalizers))
        decodes = 0
        real_decode = store_module._decode

        def counting(data: bytes) -> Any:
            nonlocal decodes
            decodes += 1
            return real_decode(data)

        monkeypatch.setattr(store_module, "_decode", counting)
        pods = lambda: [e.obj for e in cluster.store.iter(R.PODS, "default")]  # noqa: E731
        await until("every pod Running", lambda: all(
            (p.get("status") or {}).get("phase") == "Running" for p in pods()))
        for i in range(PODS):
            cluster.registry.delete(R.PODS, "default", f"p-{i:02d}", {})
        if finalizers:
            await until("every pod terminal", lambda: all(
                (p.get("status") or {}).get("phase") == "Succeeded" for p in pods()))
            for pod in pods():  # the finalizer taken off: the pod goes
                meta = pod["metadata"]
                cluster.registry.update(R.PODS, "default", meta["name"], {
                    **pod, "metadata": {**meta, "finalizers": []}})
        await until("every pod gone", lambda: not pods())
    finally:
        await cluster.stop()
    kinds = {(e.type, e.resource.kind) for e in events}
    assert {("MODIFIED", "Pod"), ("DELETED", "Pod")} <= kinds, kinds
    if not finalizers:
        # bind, status, deletion mark, removal: none decodes the stored pod (each did, as Entry.clone)
        assert decodes == 0
    # nothing the store held was changed after it was written: every event's object is still what was encoded
    changed = [f"{e.type} {e.name} rv {e.rv}" for e in events if msgspec.json.decode(e.entry.raw) != e.entry.obj]
    assert not changed, changed


def test_the_owner_and_uid_indexes_follow_each_write() -> None:
    """A write sharing the stored owner references and keeping the uid leaves the indexes as they are (issue 25: it
    re-indexed them on every binding and status); any other write re-indexes."""
    store = store_module.ObjectStore()
    key = (R.PODS, "ns", "p")
    refs = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "owner-a", "controller": True}]
    entry = store.put(R.PODS, {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "ownerReferences": refs}},
                      "ADDED")

    def indexes() -> tuple[Any, ...]:
        return (store.by_uid("u1"), store.by_uid("u2"), store.dependents_of("owner-a"), store.dependents_of("owner-b"))

    assert indexes() == (key, None, {key}, set())
    bound = entry.shallow()  # as a binding writes: the owner references shared
    bound["spec"] = {"nodeName": "n1"}
    entry = store.put(R.PODS, bound, "MODIFIED", entry.obj)
    assert indexes() == (key, None, {key}, set())
    moved = entry.shallow()
    moved["metadata"]["ownerReferences"] = [{**refs[0], "name": "b", "uid": "owner-b"}]
    entry = store.put(R.PODS, moved, "MODIFIED", entry.obj)
    assert indexes() == (key, None, set(), {key})
    equal = entry.shallow()  # equal references in a list of their own
    equal["metadata"]["ownerReferences"] = [dict(r) for r in equal["metadata"]["ownerReferences"]]
    entry = store.put(R.PODS, equal, "MODIFIED", entry.obj)
    assert indexes() == (key, None, set(), {key})
    renamed = entry.shallow()  # the references shared, the uid not
    renamed["metadata"]["uid"] = "u2"
    entry = store.put(R.PODS, renamed, "MODIFIED", entry.obj)
    assert indexes() == (None, key, set(), {key})
    orphan = entry.shallow()
    del orphan["metadata"]["ownerReferences"]
    store.put(R.PODS, orphan, "MODIFIED", entry.obj)
    assert indexes() == (None, key, set(), set())
    store.remove(R.PODS, "ns", "p")
    assert indexes() == (None, None, set(), set())
