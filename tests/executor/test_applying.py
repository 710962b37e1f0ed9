"""The single-effect actions against the sim: deletes with uid preconditions, status writes, events, patches."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from messages.actions import (
    FAILED,
    SKIPPED,
    SUCCEEDED,
    Action,
    BumpCollisionCount,
    CreateControllerRevision,
    DeleteControllerRevision,
    DeletePod,
    PatchPod,
    RecordEvent,
    UpdateStatus,
)
from runtime.bus import Bus
from tests.executor.builders import envelope, pod, raw
from tests.executor.conftest import Running, publish, results_for
from tests.simulation import SimProcess

Start = Callable[..., AbstractAsyncContextManager[Running]]


async def _call(sim: SimProcess, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> Any:
    code, got = await asyncio.to_thread(sim.request, method, path, body, content_type)
    assert 200 <= code < 300, (code, got)
    return got


async def _pod(sim: SimProcess, namespace: str, name: str) -> dict[str, Any]:
    created: dict[str, Any] = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod(name))
    return created


def _replicaset(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}}}}


async def test_delete_removes_the_pod_it_names_by_uid(bus: Bus, sim: SimProcess, namespace: str,
                                                     executor: Start) -> None:
    """The pod with the action's uid is deleted (gracefully, then gone)."""
    target = await _pod(sim, namespace, "web-0")
    async with executor() as running:
        await publish(bus, DeletePod(**envelope("del-1"), namespace=namespace, name="web-0",
                                     uid=target["metadata"]["uid"]))
        [result] = await results_for(bus, 1, (running,))
    assert (result.outcome, result.code, result.object_uid) == (SUCCEEDED, 200, target["metadata"]["uid"])
    code, _ = await asyncio.to_thread(sim.request, "GET", f"/api/v1/namespaces/{namespace}/pods/web-0")
    assert code in (200, 404)  # 200 while its graceful deletion runs


async def test_delete_spares_a_recreated_pod_of_the_same_name(bus: Bus, sim: SimProcess, namespace: str,
                                                             executor: Start) -> None:
    """The uid precondition fails on the new pod: the one we meant is gone, a success; the new one lives."""
    old = await _pod(sim, namespace, "web-0")
    await _call(sim, "DELETE", f"/api/v1/namespaces/{namespace}/pods/web-0", {"gracePeriodSeconds": 0})
    new = await _pod(sim, namespace, "web-0")
    async with executor() as running:
        await publish(bus, DeletePod(**envelope("del-1"), namespace=namespace, name="web-0",
                                     uid=old["metadata"]["uid"]))
        [result] = await results_for(bus, 1, (running,))
    assert (result.outcome, result.code, result.reason) == (SUCCEEDED, 409, "Gone")
    assert "the UID in the precondition" in result.message  # kube-apiserver's rest.BeforeDelete
    still = await _call(sim, "GET", f"/api/v1/namespaces/{namespace}/pods/web-0")
    assert still["metadata"]["uid"] == new["metadata"]["uid"] and "deletionTimestamp" not in still["metadata"]


async def test_delete_of_a_pod_that_is_not_there_is_a_success(bus: Bus, namespace: str, executor: Start) -> None:
    """Not found is not an error, as upstream."""
    async with executor() as running:
        await publish(bus, DeletePod(**envelope("del-1"), namespace=namespace, name="nobody", uid="u-1"))
        [result] = await results_for(bus, 1, (running,))
    assert (result.outcome, result.code, result.reason) == (SUCCEEDED, 404, "NotFound")


async def test_status_update_retries_once_after_a_conflict(bus: Bus, sim: SimProcess, namespace: str,
                                                           executor: Start, faults: Callable[..., None]) -> None:
    """The first PUT /status meets 409 (seed 1 draws 0.13, then 0.85): one fresh GET and PUT succeed."""
    rs = await _call(sim, "POST", f"/apis/apps/v1/namespaces/{namespace}/replicasets", _replicaset("web"))
    faults("replicasets/status:update:0.5:409", seed=1)
    async with executor() as running:
        await publish(bus, UpdateStatus(**envelope("st-1"), kind="ReplicaSet", namespace=namespace, name="web",
                                        uid=rs["metadata"]["uid"],
                                        status=raw({"replicas": 0, "observedGeneration": 1})))
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.code) == (SUCCEEDED, 200)
    assert requests == {"GET": {"200": 2}, "PUT": {"200": 1, "409": 1}}
    got = await _call(sim, "GET", f"/apis/apps/v1/namespaces/{namespace}/replicasets/web")
    assert got["status"]["observedGeneration"] == 1


