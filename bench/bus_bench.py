"""The NATS message path's CPU per message in one process (runtime/bus.py over nats-py), both sides of it:

    publish N   N events published as ingest publishes them (runtime.bus.publish_async in windows of 512, each
                window awaited with runtime.bus.stored; ~2.5 kB payloads with Nats-Msg-Id and
                Nats-Expected-Last-Subject-Sequence, a subject per object)
    consume N   N such events read by an ordered push consumer into a callback, as the reconciler reads
                KUBUS_EVENTS (reconciler/consuming.py), the stream sequence of each read with stream_sequence
    fetch N     N such messages fetched by a pull consumer 100 at a time and acked, as the executor takes its
                actions (executor/consuming.py), each one's metadata read
    results-fetch N, results-pull N
                N such messages taken as the reconciler's results consumer takes them and acked, each one's
                metadata read: with nats-py's fetch(500, timeout=1.0) (before round 11) or runtime.bus.Pull (a pull
                request of 500 kept open, each take waiting up to 1 s)
    trickle-fetch N, trickle-pull N
                the same while the N messages are published one at a time (each publish's ack awaited, on the same
                connection), as results trickle in: the publishing counted too, the same in both
    idle-fetch N, idle-pull N
                the results consumer of the two kinds, idle for N seconds (N takes of up to 1 s, nothing published)
    read N      N such events, as a JetStream consumer's HMSG, read from the wire and queued by the connection's
                protocol parser alone (no server: handed to the parser of a connection of the same class, 32 kB at
                a time, as nats-py reads its socket) and taken from the subscription's queue

against an embedded nats-server, on uvloop as the services run, through a connection made by runtime.bus.connect.
The measured part runs inside min()'s key function, so that

    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=builtin_min \\
        .venv/bin/python -m bench.bus_bench consume 5000

counts its instructions alone (the setup, publishing the messages a consume or fetch reads, is not counted).
Without valgrind it prints the CPU µs per message (time.process_time), which this shared machine moves by +-20%.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig, DeliverPolicy, StreamConfig

from runtime.bus import Pull, Sent, close, connect, jetstream, publish_async, stored, stream_sequence
from runtime.natsserver import EmbeddedNats

STREAM = "BUSBENCH"
WINDOW = 512
SUBJECTS = 1024  # >= WINDOW: each message of a window on a subject whose last sequence earlier windows' acks told
PAYLOAD = b'{"kind":"Pod","object":' + b"x" * 2500 + b"}"


async def publish(nc: Client, messages: int, tag: str) -> int:
    """Publishes `messages` events as ingest does; returns how many JetStream stored."""
    js = jetstream(nc, publish_async_max_pending=WINDOW)
    last: dict[str, int] = {}
    uids = [str(uuid.UUID(int=i)) for i in range(SUBJECTS)]
    done = 0
    for first in range(0, messages, WINDOW):
        sent: list[Sent] = []
        for i in range(first, min(first + WINDOW, messages)):
            subject = f"bench.events.{tag}.Pod.{uids[i % SUBJECTS]}"
            headers = {"Nats-Msg-Id": f"Pod/{uids[i % SUBJECTS]}/{tag}{i}/MODIFIED",
                       "Nats-Expected-Last-Subject-Sequence": str(last.get(subject, 0))}
            sent.append(await publish_async(js, subject, PAYLOAD, headers))
        await stored(js, sent)
        for s in sent:
            last[s.subject] = s.ack.result().seq
        done += len(sent)
    return done


async def consume(nc: Client, messages: int, tag: str) -> int:
    """Reads `messages` events from the stream's start with an ordered push consumer, as the reconciler does."""
    js = jetstream(nc)
    read: list[int] = []
    all_read: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def deliver(msg: Msg) -> None:
        read.append(stream_sequence(msg) + len(msg.data))
        if len(read) == messages:
            all_read.set_result(None)

    sub = await js.subscribe(f"bench.events.{tag}.>", stream=STREAM, cb=deliver, ordered_consumer=True,
                             config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=1))
    await asyncio.wait_for(all_read, 600)  # under valgrind, on a loaded machine, minutes
    await sub.unsubscribe()
    return len(read)


async def fetch(nc: Client, messages: int, tag: str) -> int:
    """Fetches `messages` events 100 at a time and acks each, as the executor takes its actions."""
    js = jetstream(nc)
    sub = await js.pull_subscribe(f"bench.events.{tag}.>", durable=f"fetch{tag}", stream=STREAM)
    read = 0
    while read < messages:
        for msg in await sub.fetch(100, timeout=10):
            read += msg.metadata.num_delivered or 0
            await msg.ack()
    await sub.unsubscribe()
    return read


RESULTS_BATCH = 500  # reconciler/relaying.py's RESULTS_PULL; before round 11, its fetch's batch


async def results_fetch(nc: Client, messages: int, tag: str) -> int:
    """Takes `messages` events as the reconciler's results consumer did before round 11, and acks each."""
    js = jetstream(nc)
    sub = await js.pull_subscribe(f"bench.events.{tag}.>", durable=f"results{tag}", stream=STREAM)
    read = 0
    while read < messages:
        try:
            msgs = await sub.fetch(RESULTS_BATCH, timeout=1.0)
        except TimeoutError:
            continue
        for msg in msgs:
            read += msg.metadata.num_delivered or 0
            await msg.ack()
    await sub.unsubscribe()
    return read


