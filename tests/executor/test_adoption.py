"""PatchPod with an owner_check against the sim: upstream's canAdopt (RecheckDeletionTimestamp) before adopting."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import msgspec
import pytest

from messages.actions import (
    FAILED,
    NOT_ADOPTED,
    SKIPPED,
    SUCCEEDED,
    Adoption,
    DeletePod,
    OwnerCheck,
    PatchControllerRevision,
    PatchPod,
)
from runtime.bus import Bus
from tests.executor.builders import create_pods, envelope, pod, raw
from tests.executor.conftest import Running, pods_in, publish, results_for
from tests.simulation import SimProcess

Start = Callable[..., AbstractAsyncContextManager[Running]]

PLURALS = {"ReplicaSet": "replicasets", "DaemonSet": "daemonsets"}


async def _call(sim: SimProcess, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> Any:
    code, got = await asyncio.to_thread(sim.request, method, path, body, content_type)
    assert 200 <= code < 300, (code, got)
    return got


async def _owner(sim: SimProcess, namespace: str, kind: str, name: str = "web",
                 finalizers: list[str] | None = None) -> dict[str, Any]:
    labels = {"app": name}
    spec: dict[str, Any] = {"selector": {"matchLabels": labels},
                            "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                                {"name": "app", "image": "registry.k8s.io/pause:3.9"}]}}}
    if kind == "ReplicaSet":
        spec["replicas"] = 0
    meta: dict[str, Any] = {"name": name}
    if finalizers:
        meta["finalizers"] = finalizers
    created: dict[str, Any] = await _call(sim, "POST", f"/apis/apps/v1/namespaces/{namespace}/{PLURALS[kind]}",
                                          {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec})
    return created


def _adopt(namespace: str, target: dict[str, Any], kind: str, name: str, uid: str, key: str = "adopt-1",
           **overrides: Any) -> PatchPod:
    """The patch upstream's ControllerRefManager sends (ownerRefControllerPatch), with the owner to recheck."""
    pod_uid = target["metadata"]["uid"]
    patch = {"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid,
                                               "controller": True, "blockOwnerDeletion": True}],
                          "uid": pod_uid}}
    fields: dict[str, Any] = {"namespace": namespace, "name": target["metadata"]["name"], "uid": pod_uid,
                              "patch_type": "strategic", "patch": raw(patch),
                              "owner_check": OwnerCheck(kind=kind, name=name, uid=uid)}
    return PatchPod(**envelope(key), **{**fields, **overrides})


async def _owner_references(sim: SimProcess, namespace: str, name: str) -> list[dict[str, Any]]:
    got = await _call(sim, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    refs: list[dict[str, Any]] = got["metadata"].get("ownerReferences", [])
    return refs


@pytest.mark.parametrize("kind", ["ReplicaSet", "DaemonSet"])
async def test_a_live_owner_adopts(bus: Bus, sim: SimProcess, namespace: str, executor: Start, kind: str) -> None:
    """A fresh GET finds the same, undeleted owner: the patch is applied."""
    owner = await _owner(sim, namespace, kind)
    target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("web-0"))
    async with executor() as running:
        await publish(bus, _adopt(namespace, target, kind, "web", owner["metadata"]["uid"]))
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.code, result.subject) == (SUCCEEDED, 200, f"{namespace}/web-0")
    assert result.object_uid == target["metadata"]["uid"]
    assert requests == {"GET": {"200": 1}, "PATCH": {"200": 1}}
    [ref] = await _owner_references(sim, namespace, "web-0")
    assert (ref["kind"], ref["uid"], ref["controller"]) == (kind, owner["metadata"]["uid"], True)


async def test_a_replaced_owner_does_not_adopt(bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    """The name now belongs to another ReplicaSet: refused with upstream's message, and no PATCH is sent."""
    owner = await _owner(sim, namespace, "ReplicaSet")
    target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("web-0"))
    async with executor() as running:
        await publish(bus, _adopt(namespace, target, "ReplicaSet", "web", "an-older-uid"))
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.reason, result.subject) == (FAILED, "Gone", f"{namespace}/web-0")
    assert result.message == (f"original ReplicaSet {namespace}/web is gone: "
                              f"got uid {owner['metadata']['uid']}, wanted an-older-uid")
    assert requests == {"GET": {"200": 1}}
    assert await _owner_references(sim, namespace, "web-0") == []