async def test_status_update_gives_up_after_a_second_conflict(bus: Bus, sim: SimProcess, namespace: str,
                                                              executor: Start, faults: Callable[..., None]) -> None:
    """Upstream's StatusUpdateRetries is 1: two conflicts end in a failed result with the API's message."""
    rs = await _call(sim, "POST", f"/apis/apps/v1/namespaces/{namespace}/replicasets", _replicaset("web"))
    faults("replicasets/status:update:1.0:409")
    async with executor() as running:
        await publish(bus, UpdateStatus(**envelope("st-1"), kind="ReplicaSet", namespace=namespace, name="web",
                                        uid=rs["metadata"]["uid"], status=raw({"replicas": 0})))
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.code, result.reason) == (FAILED, 409, "Conflict")
    assert requests["PUT"] == {"409": 2}


async def test_status_update_of_a_replaced_object_is_refused(bus: Bus, sim: SimProcess, namespace: str,
                                                             executor: Start) -> None:
    """A status computed for another incarnation of the name is not written."""
    await _call(sim, "POST", f"/apis/apps/v1/namespaces/{namespace}/replicasets", _replicaset("web"))
    async with executor() as running:
        await publish(bus, UpdateStatus(**envelope("st-1"), kind="ReplicaSet", namespace=namespace, name="web",
                                        uid="an-older-uid", status=raw({"replicas": 7})))
        [result] = await results_for(bus, 1, (running,))
    assert (result.outcome, result.reason) == (FAILED, "Gone")


def _daemonset(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}}}}


async def test_collision_count_is_bumped_once_from_a_fresh_read(bus: Bus, sim: SimProcess, namespace: str,
                                                                executor: Start) -> None:
    """As dsc.snapshot: the live count plus one, written only while it is still the count the sync saw,
    so the same bump delivered twice (or issued by two syncs) raises it once; the rest of the status stays."""
    path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets"
    ds = await _call(sim, "POST", path, _daemonset("agent"))
    ds["status"] = {"numberReady": 3, "currentNumberScheduled": 3, "desiredNumberScheduled": 3,
                    "numberMisscheduled": 0}
    await _call(sim, "PUT", f"{path}/agent/status", ds)
    uid = ds["metadata"]["uid"]
    async with executor() as running:
        await publish(bus, BumpCollisionCount(**envelope("bump-1"), namespace=namespace, name="agent", uid=uid,
                                              seen=0))
        await publish(bus, BumpCollisionCount(**envelope("bump-2"), namespace=namespace, name="agent", uid=uid,
                                              seen=0))
        await publish(bus, BumpCollisionCount(**envelope("bump-3"), namespace=namespace, name="agent",
                                              uid="an-older-uid", seen=1))
        results = sorted(await results_for(bus, 3, (running,)), key=lambda r: r.key)
    # the two bumps may run in either order: one raises the count, the other finds it raised
    assert sorted((r.outcome, r.reason) for r in results[:2]) == [(SKIPPED, "AlreadyBumped"), (SUCCEEDED, "")]
    assert (results[2].outcome, results[2].reason) == (FAILED, "Gone")
    got = await _call(sim, "GET", f"{path}/agent")
    assert (got["status"]["collisionCount"], got["status"]["numberReady"]) == (1, 3)


