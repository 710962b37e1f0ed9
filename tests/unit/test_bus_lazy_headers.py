"""A message's headers on a kubus connection are what nats-py makes of them, parsed only when read
(runtime.bus._Client, _Msg)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from runtime import bus
from runtime.natsserver import EmbeddedNats

HEADERS = b"NATS/1.0\r\nNats-Msg-Id: Pod/u1/7/ADDED\r\nNats-Expected-Last-Subject-Sequence: 3\r\n\r\n"

BLOCKS = [
    HEADERS,
    b"NATS/1.0\r\nBad Name: x\r\n\r\n",  # no line nats-py keeps: None
    b"NATS/1.0\r\nStatus: 100\r\nDescription: FlowControl Request\r\n\r\n",  # a control message's headers as lines
    b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 3\r\n\r\n",
    b"NATS/1.0 404 No Messages\r\n\r\n",
    b"NATS/1.0 503\r\n\r\n",
    b"NATS/1.0\r\n\r\n",
    b"NATS/1.0\r\n",
    b"",
]


@pytest.mark.parametrize("raw", BLOCKS)
@pytest.mark.parametrize("data", [b"", b"x"])
async def test_headers_and_control_messages_are_nats_pys(raw: bytes, data: bytes) -> None:
    theirs, ours = Client(), bus._Client()
    their_hdr = await theirs._process_headers(raw)
    our_hdr = await ours._process_headers(raw)
    # as nats-py's _process_msg asks it: of a message with headers
    assert (our_hdr and ours._is_control_message(data, our_hdr)) == (
        their_hdr and theirs._is_control_message(data, their_hdr))
    their_msg = theirs._build_message(1, b"s", b"r", data, their_hdr)
    our_msg = ours._build_message(1, b"s", b"r", data, our_hdr)
    assert isinstance(our_msg, Msg)
    assert our_msg.headers == their_msg.headers and our_msg.header == their_msg.header
    names = [f.name for f in dataclasses.fields(Msg) if f.name != "_client"]
    assert [getattr(our_msg, name) for name in names] == [getattr(their_msg, name) for name in names]


async def test_headers_are_parsed_when_read(nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[bytes] = []
    parse = bus.parse_header_lines

    def counting(raw: bytes) -> dict[str, str]:
        parsed.append(raw)
        return parse(raw)

    monkeypatch.setattr(bus, "parse_header_lines", counting)
    nc = await bus.connect(nats_server.url, "kubus-test")
    try:
        got: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

        async def on(delivered: Msg) -> None:
            got.set_result(delivered)

        await nc.subscribe("t", cb=on)
        await nc.publish("t", b"x", headers={"Nats-Msg-Id": "a/b/1/ADDED"})
        delivered = await asyncio.wait_for(got, 10)
        assert parsed == []
        assert delivered.headers == {"Nats-Msg-Id": "a/b/1/ADDED"}
        assert delivered.headers == {"Nats-Msg-Id": "a/b/1/ADDED"} and len(parsed) == 1  # once
    finally:
        await bus.close(nc)


async def test_jetstream_consumers_read_the_headers_published(nats_server: EmbeddedNats) -> None:
    """Through nats-py's JetStream machinery (a pull consumer's fetch, which tells the server's status messages from
    the stream's by their headers, and an ordered push consumer): the messages and headers published, no more."""
    nc = await bus.connect(nats_server.url, "kubus-test")
    try:
        js = bus.jetstream(nc)
        await js.add_stream(name="LAZY", subjects=["lazy.>"])
        published = [{"Nats-Msg-Id": f"m{i}", "Kubus-Note": f"n {i}"} for i in range(3)]
        for i, headers in enumerate(published):
            await js.publish(f"lazy.{i}", b"x", headers=headers)
        pulled = await js.pull_subscribe("lazy.>", durable="lazy", stream="LAZY")
        fetched = await pulled.fetch(5, timeout=1)  # fewer there: the server ends the batch with a status message
        assert [m.headers for m in fetched] == published
        pushed: list[dict[str, str] | None] = []
        all_pushed = asyncio.Event()

        async def on(delivered: Msg) -> None:
            pushed.append(delivered.headers)
            if len(pushed) == len(published):
                all_pushed.set()

        await js.subscribe("lazy.>", stream="LAZY", cb=on, ordered_consumer=True)
        await asyncio.wait_for(all_pushed.wait(), 10)
        assert pushed == published
    finally:
        await bus.close(nc)
