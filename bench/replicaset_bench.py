"""The ReplicaSet controller: the cost of one sync, and a 0 -> 10,000 -> 0 scale end to end.

    .venv/bin/python -m bench.replicaset_bench sync            # one syncReplicaSet over 1,000 / 10,000 pods
    .venv/bin/python -m bench.replicaset_bench scale           # 0 -> 10,000 -> 0 through the pipeline
    .venv/bin/python -m bench.replicaset_bench scale --pods 2000

sync: a cache holding one ReplicaSet and N of its Running, Ready pods spread over 100 nodes. Timed:
the steady state (nothing to do, status unchanged), a scale-down to N/2 that ranks all N pods with
upstream's ActivePodsWithRanks, and a scale-up from N/2 to N (N/2 creates capped at burst 500,
pod bodies built from the template). Median of repeated runs, in this process.

scale: a `kubus sim` (100 nodes of 110 pods, kubelet delay 0), an embedded nats-server, and
`kubus ingest`, `kubus reconcile` and `kubus execute` as processes (SQLite store, client rate
limiter off: --qps 0). A ReplicaSet with 0 replicas is created, scaled to N through /scale, and
the time until its status shows N available is measured; then back to 0, until status shows 0
replicas. The baseline is the event-pipeline benchmark's bare client (aiohttp, 16 requests in
flight, pre-encoded bodies) creating N pods in a fresh sim of the same kind. CPU seconds are each
process's from the scale-up's start to the scale-down's end; what each spent before (its start-up,
~1 s of imports per process, and the empty ReplicaSet's sync) is printed apart.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from bench.loadgen import machine, pod_body, post_all, profiling, start_sim
from kube import codec
from kube.testing import pod, replicaset
from messages.keys import ControllerKey, ControllerKind
from messages.observed import ADDED, ObservedEvent
from reconciler.core.cache import Cache
from reconciler.core.controllers import Controllers
from reconciler.core.replicaset.sync import sync_replicaset
from runtime.natsserver import EmbeddedNats

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
KEY = ControllerKey(ControllerKind.REPLICA_SET, "bench", "web")
SIM_FLAGS = ("--nodes", "100", "--kubelet-delay", "0")


# --- sync ---------------------------------------------------------------------------------------
def _event(obj: Any, kind: str, seq: int) -> ObservedEvent:
    return ObservedEvent(kind=kind, type=ADDED, namespace=obj.metadata.namespace, name=obj.metadata.name,
                         uid=obj.metadata.uid, resource_version=str(seq), observed_at="2026-11-22T12:00:00.000000Z",
                         ingest="bench", object=msgspec.Raw(codec.encode(obj)))


def cache_with(pods: int, replicas: int) -> Cache:
    cache = Cache()
    rs = replicaset("web").ns("bench").selector(app="web").template_labels(app="web").build()
    rs = msgspec.structs.replace(rs, spec=msgspec.structs.replace(rs.spec, replicas=replicas))
    cache.apply(_event(rs, "ReplicaSet", 1), 1)
    for i in range(pods):
        p = (pod(f"web-{i:05d}").ns("bench").labels(app="web").owned_by(rs).on_node(f"node-{i % 100}")
             .phase("Running").ready(NOW - timedelta(seconds=30 + i)).created(NOW - timedelta(seconds=60 + i))
             .build())
        cache.apply(_event(p, "Pod", i + 2), i + 2)
    return cache


def timed(fn: Callable[[], Any], runs: int) -> float:
    """The median of `runs` timings in ms; the fastest is printed beside it (the machine is shared)."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    _FASTEST.append(min(samples))
    return statistics.median(samples)


_FASTEST: list[float] = []


