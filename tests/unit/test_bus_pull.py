"""runtime.bus.Pull against a real nats-server: one pull request kept open, its messages handed over as they come,
made again when half of it came, when it expired, when it was lost and after a reconnect; the server's statuses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from runtime import bus
from runtime.natsserver import EmbeddedNats

STREAM = "PULLTEST"


class Requests:
    """Counts the pull requests a connection publishes."""

    def __init__(self, nc: Client) -> None:
        self.made: list[bytes] = []
        publish = nc.publish

        async def counted(subject: str, payload: bytes = b"", reply: str = "", headers: dict[str, str] | None = None
                          ) -> None:
            if ".CONSUMER.MSG.NEXT." in subject:
                self.made.append(payload)
            await publish(subject, payload, reply=reply, headers=headers)

        nc.publish = counted  # type: ignore[method-assign]


@pytest.fixture
async def js(nats_server: EmbeddedNats) -> AsyncIterator[JetStreamContext]:
    nc = await bus.connect(nats_server.url, "pull-test")
    try:
        js = bus.jetstream(nc)
        await js.add_stream(StreamConfig(name=STREAM, subjects=["p.>"]))
        yield js
    finally:
        await bus.close(nc)


async def subscribe(js: JetStreamContext) -> JetStreamContext.PullSubscription:
    return await js.pull_subscribe("p.>", durable="puller", stream=STREAM,
                                   config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT))


async def publish(js: JetStreamContext, *payloads: bytes) -> None:
    for payload in payloads:
        await js.publish("p.x", payload)


def data(msgs: list[Msg]) -> list[bytes]:
    return [msg.data for msg in msgs]


async def test_messages_come_as_they_are_published_through_one_request(js: JetStreamContext) -> None:
    requests = Requests(js._nc)
    pull = bus.Pull(await subscribe(js), 10)
    assert await pull.take(timeout=0.05) == []  # nothing yet: the request stays open
    assert len(requests.made) == 1
    waiting = asyncio.ensure_future(pull.take(timeout=10))
    await publish(js, b"a")
    assert data(await asyncio.wait_for(waiting, 5)) == [b"a"]  # at once, not when the batch is full or expires
    for payload in (b"b", b"c", b"d", b"e"):
        await publish(js, payload)
        assert data(await pull.take(timeout=10)) == [payload]
    assert len(requests.made) == 1  # 5 of 10 came: the request is still open for the other half
    await publish(js, b"f")
    assert data(await pull.take(timeout=10)) == [b"f"]
    assert len(requests.made) == 2  # fewer than half left to come: another request
    await publish(js, *(b"%d" % i for i in range(12)))
    got: list[bytes] = []
    while len(got) < 12:
        got += data(await pull.take(timeout=10))
    assert got == [b"%d" % i for i in range(12)]  # in order, across the two requests
    assert await pull.close() == []


async def test_an_expired_request_is_made_again(js: JetStreamContext) -> None:
    requests = Requests(js._nc)
    pull = bus.Pull(await subscribe(js), 10, expires=0.3, heartbeat=0.1)
    assert await pull.take(timeout=1.0) == []  # the first request expired (its 408) and another was made
    assert len(requests.made) >= 2
    await publish(js, b"late")
    assert data(await pull.take(timeout=10)) == [b"late"]
    await pull.close()


async def test_a_lost_request_is_made_again(js: JetStreamContext) -> None:
    """A request the server no longer has (its interest went away for a moment, as in a reconnect to a server that
    never had it) sends no heartbeats: after two heartbeats' time it is made again."""
    requests = Requests(js._nc)
    sub = await subscribe(js)
    pull = bus.Pull(sub, 10, heartbeat=0.2)
    assert await pull.take(timeout=0.05) == []
    nc = js._nc
    await nc._send_unsubscribe(sub._sub._id)  # the server forgets the inbox's interest, and with it the request
    deadline = asyncio.get_running_loop().time() + 10
    while (await sub.consumer_info()).num_waiting:  # the server drops it at its next heartbeat, or a look
        assert asyncio.get_running_loop().time() < deadline, "the server kept a request nobody listens to"
    await nc._send_subscribe(sub._sub)
    await nc.flush()
    await publish(js, b"after")  # no open request: stored, not delivered
    assert data(await pull.take(timeout=10)) == [b"after"]
    assert len(requests.made) == 2
    await pull.close()


async def test_a_reconnect_makes_the_request_again(js: JetStreamContext) -> None:
    requests = Requests(js._nc)
    pull = bus.Pull(await subscribe(js), 10)
    assert await pull.take(timeout=0.05) == []
    js._nc.stats["reconnects"] += 1  # what nats-py counts when it connected again
    assert await pull.take(timeout=0.05) == []
    assert len(requests.made) == 2
    await pull.close()


async def test_a_deleted_consumer_ends_the_pull(js: JetStreamContext) -> None:
    pull = bus.Pull(await subscribe(js), 10)
    assert await pull.take(timeout=0.05) == []
    await js.delete_consumer(STREAM, "puller")
    with pytest.raises(bus.ConsumerDeleted):
        await pull.take(timeout=10)
    await pull.close()


async def test_statuses(js: JetStreamContext) -> None:
    """The server's statuses of a request, as read from the subscription's queue (each one on its own)."""
    pull = bus.Pull(await subscribe(js), 10)

    def status(code: str, description: str, pending: int | None = None) -> Msg:
        headers = {"Status": code, "Description": description}
        if pending is not None:
            headers["Nats-Pending-Messages"] = str(pending)
        return Msg(js._nc, subject=pull._inbox, headers=headers)

    pull._to_come = 15
    pull._status(status("100", "Idle Heartbeat"))
    assert pull._to_come == 15
    pull._status(status("408", "Request Timeout", 7))
    assert pull._to_come == 8  # that request had 7 left to deliver; the other's 8 may still come
    pull._status(status("409", "Exceeded MaxWaiting", 3))
    assert pull._to_come == 5
    pull._status(status("404", "No Messages"))
    assert pull._to_come == 0  # a request ended without saying how many: ask again
    pull._to_come = 15
    pull._status(status("409", "Leadership Change"))
    assert pull._to_come == 0
    with pytest.raises(bus.ConsumerDeleted):
        pull._status(status("409", "Consumer Deleted"))
    pull._to_come = 15
    with pytest.raises(nats.js.errors.APIError) as error:
        pull._status(status("400", "Bad Request"))
    assert error.value.code == 400 and pull._to_come == 0
    await pull.close()


async def test_close_returns_what_was_delivered_and_not_taken(js: JetStreamContext) -> None:
    sub = await subscribe(js)
    pull = bus.Pull(sub, 10)
    assert await pull.take(timeout=0.05) == []
    await publish(js, b"x", b"y")
    await js._nc.flush()
    left = await pull.close()
    assert data(left) == [b"x", b"y"]
    assert await pull.close() == []
    for msg in left:
        await msg.nak()
    again = await js.pull_subscribe_bind(durable="puller", stream=STREAM)
    # handed back at once, not after the ack wait (in either order)
    assert sorted(data(await again.fetch(2, timeout=5))) == [b"x", b"y"]


def test_the_heartbeat_is_shorter_than_the_expiry() -> None:
    with pytest.raises(ValueError, match="shorter than its expiry"):
        bus.Pull(None, 10, expires=1.0, heartbeat=1.0)  # type: ignore[arg-type]
