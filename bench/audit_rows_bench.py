"""The observed-event audit rows of a reconciler's commits (store/events.py), for callgrind: instructions per row.

    .venv/bin/python -m bench.audit_rows_bench --rows 2000
    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_PyEval_CallTracing \\
        .venv/bin/python -m bench.audit_rows_bench --rows 2000

A fresh SQLite store; inside one `sys.call_tracing` call (what callgrind counts with the options above), one
transaction records that many rows in 500-row batches as a live reconciler's commits do: `events.row_of` of each
event with the pod as the cache decoded it (bench.observed_rows_bench's Running, Ready pods of a DaemonSet), then
`record_events`. The pods, the store's opening and closing are outside the call; the transaction's BEGIN and
COMMIT are a fixed part: the difference of two sizes gives the cost per row. Prints the facts column's text of
the first and last row (the same in every tree: the rows do not change).
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
from store import events
from store.engine import Store, open_store
from store.tables import observed_events

BATCH = 500  # the reconciler's batch (reconciler.consuming.BATCH)


async def record(store: Store, sample: list[tuple[ObservedEvent, Pod]]) -> int:
    recorded = 0
    async with store.transaction() as tx:
        for start in range(0, len(sample), BATCH):
            rows = [events.row_of(event, seq, pod) for seq, (event, pod) in
                    enumerate(sample[start:start + BATCH], start + 1)]
            recorded += await tx.record_events(rows)
    return recorded


async def facts(store: Store) -> list[str]:
    """The facts column's text of the first and the last row, as SQLite holds it."""
    async with store.engine.connect() as conn:
        seq = observed_events.c.stream_seq
        first, last = (await conn.execute(sa.select(sa.func.min(seq), sa.func.max(seq)))).one()
        text = sa.select(sa.cast(observed_events.c.facts, sa.Text)).where(seq.in_([first, last])).order_by(seq)
        return list((await conn.execute(text)).scalars())


def main(count: int) -> None:
    print(f"machine: {machine()}")
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2000, help="rows recorded (default 2000)")
    main(parser.parse_args().rows)
