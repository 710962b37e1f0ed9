"""JetStream publishing: the client's CPU per message on kubus's publish path, beside nats-py's own.

    .venv/bin/python -m bench.publish_bench                    # 20,000 messages of 2,500 bytes, 3 runs each
    .venv/bin/python -m bench.publish_bench --messages 50000 --size 600

What ingest, the executor (its results) and the relay do per message, in one process against an embedded
nats-server: `runtime.bus.publish_async` (publish_async_bounded: the size check, the ack's future) in windows
of `--window` messages, each window awaited with `runtime.bus.stored`, every message with its own Nats-Msg-Id
and the expected-last-subject-sequence header ingest sends, on a subject per object (`--subjects` of them).

Two paths, alternating run by run in one process: `kubus` is the JetStream context kubus publishes with
(runtime.bus.jetstream), `nats-py` the library's own JetStreamContext (the baseline). Figures: the client
process's CPU seconds per 1,000 messages (user + system, `time.process_time`), messages/s, and kubus's
ratio to the baseline (CPU: lower is better). The server's CPU is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import nats
from nats.js.api import StreamConfig
from nats.js.client import JetStreamContext

from bench.loadgen import machine
from runtime.bus import jetstream, publish_async, stored
from runtime.natsserver import EmbeddedNats

STREAM = "BENCH"


async def one_run(js: JetStreamContext, tag: str, messages: int, size: int, window: int, subjects: int) -> float:
    """Publishes `messages` on subjects and ids of their own (`tag`); the client's CPU seconds it took."""
    payload = b"x" * size
    last: dict[str, int] = {}
    start = time.process_time()
    for first in range(0, messages, window):
        sent = []
        for i in range(first, min(first + window, messages)):
            subject = f"bench.{tag}.{i % subjects}"
            headers = {"Nats-Msg-Id": f"{tag}/{i}",
                       "Nats-Expected-Last-Subject-Sequence": str(last.get(subject, 0))}
            sent.append(await publish_async(js, subject, payload, headers))
        await stored(js, sent)
        for s in sent:
            last[s.subject] = s.ack.result().seq
    return time.process_time() - start


async def bench(messages: int, size: int, window: int, subjects: int, runs: int) -> dict[str, list[float]]:
    """Both paths, alternating; each one's CPU seconds per run."""
    if subjects < window:  # a subject's expected last sequence is known once its previous window is acked
        raise ValueError(f"--subjects ({subjects}) must be at least --window ({window}): each message of a window "
                         f"must be on a subject of its own, whose last sequence the previous windows' acks told")
    print(f"machine: {machine()}; {messages:,} messages of {size:,} bytes, windows of {window}, "
          f"{subjects:,} subjects", flush=True)
    with tempfile.TemporaryDirectory(prefix="kubus-publish-bench-") as tmp:
        server = EmbeddedNats(Path(tmp) / "jetstream")
        await server.start()
        nc = await nats.connect(server.url)
        try:
            paths = {"kubus": jetstream(nc, publish_async_max_pending=window),
                     "nats-py": nc.jetstream(publish_async_max_pending=window)}
            await paths["kubus"].add_stream(StreamConfig(name=STREAM, subjects=["bench.>"],
                                                        duplicate_window=120.0))
            cpu: dict[str, list[float]] = {name: [] for name in paths}
            for run in range(runs):
                for name, js in paths.items():
                    wall = time.perf_counter()
                    seconds = await one_run(js, f"{name.replace('-', '')}{run}", messages, size, window, subjects)
                    wall = time.perf_counter() - wall
                    cpu[name].append(seconds)
                    print(f"run {run + 1} {name:8} {seconds / messages * 1e6:6.1f} us CPU per message, "
                          f"{messages / wall:9,.0f} messages/s", flush=True)
                await paths["kubus"].purge_stream(STREAM)
            ours, theirs = statistics.median(cpu["kubus"]), statistics.median(cpu["nats-py"])
            print(f"median CPU per message: kubus {ours / messages * 1e6:.1f} us, nats-py {theirs / messages * 1e6:.1f}"
                  f" us; ratio to the baseline {ours / theirs:.2f}")
            return cpu
        finally:
            await nc.close()
            await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=2_500, help="payload bytes (a pod's watch event: ~2,500)")
    parser.add_argument("--window", type=int, default=512, help="messages in flight (ingest's window per kind: 512)")
    parser.add_argument("--subjects", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(bench(args.messages, args.size, args.window, args.subjects, args.runs))


if __name__ == "__main__":
    main()
