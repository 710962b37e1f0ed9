"""CreatePods against the sim: pods appear once, slow start stops after a failing batch, faults are survived."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import msgspec
import pytest

from kubus.jetstream import Bus
from messages.actions import FAILED, IDEMPOTENCY_ANNOTATION, SKIPPED, SUCCEEDED, CreatePods, PodToCreate
from messages.naming import generated_name
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


async def test_slow_start_stops_after_the_first_batch_when_every_create_fails(
        bus: Bus, namespace: str, executor: Start, faults: Callable[..., None]) -> None:
    """On the last delivery a persistent 500 is a failure: the one-pod first batch fails, the rest are skipped."""
    faults("pods:create:1.0:500")
    async with executor(max_deliveries=2, api_attempts=2) as running:
        await publish(bus, create_pods(namespace, 5))
        results = await results_for(bus, 5, (running,))
        snapshot = running.metrics.snapshot()
    assert [(r.key.rsplit("/", 1)[1], r.outcome, r.code, r.attempts) for r in results] == [
        ("0", FAILED, 500, 2), *((str(i), SKIPPED, 0, 2) for i in range(1, 5))]
    assert snapshot["deliveries"] == {"acked": 1, "redelivered": 1}
    assert snapshot["api_requests"] == {"POST": {"500": 4}}  # two deliveries of two attempts each


async def test_twenty_percent_of_creates_failing_transiently_still_make_exactly_the_pods(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, faults: Callable[..., None]) -> None:
    """429s (with their Retry-After) and 500s on a fifth of the creates are retried away."""
    faults("pods:create:0.1:429", "pods:create:0.11:500", seed=11)
    async with executor() as running:
        for stem in ("a", "b", "c"):
            await publish(bus, create_pods(namespace, 20, stem=stem))
        results = await results_for(bus, 60, (running,), timeout=60)
    assert {r.outcome for r in results} == {SUCCEEDED}
    pods = await pods_of(sim, namespace)
    assert len(pods) == 60 and len({p["metadata"]["name"] for p in pods}) == 60
    codes = running.metrics.snapshot()["api_requests"]["POST"]
    assert codes["429"] > 0 and codes["500"] > 0, codes


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
