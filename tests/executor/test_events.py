"""Pod events against the sim: what upstream's RealPodControl records on the owner, and what it does not."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import msgspec
import pytest

from messages.actions import FAILED, SKIPPED, SUCCEEDED, ActionResult, DeletePod, RecordEvent
from runtime.bus import Bus
from tests.executor.builders import create_pods, envelope, pod, raw
from tests.executor.conftest import Running, eventually, publish, results_for
from tests.simulation import SimProcess

Start = Callable[..., AbstractAsyncContextManager[Running]]

COMPONENT = "replicaset-controller"


def _owner(namespace: str) -> dict[str, str]:
    """The ObjectReference the reconciler sends: what upstream's recorder builds from the ReplicaSet."""
    return {"kind": "ReplicaSet", "namespace": namespace, "name": "web", "uid": "rs-uid-1",
            "apiVersion": "apps/v1", "resourceVersion": "42"}


def _owned(action: Any, namespace: str) -> Any:
    return msgspec.structs.replace(action, owner=raw(_owner(namespace)), component=COMPONENT)


async def _call(sim: SimProcess, method: str, path: str, body: Any = None) -> Any:
    code, got = await asyncio.to_thread(sim.request, method, path, body)
    assert 200 <= code < 300, (code, got)
    return got


async def _events(sim: SimProcess, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await _call(sim, "GET", f"/api/v1/namespaces/{namespace}/events"))["items"]
    return sorted(items, key=lambda e: str(e["message"]))


async def _acked(running: Running, count: int) -> None:
    """Waits until `count` actions are acked and the events they started are written: an action is acked
    before its events are (they are recorded in the background, as client-go's broadcaster does), so the ack
    alone does not say they are in (a loaded CI run read the events after the ack and found 5 of 10)."""

    async def done() -> bool:
        metrics = running.metrics
        return bool(metrics.deliveries["acked"] >= count and metrics.events_pending == 0)

    await eventually(done, what=f"{count} actions acked", running=(running,))


def _summary(event: dict[str, Any]) -> tuple[str, str, str]:
    return event["type"], event["reason"], event["message"]


async def test_created_pods_are_recorded_on_the_owner(bus: Bus, namespace: str, sim: SimProcess,
                                                      executor: Start) -> None:
    """One SuccessfulCreate per pod, on the owner's ObjectReference, from the action's component."""
    async with executor() as running:
        await publish(bus, _owned(create_pods(namespace, 3), namespace))
        results = await results_for(bus, 3, (running,))
        await _acked(running, 1)
    events = await _events(sim, namespace)
    assert [_summary(e) for e in events] == [("Normal", "SuccessfulCreate", f"Created pod: web-{i}") for i in range(3)]
    for event in events:
        assert event["involvedObject"] == _owner(namespace)
        assert event["source"] == {"component": COMPONENT} and event["reportingComponent"] == COMPONENT
        assert re.fullmatch(r"web\.[0-9a-f]{16}", event["metadata"]["name"])
        assert event["count"] == 1 and event["firstTimestamp"] == event["lastTimestamp"]
    assert len({e["metadata"]["name"] for e in events}) == 3
    assert sorted(r.subject for r in results) == [f"{namespace}/web-{i}" for i in range(3)]
    assert running.metrics.snapshot()["events"] == {"recorded": 3}


async def test_a_redelivered_create_records_each_event_once(bus: Bus, namespace: str, sim: SimProcess,
                                                            executor: Start) -> None:
    """The second run meets AlreadyExists for the pods and, the event names coming from the keys, for the events."""
    action = _owned(create_pods(namespace, 2), namespace)
    async with executor() as running:
        await publish(bus, action, msg_id="first")
        await _acked(running, 1)
        await publish(bus, action, msg_id="second")
        await _acked(running, 2)
    assert [_summary(e) for e in await _events(sim, namespace)] == [
        ("Normal", "SuccessfulCreate", "Created pod: web-0"), ("Normal", "SuccessfulCreate", "Created pod: web-1")]
    assert running.metrics.snapshot()["events"] == {"recorded": 2, "duplicate": 2}


