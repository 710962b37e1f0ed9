"""The observed-event audit rows of a reconciler's commit (issue 25): CPU per row, on SQLite and PostgreSQL.

    .venv/bin/python -m bench.observed_rows_bench                          # 500-row batches, both backends
    .venv/bin/python -m bench.observed_rows_bench --rows 500 --batches 40 --backends sqlite

What store/transaction.py's `Transaction.commit` does with a batch's events, alone: `events.row_of` of each (with
the object as the reconciler's cache decoded it, so no decoding here: a DaemonSet's pods as its controller creates
them and `kubus sim`'s kubelet makes them Running and Ready), then `record_events` of the rows in an open
transaction (its BEGIN and COMMIT not counted). Every batch's rows are new (fresh stream sequences), as in a live
run. CPU is `time.process_time` (every thread of this process: the event loop's and aiosqlite's; not PostgreSQL's
server), on uvloop as the services run; the first 5 batches are left out, the figure is the median of the rest.

PostgreSQL is the tests' (tests/postgres.py: KUBUS_TEST_PG_URL, else 127.0.0.1:5432, else an embedded server of
the pgserver wheel), in a fresh database dropped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import msgspec

from bench.loadgen import machine
from kube import codec
from kube.core import Pod
from kube.testing import daemonset
from kube.times import format_time
from messages.observed import MODIFIED, ObservedEvent
from reconciler.core.daemonset.history import UNIQUE_LABEL_KEY, construct_history
from reconciler.core.daemonset.pods import DaemonPodFactory
from store import events
from store.engine import open_store, upgrade

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
WARMUP = 5


def pods(count: int) -> list[tuple[ObservedEvent, Pod]]:
    """`count` Running, Ready pods of one DaemonSet, one per node, with the MODIFIED event that made them Ready."""
    ds = daemonset("agent").ns("bench").uid("ds-agent").generation(1).image("registry.k8s.io/agent:1").build()
    revision = construct_history(ds, []).create
    assert revision is not None
    factory = DaemonPodFactory(ds, revision.metadata.labels[UNIQUE_LABEL_KEY])
    out = []
    for i in range(count):
        name = f"node-{i:05d}"
        body = factory.body(name, f"bench/create/{name}")
        created = NOW - timedelta(minutes=10, seconds=i % 600)
        started = format_time(created + timedelta(seconds=2))
        body["metadata"].update({"uid": f"pod-{i}", "creationTimestamp": format_time(created),
                                 "resourceVersion": str(i + 10)})
        body["spec"]["nodeName"] = name
        body["status"] = {
            "phase": "Running",
            "conditions": [{"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
                           for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")],
            "hostIP": "10.0.0.1", "podIP": f"10.1.{i // 250}.{i % 250}", "startTime": started}
        pod = codec.decode_builtin(body, Pod)
        observed = format_time(created + timedelta(seconds=3, microseconds=i))
        out.append((ObservedEvent(kind="Pod", type=MODIFIED, namespace="bench", name=pod.metadata.name,
                                  uid=f"pod-{i}", resource_version=str(i + 10), observed_at=observed,
                                  ingest="bench", object=msgspec.Raw(codec.encode(pod))), pod))
    return out


@contextlib.contextmanager
def database(backend: str) -> Iterator[tuple[str | None, str]]:
    """(the store's URL, a data directory) for `backend`, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="kubus-bench-rows-") as workdir:
        if backend == "sqlite":
            yield None, workdir
            return
        from tests.postgres import fresh_database, server  # the tests' PostgreSQL, only when asked for

        with server() as admin, fresh_database(admin, prefix="kubus_bench") as url:
            yield url, workdir


async def bench(url: str | None, workdir: str, rows: int, batches: int) -> tuple[float, float]:
    """CPU µs per row: (row_of, record_events), medians over the batches."""
    sample = pods(rows)
    build: list[float] = []
    record: list[float] = []
    if url is not None:
        await upgrade(url, workdir)
    store = await open_store(url, workdir)
    try:
        seq = 0
        for b in range(batches + WARMUP):
            cpu = time.process_time()
            built = [events.row_of(event, seq + i, pod) for i, (event, pod) in enumerate(sample, 1)]
            built_at = time.process_time()
            seq += rows
            async with store.transaction() as tx:
                start = time.process_time()
                new = await tx.record_events(built)
                done = time.process_time()
            assert new == rows, (new, rows)
            if b >= WARMUP:
                build.append((built_at - cpu) / rows * 1e6)
                record.append((done - start) / rows * 1e6)
    finally:
        await store.close()
    return statistics.median(build), statistics.median(record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500, help="rows a batch (default 500)")
    parser.add_argument("--batches", type=int, default=40, help="batches measured (default 40)")
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated (default both)")
    args = parser.parse_args()
    import uvloop

    print(f"machine: {machine()}")
    for backend in [b for b in args.backends.split(",") if b]:
        with database(backend) as (url, workdir):  # outside the event loop: tests.postgres runs its own
            build, record = uvloop.run(bench(url, workdir, args.rows, args.batches))
        print(f"{backend}: {args.rows}-row batches, CPU µs per row (median of {args.batches}): row_of {build:.2f}, "
              f"record_events {record:.2f}, both {build + record:.2f}")


if __name__ == "__main__":
    main()

