"""Scale: a DaemonSet onto 1,000 ... 15,000 simulated nodes, and how each cost grows with the node count.

    .venv/bin/python -m bench.scale_bench                                  # 1,000 / 2,000 / 5,000 / 10,000 / 15,000
    .venv/bin/python -m bench.scale_bench --sizes 500,1000 --svg /tmp/scale.svg
    .venv/bin/python -m bench.scale_bench --no-bare                        # without the bare client's baseline
    .venv/bin/python -m bench.scale_bench --node-selector                  # the DaemonSet selects kubernetes.io/os

For each node count N, on a fresh cluster: a `kubus sim` of N nodes (kubelet delay 0), an embedded
nats-server, and `kubus ingest`, `kubus reconcile` and `kubus execute` as processes (SQLite store, client
rate limiter off: --qps 0), set up as bench/daemonset_bench.py's rollout does (a warm-up DaemonSet for no
node, then until the reconciler has folded every node). A DaemonSet (RollingUpdate, maxUnavailable 10%) is
applied (with --node-selector, one selecting the nodes by `kubernetes.io/os: linux`, as most DaemonSets do and as
every node of the sim is labelled), and measured:

- apply -> all available: seconds until its status shows desiredNumberScheduled == numberAvailable == N;
- CPU seconds per process (utime + stime from /proc/PID/stat) spent during that apply, for the reconciler,
  the executor, ingest, the sim and nats-server;
- peak RSS per process over its whole life (VmHWM from /proc/PID/status), start-up and node fold included;
- the reconciler's store: the bytes of its SQLite database and write-ahead log once converged;
- NATS: the bytes held by the kubus streams (KUBUS_EVENTS, KUBUS_STATE, KUBUS_ACTIONS, KUBUS_RESULTS,
  KUBUS_DEAD) once converged, from JetStream's stream info;
- pure sync: one full syncDaemonSet of the converged state at that size (every node Ready with its
  current, available pod; nothing to do), on daemonset_bench's cache in this process: the median of its
  CPU time (the thread's, which the other processes on a shared machine do not inflate);
- the baseline: the bare client (aiohttp, 16 requests in flight, pre-encoded bodies) creating the same N
  pods in a fresh sim of N nodes, as the other benchmarks' ratio: bare seconds / kubus seconds.

It prints a table with each figure per size, its growth exponent between successive sizes (the slope of
log cost against log nodes: 1 is linear, 2 quadratic) and over the whole range, and writes a log-log plot
of every cost relative to its value at the smallest size as an SVG (--svg; no plotting library).
BENCH_KEEP=1 keeps each size's work directory (logs, SQLite store); BENCH_PROFILE=1 writes a cProfile of each
service and the sim at the largest size to $BENCH_PROFILE_DIR/scale-<service>.prof (default /tmp); BENCH_PROFILE=cpu
times it by each process's main-thread CPU clock instead of the wall clock (bench/cpuprofile.py).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import nats

from bench import loadgen
from bench.daemonset_bench import (
    KEY,
    NOW,
    OS_LABEL,
    _cpu_seconds,
    _json,
    _manifest,
    _wait_nodes_folded,
    _wait_status,
    bare_bodies,
    cache_with,
    settled,
    stop_services,
)
from bench.loadgen import machine, post_all, start_sim
from messages import subjects
from reconciler.core.daemonset.sync import sync_daemonset
from runtime.natsserver import EmbeddedNats

SIZES = [1_000, 2_000, 5_000, 10_000, 15_000]
PREFIX = "bench"
SERVICES = ("ingest", "reconcile", "execute")
PROCESSES = ("reconcile", "execute", "ingest", "sim", "nats-server")
STREAMS = (subjects.EVENTS_STREAM, subjects.STATE_STREAM, subjects.ACTIONS_STREAM, subjects.RESULTS_STREAM,
           subjects.DEAD_STREAM)
MIB = 1024 * 1024


@dataclass
class Figures:
    """One size's measurements."""

    nodes: int
    available_s: float = float("nan")
    cpu_s: dict[str, float] = field(default_factory=dict)  # during the apply, per process
    peak_rss_mib: dict[str, float] = field(default_factory=dict)  # VmHWM, per process
    store_mib: float = float("nan")
    stream_mib: float = float("nan")
    sync_ms: float = float("nan")
    bare_s: float = float("nan")

    def rows(self) -> dict[str, float]:
        """Every figure by the name the table and the plot give it."""
        rows = {"apply -> all available (s)": self.available_s}
        rows.update({f"CPU s, {name}": self.cpu_s.get(name, float("nan")) for name in PROCESSES})
        rows["CPU s, all five"] = sum(self.cpu_s.values()) if self.cpu_s else float("nan")
        rows.update({f"peak RSS MiB, {name}": self.peak_rss_mib.get(name, float("nan")) for name in PROCESSES})
        rows["reconciler store MiB (SQLite + WAL)"] = self.store_mib
        rows["NATS stream MiB"] = self.stream_mib
        rows["pure full sync (CPU ms)"] = self.sync_ms
        rows["bare client creates (s)"] = self.bare_s
        return rows