async def test_a_rejected_create_is_a_failed_create_event_and_skipped_pods_have_none(
        bus: Bus, namespace: str, sim: SimProcess, executor: Start) -> None:
    """Batches 1, 2, 4: pod 4 meets 422, pods 7-9 are skipped: six SuccessfulCreate, one FailedCreate."""
    async with executor() as running:
        await publish(bus, _owned(create_pods(namespace, 10, broken=frozenset({4})), namespace))
        results = await results_for(bus, 10, (running,))
        await _acked(running, 1)
    rejected = next(r for r in results if r.key.endswith("/4"))
    assert (rejected.outcome, rejected.code) == (FAILED, 422)
    assert {r.subject for r in results if r.outcome == SKIPPED} == {f"{namespace}/web-{i}" for i in (7, 8, 9)}
    events = await _events(sim, namespace)
    assert [_summary(e) for e in events] == [
        *(("Normal", "SuccessfulCreate", f"Created pod: web-{i}") for i in (0, 1, 2, 3, 5, 6)),
        ("Warning", "FailedCreate", f"Error creating: {rejected.message}")]
    assert "spec.containers[0].name" in events[-1]["message"]


async def test_a_create_answered_500_is_a_failed_create_with_the_apis_message_at_once(
        bus: Bus, namespace: str, sim: SimProcess, executor: Start, faults: Callable[..., None]) -> None:
    """As upstream's RealPodControl with client-go: a 500 (no Retry-After) is final on the first call, and
    the event carries the API's own message, as `Error creating: %v` prints a StatusError."""
    faults("pods:create:1.0:500")
    async with executor() as running:
        await publish(bus, _owned(create_pods(namespace, 2), namespace))
        results = await results_for(bus, 2, (running,))
        await _acked(running, 1)
    assert [(r.outcome, r.code, r.attempts) for r in results] == [(FAILED, 500, 1), (SKIPPED, 0, 1)]
    assert results[0].message == "Internal error occurred: injected fault"
    assert [_summary(e) for e in await _events(sim, namespace)] == [
        ("Warning", "FailedCreate", "Error creating: Internal error occurred: injected fault")]
    assert running.metrics.snapshot()["events"] == {"recorded": 1}
    assert running.metrics.snapshot()["deliveries"] == {"acked": 1}


async def test_a_create_timing_out_until_the_last_delivery_is_a_failed_create_with_the_apis_message(
        bus: Bus, namespace: str, sim: SimProcess, executor: Start, faults: Callable[..., None]) -> None:
    """An unknown outcome gets no event until it is final; then the event carries the API's own message."""
    faults("pods:create:1.0:timeout", timeout_seconds=0.1)
    async with executor(max_deliveries=2, api_attempts=1) as running:
        await publish(bus, _owned(create_pods(namespace, 2), namespace))
        results = await results_for(bus, 2, (running,))
        await _acked(running, 1)
    assert [(r.outcome, r.code) for r in results] == [(FAILED, 504), (SKIPPED, 0)]
    assert results[0].message.startswith("gave up after the last delivery: ")
    api_message = results[0].message.removeprefix("gave up after the last delivery: ")
    assert [_summary(e) for e in await _events(sim, namespace)] == [
        ("Warning", "FailedCreate", f"Error creating: {api_message}")]
    assert running.metrics.snapshot()["events"] == {"recorded": 1}  # one event: none on the first delivery


async def test_no_event_without_an_owner(bus: Bus, namespace: str, sim: SimProcess, executor: Start) -> None:
    """Creates, a rejected create and a delete with no `owner`: no event is even attempted."""
    created = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("other"))
    async with executor() as running:
        await publish(bus, create_pods(namespace, 3, broken=frozenset({2})))
        await publish(bus, DeletePod(**envelope("del-1"), namespace=namespace, name="other",
                                     uid=created["metadata"]["uid"]))
        await results_for(bus, 4, (running,))
        await _acked(running, 2)
    assert await _events(sim, namespace) == []
    assert running.metrics.snapshot()["events"] == {}


