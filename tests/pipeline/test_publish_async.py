"""runtime.bus.JetStream's asynchronous publish (ingest's events, the executor's results, the relay's actions):
each ack reaches the future of its own message whatever order acks come in, a plain ack reads as nats-py reads it
and any other answer goes through nats-py, the pending window holds, and the bus publishes through it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import nats.aio.client
import nats.errors
import nats.js.errors
import pytest
from nats.aio.msg import Msg
from nats.js.api import PubAck
from nats.js.errors import APIError

import runtime.bus
from messages import subjects
from runtime.bus import Bus, JetStream, jetstream, publish_async, stored, stream_sequence


def answer(js: JetStream, future_of: asyncio.Future[PubAck], data: dict[str, object],
           headers: dict[str, str] | None = None) -> Msg:
    """The reply JetStream would send to the publish whose ack is `future_of`."""
    token = next(t for t, f in js._publish_async_futures.items() if f is future_of)
    reply = js._async_reply_prefix.decode() + token  # type: ignore[union-attr]
    return Msg(js._nc, subject=reply, data=json.dumps(data).encode(), headers=headers)


async def test_every_ack_reaches_its_own_message(bus: Bus) -> None:
    """Published together, each future holds the sequence JetStream stored its message at."""
    assert isinstance(bus.js, JetStream)
    subject = subjects.result_subject("0", bus.prefix)
    sent = [await publish_async(bus.js, subject, f"m{i}".encode(), {"Nats-Msg-Id": f"result/m{i}"})
            for i in range(300)]
    await asyncio.wait_for(stored(bus.js, sent), 15)
    stream = bus.stream(subjects.RESULTS_STREAM)
    for s in sent[::37]:
        stored_msg = await bus.js.get_msg(stream, s.ack.result().seq)
        assert stored_msg.data == s.payload and stored_msg.headers == s.headers
    assert len({s.ack.result().seq for s in sent}) == len(sent)
    assert bus.js.publish_async_pending() == 0


async def test_acks_in_the_other_order_reach_their_own_futures(bus: Bus) -> None:
    js = jetstream(bus.nc)
    subject = f"{bus.prefix}.nostream.order"  # nothing stores it: only the answers below resolve the futures
    first = await js.publish_async(subject, b"1", headers={"Nats-Msg-Id": "1"})
    second = await js.publish_async(subject, b"2", headers={"Nats-Msg-Id": "2"})
    late = answer(js, first, {"stream": "S", "seq": 7})
    await js._handle_async_reply(answer(js, second, {"stream": "S", "seq": 8, "duplicate": True}))
    await js._handle_async_reply(late)
    assert second.result() == PubAck(stream="S", seq=8, duplicate=True)
    assert first.result() == PubAck(stream="S", seq=7)
    await asyncio.sleep(0)  # the done-callbacks (call_soon) give the slots back
    assert js.publish_async_pending() == 0


@pytest.mark.parametrize("data", [
    {"stream": "S", "seq": 1},
    {"stream": "S", "seq": 2, "domain": "hub", "duplicate": False},
    {"stream": "S", "seq": 3, "val": "12"},  # a counter stream's value: more than a plain ack, nats-py reads it
    {"stream": "S", "seq": 4, "batch": "b1", "count": 2},  # an atomic batch's commit
], ids=["plain", "domain-and-duplicate", "counter", "batch"])
async def test_an_ack_reads_as_nats_py_reads_it(bus: Bus, data: dict[str, object]) -> None:
    js = jetstream(bus.nc)
    future = await js.publish_async(f"{bus.prefix}.nostream.read", b"x")
    await js._handle_async_reply(answer(js, future, data))
    assert future.result() == PubAck.from_response(dict(data))


async def test_an_error_answer_fails_the_future(bus: Bus) -> None:
    js = jetstream(bus.nc)
    future = await js.publish_async(f"{bus.prefix}.nostream.error", b"x")
    error = {"code": 400, "err_code": 10071, "description": "wrong last sequence: 3"}
    await js._handle_async_reply(answer(js, future, {"error": error}))
    with pytest.raises(APIError, match="wrong last sequence"):
        future.result()
    unanswered = await js.publish_async(f"{bus.prefix}.nostream.error", b"x")
    await js._handle_async_reply(answer(js, unanswered, {}, headers={"Status": "503"}))
    with pytest.raises(nats.js.errors.NoStreamResponseError):
        unanswered.result()


async def test_a_message_no_stream_takes_fails_its_future(bus: Bus) -> None:
    """Through the server: no responders on the subject, as nats-py reports it."""
    future = await bus.js.publish_async(f"{bus.prefix}.nostream.z", b"x", headers={"Nats-Msg-Id": "z"})
    with pytest.raises(nats.js.errors.NoStreamResponseError):
        await asyncio.wait_for(future, 10)


async def test_the_window_holds_and_a_stop_while_waiting_is_nats_pys_error(bus: Bus) -> None:
    js = jetstream(bus.nc, publish_async_max_pending=2)
    subject = f"{bus.prefix}.nostream.window"
    held = [await js.publish_async(subject, b"x") for _ in range(2)]
    third = asyncio.create_task(js.publish_async(subject, b"x"))
    await asyncio.sleep(0)
    assert not third.done() and js.publish_async_pending() == 2  # waits for a slot
    held[0].cancel()  # what `stored` does with an ack that is late: its slot comes back
    future = await asyncio.wait_for(third, 5)
    assert js.publish_async_pending() == 2
    fourth = asyncio.create_task(js.publish_async(subject, b"x"))
    await asyncio.sleep(0)
    fourth.cancel()
    with pytest.raises(nats.js.errors.TooManyStalledMsgsError):
        await fourth
    for f in (held[1], future):
        f.cancel()
    await asyncio.sleep(0)
    assert js.publish_async_pending() == 0


async def test_a_delivered_messages_stream_sequence_is_read_as_nats_py_reads_it(bus: Bus) -> None:
    subject = subjects.result_subject("1", bus.prefix)
    for i in range(3):
        await bus.js.publish(subject, b"x", headers={"Nats-Msg-Id": f"result/seq{i}"})
    sub = await bus.js.pull_subscribe(subject, durable="seq", stream=bus.stream(subjects.RESULTS_STREAM))
    msgs = await sub.fetch(3, timeout=10)
    assert [stream_sequence(m) for m in msgs] == [m.metadata.sequence.stream for m in msgs]
    assert len(msgs) == 3 and msgs[0].reply.count(".") == 8  # the short form this server sends: read here
    # the long form (a domain and an account): nats-py reads it
    long = Msg(bus.nc, subject=subject, reply="$JS.ACK.hub.ACC.S.C.1.42.7.1700000000000000000.0.x")
    assert stream_sequence(long) == long.metadata.sequence.stream == 42
    with pytest.raises(nats.errors.NotJSMessageError):
        stream_sequence(Msg(bus.nc, subject=subject, reply="_INBOX.x"))


async def test_a_late_ack_of_a_publish_given_up_settles_no_other(bus: Bus) -> None:
    """`stored` cancels a publish whose ack is late and publishes it again; the first attempt's ack may still come.
    Its token is never handed out again, so it finds nothing to settle."""
    js = jetstream(bus.nc)
    subject = f"{bus.prefix}.nostream.late"
    given_up = await js.publish_async(subject, b"1", headers={"Nats-Msg-Id": "1"})
    late = answer(js, given_up, {"stream": "S", "seq": 1})
    given_up.cancel()
    await asyncio.sleep(0)  # its done-callback (call_soon) forgets its token
    later = [await js.publish_async(subject, b"2", headers={"Nats-Msg-Id": f"2.{i}"}) for i in range(3)]
    assert late.subject not in {answer(js, f, {}).subject for f in later}
    await js._handle_async_reply(late)
    assert not any(f.done() for f in later)
    for f in later:
        f.cancel()


# Headers JetStream._write must write as nats-py does: kubus's own, values with spaces around or a CR/LF inside
# (nats-py strips and blanks them), a key with spaces around (stripped), an empty key (skipped), no headers at all.
WRITTEN_AS_NATS_PY = [
    {"Nats-Msg-Id": "Pod/u-1/42/ADDED", "Nats-Expected-Last-Subject-Sequence": "0"},
    {"Nats-Msg-Id": "  spaced  ", "X-Other": "a\r\nb\nc\rd"},
    {" Nats-Msg-Id ": "x", "": "skipped", "K": ""},
    {},
    None,
]


async def _written(bus: Bus, monkeypatch: pytest.MonkeyPatch, send: Callable[[], Awaitable[None]]) -> list[bytes]:
    """The commands `send` hands to the connection's pending buffer."""
    commands: list[bytes] = []

    async def record(cmd: bytes, priority: bool = False) -> None:
        commands.append(bytes(cmd))

    with monkeypatch.context() as patched:
        patched.setattr(bus.nc, "_send_command", record)
        await send()
    return commands


