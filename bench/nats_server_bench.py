"""nats-server's CPU per message for what ingest publishes, with kubus's streams and with one thing changed at a time:

    .venv/bin/python -m bench.nats_server_bench N [VARIANT ...]

Each variant starts an embedded nats-server of its own, creates the streams (kubus's, by runtime.bus.ensure_streams,
unless the variant says otherwise), publishes N events as ingest publishes them (runtime.bus.publish_async in
windows of 512, each awaited with runtime.bus.stored; ~2.5 kB payloads, a subject per object, 1,024 objects, the
headers Nats-Msg-Id and Nats-Expected-Last-Subject-Sequence), waits until KUBUS_STATE has sourced every one, and
prints the server's process CPU (utime + stime from /proc, in clock ticks) per message, and its ratio to `kubus`'s.
Variants:

    kubus         as kubus runs: KUBUS_EVENTS (file) and KUBUS_STATE sourcing it (one message per subject)
    no-state      KUBUS_EVENTS alone (what KUBUS_STATE's sourcing costs)
    no-msg-id     without Nats-Msg-Id (what the duplicate window's bookkeeping costs)
    no-expected   without Nats-Expected-Last-Subject-Sequence (what the check costs)
    memory        both streams in memory instead of files (what the file store costs)
    state-all     KUBUS_STATE keeping every message instead of each object's last (what dropping the last one costs)
    no-ack        published without a reply subject: no publish ack, nor Nats-Expected-Last-Subject-Sequence (whose
                  value the acks give): what the acks cost; not a guarantee kubus could keep

The server's CPU is a process's, so run it on a quiet machine; a tick is 10 ms (a few hundred per variant).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import tempfile
import uuid
from pathlib import Path

from nats.aio.client import Client
from nats.js.api import StorageType

from messages import subjects
from runtime.bus import Sent, StreamSettings, close, connect, jetstream, publish_async, stored, wanted
from runtime.natsserver import EmbeddedNats

PREFIX = "bench"
WINDOW = 512
OBJECTS = 1024
PAYLOAD = b'{"kind":"Pod","object":' + b"x" * 2500 + b"}"
VARIANTS = ("kubus", "no-state", "no-msg-id", "no-expected", "memory", "state-all", "no-ack")


def server_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (/proc/PID/stat's 14th and 15th fields)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


async def streams(nc: Client, variant: str) -> None:
    js = jetstream(nc)
    configs = wanted(PREFIX, 1, 3600.0, StreamSettings())
    for config in configs[:2] if variant != "no-state" else configs[:1]:
        if variant == "memory":
            config = dataclasses.replace(config, storage=StorageType.MEMORY, max_bytes=-1)
        if variant == "state-all" and config.max_msgs_per_subject == 1:
            config = dataclasses.replace(config, max_msgs_per_subject=-1)
        await js.add_stream(config)


async def publish(nc: Client, messages: int, variant: str, tag: str, last: dict[str, int]) -> None:
    """Publishes `messages` events; `last` holds each subject's last sequence, as ingest's publisher keeps it."""
    js = jetstream(nc, publish_async_max_pending=WINDOW)
    uids = [str(uuid.UUID(int=i)) for i in range(OBJECTS)]
    for first in range(0, messages, WINDOW):
        sent: list[Sent] = []
        for i in range(first, min(first + WINDOW, messages)):
            uid = uids[i % OBJECTS]
            subject = subjects.event_subject("0", "Pod", uid, PREFIX)
            headers = {}
            if variant != "no-msg-id":
                headers["Nats-Msg-Id"] = f"Pod/{uid}/{tag}{i}/MODIFIED"
            if variant not in ("no-expected", "no-ack"):
                headers["Nats-Expected-Last-Subject-Sequence"] = str(last.get(subject, 0))
            if variant == "no-ack":
                await nc.publish(subject, PAYLOAD, headers=headers)
                continue
            sent.append(await publish_async(js, subject, PAYLOAD, headers))
        if variant == "no-ack":
            await nc.flush()
            continue
        await stored(js, sent)
        for s in sent:
            last[s.subject] = s.ack.result().seq


async def all_in(nc: Client, messages: int, variant: str) -> None:
    """Until KUBUS_EVENTS holds every message and KUBUS_STATE has sourced them (its last message per object)."""
    js = jetstream(nc)
    names = [subjects.stream_name(subjects.EVENTS_STREAM, PREFIX)]
    if variant != "no-state":
        names.append(subjects.stream_name(subjects.STATE_STREAM, PREFIX))
    state = messages if variant == "state-all" else min(messages, OBJECTS)
    want = {names[0]: messages, **{name: state for name in names[1:]}}
    deadline = asyncio.get_running_loop().time() + 300
    for name in names:
        while (await js.stream_info(name)).state.messages < want[name]:
            assert asyncio.get_running_loop().time() < deadline, f"{name} did not get every message"
            await asyncio.sleep(0.05)  # polling the server's count, up to the deadline


async def run(messages: int, variant: str) -> float:
    with tempfile.TemporaryDirectory(prefix="kubus-nats-bench-") as tmp:
        server = EmbeddedNats(Path(tmp) / "jetstream")
        await server.start()
        assert server._proc is not None
        try:
            nc = await connect(server.url, "bench")
            await streams(nc, variant)
            last: dict[str, int] = {}
            await publish(nc, 300, variant, "warm", last)  # warm-up, then the measured part
            await all_in(nc, 300, variant)
            before = server_ticks(server._proc.pid)
            await publish(nc, messages, variant, "m", last)
            await all_in(nc, 300 + messages, variant)
            ticks = server_ticks(server._proc.pid) - before
            await close(nc)
        finally:
            await server.stop()
    return ticks / os.sysconf("SC_CLK_TCK") / messages * 1e6


def main() -> None:
    if len(sys.argv) < 2 or not sys.argv[1].isdigit() or not set(sys.argv[2:]) <= set(VARIANTS):
        sys.exit(__doc__)
    messages = int(sys.argv[1])
    base = None
    for variant in sys.argv[2:] or VARIANTS:
        us = asyncio.run(run(messages, variant))
        base = base if base is not None or variant != "kubus" else us
        ratio = f" ({us / base:.2f} of kubus's)" if base else ""
        print(f"{variant}: nats-server {us:.1f} µs CPU per message{ratio}", flush=True)


if __name__ == "__main__":
    main()
