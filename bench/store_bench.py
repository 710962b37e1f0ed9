"""The reconciler's SQL on SQLite, without the rest of the pipeline: CPU per batch and per relay round.

    .venv/bin/python -m bench.store_bench                       # 40 results and 100 events a batch
    .venv/bin/python -m bench.store_bench --results 250 --events 500

A batch writes what a reconciler batch of the ReplicaSet scale writes (store/transaction.py): the executors'
results, the observed events with their facts, one controller's expectations, two decisions with their
summaries, two outbox rows of 20 KB (a CreatePods), the positions of two partitions, and the stream check; then
a relay round reads the pending rows and marks them sent. CPU is `time.process_time` (every thread of the process:
the event loop's and aiosqlite's), on uvloop as the services run; the first 10 batches are left out. Also counted:
the trips to aiosqlite's thread per batch (store/sqlite_driver.py).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import aiosqlite

from bench.loadgen import machine
from store import streams
from store.decisions import Decision
from store.engine import open_store
from store.events import ObservedEventRow
from store.expectations import ExpectationsRow
from store.outbox import OutboxRow
from store.results import ResultRow

AT = datetime(2026, 11, 28, 12, tzinfo=UTC)
PAYLOAD = b"x" * 20_000
WARMUP = 10


async def bench(batches: int, events: int, results: int) -> None:
    trips = 0
    original = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal trips
        trips += 1
        return await original(self, fn, *args, **kwargs)

    aiosqlite.Connection._execute = counted  # type: ignore[method-assign]
    workdir = tempfile.TemporaryDirectory(prefix="kubus-bench-store-")
    store = await open_store(None, workdir.name)
    seq = key = 0
    batch_cpu: list[float] = []
    relay_cpu: list[float] = []
    batch_trips: list[int] = []
    relay_trips: list[int] = []
    try:
        for b in range(batches + WARMUP):
            observed = []
            for _ in range(events):
                seq += 1
                observed.append(ObservedEventRow(
                    stream_seq=seq, msg_id=f"Pod/uid-{seq}/{seq}/MODIFIED", kind="Pod", event_type="MODIFIED",
                    namespace="default", name=f"web-{seq:06d}", uid=f"uid-{seq}", resource_version=str(seq),
                    observed_at=AT + timedelta(microseconds=seq), owner="ReplicaSet/web",
                    facts={"node": f"node-{seq % 100}", "revision": "abc", "ready_since": None, "deleting": False}))
            rows = []
            for _ in range(results):
                key += 1
                rows.append(ResultRow(key=f"r-{key}", action_key=f"a-{key}", decision_id=1, action="CreatePod",
                                      outcome="succeeded", code=201, reason="", message="", object_uid=f"uid-{key}",
                                      executor="x", attempts=1, finished_at=AT, subject=f"default/web-{key}",
                                      resource_version=str(key)))
            cpu, trips = time.process_time(), 0
            async with store.transaction() as tx:
                await tx.record_results(rows, AT)
                await tx.record_events(observed)
                await tx.save_expectations([ExpectationsRow(controller_key="ReplicaSet/default/web", adds=results,
                                                            dels=0, deletion_keys=frozenset(), set_at=AT)])
                ids = await tx.insert_decisions([Decision(
                    correlation_id=f"c-{b}-{k}", controller_key="ReplicaSet/default/web",
                    controller_kind="ReplicaSet", partition=15, stream_seq=seq, trigger=None, decided_at=AT,
                    duration_ms=1.0, summary={"reason": "x" * 200}) for k in range(2)])
                await tx.enqueue([OutboxRow(key=f"o-{b}-{k}", decision_id=ids[0], subject="bench.actions.15",
                                            payload=PAYLOAD, created_at=AT) for k in range(2)])
                for partition in (15, 16):
                    await tx.advance("reconciler", partition, seq)
                await streams.check(tx.conn, streams.RECONCILER, None)
            done, done_trips = time.process_time(), trips
            pending = await store.pending(500)
            await store.mark_sent([r.key for r in pending])
            if b >= WARMUP:
                batch_cpu.append(done - cpu)
                relay_cpu.append(time.process_time() - done)
                batch_trips.append(done_trips)
                relay_trips.append(trips - done_trips)
    finally:
        await store.close()
        aiosqlite.Connection._execute = original  # type: ignore[method-assign]
        workdir.cleanup()
    print(f"machine: {machine()}")
    print(f"batch of {results} results, {events} events, 2 decisions, 2 outbox rows: "
          f"{statistics.median(batch_cpu) * 1000:.2f} ms CPU (median of {batches}), "
          f"{statistics.median(batch_trips):.0f} trips to aiosqlite's thread")
    print(f"relay round (pending, mark_sent): {statistics.median(relay_cpu) * 1000:.2f} ms CPU, "
          f"{statistics.median(relay_trips):.0f} trips")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--results", type=int, default=40)
    args = parser.parse_args()
    import uvloop

    uvloop.run(bench(args.batches, args.events, args.results))


if __name__ == "__main__":
    main()