@pytest.mark.parametrize("headers", WRITTEN_AS_NATS_PY)
async def test_a_publish_writes_what_nats_py_writes(bus: Bus, monkeypatch: pytest.MonkeyPatch,
                                                    headers: dict[str, str] | None) -> None:
    """The bytes, and the client's statistics, are those of nc.publish with the same arguments."""
    js = jetstream(bus.nc)
    assert isinstance(js, JetStream)
    subject, reply, payload = f"{bus.prefix}.nostream.w", "_INBOX.abc.7", b'{"x": 1}' * 300
    stats = dict(bus.nc.stats)
    theirs = await _written(bus, monkeypatch, lambda: bus.nc.publish(subject, payload, reply=reply, headers=headers))
    their_stats = {k: bus.nc.stats[k] - stats[k] for k in ("out_msgs", "out_bytes")}
    stats = dict(bus.nc.stats)
    ours = await _written(bus, monkeypatch, lambda: js._write(subject, payload, reply, headers))
    assert ours == theirs and len(ours) == 1
    assert {k: bus.nc.stats[k] - stats[k] for k in ("out_msgs", "out_bytes")} == their_stats


@pytest.mark.parametrize(("subject", "headers", "error"), [
    ("a b", {"Nats-Msg-Id": "x"}, nats.errors.BadSubjectError),
    ("", {"Nats-Msg-Id": "x"}, nats.errors.BadSubjectError),
    ("ok", {"Bad:Key": "x"}, nats.errors.BadHeaderError),
    ("ok", {"Nats-Msg-Id": 7}, AttributeError),
])
async def test_a_publish_refuses_what_nats_py_refuses(bus: Bus, monkeypatch: pytest.MonkeyPatch, subject: str,
                                                      headers: dict[str, Any], error: type[Exception]) -> None:
    js = jetstream(bus.nc)
    assert isinstance(js, JetStream)
    for send in (lambda: bus.nc.publish(subject, b"x", reply="_INBOX.r", headers=headers),
                 lambda: js._write(subject, b"x", "_INBOX.r", headers)):
        with pytest.raises(error):
            assert not await _written(bus, monkeypatch, send)


async def test_a_payload_over_max_payload_is_nats_pys_error(bus: Bus) -> None:
    js = jetstream(bus.nc)
    assert isinstance(js, JetStream)
    with pytest.raises(nats.errors.MaxPayloadError):
        await js._write("ok", b"x" * (bus.nc.max_payload + 1), "_INBOX.r", {"Nats-Msg-Id": "x"})


def test_the_nats_py_copied_is_the_one_installed() -> None:
    """JetStream._write copies nats-py 2.16's publish, and leaves any other version to nats-py: an upgrade makes
    every publish go the slow way until the copy is checked against the new version (and this test updated)."""
    assert runtime.bus._AS_NATS_PY, f"nats-py {nats.aio.client.__version__} is not {runtime.bus._NATS_PY}"
