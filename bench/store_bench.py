"""The reconciler's SQL on SQLite, without the rest of the pipeline: CPU per batch and per relay round.

    .venv/bin/python -m bench.store_bench                       # 40 results and 100 events a batch
    .venv/bin/python -m bench.store_bench --results 250 --events 500
    .venv/bin/python -m bench.store_bench --commits 100 --shape upstream     # for callgrind, below


A batch writes what a reconciler batch of the ReplicaSet scale writes (store/transaction.py): the executors'
results, the observed events with their facts, one controller's expectations, two decisions with their
summaries, two outbox rows of 20 KB (a CreatePods), the positions of two partitions, and the stream check; then
a relay round reads the pending rows and marks them sent. CPU is `time.process_time` (every thread of the process:
the event loop's and aiosqlite's), on uvloop as the services run; the first 10 batches are left out. Also counted:
the trips to aiosqlite's thread per batch (store/sqlite_driver.py).

`--commits N --shape upstream|sim`: N reconciler batches written as the reconciler writes them (`record_results`
then `Transaction.commit` of a `Commit`, in one transaction), each followed by a relay round (`pending`,
`mark_sent`) and an ingest checkpoint, for callgrind. "upstream": the real control plane's batches (16 pod
events, 2 results, 2 decisions of 2 DeletePods each, 2 expectations, 2 positions, the tick); "sim": the sim's
5,000-node apply (95 events, 24 results, 2 decisions of 12 DeletePods each). The events and their pods are
built first, for 400 batches whatever N, so that the difference of two runs is the batches' own cost, every
thread's (aiosqlite's too, which `--toggle-collect` would not count):

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/tmp/c.%p \
        .venv/bin/python -m bench.store_bench --commits 40 --shape upstream     # and 140: (b - a) / 100

It prints a digest of every row written (the same in every tree: the rows do not change). `--fenced`: each commit
checks and extends the leases of 4 partitions, as a split reconciler's (`kubus reconcile`) do.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import aiosqlite

from bench.loadgen import machine
from bench.observed_rows_bench import pods
from messages.actions import ActionResult, DeletePod
from reconciler.core.batch import BatchTick, Commit, Sync
from reconciler.core.controllers import Decided
from reconciler.core.expectations import Expectations
from store import leases, streams
from store.decisions import Decision
from store.engine import open_store
from store.events import ObservedEventRow
from store.expectations import ExpectationsRow
from store.outbox import OutboxRow
from store.port import Fence
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


SHAPES = {"upstream": (16, 2, 2, 2), "sim": (95, 24, 2, 12)}  # events, results, decisions, deletes each
SAMPLE_BATCHES = 400


def commits(batches: int, shape: str, fenced: bool = False) -> None:
    events_per, results_per, decisions_per, deletes_per = SHAPES[shape]
    sample = pods(events_per * SAMPLE_BATCHES)
    fence = Fence(stream="2026-11-28T12:00:00Z")
    with tempfile.TemporaryDirectory(prefix="kubus-bench-store-") as workdir:
        path = f"{workdir}/kubus.db"

        async def run() -> None:
            store = await open_store(f"sqlite:///{path}", workdir, clock=lambda: AT)
            try:
                await store.record_stream_identity(streams.RECONCILER, "KUBUS_EVENTS", fence.stream or "")
                if fenced:  # a split reconciler's (`kubus reconcile`), holding 4 partitions
                    async with store.transaction() as tx:
                        epochs = await leases.acquire(tx.conn, "bench", range(4), now=AT, ttl=10 ** 8)
                    fenced_by = Fence(owner="bench", epochs=epochs, ttl=30, stream=fence.stream)
                for b in range(batches):
                    at = AT + timedelta(seconds=b)
                    first = b * events_per
                    chunk = list(enumerate(sample[first:first + events_per], first + 1))
                    syncs = [Sync(Decided(
                        controller_key=f"DaemonSet/bench/agent-{k}", controller_kind="DaemonSet", namespace="bench",
                        correlation_id=f"c-{b}-{k}", stream_seq=first + events_per, trigger=None,
                        summary={"deletes": deletes_per}, duration_ms=1.0,
                        actions=[DeletePod(key=f"c-{b}-{k}/delete/{d}", decision_id=0, controller="DaemonSet/bench/a",
                                           issued_at="2026-11-28T12:00:00.000000Z", namespace="bench",
                                           name=f"p-{b}-{k}-{d}", uid=f"u-{b}-{k}-{d}")
                                 for d in range(deletes_per)]), 0, None, "kubus.actions.0")
                        for k in range(decisions_per)]
                    results = [ActionResult(key=f"r-{b}-{r}", action_key=f"a-{b}-{r}", action="DeletePod",
                                            decision_id=1, controller="DaemonSet/bench/a", outcome="succeeded",
                                            code=200, finished_at="2026-11-28T12:00:00.000000Z")
                               for r in range(results_per)]
                    commit = Commit(
                        consumer="reconciler", at=at, empty=False, positions={0: first + events_per, 1: first + 1},
                        events=[(event, seq) for seq, (event, _) in chunk],
                        objects={seq: pod for seq, (_, pod) in chunk},
                        expectations={s.decided.controller_key: Expectations(0, deletes_per, frozenset(), at)
                                      for s in syncs},
                        decisions=syncs,
                        batch=BatchTick(instance="bench", at=at, caught_up=True, first_seq=first + 1,
                                        last_seq=first + events_per, partitions=None, results=results))
                    async with store.transaction() as tx:
                        await tx.record_results([ResultRow(
                            key=r.key, action_key=r.action_key, decision_id=r.decision_id, action=r.action,
                            outcome=r.outcome, code=r.code, reason="", message="", object_uid=None, executor="x",
                            attempts=1, finished_at=at, subject=f"bench/{r.key}") for r in results], at)
                        await tx.commit(commit, fenced_by if fenced else fence)
                    pending = await store.pending(500)
                    await store.mark_sent([r.key for r in pending])
                    await store.save_checkpoint("Pod", str(b))
            finally:
                await store.close()

        asyncio.run(run())
        print(f"{batches} {shape} batches{' (fenced)' if fenced else ''}; rows written: {digest(path)}")


def digest(path: str) -> str:
    """A digest of every table's rows as SQLite holds them (their stored bytes), the migrations' bookkeeping
    left out."""
    db = sqlite3.connect(path)
    try:
        tables = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                                           "'sqlite_%' AND name != 'alembic_version' ORDER BY name")]
        hashed = hashlib.sha256()
        counts = []
        for table in tables:
            rows = db.execute(f'SELECT * FROM "{table}" ORDER BY rowid').fetchall()
            hashed.update(repr((table, rows)).encode())
            if rows:
                counts.append(f"{table} {len(rows)}")
        return f"{hashed.hexdigest()[:16]} ({', '.join(counts)})"
    finally:
        db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--results", type=int, default=40)
    parser.add_argument("--commits", type=int, help="N reconciler commits for callgrind (see above)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="upstream")
    parser.add_argument("--fenced", action="store_true", help="commits fenced by 4 partitions' leases, as a split "
                                                              "reconciler's are (`--commits` only)")
    args = parser.parse_args()
    if args.commits is not None:
        commits(args.commits, args.shape, args.fenced)
        return
    import uvloop

    uvloop.run(bench(args.batches, args.events, args.results))


if __name__ == "__main__":
    main()
