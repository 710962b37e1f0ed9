"""Shared pieces of the ingest tests: running ingest, reading the bus, and recording the API's own
watch history as the oracle the bus is compared with."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import msgspec
from nats.js import JetStreamContext

from ingest.relisting import read_stream
from ingest.service import Ingest, IngestConfig
from messages import subjects
from messages.codec import decode_observed
from messages.observed import ObservedEvent
from tests.simulation import SimProcess

T = TypeVar("T")

PATHS = {
    "Node": "/api/v1/nodes",
    "Pod": "/api/v1/pods",
    "DaemonSet": "/apis/apps/v1/daemonsets",
    "ReplicaSet": "/apis/apps/v1/replicasets",
    "ControllerRevision": "/apis/apps/v1/controllerrevisions",
}

_names = itertools.count()


async def eventually(condition: Callable[[], Awaitable[T]], timeout: float = 20.0, what: str = "condition") -> T:
    """Awaits `condition` until it returns something truthy; fails the test at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            result = await condition()
        except AssertionError as exc:  # a condition may assert to explain what it saw
            last = exc
        else:
            if result:
                return result
            last = result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last saw: {last!r}")
        await asyncio.sleep(0.05)


async def api(sim: SimProcess, method: str, path: str, body: Any = None, expect: tuple[int, ...] = (200, 201),
              content_type: str = "application/json") -> Any:
    """One request to the sim, off the loop (ingest runs on it), asserting the status."""
    code, answer = await asyncio.to_thread(sim.request, method, path, body, content_type)
    assert code in expect, f"{method} {path} -> {code}: {answer}"
    return answer


async def current_rv(sim: SimProcess) -> int:
    return int((await api(sim, "GET", "/api/v1/namespaces"))["metadata"]["resourceVersion"])


def unique(stem: str) -> str:
    return f"{stem}-{next(_names)}-{time.monotonic_ns() % 100_000}"


def pod_body(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "ingest-test"}},
            "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}], **spec}}


async def create_pods(sim: SimProcess, namespace: str, count: int, stem: str = "p") -> list[dict[str, Any]]:
    return [await api(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod_body(f"{stem}-{i}"))
            for i in range(count)]


async def label(sim: SimProcess, path: str, value: str) -> dict[str, Any]:
    result: dict[str, Any] = await api(sim, "PATCH", path, {"metadata": {"labels": {"step": value}}},
                                       content_type="application/merge-patch+json")
    return result


async def delete_now(sim: SimProcess, path: str) -> None:
    await api(sim, "DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})


class Running:
    """An Ingest running as a task of the test's loop."""

    def __init__(self, config: IngestConfig):
        self.config = config
        self.ingest = Ingest(config)
        self.task = asyncio.create_task(self.ingest.run())

    async def synced(self, timeout: float = 20.0) -> None:
        async def ready() -> bool:
            if self.task.done():
                self.task.result()  # raises what stopped it
                raise AssertionError("ingest stopped")
            return self.ingest.synced() and not any(self.ingest.counters()["unacked"].values())
        await eventually(ready, timeout, what=f"{self.config.instance} to list and watch every kind")

    def counters(self) -> dict[str, Any]:
        return self.ingest.counters()

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@dataclass(frozen=True)
class BusMessage:
    subject: str
    msg_id: str
    seq: int
    event: ObservedEvent


async def bus_events(js: JetStreamContext, prefix: str, kind: str = "*") -> list[BusMessage]:
    """Every message of KUBUS_EVENTS (of one kind), in stream order."""
    stream = subjects.stream_name(subjects.EVENTS_STREAM, prefix)
    return [BusMessage(m.subject, (m.headers or {}).get("Nats-Msg-Id", ""), m.metadata.sequence.stream,
                       decode_observed(m.data))
            async for m in read_stream(js, stream, f"{prefix}.events.*.{kind}.*")]


async def bus_state(js: JetStreamContext, prefix: str) -> list[BusMessage]:
    stream = subjects.stream_name(subjects.STATE_STREAM, prefix)
    return [BusMessage(m.subject, (m.headers or {}).get("Nats-Msg-Id", ""), m.metadata.sequence.stream,
                       decode_observed(m.data))
            async for m in read_stream(js, stream, f"{prefix}.state.>")]


Seen = tuple[str, str, str, str, str]  # type, uid, resourceVersion, namespace, name


def seen(event: ObservedEvent) -> Seen:
    return (event.type, event.uid, event.resource_version, event.namespace, event.name)


class _Line(msgspec.Struct):
    type: str
    object: dict[str, Any]


class ApiRecorder:
    """Watches every kind from `since` with aiohttp, recording what the API itself reports: the
    oracle the bus must match (same events, same order per kind)."""

    def __init__(self, url: str, since: int):
        self.url = url
        self.since = since
        self.events: dict[str, list[Seen]] = {kind: [] for kind in PATHS}
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> ApiRecorder:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        opened = [asyncio.get_running_loop().create_future() for _ in PATHS]
        self._tasks = [asyncio.create_task(self._record(kind, path, done))
                       for (kind, path), done in zip(PATHS.items(), opened, strict=True)]
        await asyncio.gather(*opened)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _record(self, kind: str, path: str, opened: asyncio.Future[None]) -> None:
        assert self._session is not None
        query = f"?watch=true&resourceVersion={self.since}&timeoutSeconds=600"
        async with self._session.get(self.url + path + query) as resp:
            assert resp.status == 200, await resp.text()
            opened.set_result(None)
            async for line in resp.content:
                frame = msgspec.json.decode(line, type=_Line)
                meta = frame.object["metadata"]
                self.events[kind].append((frame.type, meta["uid"], meta["resourceVersion"],
                                          meta.get("namespace", ""), meta["name"]))


async def bus_since(js: JetStreamContext, prefix: str, since: int) -> dict[str, list[BusMessage]]:
    """The bus's events with a resourceVersion after `since`, by kind, in stream order."""
    by_kind: dict[str, list[BusMessage]] = {kind: [] for kind in subjects.KINDS}
    for message in await bus_events(js, prefix):
        if int(message.event.resource_version) > since:
            by_kind[message.event.kind].append(message)
    return by_kind


def _by_object(events: list[Seen]) -> dict[str, list[Seen]]:
    out: dict[str, list[Seen]] = {}
    for event in events:
        out.setdefault(event[1], []).append(event)
    return out


async def wait_caught_up(js: JetStreamContext, prefix: str, recorder: ApiRecorder, *, per_object: bool = False,
                         timeout: float = 20.0) -> None:
    """Waits until the bus holds exactly the API's events since the recorder's start: in the API's
    order per kind, or (`per_object`, after resends) per object."""

    async def caught_up() -> bool:
        bus = await bus_since(js, prefix, recorder.since)
        for kind, expected in recorder.events.items():
            got = [seen(m.event) for m in bus[kind]]
            if (_by_object(got) != _by_object(expected)) if per_object else (got != expected):
                return False
        return True
    await eventually(caught_up, timeout, what="the bus to hold every API event")
