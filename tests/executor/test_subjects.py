"""Every result names its subject: the object the effect was on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from messages.actions import (
    SUCCEEDED,
    Action,
    CreateControllerRevision,
    DeleteControllerRevision,
    DeletePod,
    PatchControllerRevision,
    PatchPod,
    RecordEvent,
    UpdateStatus,
)
from runtime.bus import Bus
from tests.executor.builders import create_pods, envelope, pod, raw
from tests.executor.conftest import Running, publish, results_for
from tests.simulation import SimProcess

Start = Callable[..., AbstractAsyncContextManager[Running]]


async def _call(sim: SimProcess, method: str, path: str, body: Any = None) -> Any:
    code, got = await asyncio.to_thread(sim.request, method, path, body)
    assert 200 <= code < 300, (code, got)
    return got


async def test_every_result_names_its_subject(bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    """namespace/name of the object acted on (each pod of a CreatePods, the revision a create names, the
    Event a RecordEvent writes)."""
    labels = {"app": "web"}
    rs = await _call(sim, "POST", f"/apis/apps/v1/namespaces/{namespace}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels}, "spec": {"containers": [{"name": "app", "image": "pause"}]}}}})
    victim = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("victim"))
    patched = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("patched"))
    revision = {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": "web-5d8f"},
                "data": {"spec": {}}, "revision": 1}
    involved = {"kind": "ReplicaSet", "namespace": namespace, "name": "web", "uid": rs["metadata"]["uid"],
                "apiVersion": "apps/v1"}
    first: list[tuple[Action, str]] = [
        (UpdateStatus(**envelope("status"), kind="ReplicaSet", namespace=namespace, name="web",
                      uid=rs["metadata"]["uid"], status=raw({"replicas": 0})), f"{namespace}/web"),
        (CreateControllerRevision(**envelope("revision"), namespace=namespace, revision=raw(revision)),
         f"{namespace}/web-5d8f"),
        (DeletePod(**envelope("delete"), namespace=namespace, name="victim", uid=victim["metadata"]["uid"]),
         f"{namespace}/victim"),
        (PatchPod(**envelope("patch"), namespace=namespace, name="patched", uid=patched["metadata"]["uid"],
                  patch_type="merge", patch=raw({"metadata": {"labels": {"x": "1"}}})), f"{namespace}/patched"),
    ]
    async with executor() as running:
        for action, _ in first:
            await publish(bus, action)
        await publish(bus, create_pods(namespace, 2, stem="made"))
        await publish(bus, RecordEvent(**envelope("event"), namespace=namespace, involved=raw(involved),
                                       type="Normal", reason="Tested", message="m", component="test"))
        results = await results_for(bus, len(first) + 3, (running,))
        by_key = {r.key: r for r in results}
        later: list[tuple[Action, str]] = [
            (PatchControllerRevision(**envelope("revision-patch"), namespace=namespace, name="web-5d8f",
                                     uid=by_key["revision"].object_uid, patch_type="merge",
                                     patch=raw({"metadata": {"labels": {"x": "1"}}})), f"{namespace}/web-5d8f"),
        ]
        for action, _ in later:
            await publish(bus, action)
        await results_for(bus, len(first) + 4, (running,))
        later.append((DeleteControllerRevision(**envelope("revision-delete"), namespace=namespace, name="web-5d8f",
                                               uid=by_key["revision"].object_uid), f"{namespace}/web-5d8f"))
        await publish(bus, later[-1][0])
        results = await results_for(bus, len(first) + 5, (running,))
    by_key = {r.key: r for r in results}
    assert {r.outcome for r in results} == {SUCCEEDED}, results
    assert {a.key: by_key[a.key].subject for a, _ in first + later} == {a.key: s for a, s in first + later}
    assert {by_key[f"{namespace}/made/{i}"].subject for i in (0, 1)} == {f"{namespace}/made-0", f"{namespace}/made-1"}
    [event] = (await _call(sim, "GET", f"/api/v1/namespaces/{namespace}/events"))["items"]
    assert by_key["event"].subject == f"{namespace}/{event['metadata']['name']}"