async def test_an_owner_being_deleted_does_not_adopt(bus: Bus, sim: SimProcess, namespace: str,
                                                     executor: Start) -> None:
    """A ReplicaSet held by a finalizer after its delete has a deletionTimestamp: refused, as upstream."""
    owner = await _owner(sim, namespace, "ReplicaSet", finalizers=["kubus.io/test-hold"])
    path = f"/apis/apps/v1/namespaces/{namespace}/replicasets/web"
    try:
        await _call(sim, "DELETE", path)
        deleting = await _call(sim, "GET", path)
        stamp = deleting["metadata"]["deletionTimestamp"]
        target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("web-0"))
        async with executor() as running:
            await publish(bus, _adopt(namespace, target, "ReplicaSet", "web", owner["metadata"]["uid"]))
            [result] = await results_for(bus, 1, (running,))
        assert (result.outcome, result.reason) == (FAILED, "Deleting")
        assert result.message == f"{namespace}/web has just been deleted at {stamp}"
        assert await _owner_references(sim, namespace, "web-0") == []
    finally:
        await asyncio.to_thread(sim.request, "PATCH", path, {"metadata": {"finalizers": None}},
                                "application/merge-patch+json")


async def test_a_missing_owner_does_not_adopt(bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    """The GET's 404 is the failure, with the API's Status."""
    target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("web-0"))
    async with executor() as running:
        await publish(bus, _adopt(namespace, target, "DaemonSet", "web", "ds-uid"))
        [result] = await results_for(bus, 1, (running,))
    assert (result.outcome, result.code, result.reason) == (FAILED, 404, "NotFound")
    assert "web" in result.message
    assert await _owner_references(sim, namespace, "web-0") == []


@pytest.mark.parametrize(("fault", "overrides", "code", "attempts", "requests", "deliveries"), [
    pytest.param("replicasets:get:1.0:500", {}, 500, 1, {"500": 1}, {"acked": 1}, id="500-fails-at-once"),
    pytest.param("replicasets:get:1.0:timeout", {"max_deliveries": 2, "api_attempts": 1}, 504, 2, {"504": 2},
                 {"redelivered": 1, "acked": 1}, id="timeouts-are-redelivered-then-given-up"),
])
async def test_a_recheck_that_fails_never_patches_the_pod(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, faults: Callable[..., None], fault: str,
        overrides: dict[str, Any], code: int, attempts: int, requests: dict[str, int],
        deliveries: dict[str, int]) -> None:
    """A 500 on the owner's GET is final (client-go retries no 500 without Retry-After): a failed result
    on the first delivery, after one call. A GET that times out (504) leaves nothing known: redelivered,
    then reported failed on the last delivery. Either way the pod is never patched."""
    owner = await _owner(sim, namespace, "ReplicaSet")
    target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("web-0"))
    faults(fault, timeout_seconds=0.1)
    async with executor(**overrides) as running:
        await publish(bus, _adopt(namespace, target, "ReplicaSet", "web", owner["metadata"]["uid"]))
        [result] = await results_for(bus, 1, (running,))
        snapshot = running.metrics.snapshot()
    assert (result.outcome, result.code, result.attempts) == (FAILED, code, attempts)
    if code == 500:
        assert (result.reason, result.message) == ("InternalError", "Internal error occurred: injected fault")
    else:
        assert result.message.startswith("gave up after the last delivery: ")
    assert snapshot["api_requests"] == {"GET": requests}
    assert snapshot["deliveries"] == deliveries
    assert await _owner_references(sim, namespace, "web-0") == []


async def test_patch_failures_after_the_recheck_are_reported_with_their_code(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    """404 (the pod is gone) and 422 (the API refuses the patch) are failed results: the reconciler
    decides to ignore them, as upstream's release does."""
    owner = await _owner(sim, namespace, "ReplicaSet")
    uid = owner["metadata"]["uid"]
    target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("web-0"))
    missing = {"metadata": {"name": "nobody", "uid": "pod-uid"}}
    actions = [
        _adopt(namespace, missing, "ReplicaSet", "web", uid, key="adopt-missing"),
        _adopt(namespace, target, "ReplicaSet", "web", uid, key="adopt-invalid", patch_type="merge",
               patch=raw({"spec": {"activeDeadlineSeconds": -1}})),
    ]
    async with executor() as running:
        for action in actions:
            await publish(bus, action)
        by_key = {r.key: r for r in await results_for(bus, 2, (running,))}
    assert [(by_key[a.key].outcome, by_key[a.key].code, by_key[a.key].reason, by_key[a.key].subject)
            for a in actions] == [(FAILED, 404, "NotFound", f"{namespace}/nobody"),
                                  (FAILED, 422, "Invalid", f"{namespace}/web-0")]