async def test_no_event_for_creates_in_a_terminating_namespace(bus: Bus, namespace: str, sim: SimProcess,
                                                               executor: Start) -> None:
    """Upstream records no FailedCreate for NamespaceTerminating: nothing is attempted."""
    await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("holder", finalizers=["kubus.io/test-hold"]))
    await _call(sim, "DELETE", f"/api/v1/namespaces/{namespace}")
    try:
        async with executor() as running:
            await publish(bus, _owned(create_pods(namespace, 3), namespace))
            results = await results_for(bus, 3, (running,))
            await _acked(running, 1)
        assert {(r.outcome, r.reason) for r in results} == {(FAILED, "NamespaceTerminating")}
        assert running.metrics.snapshot()["events"] == {}
    finally:
        await asyncio.to_thread(sim.request, "PATCH", f"/api/v1/namespaces/{namespace}/pods/holder",
                                {"metadata": {"finalizers": None}}, "application/merge-patch+json")


async def test_deletes_record_successful_delete_only_for_a_real_deletion(bus: Bus, namespace: str, sim: SimProcess,
                                                                        executor: Start) -> None:
    """A 200 is SuccessfulDelete; a 404 and a failed uid precondition (Gone) record nothing."""
    target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("web-0"))
    await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("web-1"))
    actions = [
        DeletePod(**envelope("del-real"), namespace=namespace, name="web-0", uid=target["metadata"]["uid"]),
        DeletePod(**envelope("del-missing"), namespace=namespace, name="nobody", uid="u-1"),
        DeletePod(**envelope("del-replaced"), namespace=namespace, name="web-1", uid="an-older-uid"),
    ]
    async with executor() as running:
        for action in actions:
            await publish(bus, _owned(action, namespace))
        results = await results_for(bus, 3, (running,))
        await _acked(running, 3)
    by_key = {r.key: r for r in results}
    assert [(by_key[a.key].outcome, by_key[a.key].code, by_key[a.key].subject) for a in actions] == [
        (SUCCEEDED, 200, f"{namespace}/web-0"), (SUCCEEDED, 404, f"{namespace}/nobody"),
        (SUCCEEDED, 409, f"{namespace}/web-1")]
    [event] = await _events(sim, namespace)
    assert _summary(event) == ("Normal", "SuccessfulDelete", "Deleted pod: web-0")
    assert event["involvedObject"] == _owner(namespace) and event["source"] == {"component": COMPONENT}


@pytest.mark.parametrize(("fault", "overrides", "code"), [
    pytest.param("pods:delete:1.0:409", {}, 409, id="refused"),
    pytest.param("pods:delete:1.0:500", {}, 500, id="internal-error"),
    pytest.param("pods:delete:1.0:timeout", {"max_deliveries": 1, "api_attempts": 2}, 504, id="gave-up"),
])
async def test_a_failed_delete_is_a_failed_delete_event(bus: Bus, namespace: str, sim: SimProcess, executor: Start,
                                                        faults: Callable[..., None], fault: str,
                                                        overrides: dict[str, Any], code: int) -> None:
    """FailedDelete, with the API's own message (not the executor's wording around it)."""
    target = await _call(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("web-0"))
    faults(fault, timeout_seconds=0.1)
    async with executor(**overrides) as running:
        await publish(bus, _owned(DeletePod(**envelope("del-1"), namespace=namespace, name="web-0",
                                            uid=target["metadata"]["uid"]), namespace))
        [result] = await results_for(bus, 1, (running,))
        await _acked(running, 1)
    assert (result.outcome, result.code) == (FAILED, code)
    api_message = result.message.removeprefix("gave up after the last delivery: ")
    assert api_message  # the API said something
    [event] = await _events(sim, namespace)
    assert _summary(event) == ("Warning", "FailedDelete", f"Error deleting: {api_message}")
    if code == 409:
        assert event["message"] == "Error deleting: Operation cannot be fulfilled on pods: injected conflict"
    if code == 500:
        assert (result.attempts, result.message) == (1, "Internal error occurred: injected fault")
    else:
        assert result.message.startswith("gave up after the last delivery: ") == (code == 504)


