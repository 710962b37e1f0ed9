"""An outbox row NATS can never take (issue 15): dead-lettered with a failed result, never retried in front
of the rows after it, and no slot of nats-py's publish_async window leaked. Against a nats-server whose
max_payload is 64 KiB, so that "too large" is cheap to make."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import uuid
from collections.abc import AsyncIterator, Collection, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.js.errors import APIError

from messages import codec, subjects
from messages.actions import FAILED, ActionResult, CreatePods, DeletePod, PodToCreate
from reconciler.relaying import DEAD_LETTER_REASON, RelayProgress, record_results, relay, relay_once
from runtime import serving
from runtime.bus import Bus, TooLarge, connect, ensure_streams, publish_async_bounded
from runtime.natsserver import EmbeddedNats
from store.outbox import OutboxRow
from store.results import ResultRow
from tests.leases.test_split_reconcilers import until

ISSUED = "2026-11-26T10:00:00.000000Z"  # an RFC 3339 issued_at, as the codec requires

MAX_PAYLOAD = 64 * 1024


@pytest.fixture
async def small(tmp_path: Path) -> AsyncIterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path / "nats", max_payload=MAX_PAYLOAD)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def bus(small: EmbeddedNats) -> AsyncIterator[Bus]:
    nc = await connect(small.url, "test")
    yield await ensure_streams(nc, prefix=f"t{uuid.uuid4().hex[:8]}", partitions=4)
    await nc.close()


class Outbox:
    """The relay's port over a list: pending rows oldest first; what was published how often."""

    def __init__(self, rows: Iterable[OutboxRow]) -> None:
        self.rows = {row.key: row for row in rows}
        self.marked: list[str] = []

    async def pending(self, limit: int, subjects: Collection[str] | None = None) -> list[OutboxRow]:
        return list(self.rows.values())[:limit]

    async def mark_sent(self, keys: Iterable[str]) -> int:
        keys = list(keys)
        self.marked.extend(keys)
        for key in keys:
            self.rows.pop(key, None)
        return len(keys)


def row(bus: Bus, action: CreatePods | DeletePod) -> OutboxRow:
    return OutboxRow(key=action.key, decision_id=action.decision_id, subject=subjects.action_subject("2", bus.prefix),
                     payload=codec.encode(action), created_at=datetime.now(UTC))


def delete(key: str) -> DeletePod:
    return DeletePod(key=key, decision_id=7, controller="ReplicaSet/shop/web", issued_at=ISSUED, namespace="shop",
                     name=f"pod-{key}", uid="u")


