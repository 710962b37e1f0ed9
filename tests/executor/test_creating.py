"""CreatePods against the sim: pods appear once, slow start stops after a failing batch, faults are survived."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import msgspec
import pytest

from messages.actions import (
    FAILED,
    IDEMPOTENCY_ANNOTATION,
    SKIPPED,
    SUCCEEDED,
    ActionResult,
    CreatePods,
    PodToCreate,
)
from messages.naming import generated_name
from runtime.bus import Bus
from tests.executor.builders import create_pods, envelope, pod
from tests.executor.conftest import Running, eventually, pods_of, publish, results_for
from tests.simulation import SimProcess

Start = Callable[..., AbstractAsyncContextManager[Running]]


async def test_created_pods_appear_with_a_result_each(bus: Bus, sim: SimProcess, namespace: str,
                                                      executor: Start) -> None:
    """Every requested pod is created once, and each has a succeeded result carrying its uid."""
    action = create_pods(namespace, 10)
    async with executor() as running:
        await publish(bus, action)
        results = await results_for(bus, 10, (running,))
    pods = await pods_of(sim, namespace)
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(f"web-{i}" for i in range(10))
    uids = {p["metadata"]["annotations"][IDEMPOTENCY_ANNOTATION]: p["metadata"]["uid"] for p in pods}
    assert {r.key: r.object_uid for r in results} == uids
    assert {(r.outcome, r.code, r.action, r.action_key) for r in results} == {
        (SUCCEEDED, 201, "create_pods", action.key)}
    assert running.metrics.snapshot()["results"] == {"create_pods": {SUCCEEDED: 10}}


@pytest.mark.parametrize("pods_exist_before", [
    pytest.param(False, id="same-action-delivered-twice"),
    pytest.param(True, id="run-after-the-pods-exist"),
])
async def test_a_repeated_create_makes_no_second_pod(bus: Bus, sim: SimProcess, namespace: str, executor: Start,
                                                     pods_exist_before: bool) -> None:
    """A create that meets AlreadyExists with our idempotency key is a success, and makes no pod."""
    action = create_pods(namespace, 6)
    if pods_exist_before:
        for p in action.pods:
            code, body = await asyncio.to_thread(sim.request, "POST", f"/api/v1/namespaces/{namespace}/pods",
                                                 msgspec.json.decode(p.pod))
            assert code == 201, body
    async with executor() as running:
        await publish(bus, action, msg_id="first")
        if not pods_exist_before:
            await publish(bus, action, msg_id="second")  # a second message: not deduplicated by the stream
        await eventually(lambda: _acked(running, 1 if pods_exist_before else 2), what="the actions acked",
                         running=(running,))
        results = await results_for(bus, 6, (running,))
    assert sorted(p["metadata"]["name"] for p in await pods_of(sim, namespace)) == [f"web-{i}" for i in range(6)]
    assert {r.outcome for r in results} == {SUCCEEDED}
    assert running.metrics.snapshot()["results"]["create_pods"] == {SUCCEEDED: 6 if pods_exist_before else 12}


async def test_slow_start_stops_after_a_batch_with_a_rejected_pod(bus: Bus, sim: SimProcess, namespace: str,
                                                                   executor: Start) -> None:
    """Batches 1, 2, 4: pod 4 (third batch) gets 422, so its batch completes and pods 7-9 are skipped."""
    async with executor() as running:
        await publish(bus, create_pods(namespace, 10, broken=frozenset({4})))
        results = await results_for(bus, 10, (running,))
    outcome = {r.key.rsplit("/", 1)[1]: (r.outcome, r.code) for r in results}
    assert outcome == {**{str(i): (SUCCEEDED, 201) for i in (0, 1, 2, 3, 5, 6)}, "4": (FAILED, 422),
                       **{str(i): (SKIPPED, 0) for i in (7, 8, 9)}}
    rejected = next(r for r in results if r.key.endswith("/4"))
    assert rejected.reason == "Invalid" and "spec.containers[0].name" in rejected.message
    assert len(await pods_of(sim, namespace)) == 6


async def test_a_persistent_500_fails_the_first_batch_at_once_and_skips_the_rest(
        bus: Bus, namespace: str, executor: Start, faults: Callable[..., None]) -> None:
    """client-go resends no 500 without Retry-After: the one-pod first batch fails on the first delivery,
    after one call, with the API's own message; the rest are skipped and nothing is redelivered."""
    faults("pods:create:1.0:500")
    async with executor() as running:
        await publish(bus, create_pods(namespace, 5))
        results = await results_for(bus, 5, (running,))
        await eventually(lambda: _acked(running, 1), what="the action acked", running=(running,))
        snapshot = running.metrics.snapshot()
    assert [(r.key.rsplit("/", 1)[1], r.outcome, r.code, r.attempts) for r in results] == [
        ("0", FAILED, 500, 1), *((str(i), SKIPPED, 0, 1) for i in range(1, 5))]
    assert (results[0].reason, results[0].message) == ("InternalError", "Internal error occurred: injected fault")
    assert snapshot["deliveries"] == {"acked": 1}
    assert snapshot["api_requests"] == {"POST": {"500": 1}}


