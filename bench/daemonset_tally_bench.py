"""The DaemonSet's syncs as the reconciler runs them during a round, for callgrind: K syncs of a DaemonSet on N
nodes, CHURN (250) of its pods changed (a new resourceVersion each, folded into the cache) before each.

    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_PyEval_CallTracing \\
        .venv/bin/python -m bench.daemonset_tally_bench [--nodes 2000] [--syncs 10] [--full] [--from-scratch]

Only the syncs are counted: each runs inside sys.call_tracing, which --toggle-collect turns the count on for.
Status-only syncs (expectations unsatisfied: a round of creates in flight) unless --full (a managing sync over a
settled DaemonSet). The DaemonSet's StatusTally is kept from one sync to the next, as the controller keeps it;
--from-scratch (or a tree without reconciler/core/daemonset/tally.py, such as one before it) syncs without one.
Divide the count by --syncs for one sync. Without valgrind it prints the CPU time of each sync.
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time
from typing import Any

import msgspec

from bench.daemonset_bench import KEY, NOW, _event, cache_with, settled
from reconciler.core.daemonset.sync import sync_daemonset
from reconciler.core.expectations import expect

CHURN = 250  # as bench.daemonset_bench.CHURN: burstReplicas' worth of pods changed between two syncs (kept here for a
# tree from before that name, where this driver is copied to count the syncs there)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2_000)
    parser.add_argument("--syncs", type=int, default=10)
    parser.add_argument("--full", action="store_true", help="managing syncs (expectations satisfied)")
    parser.add_argument("--from-scratch", action="store_true", help="no StatusTally kept between the syncs")
    args = parser.parse_args()
    cache = settled(cache_with(args.nodes, rolling=False))
    gc.collect()
    gc.freeze()  # as the reconciler's collector does with what survives (runtime/collecting.py)
    try:
        _syncs(cache, args)
    finally:
        gc.unfreeze()


def _syncs(cache: Any, args: argparse.Namespace) -> None:
    expectations = None if args.full else expect(CHURN, 0, NOW)
    kept: dict[str, Any] = {}
    if not args.from_scratch:
        try:
            from reconciler.core.daemonset.tally import StatusTally
        except ImportError:
            print("no StatusTally in this tree: every sync from scratch")
        else:
            kept["tally"] = StatusTally()
    sync = functools.partial(sync_daemonset, KEY, cache, expectations, {}, NOW, "bench", **kept)
    sync()
    pods = list(cache.objects["Pod"].values())
    seq = 10**6
    for round_ in range(args.syncs):
        for old in pods[round_ * CHURN % len(pods):][:CHURN]:
            seq += 1
            new = msgspec.structs.replace(old, metadata=msgspec.structs.replace(old.metadata,
                                                                                 resource_version=str(seq)))
            cache.apply(_event(new, "Pod", seq), seq)
        start = time.thread_time()
        sys.call_tracing(sync, ())
        print(f"sync {round_ + 1}: {(time.thread_time() - start) * 1000:.2f} ms of CPU")


if __name__ == "__main__":
    main()
