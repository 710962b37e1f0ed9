"""A kubus connection reads the NATS protocol as nats-py does (runtime.bus._Parser, _Client._deliver): the same calls
for the same bytes however the reads cut them, and the same messages, counters and slow-consumer errors."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Collection
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import ProtocolError, SlowConsumerError
from nats.protocol.parser import Parser

from runtime import bus

HEADERS = b"NATS/1.0\r\nNats-Msg-Id: Pod/u1/7/ADDED\r\n\r\n"
ACK = b"$JS.ACK.KUBUS_EVENTS.c.1.7.7.1732870000000000000.0"


def hmsg(subject: bytes, sid: int, reply: bytes, headers: bytes, payload: bytes) -> bytes:
    fields = [b"HMSG", subject, b"%d" % sid, *([reply] if reply else []), b"%d" % len(headers),
              b"%d" % (len(headers) + len(payload))]
    return b" ".join(fields) + b"\r\n" + headers + payload + b"\r\n"


def wire(subject: bytes, sid: int, payload: bytes, headers: bytes = b"", reply: bytes = b"") -> bytes:
    if headers:
        return hmsg(subject, sid, reply, headers, payload)
    return b" ".join([b"MSG", subject, b"%d" % sid, *([reply] if reply else []), b"%d" % len(payload)]) + \
        b"\r\n" + payload + b"\r\n"


# what a server sends, and lines nats-py reads though nats-server does not write them so
STREAM = b"".join([
    b'INFO {"server_id":"x","max_payload":1048576}\r\n',
    wire(b"a.b", 1, b"hello"),
    wire(b"kubus.events.3.Pod.u1", 1, b'{"kind":"Pod"}' * 40, HEADERS, ACK),
    b"PING\r\n",
    wire(b"_INBOX.x.1", 2, b"ack", reply=b"r.1"),
    wire(b"s.2", 2, b"x", HEADERS),
    b"PONG\r\n",
    b"+OK\r\n",
    wire(b"_INBOX.p", 1, b"", b"NATS/1.0 404 No Messages\r\n\r\n"),
    wire(b"_INBOX.p", 1, b"", b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 3\r\n\r\n"),
    wire(b"empty", 2, b""),
    wire(b"inside", 1, b"x\r\nMSG y 1 3\r\nabc\r\nz"),
    b"-ERR 'Slow Consumer'\r\n",
    b"HMSG nohdr 1 0 5\r\nhello\r\n",  # no headers: the header size could be a reply
    b"MSG\ttab 1 3\r\nabc\r\n",
    b"MSG two  1 3\r\nabc\r\n",
    wire(b"last", 2, b"last", reply=b"r.2"),
])


class Recorder:
    """A connection to a parser: records what the parser hands it (a message delivered without a coroutine as
    nats-py's _process_msg would be handed it), and can reset the parser while a message is processed."""

    def __init__(self, deliver_sids: Collection[int], reset_on: bytes | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.deliver_sids = deliver_sids
        self.reset_on = reset_on
        self.parser: Parser | None = None

    def _deliver(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> bool:
        if sid not in self.deliver_sids:
            return False
        self.calls.append(("msg", sid, subject, reply, data, headers, type(data), type(headers)))
        return True

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        self.calls.append(("msg", sid, subject, reply, data, headers, type(data), type(headers)))
        if subject == self.reset_on and self.parser is not None:
            self.parser.reset()  # a reconnect while the message is processed

    async def _process_err(self, text: str) -> None:
        self.calls.append(("err", text))

    async def _process_ping(self) -> None:
        self.calls.append(("ping",))

    async def _process_pong(self) -> None:
        self.calls.append(("pong",))

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.calls.append(("info", info))


async def read(parser_class: type[Parser], reads: list[bytes], deliver_sids: Collection[int] = (1,),
               reset_on: bytes | None = None) -> tuple[list[tuple[Any, ...]], type[BaseException] | None, bytes]:
    """What a parser of `parser_class` made of `reads`: its calls, the protocol error it raised, what it kept."""
    nc = Recorder(set(deliver_sids), reset_on)
    parser = parser_class(nc)
    nc.parser = parser
    try:
        for data in reads:
            await parser.parse(data)
    except (ProtocolError, ValueError) as exc:  # a line refused; an INFO that is no JSON
        return nc.calls, type(exc), bytes(parser.buf)
    return nc.calls, None, bytes(parser.buf)


def cuts(stream: bytes) -> list[list[bytes]]:
    """The stream in two reads cut at every byte, and in reads of one byte each."""
    return [[stream[:at], stream[at:]] for at in range(len(stream) + 1)] + [[bytes([b]) for b in stream]]


async def test_a_stream_cut_anywhere_is_read_as_nats_py_reads_it() -> None:
    theirs, _, _ = await read(Parser, [STREAM])
    assert sum(1 for call in theirs if call[0] == "msg") == 12 and ("ping",) in theirs
    for reads in cuts(STREAM):
        ours = await read(bus._Parser, reads)
        assert ours == await read(Parser, reads), reads
        assert ours[0] == theirs


@pytest.mark.parametrize("deliver_sids", [(), (1, 2)], ids=["awaited", "delivered"])
async def test_messages_are_read_alike_delivered_or_awaited(deliver_sids: tuple[int, ...]) -> None:
    for reads in cuts(STREAM)[::7]:
        assert await read(bus._Parser, reads, deliver_sids) == await read(Parser, reads)


@pytest.mark.parametrize("odd", [
    b"MSG a b 5\r\nhello\r\n",  # refused: a sid that is no number
    b"FOO bar\r\n",  # refused: no such operation
    b"HMSG a 1 x 5\r\nhello\r\n",
    b"MSG a 1 5 6 7\r\nhello\r\n",
    b"MSG trailing 1 3 \r\nabc\r\n",
    b"MSG a\tb 1 3\r\nabc\r\n",  # a tab inside what one space would leave one field
    b"MSG plus 1 r +3\r\nabc\r\n",
    b"HMSG digits 1 0 7\r\n12\r\n345\r\n",  # no headers, digits after: nats-py takes the 0 for a reply
    b"-ERR\r\n",
])
async def test_lines_nats_server_does_not_write_are_read_as_nats_py_reads_them(odd: bytes) -> None:
    stream = b"MSG a 1 2\r\nok\r\n" + odd + b"MSG b 1 2\r\nok\r\n"
    for reads in cuts(stream):
        assert await read(bus._Parser, reads) == await read(Parser, reads)


async def test_a_reset_drops_what_was_read() -> None:
    for at in range(len(STREAM)):
        ours = await read(bus._Parser, [STREAM[:at], b"", STREAM])
        theirs = await read(Parser, [STREAM[:at], b"", STREAM])
        assert ours == theirs
    # a reset (a reconnect) while a message is processed ends the read, as in nats-py: the rest of it is dropped
    after = b"MSG after 1 1\r\n!\r\n"
    ours = await read(bus._Parser, [STREAM, after], reset_on=b"_INBOX.x.1")
    assert ours == await read(Parser, [STREAM, after], reset_on=b"_INBOX.x.1")
    assert [call[2] for call in ours[0] if call[0] == "msg"][-2:] == [b"_INBOX.x.1", b"after"]
    for reads in cuts(STREAM)[::5]:  # the next read then starts where the cut is: garbage, read alike
        assert await read(bus._Parser, [*reads, after], reset_on=b"_INBOX.x.1") == await read(
            Parser, [*reads, after], reset_on=b"_INBOX.x.1")


async def test_a_reset_between_reads_forgets_a_message_begun() -> None:
    big = b"MSG big 1 5000\r\n" + b"x" * 5000 + b"\r\n"
    for parser_class in (bus._Parser, Parser):
        nc = Recorder({1})
        parser = parser_class(nc)
        await parser.parse(big[:3000])
        parser.reset()
        await parser.parse(b"MSG fresh 1 2\r\nok\r\n")
        assert [call[2] for call in nc.calls] == [b"fresh"]


class PushConsumer:
    """What nats-py's _process_msg asks of a JetStream push consumer's subscription (its _JSI) for a data message."""

    def __init__(self, ordered: bool) -> None:
        self._active = False
        self._ordered = ordered
        self._dseq, self._sseq = 1, 0
        self.tracked: list[tuple[str, bool]] = []
        self.resets: list[int | None] = []
        self.heartbeats = 0

    def track_sequences(self, reply: str) -> None:
        self.tracked.append((reply, self._active))
        self._active = False  # so that the next message shows whether it was marked active too

    async def reset_ordered_consumer(self, sseq: int | None) -> bool:
        self.resets.append(sseq)
        return True

    async def check_for_sequence_mismatch(self, _: Msg) -> None:
        self.heartbeats += 1

    def seen(self) -> tuple[Any, ...]:
        return self._dseq, self._sseq, self.tracked, self.resets, self.heartbeats


def ack(stream_seq: int, consumer_seq: int) -> bytes:
    return b"$JS.ACK.KUBUS_EVENTS.c.1.%d.%d.1732870000000000000.0" % (stream_seq, consumer_seq)


async def connection(client_class: type[Client]) -> tuple[Client, list[BaseException], dict[str, Subscription]]:
    """A client, not connected, with subscriptions of every kind _deliver tells apart, and its error callback's
    calls."""
    nc = client_class()
    errors: list[BaseException] = []

    async def on_error(exc: BaseException) -> None:
        errors.append(exc)

    nc._error_cb = on_error
    subs = {
        "plain": Subscription(nc, 1, "plain"),
        "limited": Subscription(nc, 2, "limited", max_msgs=2),
        "few bytes": Subscription(nc, 3, "few", pending_bytes_limit=10),
        "few messages": Subscription(nc, 4, "few", pending_msgs_limit=2),
        "request": Subscription(nc, 5, "request", future=asyncio.get_running_loop().create_future()),
        "pushed": Subscription(nc, 6, "pushed"),
        "ordered": Subscription(nc, 7, "ordered"),
    }
    subs["pushed"]._jsi = PushConsumer(ordered=False)  # type: ignore[assignment]
    subs["ordered"]._jsi = PushConsumer(ordered=True)  # type: ignore[assignment]
    for sub in subs.values():
        nc._subs[sub._id] = sub
    return nc, errors, subs


MESSAGES = [
    wire(b"plain", 1, b"one", reply=b"r.1"),
    wire(b"plain", 1, b"two", headers=HEADERS, reply=ACK),
    wire(b"plain", 1, b"", headers=b"NATS/1.0 503\r\n\r\n"),
    wire(b"plain", 1, b"", headers=b"NATS/1.0\r\nBad Name: x\r\n\r\n"),
    *[wire(b"limited", 2, b"%d" % i) for i in range(3)],
    *[wire(b"few", 3, b"abcd") for _ in range(4)],
    *[wire(b"few", 4, b"m%d" % i) for i in range(3)],
    wire(b"request", 5, b"answer"),
    wire(b"nobody", 9, b"lost"),
    wire(b"pushed", 6, b"event", HEADERS, ACK),
    wire(b"pushed", 6, b"", HEADERS, ack(2, 2)),  # no payload, and no control message either
    wire(b"pushed", 6, b"", b"NATS/1.0\r\nStatus: 100\r\nDescription: Idle Heartbeat\r\n\r\n"),  # as lines
    wire(b"ordered", 7, b"e1", HEADERS, ack(10, 1)),
    wire(b"ordered", 7, b"e2", reply=ack(11, 2)),
    wire(b"ordered", 7, b"e3", HEADERS, ack(13, 4)),  # one missed: nats-py resets the consumer
    wire(b"ordered", 7, b"e4", HEADERS, b"$JS.ACK.S.c.1.14.x.1.0"),  # no sequence: nats-py refuses it
]


def state(nc: Client, errors: list[BaseException], subs: dict[str, Subscription]) -> dict[str, Any]:
    names = [f.name for f in dataclasses.fields(Msg) if f.name != "_client"]
    queued = {name: [[getattr(msg, field) for field in names] for msg in sub._pending_queue._queue]
              for name, sub in subs.items()}
    return {"stats": dict(nc.stats), "subs": sorted(nc._subs), "queued": queued,
            "received": {name: sub._received for name, sub in subs.items()},
            "pending": {name: (sub._pending_size, sub._pending_queue._unfinished_tasks) for name, sub in subs.items()},
            "answer": subs["request"]._future.result().data if subs["request"]._future.done() else None,
            "errors": [(type(exc), exc.sid) for exc in errors if isinstance(exc, SlowConsumerError)],
            "consumers": [subs[name]._jsi.seen() for name in ("pushed", "ordered")]}  # type: ignore[union-attr]


async def test_messages_are_counted_made_and_queued_as_nats_py_does() -> None:
    found = []
    for client_class in (Client, bus._Client):
        nc, errors, subs = await connection(client_class)
        with pytest.raises(ValueError):  # e4's reply: nats-py's int() of its consumer sequence
            await nc._ps.parse(b"".join(MESSAGES))
        found.append(state(nc, errors, subs))
    theirs, ours = found
    assert ours == theirs
    assert len(theirs["errors"]) == 3 and theirs["answer"] == b"answer" and theirs["subs"] == [1, 3, 4, 5, 6, 7]
    assert theirs["consumers"] == [(1, 0, [(ACK.decode(), True), (ack(2, 2).decode(), True)], [], 1),
                                   (3, 11, [(ack(10, 1).decode(), True), (ack(11, 2).decode(), True)], [12], 0)]
