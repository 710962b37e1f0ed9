"""A kubus connection's subscriptions hand over a message already received at once (runtime.bus._Subscription),
and otherwise as nats-py's do: the same messages, counters, errors, and JetStream fetches."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from runtime import bus
from runtime.natsserver import EmbeddedNats
from tests.simulation import until

Connect = Callable[[str], Awaitable[Client]]


async def nats_pys(url: str) -> Client:
    return await nats.connect(url)


async def kubus(url: str) -> Client:
    return await bus.connect(url, "kubus-test")


BOTH = pytest.mark.parametrize("connect", [nats_pys, kubus], ids=["nats-py", "kubus"])


async def test_a_message_received_is_handed_over_without_waiting(nats_server: EmbeddedNats) -> None:
    nc = await kubus(nats_server.url)
    try:
        sub = await nc.subscribe("t")
        assert type(sub) is bus._Subscription
        for i in range(3):
            await nc.publish("t", b"m%d" % i)
        await until("the three messages received", lambda: sub.pending_msgs == 3)
        assert sub.pending_bytes == 6
        others_ran: list[bool] = []
        asyncio.get_running_loop().call_soon(others_ran.append, True)
        taken = [(await sub.next_msg()).data for _ in range(3)]
        assert taken == [b"m0", b"m1", b"m2"] and others_ran == []  # no task, no turn of the loop
        assert (sub.pending_msgs, sub.pending_bytes) == (0, 0)
        await asyncio.wait_for(sub._pending_queue.join(), 5)  # each one's task done, as nats-py's next_msg does
    finally:
        await bus.close(nc)


@BOTH
async def test_next_msg_is_nats_pys(connect: Connect, nats_server: EmbeddedNats) -> None:
    """The same answers from nats-py's subscription and kubus's, with and without a message waiting."""
    nc = await connect(nats_server.url)
    try:
        sub = await nc.subscribe("t")
        waiting = asyncio.ensure_future(sub.next_msg(timeout=10))  # nothing yet: waits for the next one
        await nc.publish("t", b"first")
        assert (await waiting).data == b"first"
        with pytest.raises(nats.errors.TimeoutError):
            await sub.next_msg(timeout=0.05)
        await nc.publish("t", b"second")
        await until("the second message received", lambda: sub.pending_msgs == 1)
        for no_time in (0, -1.0):  # nats-py times out with no time left even when a message waits
            with pytest.raises(nats.errors.TimeoutError):
                await sub.next_msg(timeout=no_time)
        assert sub.pending_msgs == 1
        assert (await sub.next_msg(timeout=None)).data == b"second"

        release = asyncio.Event()

        async def on(_: Msg) -> None:
            await release.wait()  # holds the first message: the second waits in the queue

        with_callback = await nc.subscribe("u", cb=on)
        await nc.publish("u", b"1")
        await nc.publish("u", b"2")
        await until("the second message queued behind the callback", lambda: with_callback.pending_msgs == 1)
        with pytest.raises(nats.errors.Error, match="next_msg cannot be used in async subscriptions"):
            await with_callback.next_msg()
        release.set()
        await nc.publish("t", b"third")
        await until("the third message received", lambda: sub.pending_msgs == 1)
    finally:
        await nc.close()
    with pytest.raises(nats.errors.ConnectionClosedError):
        await sub.next_msg()


@BOTH
async def test_fetches_of_messages_already_received(connect: Connect, nats_server: EmbeddedNats) -> None:
    """A pull consumer's batches (each message taken with a next_msg, the server's status messages among them) and
    an ordered push consumer read with next_msg, as the replay reads: every message once, in order."""
    nc = await connect(nats_server.url)
    try:
        js = bus.jetstream(nc)
        await js.add_stream(name="NEXT", subjects=["next.>"])
        for i in range(250):
            await js.publish(f"next.{i % 7}", b"%d" % i)
        pulled = await js.pull_subscribe("next.>", durable="next", stream="NEXT")
        batches = []
        for _ in range(3):  # 100, 100, then the 50 left, ended by the server's "404 No Messages"
            msgs = await pulled.fetch(100, timeout=5)
            batches.append([int(m.data) for m in msgs])
            for msg in msgs:
                await msg.ack()
        assert batches == [list(range(0, 100)), list(range(100, 200)), list(range(200, 250))]
        with pytest.raises(TimeoutError):  # nats-py's own, or asyncio's: nats-py raises either
            await pulled.fetch(10, timeout=0.5)
        pushed = await js.subscribe("next.>", stream="NEXT", ordered_consumer=True)
        read = [int((await pushed.next_msg(timeout=5)).data) for _ in range(250)]
        assert read == list(range(250))
        with pytest.raises(nats.errors.TimeoutError):
            await pushed.next_msg(timeout=0.2)
    finally:
        await nc.close()