def bench_sync(sizes: list[int], runs: int) -> None:
    print(f"machine: {machine()}")
    for n in sizes:
        steady = cache_with(n, n)
        rs = steady.named("ReplicaSet", "bench", "web")
        # the steady state with the status already right, as after convergence
        plan = sync_replicaset(KEY, steady, None, None, NOW, "k")
        assert plan.status is not None
        steady.objects["ReplicaSet"][rs.metadata.uid] = msgspec.structs.replace(rs, status=plan.status)
        t_steady = timed(lambda c=steady: sync_replicaset(KEY, c, None, None, NOW, "k"), runs)
        down = cache_with(n, n // 2)
        check = sync_replicaset(KEY, down, None, None, NOW, "k")
        assert len(check.deletes) == min(n // 2, 500), len(check.deletes)
        t_down = timed(lambda c=down: sync_replicaset(KEY, c, None, None, NOW, "k"), runs)
        up = cache_with(n // 2, n)
        t_up = timed(lambda c=up: sync_replicaset(KEY, c, None, None, NOW, "k"), runs)

        def engine(c: Cache = down) -> None:
            controllers = Controllers(c)
            controllers.enqueue(KEY)
            controllers.sync_ready(NOW, "2026-11-22T12:00:00.000000Z")

        t_engine = timed(engine, runs)
        fastest = dict(zip(("steady", "down", "up", "engine"), _FASTEST[-4:], strict=True))
        target = 5.0 if n <= 1000 else 50.0
        print(f"{n:>6,} pods: steady {t_steady:6.2f} ms (fastest {fastest['steady']:.2f}) | scale-down ranking all "
              f"{n:,} pods {t_down:6.2f} ms (fastest {fastest['down']:.2f}; target < {target:.0f} ms, ratio "
              f"{t_down / target:.2f}) | scale-up {t_up:6.2f} ms (fastest {fastest['up']:.2f}) | scale-down with "
              f"actions built {t_engine:6.2f} ms  (median of {runs})")


# --- scale --------------------------------------------------------------------------------------
async def _json(session: aiohttp.ClientSession, method: str, url: str, body: Any = None,
                content_type: str = "application/json") -> Any:
    data = None if body is None else msgspec.json.encode(body)
    async with session.request(method, url, data=data, headers={"Content-Type": content_type}) as resp:
        payload = await resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {url}: {resp.status} {payload[:300]!r}")
        return msgspec.json.decode(payload)


async def _wait_status(session: aiohttp.ClientSession, url: str, done: Callable[[dict[str, Any]], bool],
                       procs: list[subprocess.Popen[bytes]], timeout: float) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        status = (await _json(session, "GET", url)).get("status", {})
        if done(status):
            return time.perf_counter() - start
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a kubus service exited during the benchmark")
        await asyncio.sleep(0.05)  # polling the API for the figure; the services run meanwhile
    raise RuntimeError(f"no convergence within {timeout} s; last status {status}")


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def bench_scale(pods: int) -> None:
    print(f"machine: {machine()}")
    sim = start_sim(*SIM_FLAGS, profile="sim")
    workdir = Path(tempfile.mkdtemp(prefix="kubus-bench-rs-"))
    server = EmbeddedNats(workdir / "nats")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        nats_url = await server.start()
        for service in ("ingest", "reconcile", "execute"):
            log = open(workdir / f"{service}.log", "wb")  # noqa: SIM115 - owned by the child
            # BENCH_PROFILE=1 writes a cProfile of each service (and the sim) to $BENCH_PROFILE_DIR/<service>.prof
            # (=cpu: timed by the main thread's CPU clock, bench/cpuprofile.py)
            profile = profiling(service)
            procs.append(subprocess.Popen(
                [sys.executable, *profile, "-m", "kubus", service, "--nats-url", nats_url, "--prefix", "bench",
                 "--data-dir", str(workdir / "data"), "--metrics-port", "0",
                 # (the reconciler never calls the API: it takes no kubeconfig)
                 *([] if service == "reconcile" else ["--kubeconfig", str(sim.kubeconfig)]),
                 *(["--qps", "0"] if service == "execute" else [])], stdout=log, stderr=subprocess.STDOUT))
        pids = {"sim": sim.proc.pid, "nats-server": server._proc.pid if server._proc else 0,
                **{name: p.pid for name, p in zip(("ingest", "reconcile", "execute"), procs, strict=True)}}
        base = f"{sim.url}/apis/apps/v1/namespaces/default/replicasets"
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
              "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}}}}
        async with aiohttp.ClientSession() as session:
            await _json(session, "POST", base, rs)
            await _wait_status(session, f"{base}/web", lambda s: s.get("observedGeneration", 0) >= 1, procs, 120)
            cpu_before = {name: _cpu_seconds(pid) for name, pid in pids.items()}  # start-up, the empty sync
            scale = {"spec": {"replicas": pods}}
            await _json(session, "PATCH", f"{base}/web/scale", scale, "application/merge-patch+json")
            up = await _wait_status(session, f"{base}/web", lambda s: s.get("availableReplicas", 0) == pods,
                                    procs, 600)
            await _json(session, "PATCH", f"{base}/web/scale", {"spec": {"replicas": 0}},
                        "application/merge-patch+json")
            down = await _wait_status(session, f"{base}/web", lambda s: s.get("replicas", -1) == 0, procs, 600)
        cpu = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        for p in procs:
            p.terminate()
        for p, name in zip(procs, ("ingest", "reconcile", "execute"), strict=True):
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{name} did not stop within 60 s of SIGTERM; see {workdir}/{name}.log") from None
        procs.clear()
    finally:
        for p in procs:
            p.kill()
        await server.stop()
        sim.stop()
    bare = start_sim(*SIM_FLAGS)
    try:
        bodies = [pod_body(f"bare-{i:06d}") for i in range(pods)]
        started = time.perf_counter()
        bare_seconds, failures = await post_all(bare.url, "/api/v1/namespaces/default/pods", bodies)
        assert failures == 0, failures
        pending = "/api/v1/namespaces/default/pods?fieldSelector=status.phase!%3DRunning&limit=1"
        async with aiohttp.ClientSession() as session:
            while (await _json(session, "GET", bare.url + pending))["items"]:
                await asyncio.sleep(0.05)  # polling the API for the figure; the sim runs the pods meanwhile
        bare_running = time.perf_counter() - started
    finally:
        bare.stop()
    if os.environ.get("BENCH_KEEP"):
        print(f"workdir kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)  # kept when something failed above, for its logs
    print(f"kubus: 0 -> {pods:,} available in {up:.1f} s ({pods / up:,.0f} pods/s; target <= 30 s, ratio "
          f"{up / 30:.2f}); {pods:,} -> 0 in {down:.1f} s")
    print(f"bare client creating {pods:,} pods (16 in flight): {bare_seconds:.1f} s ({pods / bare_seconds:,.0f} "
          f"pods/s); kubus / bare throughput {bare_seconds / up:.2f} (target >= 0.5)")
    print(f"the same bare client until all {pods:,} pods are Running (the sim's scheduler and kubelets done): "
          f"{bare_running:.1f} s; kubus / bare {bare_running / up:.2f}")
    print("CPU seconds over both scales: " + ", ".join(f"{k} {v - cpu_before[k]:.1f}" for k, v in cpu.items())
          + f" ({sum(cpu.values()) - sum(cpu_before.values()):.1f} in all, "
          f"{(sum(cpu.values()) - sum(cpu_before.values())) / (2 * pods) * 1000:.2f} ms per pod-operation)")
    print(f"CPU ms per pod-operation ({2 * pods:,}: each pod created and deleted), from the first scale on: "
          + ", ".join(f"{k} {(v - cpu_before[k]) * 1000 / (2 * pods):.3f}" for k, v in cpu.items()))
    print("  and before the scale (process start-up, the empty ReplicaSet's sync): "
          + ", ".join(f"{k} {v:.1f}" for k, v in cpu_before.items()))
    print("kube-controller-manager at its default 20 requests/s would need "
          f">= {pods / 20:,.0f} s for the creates alone")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("sync", "scale"))
    parser.add_argument("--pods", type=int, default=10_000, help="scale: the replica count to reach")
    parser.add_argument("--runs", type=int, default=20, help="sync: runs per figure")
    args = parser.parse_args()
    if args.part == "sync":
        bench_sync([1_000, 10_000], args.runs)
    else:
        import uvloop

        uvloop.run(bench_scale(args.pods))


if __name__ == "__main__":
    main()
