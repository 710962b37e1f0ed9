"""Replay throughput: KUBUS_EVENTS messages replayed per second from an exported history.

    .venv/bin/python -m bench.replay_bench [--events 100000] [--runs 3] [--keep FILE]
    .venv/bin/python -m bench.replay_bench --from FILE [--runs 3]    # replay a kept history again
    ... [--processes 2|1|0]    # 2 (default): as kubus replay --diff runs; 1: in one process; 0: the engine alone
    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=functools_reduce \
        .venv/bin/python -m bench.replay_bench --from FILE --count first|second|alone   # one part's instructions

Records a history of at least `--events` events with the in-process world of `replay.synthetic` (see
`record`: a busy cluster of 100 nodes, ReplicaSets scaled by thousands of pods, a DaemonSet rolled over
and over with failing pods, refused creates, reconciler restarts), exports it to a file as `kubus events
export` does, then times `kubus replay --from-file FILE --diff` without the printing: reading and checking
the file, folding the events into the cache, the controllers' work and the comparison with every recorded
decision. The figure is events (batch messages) replayed per second of wall time; the bootstrap messages
of the restarts are replayed too but not counted. Each run also says how much of its time went to the
controllers themselves (`reconciler.core.stepping.decide`: handlers, syncs, the same CPU the live reconciler
spent on them) and how fast the rest of the replay goes.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import resource
import statistics
import tempfile
import time
from datetime import timedelta
from typing import Any

from bench.loadgen import machine
from reconciler.core import stepping
from replay import fileformat, parallel
from replay.engine import Engine, Stats
from replay.synthetic import FAIL_AFTER, World, daemonset, replicaset

NODES = 100
REPLICASETS = 5
HIGH, LOW = 2_000, 100


def record(events: int) -> World:
    """A busy cluster's history: five ReplicaSets scaled between 100 and 2,000 pods (the controller creates
    and deletes up to 500 pods a sync, so the reconciler's batches fill up, as they do under load), a
    DaemonSet on 100 nodes rolled in every round (its new pods failing in every other round), one pod
    create in 1,000 refused, a reconciler restart every fourth round."""
    world = World(nodes=NODES, fail_creates=0.001, seed=7)
    world.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
    world.create(daemonset("agent", "bench", "agent:0", max_unavailable="10%"))
    for i in range(REPLICASETS):
        world.create(replicaset(f"web-{i}", "bench", LOW))
    world.settle(dt=timedelta(milliseconds=100))
    round_ = 0
    while len(world.stream) < events:
        round_ += 1
        failing = {FAIL_AFTER: "2"} if round_ % 2 else {}
        world.update("DaemonSet", "bench", "agent", {"spec": {"template": {
            "metadata": {"annotations": failing or None},
            "spec": {"containers": [{"name": "main", "image": f"agent:{round_}"}]}}}})
        for i in range(REPLICASETS):
            world.update("ReplicaSet", "bench", f"web-{i}", {"spec": {"replicas": HIGH if round_ % 2 else LOW}})
        world.run(8, dt=timedelta(milliseconds=100))
        if round_ % 4 == 0:
            world.restart()
    world.run(2, dt=timedelta(milliseconds=100))
    return world


class Timed:
    """`reconciler.core.stepping.decide`, timed (the engine calls it through the module)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.original = stepping.decide

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.original(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started


def replay_parallel(path: str, processes: int) -> tuple[float, float, Stats, float]:
    """`replay.parallel.replay_diff` (what `kubus replay --from-file FILE --diff` runs): (wall seconds, 0, the
    statistics, CPU seconds of this process and of the one it forked)."""
    started, cpu = time.perf_counter(), _cpu()
    outcome = parallel.replay_diff(path, processes=processes)
    seconds = time.perf_counter() - started
    assert outcome.divergence is None, outcome.divergence.describe()
    if outcome.processes != processes:
        print(f"  (replayed in {outcome.processes} process(es), not {processes})")
    print(f"  CPU seconds per process: {', '.join(f'{c:.2f}' for c in outcome.cpu)}")
    return seconds, 0.0, outcome.stats, _cpu() - cpu


def _cpu() -> float:
    """CPU seconds of this process and of its children that ended."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def replay(path: str) -> tuple[float, float, Engine, float]:
    """(wall seconds, seconds in the controllers, the engine, CPU seconds of the process)."""
    timed = Timed()
    stepping.decide = timed
    try:
        started, cpu = time.perf_counter(), time.process_time()
        _, bundles = fileformat.read_file(path, decode_objects=True)
        engine = Engine(compare=True)
        engine.run(bundles)
        return time.perf_counter() - started, timed.seconds, engine, time.process_time() - cpu
    finally:
        stepping.decide = timed.original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", help="write the history here (and keep it)")
    parser.add_argument("--from", dest="source", help="replay this kept history (--keep) instead of recording one")
    parser.add_argument("--count", choices=("first", "second", "alone"),
                        help="replay once, in this process, only the first half (up to the cut), only the second "
                             "(from the cut) or the whole file, inside functools.reduce: what callgrind's "
                             "--toggle-collect=functools_reduce counts (the halves' instructions without startup)")
    parser.add_argument("--processes", type=int, choices=(0, 1, 2), default=2,
                        help="2: as `kubus replay --from-file --diff` runs (cut in two at a restart, "
                             "replay.parallel); 1: the same in one process; 0: the engine alone, with the "
                             "controllers' share timed")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    if args.source and args.count:
        count(args.source, args.count)
        return
    if args.source:
        print(f"history: {args.source}, {os.path.getsize(args.source) / 2**20:.1f} MiB")
        runs(args.source, args.runs, None, args.processes)
        return
    started = time.perf_counter()
    world = record(args.events)
    recorded = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or os.path.join(tmp, "history.jsonl")
        started = time.perf_counter()
        with open(path, "wb") as out:
            counts = fileformat.write(out, asyncio.run(world.bundle_list()), {"bench": "replay_bench"})
        exported = time.perf_counter() - started
        size = os.path.getsize(path)
        print(f"history: {len(world.stream):,} events, {counts['tick']:,} ticks, {counts['decision']:,} decisions, "
              f"{counts['result']:,} results, {counts['state']:,} bootstrap lines ({world._restarts} starts); "
              f"recorded in {recorded:.1f} s, exported in {exported:.1f} s, {size / 2**20:.1f} MiB")
        runs(path, args.runs, counts["decision"], args.processes)


def count(path: str, part: str) -> None:
    """One part of `kubus replay --from-file FILE --diff`, run inside functools.reduce (see --count)."""
    at = parallel.cut(path)

    def replay_part(_: object, __: object) -> Any:
        if part == "alone":
            return parallel.replay_alone(path)
        if at is None:
            raise SystemExit(f"{path} has no restart to cut the replay at")
        return parallel.replay_first_half(path, at) if part == "first" else parallel.replay_second_half(path, at)

    cpu = time.process_time()
    outcome = functools.reduce(replay_part, [None], None)
    assert outcome.divergence is None and not getattr(outcome, "error", None), outcome
    print(f"{part}: {outcome.stats.events:,} events, {outcome.stats.compared:,} decisions compared, "
          f"{time.process_time() - cpu:.2f} CPU s; cut {at}")


def runs(path: str, count: int, decisions: int | None, processes: int) -> None:
    """Replays `path` `count` times and prints each run and the medians."""
    rates = []
    rest = []
    cpu_rates = []
    for run in range(count):
        if processes:
            seconds, controllers, stats, cpu = replay_parallel(path, processes)
        else:
            seconds, controllers, engine, cpu = replay(path)
            stats = engine.stats
            assert engine.divergence is None, engine.divergence.describe()
        assert stats.compared == (stats.decisions if decisions is None else decisions), stats.compared
        rate = stats.events / seconds
        rates.append(rate)
        cpu_rates.append(stats.events / cpu)
        line = (f"run {run + 1}: {stats.events:,} events in {seconds:.2f} s = {rate:,.0f} events/s "
                f"({stats.decisions:,} decisions, all identical; {cpu:.2f} CPU s = {cpu_rates[-1]:,.0f} events per "
                f"CPU second")
        if processes:
            print(f"{line}; {processes} process(es))")
            continue
        rest.append(stats.events / (seconds - controllers))
        print(f"{line}); the controllers {controllers:.2f} s ({controllers / seconds:.0%}), the rest (reading "
              f"and checking the file, folding, bootstraps, comparing) {seconds - controllers:.2f} s = "
              f"{rest[-1]:,.0f} events/s")
    print(f"events replayed per second: median {statistics.median(rates):,.0f}, best {max(rates):,.0f} "
          f"(target >= 60,000); per CPU second: median {statistics.median(cpu_rates):,.0f}"
          + (f"; without the controllers' own time: median {statistics.median(rest):,.0f}" if rest else ""))


if __name__ == "__main__":
    main()