@pytest.mark.parametrize("fault", ["events:create:1.0:409", "events:create:1.0:500"])
async def test_an_event_that_cannot_be_recorded_changes_no_result(
        bus: Bus, namespace: str, sim: SimProcess, executor: Start, faults: Callable[..., None],
        caplog: pytest.LogCaptureFixture, fault: str) -> None:
    """Best effort: an event the API refuses (409, or 500: client-go's recorder gives up on any Status
    error) is logged at warning level, and the pods are created and reported as ever."""
    faults(fault)
    with caplog.at_level(logging.WARNING, logger="kubus.executor.events"):
        async with executor(api_attempts=2) as running:
            await publish(bus, _owned(create_pods(namespace, 3), namespace))
            results = await results_for(bus, 3, (running,))
            await _acked(running, 1)
    assert {(r.outcome, r.code) for r in results} == {(SUCCEEDED, 201)}
    assert running.metrics.snapshot()["deliveries"] == {"acked": 1}
    assert running.metrics.snapshot()["events"] == {"failed": 3}
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "kubus.executor.events" and r.levelno == logging.WARNING]
    assert len(warnings) == 3 and all("not recorded" in w for w in warnings), warnings
    assert await _events(sim, namespace) == []


async def test_record_event_actions_pass_the_same_event_correlator(bus: Bus, namespace: str, sim: SimProcess,
                                                                   executor: Start) -> None:
    """26 events alike but for their message, on one object from one component, within seconds; the
    correlator is the process's, shared by the 26 deliveries. As client-go's: the first 9 are written as
    they are, the 10th distinct message turns into "(combined from similar events): ..." and the next
    15 count onto that Event (count 16); the 26th finds the spam filter's 25 tokens spent and is dropped,
    reported skipped."""
    involved = raw(_owner(namespace))
    async with executor() as running:
        for i in range(26):
            await publish(bus, RecordEvent(**envelope(f"ev-{i}"), namespace=namespace, involved=involved,
                                           type="Normal", reason="SuccessfulCreate", message=f"Created pod: web-{i}",
                                           component=COMPONENT))
        results = await results_for(bus, 26, (running,))
    outcomes = sorted((r.outcome, r.reason) for r in results)
    assert outcomes == [(SKIPPED, "SpamFiltered")] + [(SUCCEEDED, "")] * 25
    assert running.metrics.snapshot()["events"] == {"recorded": 10, "counted": 15, "dropped": 1}
    events = await _events(sim, namespace)
    assert len(events) == 10
    [combined] = [e for e in events if e["message"].startswith("(combined from similar events): ")]
    plain = [e for e in events if e is not combined]
    assert combined["count"] == 16 and {e["count"] for e in plain} == {1}
    messages = {e["message"] for e in plain} | {combined["message"].removeprefix("(combined from similar events): ")}
    assert messages <= {f"Created pod: web-{i}" for i in range(26)} and len(messages) == 10
    assert (combined["type"], combined["reason"], combined["involvedObject"], combined["source"]) == (
        "Normal", "SuccessfulCreate", _owner(namespace), {"component": COMPONENT})
    assert combined["reportingComponent"] == ""  # upstream's aggregate copies no reporting fields
    names = {f"{namespace}/{e['metadata']['name']}" for e in events}
    assert {r.subject for r in results if r.outcome == SUCCEEDED} == names
    assert sum(r.subject == f"{namespace}/{combined['metadata']['name']}" for r in results) == 16
    dropped: ActionResult = next(r for r in results if r.outcome == SKIPPED)
    assert dropped.subject not in names and dropped.subject.startswith(f"{namespace}/web.")


