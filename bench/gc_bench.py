"""The cyclic collector's share of the reconciler's syncs, with and without runtime/collecting.py's policy.

    .venv/bin/python -m bench.gc_bench                  # 5,000 nodes, 60 rolling syncs per side, twice
    .venv/bin/python -m bench.gc_bench --nodes 1000 --syncs 100

The DaemonSet benchmark's cache (bench/daemonset_bench.py: N nodes, one pod per node as the controller builds
it, the template changed) is built, and the rolling step synced `--syncs` times, each sync's decision kept
for a while as the reconciler keeps a batch's until it is committed: once with CPython's collector as it comes
(`default`), once with the policy installed (`frozen survivors`: the survivors of each full collection frozen).
Printed per side: full collections, the seconds they took (timed from the collector's own callbacks), the CPU
seconds of the syncs (time.process_time, less sensitive than wall time to other work on the machine), the
median sync, and the ratio policy / default.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections import deque
from typing import Any

from bench import daemonset_bench as b
from bench.loadgen import machine
from runtime import collecting


class GcTimer:
    def __init__(self) -> None:
        self.full = 0
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.full += 1
            self.seconds += time.perf_counter() - self._started


def run(nodes: int, syncs: int, policy: bool) -> dict[str, float]:
    cache = b.settled(b.cache_with(nodes, rolling=True))
    timer = GcTimer()
    gc.collect()
    if policy:
        collecting.install()
    gc.callbacks.append(timer)  # after the policy's: its freeze is not in the timed collection
    kept: deque[Any] = deque(maxlen=8)  # a few batches' decisions alive at once, as in the reconciler
    times = []
    cpu = time.process_time()
    try:
        for _ in range(syncs):
            started = time.perf_counter()
            kept.append(b.sync_daemonset(b.KEY, cache, None, {}, b.NOW, "k"))
            times.append(time.perf_counter() - started)
        cpu = time.process_time() - cpu
    finally:
        gc.callbacks.remove(timer)
        if policy:
            collecting.uninstall()
    del cache, kept
    gc.collect()
    return {"full": timer.full, "gc_s": timer.seconds, "cpu_s": cpu, "median_ms": statistics.median(times) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--syncs", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    for round_ in range(1, args.rounds + 1):
        default = run(args.nodes, args.syncs, policy=False)
        frozen = run(args.nodes, args.syncs, policy=True)
        for name, r in (("default", default), ("frozen survivors", frozen)):
            print(f"round {round_}, {name}: {r['full']:.0f} full collections taking {r['gc_s']:.2f} s; "
                  f"{args.syncs} rolling syncs over {args.nodes:,} nodes: {r['cpu_s']:.2f} CPU s, "
                  f"median {r['median_ms']:.1f} ms")
        print(f"round {round_}: ratio frozen / default: CPU {frozen['cpu_s'] / default['cpu_s']:.2f}, "
              f"collector seconds {frozen['gc_s'] / max(default['gc_s'], 1e-9):.2f}")


if __name__ == "__main__":
    main()
