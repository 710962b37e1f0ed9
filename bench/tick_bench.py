"""The reconciler's tick rows (its input log, store/ticks.py): CPU per tick recorded, for callgrind.

    .venv/bin/python -m bench.tick_bench --ticks 500
    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_PyEval_CallTracing \\
        .venv/bin/python -m bench.tick_bench --ticks 500

A fresh SQLite store; inside one `sys.call_tracing` call (what callgrind counts with the options above), one
transaction records that many batch ticks as a live reconciler's commits do (`Transaction.record_tick`), each
with the results fed to its batch and the decisions it committed. The store's opening is outside the call; the
transaction's BEGIN and COMMIT are a fixed part: the difference of two sizes gives the cost per tick.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

from bench.loadgen import machine
from reconciler.core.ticks import BATCH, Tick
from store.engine import Store, open_store

AT = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


def tick(i: int) -> Tick:
    """A caught-up batch's tick: its events' range, three results fed (pod creates), two decisions."""
    keys = [f"rs-web/create/{3 * i + k:07d}" for k in range(3)]
    return Tick(instance="reconciler", kind=BATCH, at=AT + timedelta(milliseconds=50 * i), caught_up=True,
                first_seq=10 * i + 1, last_seq=10 * i + 10, partitions=None, result_keys=keys,
                results=[{"key": key, "action_key": f"rs-web/decision-{i}", "action": "create_pods",
                          "outcome": "succeeded", "code": 201, "executor": "executor-0", "attempts": 1}
                         for key in keys],
                decision_ids=[2 * i + 1, 2 * i + 2])


async def record(store: Store, ticks: list[Tick]) -> int:
    async with store.transaction() as tx:
        return sum([await tx.record_tick(t) for t in ticks])


def main(count: int) -> None:
    print(f"machine: {machine()}")
    ticks = [tick(i) for i in range(count)]
    with tempfile.TemporaryDirectory() as tmp, asyncio.Runner() as runner:
        store = runner.run(open_store(None, tmp))
        try:
            def drive() -> int:
                return runner.run(record(store, ticks))

            start = time.process_time()
            ids = sys.call_tracing(drive, ())
            cpu = time.process_time() - start
        finally:
            runner.run(store.close())
    assert ids == count * (count + 1) // 2, ids  # ids 1..count, one each
    print(f"ticks: {count:,} recorded, {cpu:.3f} CPU s ({cpu / count * 1e6:.1f} µs per tick)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=int, default=500)
    main(parser.parse_args().ticks)
