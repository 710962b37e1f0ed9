"""runtime.bus.stored: an ack lost to a reconnect is never waited for for ever (issue 12's CI run: an
executor waited 30 s on result acks lost to a NATS restart, and the outbox relay would have waited for ever).
The message is published again with its Nats-Msg-Id, and JetStream keeps it once."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.errors import APIError

from messages import subjects
from runtime.bus import Bus, Sent, publish_async, stored


async def count(bus: Bus, stream: str) -> int:
    return int((await bus.js.stream_info(stream)).state.messages)


def lost(subject: str, payload: bytes, msg_id: str) -> Sent:
    """A publish whose ack never comes (the connection dropped after the server stored it, or before)."""
    return Sent(asyncio.get_running_loop().create_future(), subject, payload, {"Nats-Msg-Id": msg_id})


async def test_a_message_whose_ack_was_lost_is_stored_once(bus: Bus) -> None:
    stream = bus.stream(subjects.RESULTS_STREAM)
    subject = subjects.result_subject("0", bus.prefix)
    await bus.js.publish(subject, b"stored", headers={"Nats-Msg-Id": "result/a"})  # stored; its ack then lost
    sent = [lost(subject, b"stored", "result/a"), lost(subject, b"never-sent", "result/b"),
            await publish_async(bus.js, subject, b"acked", {"Nats-Msg-Id": "result/c"})]
    await asyncio.wait_for(stored(bus.js, sent, ack_wait=0.2, timeout=10), 15)
    assert await count(bus, stream) == 3  # a once, b now, c once
    assert all(s.ack.done() for s in sent)  # the lost futures were given up (their publish slots back)


async def test_an_error_jetstream_answers_is_raised_at_once(bus: Bus) -> None:
    subject = f"{bus.prefix}.nostream.x"  # no stream takes it: JetStream answers 503 no responders
    failed: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    failed.set_exception(APIError(code=400, description="maximum payload exceeded"))
    with pytest.raises(APIError, match="maximum payload exceeded"):
        await stored(bus.js, [Sent(failed, subject, b"x", {"Nats-Msg-Id": "x"})], timeout=5)  # type: ignore[arg-type]


async def test_nothing_answering_is_a_timeout_naming_the_subject(bus: Bus) -> None:
    subject = f"{bus.prefix}.nostream.y"
    with pytest.raises(TimeoutError, match=f"did not store a message on {subject}"):
        await stored(bus.js, [lost(subject, b"y", "y")], ack_wait=0.2, timeout=1)