async def test_an_identical_event_is_counted_on_the_first_with_a_strategic_merge_patch(
        bus: Bus, namespace: str, sim: SimProcess, executor: Start) -> None:
    """The same event three times (three actions): one Event, count 3, the first one's name and
    firstTimestamp; one POST, then two PATCHes."""
    involved = raw(_owner(namespace))
    actions = [RecordEvent(**envelope(f"again-{i}"), namespace=namespace, involved=involved, type="Warning",
                           reason="FailedCreate", message="Error creating: quota exceeded", component=COMPONENT)
               for i in range(3)]
    async with executor() as running:
        await publish(bus, actions[0])
        [first] = await results_for(bus, 1, (running,))
        first_event = (await _events(sim, namespace))[0]
        for action in actions[1:]:
            await publish(bus, action)
        results = await results_for(bus, 3, (running,))
        snapshot = running.metrics.snapshot()
    [event] = await _events(sim, namespace)
    assert _summary(event) == ("Warning", "FailedCreate", "Error creating: quota exceeded")
    assert event["count"] == 3 and event["metadata"]["name"] == first_event["metadata"]["name"]
    assert event["firstTimestamp"] == first_event["firstTimestamp"] <= event["lastTimestamp"]
    assert {(r.outcome, r.code, r.subject) for r in results} == {
        (SUCCEEDED, 201, first.subject), (SUCCEEDED, 200, first.subject)}
    assert sorted(r.code for r in results) == [200, 200, 201]
    assert snapshot["events"] == {"recorded": 1, "counted": 2}
    assert snapshot["api_requests"] == {"POST": {"201": 1}, "PATCH": {"200": 2}}


async def test_a_count_for_an_event_deleted_meanwhile_creates_it_again(
        bus: Bus, namespace: str, sim: SimProcess, executor: Start) -> None:
    """recordEvent: the PATCH of the existing Event answers 404, so the event is POSTed, with its count."""
    involved = raw(_owner(namespace))
    actions = [RecordEvent(**envelope(f"gone-{i}"), namespace=namespace, involved=involved, type="Normal",
                           reason="SuccessfulDelete", message="Deleted pod: web-0", component=COMPONENT)
               for i in range(2)]
    async with executor() as running:
        await publish(bus, actions[0])
        [first] = await results_for(bus, 1, (running,))
        await _call(sim, "DELETE", f"/api/v1/namespaces/{first.subject.replace('/', '/events/', 1)}")
        await publish(bus, actions[1])
        results = await results_for(bus, 2, (running,))
        snapshot = running.metrics.snapshot()
    [event] = await _events(sim, namespace)
    assert (event["count"], f"{namespace}/{event['metadata']['name']}") == (2, first.subject)
    assert [(r.outcome, r.code, r.subject) for r in results] == [(SUCCEEDED, 201, first.subject)] * 2
    assert snapshot["events"] == {"recorded": 2}
    assert snapshot["api_requests"] == {"POST": {"201": 2}, "PATCH": {"404": 1}}


async def test_a_rounds_creates_beyond_nine_are_combined_into_one_event(bus: Bus, namespace: str, sim: SimProcess,
                                                                         executor: Start) -> None:
    """12 pods created for one owner: what `kubectl describe rs` shows upstream, 9 SuccessfulCreate events
    and one "(combined from similar events): Created pod: ..." counted 3 times."""
    async with executor() as running:
        await publish(bus, _owned(create_pods(namespace, 12), namespace))
        results = await results_for(bus, 12, (running,))
        await _acked(running, 1)
    assert {r.outcome for r in results} == {SUCCEEDED}
    events = await _events(sim, namespace)
    assert sorted(e["count"] for e in events) == [1] * 9 + [3]
    [combined] = [e for e in events if e["count"] == 3]
    created = {f"Created pod: web-{i}" for i in range(12)}
    assert combined["message"].removeprefix("(combined from similar events): ") in created
    assert {e["message"] for e in events if e is not combined} < created
    assert {(e["type"], e["reason"]) for e in events} == {("Normal", "SuccessfulCreate")}
    assert running.metrics.snapshot()["events"] == {"recorded": 10, "counted": 2}
