"""Instructions per pod operation applied: a ReplicaSet's scale-up or scale-down as the executor applies it,
without NATS.

    .venv/bin/python -m bench.executor_apply_bench delete 1000 --check  # what was sent and reported, a digest
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_PyEval_CallTracing \\
        .venv/bin/python -m bench.executor_apply_bench delete 1000       # the instructions of the applying alone

Each action (with its owner, so with SuccessfulCreate / SuccessfulDelete events) goes through what
`Executor._apply` does between decoding the action and acking it: a `Delivery`, `checked_apply` (no ownership
check: the index is measured apart), the API calls on a stand-in API answering at once, each result encoded as
`Results.publish` encodes it, and the events recorded (past the spam filter's burst of 25, dropped). `delete`:
one DeletePod per pod; `create`: CreatePods of 50 pods (bench/executor_bench.py's bodies). The difference of two
sizes is the cost of one pod's operation.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys

import msgspec
import uvloop

from bench.executor_bench import pod_bodies
from bench.executor_events_bench import OWNER, Clock
from executor.consuming import checked_apply
from executor.delivery import Delivery
from executor.events import EventRecorder
from executor.kubeapi import KubeApi
from executor.metrics import ExecutorMetrics
from kube.flowcontrol import TokenBucket
from messages import codec
from messages.actions import Action, ActionResult, CreatePods, DeletePod, PodToCreate
from runtime.kubehttp import Answer


class Http:
    """Answers a POST (a pod, an event) with what was sent, a pod DELETE with 200 and the pod marked for
    deletion."""

    host = "http://127.0.0.1:1"

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, bytes | None]] = []

    async def request(self, method: str, path: str, *, body: bytes | None = None,
                      headers: dict[str, str] | None = None) -> Answer:
        self.requests.append((method, path, body))
        assert body is not None
        if method == "POST":
            return Answer(201, body)
        name = path.rsplit("/", 1)[1]
        return Answer(200, b'{"kind":"Pod","apiVersion":"v1","metadata":{"name":"' + name.encode()
                      + b'","namespace":"bench","uid":"' + name.encode() + b'-uid","resourceVersion":"7",'
                      b'"deletionTimestamp":"2026-01-01T00:00:00Z","deletionGracePeriodSeconds":30}}')


PER_ACTION = 50
ENVELOPE = {"controller": "ReplicaSet/bench/web", "issued_at": "2026-01-01T00:00:00Z", "namespace": "bench",
            "owner": OWNER, "component": "replicaset-controller"}


def actions(kind: str, pods: int) -> list[Action]:
    if kind == "delete":
        return [DeletePod(key=f"bench/web/delete/{i}", decision_id=i, name=f"web-{i:06d}", uid=f"web-{i:06d}-uid",
                          **ENVELOPE) for i in range(pods)]
    bodies = pod_bodies(pods, "rs-uid-1")
    return [CreatePods(key=f"bench/web/create/{n}", decision_id=n, **ENVELOPE,
                       pods=[PodToCreate(key=k, pod=msgspec.Raw(b)) for k, b in bodies[start:start + PER_ACTION]])
            for n, start in enumerate(range(0, pods, PER_ACTION))]


async def apply_all(todo: list[Action], http: Http, metrics: ExecutorMetrics, reported: list[bytes]) -> None:
    api = KubeApi(http, limiter=TokenBucket(0, 0), metrics=metrics, stopping=asyncio.Event())  # type: ignore[arg-type]
    clock = Clock()
    recorder = EventRecorder(metrics, clock=clock)

    async def report(result: ActionResult) -> None:
        reported.append(codec.encode(result))

    for action in todo:
        delivery = Delivery(api=api, action=action, number=1, final=False, executor="bench-executor",
                            report=report, now=clock, events=recorder)
        assert await checked_apply(delivery, None) is None
        await recorder.drain()


def main() -> None:
    kind, pods = sys.argv[1], int(sys.argv[2])
    todo, http, metrics, reported = actions(kind, pods), Http(), ExecutorMetrics(), []

    def drive() -> None:
        uvloop.run(apply_all(todo, http, metrics, reported))

    if "--check" in sys.argv:
        drive()
        digest = hashlib.sha256(repr((http.requests, reported)).encode()).hexdigest()
        print(f"{pods} {kind}s: {metrics.snapshot()['events']}, {len(http.requests)} requests, {len(reported)} "
              f"results, digest {digest}\n  last result {reported[-1].decode()}")
    else:
        sys.call_tracing(drive, ())


if __name__ == "__main__":
    main()