async def test_an_owner_check_of_another_kind_is_a_bad_action(bus: Bus, sim: SimProcess, namespace: str,
                                                              executor: Start) -> None:
    """Only ReplicaSets and DaemonSets adopt pods: nothing is called for any other kind."""
    target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("web-0"))
    async with executor() as running:
        await publish(bus, _adopt(namespace, target, "StatefulSet", "web", "uid"))
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.code, result.reason) == (FAILED, 0, "BadAction")
    assert requests == {}


# --- actions that wait on an adoption (adopt_first): upstream's claim adopts before the sync deletes ---
def _adoption(target: dict[str, Any], kind: str, name: str, uid: str) -> Adoption:
    first = _adopt("unused", target, kind, name, uid)
    assert first.owner_check is not None
    return Adoption(owner_check=first.owner_check, patch_type=first.patch_type, patch=first.patch)


def _delete(namespace: str, target: dict[str, Any], adoption: Adoption | None, key: str = "delete-1") -> DeletePod:
    return DeletePod(**envelope(key), namespace=namespace, name=target["metadata"]["name"],
                     uid=target["metadata"]["uid"], adopt_first=adoption)


async def test_a_delete_waiting_on_an_adoption_adopts_then_deletes(bus: Bus, sim: SimProcess, namespace: str,
                                                                   executor: Start) -> None:
    owner = await _owner(sim, namespace, "DaemonSet")
    target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("stray"))
    adoption = _adoption(target, "DaemonSet", "web", owner["metadata"]["uid"])
    async with executor() as running:
        await publish(bus, _delete(namespace, target, adoption))
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.code, result.action) == (SUCCEEDED, 200, "delete_pod")
    # the owner re-read, the adoption patch, then the delete: in that order, each once
    assert requests == {"GET": {"200": 1}, "PATCH": {"200": 1}, "DELETE": {"200": 1}}
    for left in await asyncio.to_thread(pods_in, sim, namespace):  # gone, or terminating as ours
        assert left["metadata"].get("deletionTimestamp"), left
        assert [r["uid"] for r in left["metadata"]["ownerReferences"]] == [owner["metadata"]["uid"]]


async def test_a_delete_whose_adoption_is_refused_is_not_applied(bus: Bus, sim: SimProcess, namespace: str,
                                                                 executor: Start) -> None:
    """The pod got another controller first: the API refuses the second (422), the pod lives on, untouched."""
    first = await _owner(sim, namespace, "DaemonSet", name="first")
    second = await _owner(sim, namespace, "DaemonSet", name="second")
    target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("stray"))
    async with executor() as running:
        await publish(bus, _adopt(namespace, target, "DaemonSet", "first", first["metadata"]["uid"]))
        [adopted] = await results_for(bus, 1, (running,))
        assert adopted.outcome == SUCCEEDED
        await publish(bus, _delete(namespace, target,
                                   _adoption(target, "DaemonSet", "second", second["metadata"]["uid"])))
        results = await results_for(bus, 2, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    skipped = next(r for r in results if r.action == "delete_pod")
    assert (skipped.outcome, skipped.code, skipped.reason) == (SKIPPED, 422, NOT_ADOPTED)
    assert "Only one reference can have Controller set to true" in skipped.message
    assert "DELETE" not in requests
    [ref] = await _owner_references(sim, namespace, "stray")
    assert ref["name"] == "first"


async def test_a_delete_whose_owner_is_being_deleted_is_not_applied(bus: Bus, sim: SimProcess, namespace: str,
                                                                    executor: Start) -> None:
    owner = await _owner(sim, namespace, "ReplicaSet", finalizers=["example.com/hold"])
    await _call(sim, "DELETE", f"/apis/apps/v1/namespaces/{namespace}/replicasets/web")
    target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("stray"))
    async with executor() as running:
        await publish(bus, _delete(namespace, target, _adoption(target, "ReplicaSet", "web",
                                                                owner["metadata"]["uid"])))
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.reason) == (SKIPPED, NOT_ADOPTED)
    assert "has just been deleted" in result.message
    assert set(requests) == {"GET"}
    assert [p["metadata"]["name"] for p in await asyncio.to_thread(pods_in, sim, namespace)] == ["stray"]


