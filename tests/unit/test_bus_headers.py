"""Message headers are parsed as nats-py parses them, at less than half the cost (runtime.bus.parse_header_lines)."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client

from runtime import bus
from runtime.natsserver import EmbeddedNats

BLOCKS = [
    b"Nats-Msg-Id: Pod/0b0c3f5e-1234-4bcd-9abc-1234567890ab/123456/MODIFIED\r\n"
    b"Nats-Expected-Last-Subject-Sequence: 123456\r\n\r\n",
    b"Nats-Msg-Id:no-space\r\nX:\t tabbed \t\r\n\r\n",
    b"Bad Name: skipped\r\nGood: kept\r\n\r\n",  # whitespace inside a name: skipped
    b"\x1cLead: kept by neither? \r\n\x1fTrail\x1c: x\r\n\r\n",  # characters bytes.strip keeps, str.isspace sees
    b": empty name\r\nno colon at all\r\n\r\n",
    b"Caf\xc3\xa9: non-ascii name\r\nValue: caf\xc3\xa9 \xff broken\r\n\r\n",
    b"Dup: one\r\nDup: two\r\n\r\n",
    b"Kubus-Dead-Error: a: b: c\r\n\r\n",
    b"",
    b"\r\n\r\n",
]


@pytest.mark.parametrize("raw", BLOCKS)
def test_the_same_headers_as_nats_py(raw: bytes) -> None:
    assert bus.parse_header_lines(raw) == Client._parse_header_lines(raw)


async def test_a_kubus_connection_parses_with_it(nats_server: EmbeddedNats) -> None:
    nc = await bus.connect(nats_server.url, "kubus-test")
    try:
        assert nc._parse_header_lines is bus.parse_header_lines
        got: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()

        async def on(msg: object) -> None:
            got.set_result(dict(getattr(msg, "headers", None) or {}))

        await nc.subscribe("t", cb=on)
        await nc.publish("t", b"x", headers={"Nats-Msg-Id": "a/b/1/ADDED", "Kubus-Dead-Reason": "TooLarge"})
        assert await asyncio.wait_for(got, 10) == {"Nats-Msg-Id": "a/b/1/ADDED", "Kubus-Dead-Reason": "TooLarge"}
    finally:
        await bus.close(nc)
