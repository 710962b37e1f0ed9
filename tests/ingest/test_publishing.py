"""OrderedPublisher against a scripted JetStream: pipelining, per-object order, in-order resends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.errors import MaxPayloadError
from nats.js.api import PubAck
from nats.js.errors import ServiceUnavailableError, TooManyStalledMsgsError

from ingest.backoff import Backoff
from ingest.counting import Counters
from ingest.publishing import MSG_ID, OrderedPublisher


class ScriptedJetStream:
    """publish_async hands out futures the test resolves; publish (the resend path) answers at once."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, asyncio.Future[PubAck]]] = []  # (msg id, ack) in send order
        self.resent: list[str] = []
        self.stored: set[str] = set()
        self.failing_resends = 0
        self.refusals: list[Exception] = []  # what the next resends are answered with, before one succeeds
        self.refuse_next_send: Exception | None = None
        self.too_large: set[str] = set()  # msg ids NATS refuses for their size, every time

    async def publish_async(self, subject: str, payload: bytes, headers: dict[str, str]) -> asyncio.Future[PubAck]:
        if self.refuse_next_send is not None:
            error, self.refuse_next_send = self.refuse_next_send, None
            raise error
        future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        self.sent.append((headers[MSG_ID], future))
        return future

    async def publish(self, subject: str, payload: bytes, timeout: float, headers: dict[str, str]) -> PubAck:
        msg_id = headers[MSG_ID]
        self.resent.append(msg_id)
        if msg_id in self.too_large:
            raise MaxPayloadError
        if self.failing_resends:
            self.failing_resends -= 1
            raise TimeoutError("nats: timeout")
        if self.refusals:
            raise self.refusals.pop(0)
        duplicate = msg_id in self.stored
        self.stored.add(msg_id)
        return PubAck(stream="S", seq=len(self.stored), duplicate=duplicate or None)

    def ack(self, msg_id: str) -> None:
        self.stored.add(msg_id)
        self._future(msg_id).set_result(PubAck(stream="S", seq=len(self.stored)))

    def fail(self, msg_id: str) -> None:
        self._future(msg_id).set_exception(TimeoutError("nats: timeout"))

    def ids(self) -> list[str]:
        return [msg_id for msg_id, _ in self.sent]

    def _future(self, msg_id: str) -> asyncio.Future[PubAck]:
        return next(f for m, f in self.sent if m == msg_id)


@pytest.fixture
def js() -> ScriptedJetStream:
    return ScriptedJetStream()


@pytest.fixture
def counters() -> Counters:
    return Counters()


def publisher(js: ScriptedJetStream, counters: Counters, **kwargs: Any) -> OrderedPublisher:
    return OrderedPublisher(js, "Pod", counters, backoff=Backoff(0.001, 0.001), **kwargs)  # type: ignore[arg-type]


