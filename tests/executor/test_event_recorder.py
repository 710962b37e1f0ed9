"""The EventRecorder on a stand-in API: the order in which the events of concurrent calls are written, and what a
call costs in tasks."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import msgspec

from executor.effects import Effect
from executor.events import EventRecorder, create_event, record_pod_events
from executor.kubeapi import KubeApi
from executor.metrics import ExecutorMetrics
from kube.flowcontrol import TokenBucket
from messages.actions import SUCCEEDED
from runtime.kubehttp import Answer

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
OWNER = msgspec.Raw(json.dumps({"kind": "ReplicaSet", "namespace": "ns", "name": "web", "uid": "rs-1",
                                "apiVersion": "apps/v1"}).encode())
TIMEOUT = 10.0


class GatedHttp:
    """Answers each event POST with the event, the first one only once `gate` is set; keeps the messages in the
    order they were sent."""

    host = "http://127.0.0.1:1"

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.first_sent = asyncio.Event()
        self.gate = asyncio.Event()

    async def request(self, method: str, path: str, *, body: bytes | None = None,
                      headers: dict[str, str] | None = None) -> Answer:
        assert method == "POST" and body is not None
        self.sent.append(json.loads(body)["message"])
        if len(self.sent) == 1:
            self.first_sent.set()
            await self.gate.wait()
        return Answer(201, body)


def _setup() -> tuple[GatedHttp, KubeApi, EventRecorder]:
    http, metrics = GatedHttp(), ExecutorMetrics()
    api = KubeApi(http, limiter=TokenBucket(0, 0), metrics=metrics, stopping=asyncio.Event())  # type: ignore[arg-type]
    return http, api, EventRecorder(metrics, clock=lambda: T0)


async def _record(recorder: EventRecorder, api: KubeApi, pods: list[str]) -> None:
    events = [(f"ns/web/{name}", create_event(Effect(SUCCEEDED, 201), name)) for name in pods]
    await record_pod_events(recorder, api, lambda: T0, OWNER, "replicaset-controller", "ns", events)


async def test_a_calls_events_are_written_together_before_a_later_calls() -> None:
    """While the first event of one call is being written, a second call's events wait for the owner's turn; the
    rest of the first call's events still come before them (correlated in the order they were asked for)."""
    http, api, recorder = _setup()
    await _record(recorder, api, ["a-0", "a-1", "a-2"])
    await _record(recorder, api, ["b-0", "b-1"])
    await asyncio.wait_for(http.first_sent.wait(), TIMEOUT)  # both calls have asked for the owner's turn by now
    http.gate.set()
    await asyncio.wait_for(recorder.drain(), TIMEOUT)
    assert http.sent == [f"Created pod: {name}" for name in ("a-0", "a-1", "a-2", "b-0", "b-1")]
    assert recorder.metrics.snapshot()["events"] == {"recorded": 5}


async def test_a_calls_events_are_recorded_in_one_task() -> None:
    """A task per event, each waiting for the owner's turn, costs as much as correlating an event the spam filter
    drops, which nearly every event of a large scale is."""
    http, api, recorder = _setup()
    http.gate.set()
    before = len(asyncio.all_tasks())
    await _record(recorder, api, [f"p-{i}" for i in range(5)])
    assert len(asyncio.all_tasks()) == before + 1
    assert recorder.metrics.events_pending == 1
    await asyncio.wait_for(recorder.drain(), TIMEOUT)
    assert len(http.sent) == 5 and recorder.metrics.events_pending == 0