def peak_rss_mib(pid: int) -> float:
    """VmHWM (the peak resident set) of a process, from /proc (Linux)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def store_bytes(data_dir: Path) -> int:
    """The SQLite store's bytes: the database and its write-ahead log."""
    return sum(p.stat().st_size for p in data_dir.glob("kubus.db*") if p.is_file())


async def stream_bytes(nats_url: str) -> int:
    """The bytes JetStream holds in the kubus streams."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        total = 0
        for base in STREAMS:
            info = await js.stream_info(subjects.stream_name(base, PREFIX))
            total += info.state.bytes
        return total
    finally:
        await nc.close()


def pure_sync_ms(nodes: int, runs: int) -> float:
    """Median CPU ms (this thread's, so that the machine's load does not inflate it) of one full syncDaemonSet with
    every node Ready and its current, available pod (nothing to do)."""
    cache = settled(cache_with(nodes, rolling=False))
    check = sync_daemonset(KEY, cache, None, {}, NOW, "k")
    assert (check.creates, check.deletes, check.status) == ([], [], None), check.explain
    samples = []
    for _ in range(runs):
        start = time.thread_time()
        sync_daemonset(KEY, cache, None, {}, NOW, "k")
        samples.append((time.thread_time() - start) * 1000)
    del cache, check
    gc.collect()
    return statistics.median(samples)


async def measure_pipeline(figures: Figures, timeout: float, profiling: bool = False,
                           node_selector: bool = False) -> None:
    """The apply on a fresh sim of figures.nodes nodes: time, CPU, peak RSS, store and stream bytes."""
    nodes = figures.nodes
    sim = start_sim("--nodes", str(nodes), "--kubelet-delay", "0", "--watch-history", str(max(20_000, 20 * nodes)),
                    profile="scale-sim" if profiling else "")
    workdir = Path(tempfile.mkdtemp(prefix="kubus-bench-scale-"))
    server = EmbeddedNats(workdir / "nats")
    procs: list[subprocess.Popen[bytes]] = []
    ok = False
    try:
        nats_url = await server.start()
        for service in SERVICES:
            log = open(workdir / f"{service}.log", "wb")  # noqa: SIM115 - owned by the child
            # BENCH_PROFILE=1: a cProfile of each service at the largest size, to /tmp/scale-<service>.prof
            profile = loadgen.profiling(f"scale-{service}") if profiling else []
            procs.append(subprocess.Popen(
                [sys.executable, *profile, "-m", "kubus", service, "--nats-url", nats_url, "--prefix", PREFIX,
                 "--data-dir", str(workdir / "data"), "--metrics-port", "0",
                 *([] if service == "reconcile" else ["--kubeconfig", str(sim.kubeconfig)]),
                 *(["--qps", "0"] if service == "execute" else [])], stdout=log, stderr=subprocess.STDOUT))
        pids = {"sim": sim.proc.pid, "nats-server": server._proc.pid if server._proc else 0,
                **{name: p.pid for name, p in zip(SERVICES, procs, strict=True)}}
        base = f"{sim.url}/apis/apps/v1/namespaces/default/daemonsets"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            warmup = _manifest("registry.k8s.io/agent:1")
            warmup["metadata"]["name"] = "warmup"
            warmup["spec"]["selector"]["matchLabels"] = warmup["spec"]["template"]["metadata"]["labels"] = {
                "app": "warmup"}
            warmup["spec"]["template"]["spec"]["nodeSelector"] = {"bench.kubus.io/no-such-label": "x"}
            await _json(session, "POST", base, warmup)
            await _wait_status(session, f"{base}/warmup", lambda s: s.get("observedGeneration", 0) >= 1, procs,
                               timeout)
            await _wait_nodes_folded(workdir / "data" / "kubus.db", nodes, procs, timeout)
            before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
            applied = _manifest("registry.k8s.io/agent:1")
            if node_selector:
                applied["spec"]["template"]["spec"]["nodeSelector"] = dict(OS_LABEL)
            await _json(session, "POST", base, applied)
            figures.available_s = await _wait_status(
                session, f"{base}/agent",
                lambda s: s.get("desiredNumberScheduled") == nodes and s.get("numberAvailable", 0) == nodes,
                procs, timeout)
        after = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        figures.cpu_s = {name: after[name] - before[name] for name in PROCESSES}
        figures.peak_rss_mib = {name: peak_rss_mib(pids[name]) for name in PROCESSES}
        figures.stream_mib = await stream_bytes(nats_url) / MIB
        stop_services(procs, SERVICES, workdir)
        figures.store_mib = store_bytes(workdir / "data") / MIB  # after a clean stop: the WAL checkpointed
        ok = True
    finally:
        for p in procs:
            p.kill()
        await server.stop()
        sim.stop()
        if os.environ.get("BENCH_KEEP") or not ok:
            print(f"  work directory (logs, store) kept: {workdir}", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


async def measure_bare(figures: Figures) -> None:
    """The bare client creating the same pods in a fresh sim of the same size."""
    bare = start_sim("--nodes", str(figures.nodes), "--kubelet-delay", "0",
                     "--watch-history", str(max(20_000, 20 * figures.nodes)))
    try:
        seconds, failures = await post_all(bare.url, "/api/v1/namespaces/default/pods", bare_bodies(figures.nodes))
        if failures:
            raise RuntimeError(f"the bare client's creates failed {failures} times on {figures.nodes:,} nodes")
        figures.bare_s = seconds
    finally:
        bare.stop()


def exponent(n1: int, c1: float, n2: int, c2: float) -> float:
    """The slope of log cost against log nodes between two sizes (1: linear, 2: quadratic)."""
    if not (c1 > 0 and c2 > 0) or n1 == n2:
        return float("nan")
    return math.log(c2 / c1) / math.log(n2 / n1)


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"


def table(results: list[Figures]) -> str:
    """A Markdown table: each figure by size, its exponents between successive sizes and over the whole range."""
    sizes = [f.nodes for f in results]
    rows = [f.rows() for f in results]
    steps = [f"k {a:,}→{b:,}" for a, b in itertools.pairwise(sizes)]
    header = ["figure", *(f"{n:,}" for n in sizes), *steps]
    if len(sizes) > 2:
        header.append("k overall")
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name in rows[0]:
        values = [r[name] for r in rows]
        ks = [exponent(a, x, b, y) for a, b, x, y in zip(sizes, sizes[1:], values, values[1:], strict=False)]
        if len(sizes) > 2:
            ks.append(exponent(sizes[0], values[0], sizes[-1], values[-1]))
        lines.append("| " + " | ".join([name, *map(_fmt, values), *(f"{k:.2f}" if not math.isnan(k) else "—"
                                                                         for k in ks)]) + " |")
    ratio = [f.bare_s / f.available_s if f.available_s > 0 else float("nan") for f in results]
    lines.append("| " + " | ".join(["kubus / bare (bare s / kubus s)", *map(_fmt, ratio),
                                    *([""] * (len(header) - 1 - len(sizes)))]) + " |")
    per_pod = [1000 * sum(f.cpu_s.values()) / f.nodes if f.cpu_s else float("nan") for f in results]
    lines.append("| " + " | ".join(["CPU ms per pod, all five", *map(_fmt, per_pod),
                                    *([""] * (len(header) - 1 - len(sizes)))]) + " |")
    return "\n".join(lines)


PLOTTED = ("apply -> all available (s)", "CPU s, reconcile", "CPU s, execute", "CPU s, ingest", "CPU s, sim",
           "CPU s, nats-server", "peak RSS MiB, reconcile", "reconciler store MiB (SQLite + WAL)",
           "NATS stream MiB", "pure full sync (CPU ms)")
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#ff7f0e", "#17becf", "#bcbd22",
           "#000000")


def svg(results: list[Figures], title: str) -> str:
    """A log-log plot of each cost relative to its value at the smallest size, with slope-1 and slope-2 guides."""
    width, height, left, right, top, bottom = 1000, 560, 70, 380, 40, 60
    sizes = [f.nodes for f in results]
    series = {name: [f.rows()[name] for f in results] for name in PLOTTED}
    rel = {name: [v / vs[0] if vs[0] > 0 and v > 0 else float("nan") for v in vs] for name, vs in series.items()}
    span = sizes[-1] / sizes[0]
    finite = [v for vs in rel.values() for v in vs if not math.isnan(v)]
    y_max = max([span ** 2 if span ** 2 <= max(finite, default=1) * 4 else max(finite, default=1), span, 2.0])
    y_min = min([*finite, 1.0]) / 1.5
    x0, x1 = math.log10(sizes[0]), math.log10(sizes[-1])
    y0, y1 = math.log10(y_min), math.log10(y_max)

    def px(n: float) -> float:
        return left + (math.log10(n) - x0) / ((x1 - x0) or 1) * (width - left - right)

    def py(v: float) -> float:
        return height - bottom - (math.log10(v) - y0) / ((y1 - y0) or 1) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14">{title}</text>',
           f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>',
           f'<text x="{(left + width - right) / 2:.0f}" y="{height - 15}" text-anchor="middle">nodes (log)</text>',
           f'<text x="18" y="{(top + height - bottom) / 2:.0f}" text-anchor="middle" '
           f'transform="rotate(-90 18 {(top + height - bottom) / 2:.0f})">cost / cost at {sizes[0]:,} nodes (log)'
           '</text>']
    for n in sizes:
        out.append(f'<line x1="{px(n):.1f}" y1="{height - bottom}" x2="{px(n):.1f}" y2="{height - bottom + 5}" '
                   'stroke="black"/>')
        out.append(f'<text x="{px(n):.1f}" y="{height - bottom + 18}" text-anchor="middle">{n:,}</text>')
    tick = 10 ** math.floor(y0)
    while tick <= y_max:
        for m in (1, 2, 5):
            v = tick * m
            if y_min <= v <= y_max:
                out.append(f'<line x1="{left}" y1="{py(v):.1f}" x2="{width - right}" y2="{py(v):.1f}" '
                           'stroke="#dddddd"/>')
                out.append(f'<text x="{left - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
        tick *= 10
    for slope, dash in ((1, "6,4"), (2, "2,4")):
        end = min(span, y_max ** (1 / slope))
        out.append(f'<line x1="{px(sizes[0]):.1f}" y1="{py(1):.1f}" x2="{px(sizes[0] * end):.1f}" '
                   f'y2="{py(end ** slope):.1f}" stroke="#888888" stroke-dasharray="{dash}"/>')
        out.append(f'<text x="{px(sizes[0] * end) + 4:.1f}" y="{py(end ** slope) + 4:.1f}" fill="#888888">'
                   f'{"linear" if slope == 1 else "quadratic"}</text>')
    for i, (name, vs) in enumerate(rel.items()):
        colour = COLOURS[i % len(COLOURS)]
        points = [(px(n), py(v)) for n, v in zip(sizes, vs, strict=True) if not math.isnan(v)]
        if points:
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                       + " ".join(f"{x:.1f},{y:.1f}" for x, y in points) + '"/>')
            out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in points)
        k = exponent(sizes[0], series[name][0], sizes[-1], series[name][-1])
        label = f"{name}  (k {k:.2f})" if not math.isnan(k) else name
        y = top + 10 + i * 20
        out.append(f'<line x1="{width - right + 15}" y1="{y}" x2="{width - right + 40}" y2="{y}" stroke="{colour}" '
                   'stroke-width="2"/>')
        out.append(f'<text x="{width - right + 45}" y="{y + 4}">{label.replace(">", "&gt;")}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


async def run(sizes: list[int], *, bare: bool, sync_runs: int, timeout_per_node: float,
              node_selector: bool = False) -> list[Figures]:
    print(f"machine: {machine()}", flush=True)
    results = []
    for n in sizes:
        figures = Figures(n)
        started = time.perf_counter()
        await measure_pipeline(figures, timeout=max(120.0, timeout_per_node * n),
                               profiling=bool(os.environ.get("BENCH_PROFILE")) and n == sizes[-1],
                               node_selector=node_selector)
        if bare:
            await measure_bare(figures)
        figures.sync_ms = pure_sync_ms(n, sync_runs)
        print(f"{n:>6,} nodes: all available in {figures.available_s:.1f} s; CPU s "
              + ", ".join(f"{k} {v:.1f}" for k, v in figures.cpu_s.items())
              + "; peak RSS MiB " + ", ".join(f"{k} {v:.0f}" for k, v in figures.peak_rss_mib.items())
              + f"; store {figures.store_mib:.1f} MiB; streams {figures.stream_mib:.1f} MiB; pure sync "
              f"{figures.sync_ms:.1f} ms; bare {figures.bare_s:.1f} s  ({time.perf_counter() - started:.0f} s in all)",
              flush=True)
        results.append(figures)
    return results


def main(argv: list[str] | None = None) -> list[Figures]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=SIZES,
                        help="node counts, comma-separated, ascending (default 1000,2000,5000,10000,15000)")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare client's baseline")
    parser.add_argument("--sync-runs", type=int, default=5, help="runs of the pure sync per size (median)")
    parser.add_argument("--timeout-per-node", type=float, default=0.06,
                        help="seconds allowed per node for each wait (at least 120 s)")
    parser.add_argument("--svg", type=Path, default=None, help="where to write the log-log plot")
    parser.add_argument("--node-selector", action="store_true",
                        help="the DaemonSet selects the nodes by kubernetes.io/os: linux (every sim node has it)")
    args = parser.parse_args(argv)
    if args.sizes != sorted(args.sizes) or len(set(args.sizes)) != len(args.sizes):
        parser.error(f"--sizes must be distinct and ascending, got {args.sizes}")
    import uvloop

    results = uvloop.run(run(args.sizes, bare=not args.no_bare, sync_runs=args.sync_runs,
                             timeout_per_node=args.timeout_per_node, node_selector=args.node_selector))
    print(table(results), flush=True)
    if args.svg is not None and len(results) >= 2:
        args.svg.write_text(svg(results, f"kubus: a DaemonSet onto {results[0].nodes:,} to {results[-1].nodes:,} "
                                         "simulated nodes, cost relative to the smallest"))
        print(f"plot: {args.svg}")
    return results


if __name__ == "__main__":
    main()
