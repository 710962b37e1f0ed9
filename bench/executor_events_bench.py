"""Instructions per pod event: a ReplicaSet's SuccessfulCreate events through the executor's EventRecorder.

    .venv/bin/python -m bench.executor_events_bench 1000 --check     # what was written, and a digest of it
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_PyEval_CallTracing \\
        .venv/bin/python -m bench.executor_events_bench 1000          # the instructions of the recording alone

CreatePods actions of 50 pods with an owner, recorded as `create_pods` does: `record_pod_events` once per
slow-start batch (1, 2, 4, 8, 16, 19), each batch's events drained before the next. The API is a stand-in
answering at once (a POST with the event sent, a PATCH with the stored event patched), so what is counted is
the recorder, the correlator and the KubeApi call around them. Every event is about the one ReplicaSet, so
past the spam filter's burst (25) every event is dropped: the difference of two sizes is the cost of a
dropped event, which is what nearly every event of a large scale is.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import uvloop

from executor.creating import batch_sizes
from executor.effects import Effect
from executor.events import EventRecorder, create_event, record_pod_events
from executor.kubeapi import KubeApi
from executor.metrics import ExecutorMetrics
from kube.flowcontrol import TokenBucket
from messages.actions import SUCCEEDED
from runtime.kubehttp import Answer

PER_ACTION = 50
OWNER = msgspec.Raw(json.dumps({"kind": "ReplicaSet", "namespace": "bench", "name": "web", "uid": "rs-uid-1",
                                "apiVersion": "apps/v1", "resourceVersion": "42"}).encode())


class Clock:
    """A millisecond per reading: deterministic, and the spam filter's bucket refills by almost nothing."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


class Http:
    """Answers an event POST with the event, a PATCH with the stored event patched; records every request."""

    host = "http://127.0.0.1:1"

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, bytes | None]] = []
        self.stored: dict[str, dict[str, Any]] = {}

    async def request(self, method: str, path: str, *, body: bytes | None = None,
                      headers: dict[str, str] | None = None) -> Answer:
        self.requests.append((method, path, body))
        assert body is not None
        if method == "POST":
            event = json.loads(body)
            self.stored[event["metadata"]["name"]] = event
            return Answer(201, body)
        event = self.stored[path.rsplit("/", 1)[1]]
        event.update(json.loads(body))
        return Answer(200, json.dumps(event).encode())


async def record(pods: int, http: Http, metrics: ExecutorMetrics) -> None:
    api = KubeApi(http, limiter=TokenBucket(0, 0), metrics=metrics, stopping=asyncio.Event())  # type: ignore[arg-type]
    clock = Clock()
    recorder = EventRecorder(metrics, clock=clock)
    for action in range(0, pods, PER_ACTION):
        done = action
        for size in batch_sizes(min(PER_ACTION, pods - action)):
            events = [(f"bench/web/{i}", create_event(Effect(SUCCEEDED, 201), f"web-{i:06d}"))
                      for i in range(done, done + size)]
            done += size
            await record_pod_events(recorder, api, clock, OWNER, "replicaset-controller", "bench", events)
            await recorder.drain()


def main() -> None:
    pods = int(sys.argv[1])
    http, metrics = Http(), ExecutorMetrics()

    def drive() -> None:
        uvloop.run(record(pods, http, metrics))

    if "--check" in sys.argv:
        drive()
        digest = hashlib.sha256(repr(http.requests).encode()).hexdigest()
        print(f"{pods} events: {metrics.snapshot()['events']}, {len(http.requests)} requests, digest {digest}")
    else:
        sys.call_tracing(drive, ())


if __name__ == "__main__":
    main()
