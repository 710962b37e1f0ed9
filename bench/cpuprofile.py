"""`python -m bench.cpuprofile -o FILE -m MODULE [ARGS]`: cProfile of MODULE's main thread, timed by its CPU clock.

`python -m cProfile` times functions by the wall clock: on a loaded machine a function is charged for the time its
process waited for a core or for the GIL (the SQLite thread's turn), which put socket writes and queue puts at the
top of the services' profiles. Timed by the thread's CPU clock (`time.thread_time`), each function is charged only
for the CPU the event loop's thread spent in it; the other threads' CPU (aiosqlite's) is not counted. The clock is
a system call (slower than the wall clock's), so totals run higher than without the profiler: read the ranking.
`BENCH_PROFILE=cpu` makes the benchmarks start their processes this way (bench.loadgen.profiling).
"""

from __future__ import annotations

import cProfile
import runpy
import sys
import time


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[0] != "-o" or argv[2] != "-m":
        raise SystemExit("usage: python -m bench.cpuprofile -o FILE -m MODULE [ARGS...]")
    out, module, args = argv[1], argv[3], argv[4:]
    sys.argv = [module, *args]
    profile = cProfile.Profile(time.thread_time)
    profile.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        profile.disable()
        profile.dump_stats(out)


if __name__ == "__main__":
    main(sys.argv[1:])