async def test_recorded_event_is_written_once_even_when_redelivered(bus: Bus, sim: SimProcess, namespace: str,
                                                                   executor: Start) -> None:
    """The event's name comes from the action's key, so the second delivery meets AlreadyExists."""
    involved = {"kind": "ReplicaSet", "namespace": namespace, "name": "web", "uid": "rs-uid",
                "apiVersion": "apps/v1"}
    action = RecordEvent(**envelope("ev-1"), namespace=namespace, involved=raw(involved), type="Normal",
                         reason="SuccessfulCreate", message="Created pod: web-0", component="replicaset-controller")
    async with executor() as running:
        await publish(bus, action, msg_id="one")
        [result] = await results_for(bus, 1, (running,))
        await publish(bus, action, msg_id="two")
        while running.metrics.deliveries["acked"] < 2:
            running.check()
            await asyncio.sleep(0.05)  # polling: the second delivery's result is deduplicated in the stream
    assert running.metrics.snapshot()["results"]["record_event"] == {SUCCEEDED: 2}
    events = (await _call(sim, "GET", f"/api/v1/namespaces/{namespace}/events"))["items"]
    assert len(events) == 1
    [event] = events
    assert result.object_uid == event["metadata"]["uid"]
    assert event["metadata"]["name"].startswith("web.") and len(event["metadata"]["name"]) == len("web.") + 16
    assert {k: event[k] for k in ("reason", "message", "type", "count", "reportingComponent")} == {
        "reason": "SuccessfulCreate", "message": "Created pod: web-0", "type": "Normal", "count": 1,
        "reportingComponent": "replicaset-controller"}
    assert event["source"] == {"component": "replicaset-controller"}
    assert event["involvedObject"] == involved
    assert event["firstTimestamp"] == event["lastTimestamp"]


async def test_patches(bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    """A strategic-merge PatchPod, and an unknown patch type."""
    target = await _pod(sim, namespace, "web-0")
    uid = target["metadata"]["uid"]
    actions: list[Action] = [
        PatchPod(**envelope("p-1"), namespace=namespace, name="web-0", uid=uid, patch_type="strategic",
                 patch=raw({"metadata": {"labels": {"adopted": "yes"}, "uid": uid}})),
        PatchPod(**envelope("p-2"), namespace=namespace, name="web-0", uid=uid, patch_type="yaml",
                 patch=raw({})),
    ]
    async with executor() as running:
        for action in actions:
            await publish(bus, action)
        results = await results_for(bus, 2, (running,))
    by_key = {r.key: r for r in results}
    assert by_key["p-1"].outcome == SUCCEEDED
    assert (by_key["p-2"].outcome, by_key["p-2"].reason) == (FAILED, "BadAction")
    patched = await _call(sim, "GET", f"/api/v1/namespaces/{namespace}/pods/web-0")
    assert patched["metadata"]["labels"]["adopted"] == "yes"


async def test_controller_revisions(bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    """Create; a create of a taken name reports the existing uid as failed AlreadyExists; deletes by uid."""
    revision = {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": "web-5d8f"},
                "data": {"spec": {}}, "revision": 1}
    async with executor() as running:
        await publish(bus, CreateControllerRevision(**envelope("cr-1"), namespace=namespace, revision=raw(revision)))
        [created] = await results_for(bus, 1, (running,))
        await publish(bus, CreateControllerRevision(**envelope("cr-2"), namespace=namespace, revision=raw(revision)))
        await publish(bus, DeleteControllerRevision(**envelope("cr-3"), namespace=namespace, name="web-5d8f",
                                                    uid="another-uid"))
        by_key = {r.key: r for r in await results_for(bus, 3, (running,))}  # cr-2 and cr-3 run concurrently
        taken, spared = by_key["cr-2"], by_key["cr-3"]
        await publish(bus, DeleteControllerRevision(**envelope("cr-4"), namespace=namespace, name="web-5d8f",
                                                    uid=created.object_uid))
        *_, deleted = await results_for(bus, 4, (running,))
    assert (created.outcome, created.code) == (SUCCEEDED, 201)
    assert (taken.outcome, taken.reason, taken.object_uid) == (FAILED, "AlreadyExists", created.object_uid)
    assert (spared.outcome, spared.reason) == (SUCCEEDED, "Gone")
    assert (deleted.outcome, deleted.code) == (SUCCEEDED, 200)
    code, _ = await asyncio.to_thread(sim.request, "GET",
                                      f"/apis/apps/v1/namespaces/{namespace}/controllerrevisions/web-5d8f")
    assert code == 404