async def results_pull(nc: Client, messages: int, tag: str) -> int:
    """Takes `messages` events as the reconciler's results consumer does (runtime.bus.Pull), and acks each."""
    js = jetstream(nc)
    sub = await js.pull_subscribe(f"bench.events.{tag}.>", durable=f"results{tag}", stream=STREAM)
    pull = Pull(sub, RESULTS_BATCH)
    read = 0
    while read < messages:
        for msg in await pull.take(timeout=1.0):
            read += msg.metadata.num_delivered or 0
            await msg.ack()
    await pull.close()  # unsubscribes
    return read


def trickled(take: Callable[[Client, int, str], Awaitable[int]]) -> Callable[[Client, int, str], Awaitable[int]]:
    """`take`, while the messages it takes are published one at a time, each publish's ack awaited."""

    async def trickle(nc: Client, messages: int, tag: str) -> int:
        js = jetstream(nc)
        taking = asyncio.ensure_future(take(nc, messages, f"t{tag}"))
        for i in range(messages):
            await js.publish(f"bench.events.t{tag}.Pod.{i % SUBJECTS}", PAYLOAD)
        return await taking

    return trickle


async def idle_fetch(nc: Client, seconds: int, tag: str) -> int:
    """The results consumer before round 11, idle: `seconds` fetches that time out."""
    sub = await jetstream(nc).pull_subscribe(f"bench.idle.{tag}", durable=f"idle{tag}", stream=STREAM)
    for _ in range(seconds):
        with contextlib.suppress(TimeoutError):
            await sub.fetch(RESULTS_BATCH, timeout=1.0)
    await sub.unsubscribe()
    return seconds


async def idle_pull(nc: Client, seconds: int, tag: str) -> int:
    """The results consumer, idle: `seconds` takes that find nothing."""
    pull = Pull(await jetstream(nc).pull_subscribe(f"bench.idle.{tag}", durable=f"idle{tag}", stream=STREAM),
                RESULTS_BATCH)
    for _ in range(seconds):
        await pull.take(timeout=1.0)
    await pull.close()
    return seconds


async def read(nc: Client, messages: int, tag: str) -> int:
    """Reads `messages` events from the wire into a subscription's queue, as the connection's parser reads a socket."""
    reader = type(nc)()  # the parser and message handling of nc's class, on a connection of its own
    sub = Subscription(reader, 1, "bench.events.>")
    reader._subs[1] = sub
    wire = events_on_the_wire(messages)
    queue = sub._pending_queue
    read = 0
    for at in range(0, len(wire), READ_SIZE):
        await reader._ps.parse(wire[at:at + READ_SIZE])
        while not queue.empty():
            read += len(queue.get_nowait().data) > 0
            queue.task_done()
    return read


@functools.cache
def events_on_the_wire(messages: int) -> bytes:
    """`messages` events as a JetStream consumer's HMSG, with the two headers ingest publishes (made before the part
    that reads them is measured)."""
    headers = b"NATS/1.0\r\nNats-Msg-Id: Pod/u/1/MODIFIED\r\nNats-Expected-Last-Subject-Sequence: 7\r\n\r\n"
    return b"".join(
        b"HMSG bench.events.m.Pod.%s 1 $JS.ACK.%s.c.1.%d.%d.1732870000000000000.0 %d %d\r\n%s%s\r\n" % (
            str(uuid.UUID(int=i % SUBJECTS)).encode(), STREAM.encode(), i + 1, i + 1, len(headers),
            len(headers) + len(PAYLOAD), headers, PAYLOAD)
        for i in range(messages))


READ_SIZE = 32768  # what nats-py asks its socket for at a time (nats.aio.client.DEFAULT_BUFFER_SIZE)

PARTS: dict[str, Callable[[Client, int, str], Awaitable[int]]] = {
    "publish": publish, "consume": consume, "fetch": fetch, "read": read,
    "results-fetch": results_fetch, "results-pull": results_pull,
    "trickle-fetch": trickled(results_fetch), "trickle-pull": trickled(results_pull),
    "idle-fetch": idle_fetch, "idle-pull": idle_pull}


def run(part: str, messages: int) -> None:
    import uvloop

    loop = uvloop.new_event_loop()
    with tempfile.TemporaryDirectory(prefix="kubus-bus-bench-") as tmp:
        server = EmbeddedNats(Path(tmp) / "jetstream")
        loop.run_until_complete(server.start())

        async def setup() -> Client:
            nc = await connect(server.url, "bench")
            await jetstream(nc).add_stream(StreamConfig(name=STREAM, subjects=["bench.>"], duplicate_window=120.0))
            if part in ("consume", "fetch", "results-fetch", "results-pull"):
                await publish(nc, 300, "warm")
                await publish(nc, messages, "m")
            events_on_the_wire(messages)
            # warm-up: nats-py's and kubus's first calls, on other subjects (an idle part: two seconds)
            await PARTS[part](nc, 2 if part.startswith("idle") else 300, "warm")
            return nc

        nc = loop.run_until_complete(setup())
        done: list[int] = []
        cpu = time.process_time()

        def measured(_: int) -> int:
            done.append(loop.run_until_complete(PARTS[part](nc, messages, "m")))
            return 0

        min([0], key=measured)
        cpu = time.process_time() - cpu
        print(f"{part}: {messages:,} messages ({done[0]:,}): {cpu / messages * 1e6:.1f} µs CPU each", flush=True)
        loop.run_until_complete(close(nc))
        loop.run_until_complete(server.stop())
    loop.close()


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in PARTS:
        sys.exit(__doc__)
    run(sys.argv[1], int(sys.argv[2]))


if __name__ == "__main__":
    main()