async def test_a_revision_is_adopted_only_for_a_live_owner(bus: Bus, sim: SimProcess, namespace: str,
                                                           executor: Start) -> None:
    """ClaimControllerRevisions' canAdopt: the DaemonSet re-read first; one being deleted adopts nothing."""
    owner = await _owner(sim, namespace, "DaemonSet", finalizers=["example.com/hold"])
    body = {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": "web-1"}, "revision": 1,
            "data": {}}
    revision = await _call(sim, "POST", f"/apis/apps/v1/namespaces/{namespace}/controllerrevisions", body)
    uid = owner["metadata"]["uid"]
    patch = {"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "web",
                                               "uid": uid, "controller": True, "blockOwnerDeletion": True}],
                          "uid": revision["metadata"]["uid"]}}
    adopt = PatchControllerRevision(**envelope("adopt-rev", "DaemonSet/test/web"), namespace=namespace, name="web-1",
                                    uid=revision["metadata"]["uid"], patch_type="strategic", patch=raw(patch),
                                    owner_check=OwnerCheck(kind="DaemonSet", name="web", uid=uid))
    await _call(sim, "DELETE", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/web")
    async with executor() as running:
        await publish(bus, adopt)
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.reason) == (FAILED, "Deleting")
    assert set(requests) == {"GET"}
    got = await _call(sim, "GET", f"/apis/apps/v1/namespaces/{namespace}/controllerrevisions/web-1")
    assert not got["metadata"].get("ownerReferences")


async def _held_deleting_owner(sim: SimProcess, namespace: str, kind: str) -> tuple[dict[str, Any], str]:
    """An owner held by a finalizer after its delete: it has a deletionTimestamp, as in the race upstream's
    TestDoNotAdoptOrCreateIfBeingDeletedRace / TestDontDoAnythingIfBeingDeletedRace set up."""
    owner = await _owner(sim, namespace, kind, finalizers=["example.com/hold"])
    path = f"/apis/apps/v1/namespaces/{namespace}/{PLURALS[kind]}/web"
    await _call(sim, "DELETE", path)
    return owner, path


async def _release(sim: SimProcess, path: str) -> None:
    await asyncio.to_thread(sim.request, "PATCH", path, {"metadata": {"finalizers": None}},
                            "application/merge-patch+json")


@pytest.mark.parametrize("kind", ["ReplicaSet", "DaemonSet"])
async def test_creates_of_a_claiming_sync_whose_owner_is_being_deleted_are_not_made(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, kind: str) -> None:
    """A sync that adopts orphans makes its creates only if its claim could succeed: upstream's ClaimPods fails the
    whole sync when canAdopt's fresh read finds the owner being deleted, so nothing is created, and no event."""
    owner, path = await _held_deleting_owner(sim, namespace, kind)
    try:
        action = create_pods(namespace, 3)
        action = msgspec.structs.replace(action, after_claim=OwnerCheck(
            kind=kind, name="web", uid=owner["metadata"]["uid"]))
        async with executor() as running:
            await publish(bus, action)
            results = await results_for(bus, 3, (running,))
            requests = running.metrics.snapshot()["api_requests"]
        assert {(r.outcome, r.reason) for r in results} == {(SKIPPED, NOT_ADOPTED)}
        assert all("has just been deleted" in r.message for r in results), results
        assert set(requests) == {"GET"}, "no create, no event"
        assert await asyncio.to_thread(pods_in, sim, namespace) == []
    finally:
        await _release(sim, path)


async def test_creates_and_deletes_of_a_claiming_sync_go_ahead_for_a_live_owner(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    owner = await _owner(sim, namespace, "ReplicaSet")
    check = OwnerCheck(kind="ReplicaSet", name="web", uid=owner["metadata"]["uid"])
    doomed = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("doomed"))
    async with executor() as running:
        await publish(bus, msgspec.structs.replace(create_pods(namespace, 2), after_claim=check))
        await publish(bus, msgspec.structs.replace(_delete(namespace, doomed, None), after_claim=check))
        results = await results_for(bus, 3, (running,))
    assert {r.outcome for r in results} == {SUCCEEDED}
    alive = [p["metadata"]["name"] for p in await asyncio.to_thread(pods_in, sim, namespace)
             if not p["metadata"].get("deletionTimestamp")]  # (a deleted pod terminates gracefully)
    assert sorted(alive) == ["web-0", "web-1"]


async def test_a_delete_of_a_claiming_sync_whose_owner_is_being_deleted_is_not_applied(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    owner, path = await _held_deleting_owner(sim, namespace, "DaemonSet")
    try:
        target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("kept"))
        action = msgspec.structs.replace(_delete(namespace, target, None), after_claim=OwnerCheck(
            kind="DaemonSet", name="web", uid=owner["metadata"]["uid"]))
        async with executor() as running:
            await publish(bus, action)
            [result] = await results_for(bus, 1, (running,))
        assert (result.outcome, result.reason) == (SKIPPED, NOT_ADOPTED)
        assert [p["metadata"]["name"] for p in await asyncio.to_thread(pods_in, sim, namespace)] == ["kept"]
    finally:
        await _release(sim, path)
