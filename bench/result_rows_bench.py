"""The action-result rows a reconciler records (issue 25): CPU µs per row of `record_results`, the old way
(a dict per row through SQLAlchemy's insert_or_ignore .. RETURNING) against the current one (store/results.py:
bound column by column, sql.insert_new_returning), alternating, on SQLite and PostgreSQL.

    .venv/bin/python -m bench.result_rows_bench                          # 500-row batches, both backends, 3 runs each
    .venv/bin/python -m bench.result_rows_bench --rows 2000 --batches 20 --backends sqlite

A run is a fresh database and `--batches` batches of new results (pod creates as executors report them, every
key new, as in a live run) recorded by `Transaction.record_results` in an open transaction (BEGIN and COMMIT not
counted), after 5 warm-up batches; its figure is the median batch. CPU is `time.process_time` (the event loop's
and aiosqlite's threads; not PostgreSQL's server), on uvloop as the services run. PostgreSQL: as
bench/observed_rows_bench.py.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from bench.loadgen import machine
from bench.observed_rows_bench import WARMUP, database
from store import sql
from store.engine import open_store, upgrade
from store.results import ResultRow
from store.tables import action_results

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


async def old_record(conn: AsyncConnection, rows: Iterable[ResultRow], *, at: datetime) -> list[str]:
    """store/results.py `record` before issue 25's change (main at bb7d79d)."""
    values = [{**sql.values_of(r), "recorded_at": at} for r in rows]
    return [str(k) for k in await sql.insert_or_ignore(conn, action_results, values, returning=action_results.c.key)]


def batch(start: int, count: int) -> list[ResultRow]:
    """`count` succeeded pod creates, keyed from `start`, as relaying.py builds their rows."""
    return [ResultRow(key=f"rs-web/create/{i:07d}", action_key=f"rs-web/decision-{i // 50}", decision_id=i // 50,
                      action="create_pods", outcome="succeeded", code=201, reason="", message="",
                      object_uid=f"0b9c{i:08d}-7d6e-4a1f-9c3b-5e2d1f0a8b7c", executor="executor-0", attempts=1,
                      finished_at=NOW + timedelta(microseconds=i), subject=f"bench/web-{i:07d}",
                      resource_version=str(100000 + i))
            for i in range(start, start + count)]


async def run(url: str | None, workdir: str, rows: int, batches: int, old: bool) -> float:
    """CPU µs per row of record_results, the median batch."""
    if url is not None:
        await upgrade(url, workdir)
    store = await open_store(url, workdir)
    figures: list[float] = []
    try:
        for b in range(batches + WARMUP):
            built = batch(b * rows, rows)
            async with store.transaction() as tx:
                start = time.process_time()
                if old:
                    new = await old_record(tx.conn, built, at=NOW)
                else:
                    new = await tx.record_results(built, NOW)
                done = time.process_time()
            assert len(new) == rows, (len(new), rows)
            if b >= WARMUP:
                figures.append((done - start) / rows * 1e6)
    finally:
        await store.close()
    return statistics.median(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500, help="rows a batch (default 500)")
    parser.add_argument("--batches", type=int, default=30, help="batches measured a run (default 30)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each, alternating (default 3)")
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated (default both)")
    args = parser.parse_args()
    import uvloop

    print(f"machine: {machine()}")
    for backend in [b for b in args.backends.split(",") if b]:
        figures: dict[str, list[float]] = {"old": [], "new": []}
        for _, old in itertools.product(range(args.runs), (True, False)):
            with database(backend) as (url, workdir):  # outside the event loop: tests.postgres runs its own
                figures["old" if old else "new"].append(uvloop.run(run(url, workdir, args.rows, args.batches, old)))
        shown = {k: ", ".join(f"{v:.2f}" for v in vs) for k, vs in figures.items()}
        ratio = statistics.median(figures["new"]) / statistics.median(figures["old"])
        print(f"{backend}: {args.rows}-row batches, record_results CPU µs per row (median of {args.batches} a run): "
              f"old {shown['old']}; new {shown['new']}; new/old of the medians {ratio:.2f}")


if __name__ == "__main__":
    main()