async def test_creates_that_keep_timing_out_are_redelivered_then_given_up_without_a_pod(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, faults: Callable[..., None]) -> None:
    """No answer but a 504 leaves the outcome unknown: retried within the delivery, redelivered, and
    reported failed only on the last delivery; the sim applied none of them, so there is no pod."""
    faults("pods:create:1.0:timeout", timeout_seconds=0.1)
    async with executor(max_deliveries=2, api_attempts=2) as running:
        await publish(bus, create_pods(namespace, 3))
        results = await results_for(bus, 3, (running,))
        await eventually(lambda: _acked(running, 1), what="the action acked", running=(running,))
        snapshot = running.metrics.snapshot()
    assert [(r.key.rsplit("/", 1)[1], r.outcome, r.code, r.attempts) for r in results] == [
        ("0", FAILED, 504, 2), ("1", SKIPPED, 0, 2), ("2", SKIPPED, 0, 2)]
    assert results[0].message.startswith("gave up after the last delivery: Timeout: request did not complete")
    assert snapshot["deliveries"] == {"acked": 1, "redelivered": 1}
    assert snapshot["api_requests"] == {"POST": {"504": 4}}  # two deliveries of two attempts each
    assert await pods_of(sim, namespace) == []


async def test_creates_answered_429_are_retried_until_they_are_made(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, faults: Callable[..., None]) -> None:
    """429s on a fifth of the creates carry their Retry-After: sent again after it, all pods made once."""
    faults("pods:create:0.2:429", seed=11)
    async with executor() as running:
        for stem in ("a", "b", "c"):
            await publish(bus, create_pods(namespace, 20, stem=stem))
        results = await results_for(bus, 60, (running,), timeout=60)
        snapshot = running.metrics.snapshot()
    assert {r.outcome for r in results} == {SUCCEEDED}
    pods = await pods_of(sim, namespace)
    assert len(pods) == 60 and len({p["metadata"]["name"] for p in pods}) == 60
    codes = snapshot["api_requests"]["POST"]
    assert codes["429"] > 0 and codes["201"] == 60 and set(codes) == {"201", "429"}, codes
    assert snapshot["deliveries"] == {"acked": 3}


async def test_creates_answered_500_fail_at_once_and_end_their_slow_start(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, faults: Callable[..., None]) -> None:
    """500s (no Retry-After) on a fifth of the creates are final: each is a failed result after one call,
    its batch is finished and the rest of its action skipped; no action is redelivered."""
    faults("pods:create:0.2:500", seed=11)
    async with executor() as running:
        for stem in ("a", "b", "c"):
            await publish(bus, create_pods(namespace, 20, stem=stem))
        results = await results_for(bus, 60, (running,), timeout=60)
        await eventually(lambda: _acked(running, 3), what="the actions acked", running=(running,))
        snapshot = running.metrics.snapshot()
    by_outcome: dict[str, list[ActionResult]] = {}
    for r in results:
        by_outcome.setdefault(r.outcome, []).append(r)
    failures = by_outcome.get(FAILED, [])
    assert failures, "no create failed"
    assert {(r.code, r.reason, r.attempts) for r in failures} == {(500, "InternalError", 1)}
    codes = snapshot["api_requests"]["POST"]
    assert codes == {"201": len(by_outcome.get(SUCCEEDED, [])), "500": len(failures)}, codes
    for stem in ("a", "b", "c"):
        mine = sorted((r for r in results if r.key.startswith(f"{namespace}/{stem}/")),
                      key=lambda r: int(r.key.rsplit("/", 1)[1]))
        failed_at = [int(r.key.rsplit("/", 1)[1]) for r in mine if r.outcome == FAILED]
        # batches of 1, 2, 4, 8 and 5 pods: the one holding the first failure is the last attempted
        batch_end = next(end for end in (1, 3, 7, 15, 20) if end > failed_at[0]) if failed_at else 20
        assert {r.outcome for r in mine[:batch_end]} <= {SUCCEEDED, FAILED}
        assert [(r.outcome, r.reason) for r in mine[batch_end:]] == [(SKIPPED, "SlowStartStopped")] * (20 - batch_end)
    assert len(await pods_of(sim, namespace)) == len(by_outcome.get(SUCCEEDED, []))
    assert snapshot["deliveries"] == {"acked": 3}