def huge_create(compressible: bool = False) -> CreatePods:
    """One pod whose body alone is over max_payload: no cutting makes it fit (nor compressing, unless
    `compressible`)."""
    noise = base64.b64encode(b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(MAX_PAYLOAD // 24)))
    blob = "y" * (MAX_PAYLOAD + 100) if compressible else noise.decode()
    body = {"metadata": {"name": "web-big", "namespace": "shop"}, "spec": {"x": blob}}
    return CreatePods(key="ReplicaSet/shop/web@5-1/create", decision_id=8, controller="ReplicaSet/shop/web",
                      issued_at=ISSUED, namespace="shop",
                      pods=[PodToCreate(key="ReplicaSet/shop/web@5-1/create/0", pod=msgspec.Raw(codec.encode(body)))])


async def messages(bus: Bus, base: str) -> list[msgspec.Raw]:
    stream = bus.stream(base)
    info = await bus.js.stream_info(stream)
    return [msgspec.Raw((await bus.js.get_msg(stream, seq)).data or b"")
            for seq in range(info.state.first_seq, info.state.last_seq + 1)] if info.state.messages else []


async def test_a_row_too_large_is_dead_lettered_with_a_failed_result_and_the_others_go_through(bus: Bus) -> None:
    before = serving.DEAD_LETTERED.labels(origin="actions", reason="too_large")._value.get()
    outbox = Outbox([row(bus, delete("a")), row(bus, huge_create()), row(bus, delete("c"))])
    assert await relay_once(bus, outbox) == 3
    assert outbox.rows == {}  # every row left the outbox, the one NATS refuses too
    actions = [codec.decode_action(bytes(m)) for m in await messages(bus, subjects.ACTIONS_STREAM)]
    assert [a.key for a in actions] == ["a", "c"]  # published once each, in order
    [raw] = await messages(bus, subjects.RESULTS_STREAM)
    result = codec.decode_result(bytes(raw))
    assert (result.key, result.action_key, result.action, result.outcome, result.reason) == (
        "ReplicaSet/shop/web@5-1/create/0", "ReplicaSet/shop/web@5-1/create", "create_pods", FAILED,
        DEAD_LETTER_REASON)
    assert (result.decision_id, result.controller, result.subject) == (8, "ReplicaSet/shop/web", "shop/web-big")
    assert "CreatePods" in result.message and f"max_payload of {MAX_PAYLOAD} bytes" in result.message
    [dead] = await messages(bus, subjects.DEAD_STREAM)
    note = msgspec.json.decode(bytes(dead))
    assert note["key"] == "ReplicaSet/shop/web@5-1/create" and note["size"] > MAX_PAYLOAD
    assert serving.DEAD_LETTERED.labels(origin="actions", reason="too_large")._value.get() == before + 1
    assert bus.js.publish_async_pending() == 0  # no future left behind: no slot of the window leaked
    # a later round: the result is not published twice, whatever is pending now goes out
    outbox.rows["d"] = row(bus, delete("d"))
    assert await relay_once(bus, outbox) == 1
    assert len(await messages(bus, subjects.RESULTS_STREAM)) == 1
    # the results path hands it to the reconciler as any executor's result
    recorded: list[ActionResult] = []

    class Recorder:
        async def record_results(self, results: list[ActionResult], rows: list[ResultRow]) -> None:
            recorded.extend(results)

    stop = asyncio.Event()
    task = asyncio.create_task(record_results(bus, Recorder(), stop=stop))
    try:
        async def handed_over() -> bool:
            return bool(recorded)

        await until(handed_over, "the result recorded", timeout=10)
        assert recorded == [result]
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_a_row_over_max_payload_that_compresses_is_published_compressed(bus: Bus) -> None:
    action = huge_create(compressible=True)
    outbox = Outbox([row(bus, action)])
    assert await relay_once(bus, outbox) == 1 and outbox.rows == {}
    [raw] = await messages(bus, subjects.ACTIONS_STREAM)
    assert codec.is_compressed(bytes(raw)) and len(raw) < MAX_PAYLOAD
    assert codec.decode_action(bytes(raw)) == action  # what an executor reads
    assert await messages(bus, subjects.RESULTS_STREAM) == []


async def test_the_relay_loop_keeps_going_past_it(bus: Bus) -> None:
    """The loop as the service runs it: after the dead letter, a row committed later is published."""
    outbox = Outbox([row(bus, huge_create()), row(bus, delete("after"))])
    wakeup, stop, progress = asyncio.Event(), asyncio.Event(), RelayProgress()
    task = asyncio.create_task(relay(bus, outbox, wakeup, interval=0.05, stop=stop, progress=progress))
    try:
        async def drained() -> bool:
            return not outbox.rows

        await until(drained, "the outbox to drain", timeout=10)
        outbox.rows["later"] = row(bus, delete("later"))
        wakeup.set()
        await until(drained, "the later row", timeout=10)
        assert [codec.decode_action(bytes(m)).key for m in await messages(bus, subjects.ACTIONS_STREAM)] == [
            "after", "later"]
        assert progress.healthy() and progress.failing_since is None
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


class RefusingJetStream:
    """bus.js, except that JetStream refuses the message of one subject (an error of its own, not its size)."""

    def __init__(self, js: Any, subject: str) -> None:
        self._js = js
        self._subject = subject

    def __getattr__(self, name: str) -> Any:
        return getattr(self._js, name)

    async def publish_async(self, subject: str, payload: bytes, **kwargs: Any) -> asyncio.Future[Any]:
        if subject != self._subject:
            return await self._js.publish_async(subject, payload, **kwargs)
        refused: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        refused.set_exception(APIError(code=503, err_code=10077, description="insufficient resources"))
        return refused


async def test_rows_ahead_of_a_failure_are_not_published_again(bus: Bus) -> None:
    """A round that fails marks what JetStream did store; the next round does not publish it again."""
    refusing = subjects.action_subject("3", bus.prefix)
    failing = dataclasses.replace(bus, js=RefusingJetStream(bus.js, refusing))
    outbox = Outbox([row(bus, delete("first")), dataclasses.replace(row(bus, delete("refused")), subject=refusing)])
    with pytest.raises(APIError, match="insufficient resources"):
        await relay_once(failing, outbox)
    assert outbox.marked == ["first"] and list(outbox.rows) == ["refused"]
    ticks = iter([0.0, 0.0, 200.0])
    progress = RelayProgress(clock=lambda: next(ticks))
    progress.failed()
    assert not progress.healthy()  # failing for 200 s, over RELAY_STALL_LIMIT: /healthz says so


async def test_nats_py_leaks_a_slot_per_failed_write_and_the_bounded_publish_does_not(bus: Bus) -> None:
    """The bug: nats-py's publish_async registers the ack's future, then the write raises (here: over
    max_payload) and the future and its slot of the window stay taken for good."""
    js = bus.nc.jetstream(publish_async_max_pending=4)
    subject = subjects.action_subject("0", bus.prefix)
    with pytest.raises(Exception, match="maximum payload"):
        await js.publish_async(subject, b"x" * (MAX_PAYLOAD + 1))
    assert js.publish_async_pending() == 1  # leaked
    js = bus.nc.jetstream(publish_async_max_pending=4)
    for _ in range(10):  # more than the window: a leak would block the fifth for ever
        failed = await asyncio.wait_for(publish_async_bounded(js, subject, b"x" * (MAX_PAYLOAD + 1), {}), 5)
        assert isinstance(failed.exception(), TooLarge)
    # a payload under max_payload whose headers take it over: refused before the server would close the
    # connection for it
    headers = {"Nats-Msg-Id": "k" * 200}
    failed = await publish_async_bounded(js, subject, b"x" * (MAX_PAYLOAD - 100), headers)
    assert isinstance(failed.exception(), TooLarge)
    await bus.nc.close()  # a write on a closed connection raises after registering: given back too
    for _ in range(10):
        failed = await asyncio.wait_for(publish_async_bounded(js, subject, b"{}", {}), 5)
        assert failed.exception() is not None
    # the slot comes back through the cancelled future's done-callback, which asyncio runs on the loop's next
    # iteration (call_soon): one yield, not a wait for time
    await asyncio.sleep(0)
    assert js.publish_async_pending() == 0
