"""The reconciler's intake: CPU per event from KUBUS_EVENTS to the batch's (sequence, subject, payload).

    .venv/bin/python -m bench.intake_bench --events 2000
    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_PyEval_CallTracing \\
        .venv/bin/python -m bench.intake_bench --events 2000

Publishes that many pod events (as ingest would) to an embedded nats-server, then, inside one
`sys.call_tracing` call (what callgrind counts with the options above), connects, subscribes as
`Reconciler.run` does and takes batches with the loop's own `_next_batch` until it has read every event,
reading each as `_process` does. The connection and the subscription are a fixed part: the difference
of two sizes gives the cost per event. Prints the CPU seconds of the call and what it read.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time

from bench.loadgen import machine
from bench.reconciler_bench import events, publish
from reconciler.consuming import Reconciler
from runtime.bus import connect, ensure_streams, stream_sequence
from runtime.natsserver import EmbeddedNats

PREFIX = "benchintake"


async def consume(url: str, count: int) -> tuple[int, int, int]:
    """Reads the `count` events as the reconciler's loop does: (events, batches, sum of their sequences)."""
    nc = await connect(url, "bench-intake")
    bus = await ensure_streams(nc, prefix=PREFIX, partitions=16)  # as the service's start (finds them there)
    reconciler = Reconciler(bus, store=None)  # type: ignore[arg-type]  # the intake needs no store
    sub = await reconciler._subscribe(1)
    read = batches = total = 0
    while read < count:
        msgs = await reconciler._next_batch()
        messages = [(stream_sequence(m), m.subject, m.data) for m in msgs]
        read += len(messages)
        batches += 1
        total += sum(seq for seq, _, _ in messages)
    await sub.unsubscribe()
    await nc.close()
    return read, batches, total


async def prepare(url: str, count: int) -> None:
    nc = await connect(url, "bench-publish")
    bus = await ensure_streams(nc, prefix=PREFIX, partitions=16)
    await publish(bus, events(count))
    await nc.close()


def main(count: int) -> None:
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp, asyncio.Runner() as runner:
        server = EmbeddedNats(tmp)
        runner.run(server.start())
        try:
            runner.run(prepare(server.url, count))

            def drive() -> tuple[int, int, int]:
                return runner.run(consume(server.url, count))

            start = time.process_time()
            read, batches, total = sys.call_tracing(drive, ())
            cpu = time.process_time() - start
        finally:
            runner.run(server.stop())
    assert total == count * (count + 1) // 2, total  # every sequence once
    print(f"intake: {read:,} events in {batches:,} batches, {cpu:.3f} CPU s ({cpu / read * 1e6:.1f} µs per event)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2000)
    main(parser.parse_args().events)
