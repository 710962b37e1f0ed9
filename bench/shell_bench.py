"""The reconciler shell's bookkeeping of each event it commits, for callgrind: instructions per event.

    .venv/bin/python -m bench.shell_bench rows --events 2000
    .venv/bin/python -m bench.shell_bench counts --events 20000
    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_PyEval_CallTracing \\
        .venv/bin/python -m bench.shell_bench rows --events 2000

The events are bench.observed_rows_bench's (MODIFIED events of a DaemonSet's Running, Ready pods, with the pods
as the reconciler's cache decoded them), taken in the reconciler's 500-event batches. Inside one `sys.call_tracing`
call (what callgrind counts with the options above):

- rows: the observed-event audit rows (store/events.py) of a fresh SQLite store, in one transaction, as a live
  reconciler's commits record them: `events.row_of` of each event, then `record_events`. The store's opening and
  closing are outside the call; the transaction's BEGIN and COMMIT are a fixed part. Prints the facts column's
  text of the first and last row (the same in every tree: the rows do not change).
- counts: kubus_reconciler_events_total, as the reconciler's loop counts a batch's events (`Reconciler._count`).

The difference of two sizes gives the cost per event.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time

import sqlalchemy as sa

from bench.loadgen import machine
from bench.observed_rows_bench import pods
from kube.core import Pod
from messages.observed import ObservedEvent
from reconciler.consuming import BATCH, Reconciler
from store import events
from store.engine import Store, open_store
from store.tables import observed_events


async def record(store: Store, sample: list[tuple[ObservedEvent, Pod]]) -> int:
    recorded = 0
    async with store.transaction() as tx:
        for start in range(0, len(sample), BATCH):
            built = [events.row_of(event, seq, pod) for seq, (event, pod) in
                     enumerate(sample[start:start + BATCH], start + 1)]
            recorded += await tx.record_events(built)
    return recorded


async def facts(store: Store) -> list[str]:
    """The facts column's text of the first and the last row, as SQLite holds it."""
    async with store.engine.connect() as conn:
        seq = observed_events.c.stream_seq
        first, last = (await conn.execute(sa.select(sa.func.min(seq), sa.func.max(seq)))).one()
        text = sa.select(sa.cast(observed_events.c.facts, sa.Text)).where(seq.in_([first, last])).order_by(seq)
        return list((await conn.execute(text)).scalars())


def count(sample: list[tuple[ObservedEvent, Pod]]) -> float:
    """Counts the events as the reconciler's loop does, batch by batch; the CPU seconds it took."""
    reconciler = Reconciler(object(), object())  # type: ignore[arg-type]  # counting needs neither
    batches = [[event for event, _ in sample[start:start + BATCH]] for start in range(0, len(sample), BATCH)]

    def drive() -> None:
        for batch in batches:
            reconciler._count(batch)

    start = time.process_time()
    sys.call_tracing(drive, ())
    return time.process_time() - start


def rows(count: int) -> None:
    sample = pods(count)
    with tempfile.TemporaryDirectory() as tmp, asyncio.Runner() as runner:
        store = runner.run(open_store(None, tmp))
        try:
            def drive() -> int:
                return runner.run(record(store, sample))

            start = time.process_time()
            recorded = sys.call_tracing(drive, ())
            cpu = time.process_time() - start
            stored = runner.run(facts(store))
        finally:
            runner.run(store.close())
    assert recorded == count, recorded
    print(f"rows: {count:,} recorded, {cpu:.3f} CPU s ({cpu / count * 1e6:.1f} µs per row); facts {stored}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["rows", "counts"])
    parser.add_argument("--events", type=int, default=2000, help="events (default 2000)")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    if args.part == "rows":
        rows(args.events)
        return
    cpu = count(pods(args.events))
    print(f"counts: {args.events:,} events counted, {cpu:.3f} CPU s ({cpu / args.events * 1e6:.2f} µs per event)")


if __name__ == "__main__":
    main()