async def test_a_create_applied_but_answered_504_ends_with_one_pod_and_a_success(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, faults: Callable[..., None]) -> None:
    """The retry meets AlreadyExists; the GET finds our key on the pod: succeeded, and one pod."""
    faults("pods:create:1.0:timeout-applied")
    async with executor() as running:
        await publish(bus, create_pods(namespace, 1))
        [result] = await results_for(bus, 1, (running,), timeout=30)
    assert (result.outcome, result.code, result.reason) == (SUCCEEDED, 409, "AlreadyExists")
    [only] = await pods_of(sim, namespace)
    assert result.object_uid == only["metadata"]["uid"]
    assert running.metrics.snapshot()["api_requests"] == {"POST": {"504": 1, "409": 1}, "GET": {"200": 1}}


async def test_a_same_named_pod_of_someone_else_is_a_failure(bus: Bus, sim: SimProcess, namespace: str,
                                                             executor: Start) -> None:
    """AlreadyExists without our key on the pod is not ours to count as created."""
    code, body = await asyncio.to_thread(sim.request, "POST", f"/api/v1/namespaces/{namespace}/pods",
                                         pod("web-0", "someone-else"))
    assert code == 201, body
    async with executor() as running:
        await publish(bus, create_pods(namespace, 3))
        results = await results_for(bus, 3, (running,))
    assert [(r.outcome, r.reason) for r in results] == [(FAILED, "AlreadyExists"), (SKIPPED, "SlowStartStopped"),
                                                        (SKIPPED, "SlowStartStopped")]
    assert "someone-else" in results[0].message


async def test_creates_in_a_terminating_namespace_fail_without_stopping_the_batches(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    """NamespaceTerminating is reported failed with its reason, and (as upstream) does not stop slow start."""
    code, body = await asyncio.to_thread(sim.request, "POST", f"/api/v1/namespaces/{namespace}/pods",
                                         pod("holder", finalizers=["kubus.io/test-hold"]))
    assert code == 201, body
    code, body = await asyncio.to_thread(sim.request, "DELETE", f"/api/v1/namespaces/{namespace}")
    assert code == 200, body
    try:
        async with executor() as running:
            await publish(bus, create_pods(namespace, 4))
            results = await results_for(bus, 4, (running,))
        assert {(r.outcome, r.code, r.reason) for r in results} == {(FAILED, 403, "NamespaceTerminating")}
    finally:
        await asyncio.to_thread(sim.request, "PATCH", f"/api/v1/namespaces/{namespace}/pods/holder",
                                {"metadata": {"finalizers": None}}, "application/merge-patch+json")


async def _acked(running: Running, count: int) -> bool:
    return bool(running.metrics.deliveries["acked"] >= count)


async def test_a_generated_name_taken_by_someone_else_moves_to_the_keys_next_name(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    """As kube-apiserver retries generateName collisions: the key's next name, the same on every
    delivery, so a redelivered create finds the pod its first delivery made."""
    key = f"{namespace}/gen/0"
    first, second = generated_name("web-", key), generated_name("web-", key, 1)
    code, body = await asyncio.to_thread(sim.request, "POST", f"/api/v1/namespaces/{namespace}/pods",
                                         pod(first, "someone-else"))
    assert code == 201, body
    mine = pod(first, key)
    mine["metadata"]["generateName"] = "web-"
    action = CreatePods(**envelope(f"{namespace}/gen"), namespace=namespace,
                        pods=[PodToCreate(key=key, pod=msgspec.Raw(msgspec.json.encode(mine)))])
    async with executor() as running:
        await publish(bus, action, msg_id="first")
        await publish(bus, action, msg_id="second")  # a redelivery: the stream keeps one result per key
        await eventually(lambda: _acked(running, 2), what="the actions acked", running=(running,))
        results = await results_for(bus, 1, (running,))
    assert [(r.outcome, r.subject) for r in results] == [(SUCCEEDED, f"{namespace}/{second}")]
    assert running.metrics.snapshot()["results"]["create_pods"] == {SUCCEEDED: 2}
    names = sorted(p["metadata"]["name"] for p in await pods_of(sim, namespace))
    assert names == sorted([first, second])