async def run_pending() -> None:
    """Lets every task that can run, run (no time passes)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def send(pub: OrderedPublisher, msg_id: str, subject: str | None = None, position: str | None = None) -> None:
    await pub.publish(subject or f"s.{msg_id}", msg_id, "ADDED", msg_id.encode(), position)


async def test_messages_are_pipelined_and_the_position_advances_only_over_an_acked_prefix(
        js: ScriptedJetStream, counters: Counters) -> None:
    pub = publisher(js, counters)
    for i, msg_id in enumerate("abc", 1):
        await send(pub, msg_id, position=str(i))
    assert js.ids() == ["a", "b", "c"]  # all out before any ack
    drained = asyncio.create_task(pub.drain())
    js.ack("b")
    await run_pending()
    assert pub.acked_position is None  # b is acked, but a is not
    js.ack("a")
    await run_pending()
    assert pub.acked_position == "2"
    js.ack("c")
    await drained
    assert pub.acked_position == "3" and counters.last_rv["Pod"] == "3"
    assert counters.published[("Pod", "ADDED")] == 3


async def test_acks_already_in_are_accounted_by_the_next_publish(js: ScriptedJetStream, counters: Counters) -> None:
    """Without a drain: the acked prefix is counted and passed by the resume point, and its objects are free for
    their next event, while the failed and the unacked entries behind it stay pending in order."""
    pub = publisher(js, counters)
    for i, msg_id in enumerate("abcd", 1):
        await send(pub, msg_id, position=str(i))
    js.ack("a")
    js.ack("b")
    js.ack("d")
    await send(pub, "e", position="5")
    assert pub.acked_position == "2" and counters.last_rv["Pod"] == "2" and pub.unacked == 3
    assert counters.published[("Pod", "ADDED")] == 2
    sent = len(js.ids())
    await pub.publish("s.a", "a2", "MODIFIED", b"a2", "6")  # a's ack is in: sent without waiting for c's
    assert js.ids()[sent:] == ["a2"]


async def test_an_objects_next_event_waits_for_the_previous_ack(js: ScriptedJetStream, counters: Counters) -> None:
    pub = publisher(js, counters)
    await send(pub, "a1", subject="s.obj")
    second = asyncio.create_task(send(pub, "a2", subject="s.obj"))
    await run_pending()
    assert js.ids() == ["a1"]
    js.ack("a1")
    await second
    assert js.ids() == ["a1", "a2"]


async def test_the_window_bounds_unacked_messages(js: ScriptedJetStream, counters: Counters) -> None:
    pub = publisher(js, counters, window=2)
    await send(pub, "a")
    await send(pub, "b")
    third = asyncio.create_task(send(pub, "c"))
    await run_pending()
    assert js.ids() == ["a", "b"] and pub.unacked == 2
    js.ack("a")
    await third
    assert js.ids() == ["a", "b", "c"]


async def test_after_a_failure_exactly_the_unacked_messages_are_resent_in_order(
        js: ScriptedJetStream, counters: Counters) -> None:
    pub = publisher(js, counters, ack_timeout=0.05)
    for i, msg_id in enumerate("abcd", 1):
        await send(pub, msg_id, position=str(i))
    js.fail("a")  # lost
    js.ack("b")
    js.stored.add("c")  # c reached the stream but its ack never comes: the resend is a duplicate
    js.ack("d")
    js.failing_resends = 1  # NATS still away for the first resend
    await pub.drain()
    assert js.resent == ["a", "a", "c"]
    assert pub.acked_position == "4"
    assert counters.published[("Pod", "ADDED")] == 3 and counters.duplicates["Pod"] == 1
    assert counters.publish_retries["Pod"] == 1


async def test_a_send_refused_outright_is_resent(js: ScriptedJetStream, counters: Counters) -> None:
    pub = publisher(js, counters)
    js.refuse_next_send = ConnectionError("nats: connection closed")
    await send(pub, "a", position="1")
    assert js.resent == ["a"] and pub.acked_position == "1"


async def test_a_resend_jetstream_refuses_for_another_reason_is_retried(
        js: ScriptedJetStream, counters: Counters) -> None:
    """Only a wrong last sequence is decided on the subject's last message; JetStream's other refusals (a stream
    electing its leader) are waited out, as NATS away is."""
    pub = publisher(js, counters)
    js.refusals = [ServiceUnavailableError(code=503, err_code=10008, description="JetStream system temporarily "
                                                                               "unavailable")]
    js.refuse_next_send = ConnectionError("nats: connection closed")
    await send(pub, "a", position="1")
    await pub.drain()
    assert js.resent == ["a", "a"] and pub.acked_position == "1"
    assert counters.publish_retries["Pod"] == 1


async def test_a_cancellation_nats_py_turns_into_its_own_error_still_cancels(counters: Counters) -> None:
    """nats-py's publish_async answers a cancellation while it waits for a slot with TooManyStalledMsgsError; the
    publisher must not take that for NATS trouble and go on (a stopping ingest waited for its watcher for ever)."""
    class Stalled(ScriptedJetStream):
        async def publish_async(self, subject: str, payload: bytes, headers: dict[str, str]) -> Any:
            try:
                await asyncio.get_running_loop().create_future()  # no slot comes
            except asyncio.CancelledError:
                raise TooManyStalledMsgsError from None

    pub = publisher(Stalled(), counters)
    sending = asyncio.create_task(send(pub, "a", position="1"))
    await run_pending()
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(sending, 5)


async def test_a_mark_is_reached_once_everything_before_it_is_acked(
        js: ScriptedJetStream, counters: Counters) -> None:
    pub = publisher(js, counters)
    pub.mark("10")
    assert pub.acked_position == "10"  # nothing outstanding: a bookmark moves the position at once
    await send(pub, "a", position=None)  # a relist's synthetic event has no position of its own
    pub.mark("20")
    assert pub.acked_position == "10"
    js.ack("a")
    await pub.drain()
    assert pub.acked_position == "20"


async def test_a_message_refused_for_its_size_is_dropped_not_retried_in_front_of_the_others(
        js: ScriptedJetStream, counters: Counters) -> None:
    """Issue 15: only a server whose max_payload shrank after the watcher fitted the event can refuse one
    (ingest compresses or quarantines an event over the limit first); retrying it would stop every event of
    the kind behind it for good."""
    pub = publisher(js, counters)
    js.too_large.add("big")
    js.refuse_next_send = MaxPayloadError()
    await send(pub, "big", position="1")
    await send(pub, "next", position="2")
    js.ack("next")
    await asyncio.wait_for(pub.drain(), 5)
    assert js.resent == ["big"] and pub.acked_position == "2"  # tried once, then dropped; the next went on
    assert counters.too_large["Pod"] == 1 and counters.published[("Pod", "ADDED")] == 1
