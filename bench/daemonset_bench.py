"""The DaemonSet controller: the cost of one sync, and a 5,000-node rollout end to end.

    .venv/bin/python -m bench.daemonset_bench sync              # one syncDaemonSet over 1,000 / 5,000 nodes
    .venv/bin/python -m bench.daemonset_bench rollout           # apply + rolling update on a 5,000-node sim
    .venv/bin/python -m bench.daemonset_bench rollout --nodes 500

sync: a cache holding 1,000 (or 5,000) Ready nodes, one DaemonSet (RollingUpdate, maxUnavailable 10%),
its ControllerRevisions, and on every node one Running, Ready, available pod built exactly as the
controller builds it (the template's body, the daemon tolerations, the node-name affinity), bound to
its node, with the status the sim's kubelet writes. Timed, in this process, median of repeated runs
(one cache alive at a time):

- steady: the pods are of the current revision and the status is already right: nothing to do
  (history, claim, placement on every node, manage, status, the decision's per-node summary; the
  rolling-update walk is skipped, no pod being old);
- rolling: the template has changed (the new revision exists), every pod is of the old one: the
  rolling-update step chooses the old pods to delete within maxUnavailable (10% of the nodes,
  capped at burstReplicas 250 per sync), the status is recomputed;
- engine: the rolling sync through the reconciler's engine (Controllers.sync_ready), with its
  actions and decision summary built;
- frozen: the rolling sync again after gc.freeze(): the cache out of the cyclic collector's sight, so
  the difference is what the full collections a sync brings on cost;
- as the reconciler runs them: the DaemonSet's StatusTally (reconciler.core.daemonset.tally) kept from
  one sync to the next and CHURN (250) pods changed (untimed) before each: a status-only sync (a round
  of creates in flight: expectations unsatisfied), beside the same from scratch, and the rolling step.
  The figures above are from scratch: each sync claims, groups and counts over every node.

rollout: a `kubus sim` (N nodes, kubelet delay 0), an embedded nats-server, and `kubus ingest`,
`kubus reconcile` and `kubus execute` as processes (SQLite store, client rate limiter off: --qps 0).
A DaemonSet (RollingUpdate, maxUnavailable 10%) is created, and the time until its status shows N
available is measured; then its image is changed, and the time until status.updatedNumberScheduled
== status.numberAvailable == N (and observedGeneration is the new generation) is measured. The
baseline is the event-pipeline benchmark's bare client (aiohttp, 16 requests in flight, pre-encoded
bodies) creating N pods in a fresh sim of the same kind.

BENCH_PROFILE=1 writes a cProfile of each service to /tmp/<service>.prof (rollout) or of the
5,000-node syncs to /tmp/daemonset-sync.prof (sync); BENCH_KEEP=1 keeps the rollout's work
directory (logs, SQLite store).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import gc
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import aiohttp
import msgspec

from bench.loadgen import machine, post_all, start_sim
from kube import codec
from kube.apps import ControllerRevision, DaemonSet
from kube.core import Pod
from kube.testing import daemonset, node
from kube.times import format_time
from messages.keys import ControllerKey, ControllerKind
from messages.observed import ADDED, ObservedEvent
from reconciler.core.cache import Cache
from reconciler.core.controllers import Controllers
from reconciler.core.daemonset.history import UNIQUE_LABEL_KEY, construct_history
from reconciler.core.daemonset.pods import DaemonPodFactory
from reconciler.core.daemonset.sync import sync_daemonset
from reconciler.core.daemonset.tally import StatusTally
from reconciler.core.expectations import expect
from runtime.natsserver import EmbeddedNats

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
KEY = ControllerKey(ControllerKind.DAEMON_SET, "bench", "agent")
MAX_UNAVAILABLE = "10%"
TARGETS_MS = {1_000: 10.0, 5_000: 50.0}  # issue 5: one sync, by node count
ROLLING_TARGET_MS = 25.0  # issue 25: the 5,000-node rolling step (other sizes: in proportion)
ROLLOUT_TARGET_S = 30.0  # issue 25: the full rolling update of the 5,000-node DaemonSet


# --- sync ---------------------------------------------------------------------------------------
def _event(obj: Any, kind: str, seq: int) -> ObservedEvent:
    return ObservedEvent(kind=kind, type=ADDED, namespace=obj.metadata.namespace, name=obj.metadata.name,
                         uid=obj.metadata.uid, resource_version=str(seq), observed_at="2026-11-22T12:00:00.000000Z",
                         ingest="bench", object=msgspec.Raw(codec.encode(obj)))


OS_LABEL: Final = {"kubernetes.io/os": "linux"}  # the nodeSelector most DaemonSets carry (kube-proxy, CNI agents)


def _daemonset(image: str, generation: int, node_selector: bool = False) -> DaemonSet:
    builder = (daemonset("agent").ns("bench").uid("ds-agent").generation(generation).image(image)
               .rolling_update(max_unavailable=MAX_UNAVAILABLE, max_surge=0))
    ds = builder.build()
    if node_selector:
        ds.spec.template.spec.node_selector = dict(OS_LABEL)
    return ds


def _revision(ds: DaemonSet, number: int) -> ControllerRevision:
    """The revision the controller creates for ``ds``, as the cache holds it once created."""
    revision = construct_history(ds, []).create
    assert revision is not None
    revision.metadata.uid = f"uid-{revision.metadata.name}"
    revision.revision = number
    return revision


def cache_with(nodes: int, *, rolling: bool, node_selector: bool = False) -> Cache:
    """``nodes`` Ready nodes with one Running, Ready pod of the DaemonSet each.

    rolling=False: the pods are of the current revision. rolling=True: the template changed after
    they were created (generation 2, revision 2 exists), so every pod is of the old revision 1.
    node_selector: the template selects the nodes by OS_LABEL, which every node carries.
    """
    old = _daemonset("registry.k8s.io/agent:1", 1, node_selector)
    old_revision = _revision(old, 1)
    ds = _daemonset("registry.k8s.io/agent:2", 2, node_selector) if rolling else old
    revisions = [old_revision, _revision(ds, 2)] if rolling else [old_revision]
    cache = Cache()
    seq = 0

    def add(obj: Any, kind: str) -> None:
        nonlocal seq
        seq += 1
        cache.apply(_event(obj, kind, seq), seq)

    add(ds, "DaemonSet")
    for revision in revisions:
        add(revision, "ControllerRevision")
    width = len(str(nodes - 1))
    names = [f"node-{i:0{width}d}" for i in range(nodes)]
    for name in names:
        add(node(name).ready(at=NOW - timedelta(days=1)).labels(OS_LABEL if node_selector else {}).build(), "Node")
    factory = DaemonPodFactory(old, old_revision.metadata.labels[UNIQUE_LABEL_KEY])
    for i, name in enumerate(names):
        body = factory.body(name, f"bench/create/{name}")
        created = NOW - timedelta(minutes=10, seconds=i % 600)
        body["metadata"].update({"uid": f"pod-{i}", "creationTimestamp": format_time(created),
                                 "resourceVersion": str(seq + 1)})
        body["spec"]["nodeName"] = name
        started = format_time(created + timedelta(seconds=2))
        # the status `kubus sim`'s kubelet writes (as a real kubelet does): five conditions, Ready third
        body["status"] = {
            "phase": "Running",
            "conditions": [{"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
                           for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")]
            + [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                "lastTransitionTime": format_time(created)}],
            "hostIP": "10.0.0.1", "podIP": f"10.1.{i // 250}.{i % 250}", "startTime": started,
            "containerStatuses": [{"name": "main", "state": {"running": {"startedAt": started}}, "lastState": {},
                                   "ready": True, "restartCount": 0, "image": "registry.k8s.io/agent:1",
                                   "started": True}]}
        add(codec.decode_builtin(body, Pod), "Pod")
    return cache


def settled(cache: Cache) -> Cache:
    """The cache with the DaemonSet's status as its last sync wrote it (observedGeneration included)."""
    plan = sync_daemonset(KEY, cache, None, {}, NOW, "k")
    assert plan.ds is not None and plan.status is not None, plan.explain
    ds = msgspec.structs.replace(plan.ds, status=plan.status)
    cache.objects["DaemonSet"][ds.metadata.uid] = ds
    return cache


CHURN = 250  # pods changed between two syncs of a round: burstReplicas' worth


def churn(cache: Cache, count: int) -> Callable[[], None]:
    """What changes `count` pods in `cache` (the next `count` in turn, each to a new resourceVersion, as a
    watch's MODIFIED would), for a sync with a kept StatusTally to take in."""
    pods = list(cache.objects["Pod"].values())
    position = [0, 10**9]  # the next pod, the next stream sequence

    def change() -> None:
        for _ in range(count):
            old = cache.objects["Pod"][pods[position[0] % len(pods)].metadata.uid]
            position[0] += 1
            position[1] += 1
            new = msgspec.structs.replace(old, metadata=msgspec.structs.replace(
                old.metadata, resource_version=str(position[1])))
            cache.apply(_event(new, "Pod", position[1]), position[1])
    return change


def timed_after(prepare: Callable[[], Any], fn: Callable[[], Any], runs: int) -> tuple[float, float]:
    """timed(fn), with `prepare` run (untimed) before each run."""
    samples = []
    for _ in range(runs):
        prepare()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), min(samples)


def timed(fn: Callable[[], Any], runs: int) -> tuple[float, float]:
    """(median, fastest) of `runs` timings in ms (the fastest is printed beside it: the machine is shared)."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), min(samples)


def bench_sync(sizes: list[int], runs: int) -> dict[int, dict[str, float]]:
    """Prints one line per size; returns {size: {figure: median ms}} (the smoke test reads it).

    One cache at a time is alive, as in a reconciler watching one cluster: the collector's full
    collections, which a sync's allocations bring on, scan all of it.
    """
    print(f"machine: {machine()}")
    figures: dict[int, dict[str, float]] = {}
    profile = cProfile.Profile() if os.environ.get("BENCH_PROFILE") else None
    for n in sizes:
        profiling = profile if n == max(sizes) else None
        steady = settled(cache_with(n, rolling=False))
        check = sync_daemonset(KEY, steady, None, {}, NOW, "k")
        assert (check.creates, check.deletes, check.status) == ([], [], None), check.explain
        if profiling is not None:
            profiling.enable()
        t_steady = timed(functools.partial(sync_daemonset, KEY, steady, None, {}, NOW, "k"), runs)
        # a status-only sync (a round of creates in flight) as the reconciler runs it: with the DaemonSet's
        # StatusTally kept from its last sync, CHURN pods changed since
        waiting, tally = expect(CHURN, 0, NOW), StatusTally()
        sync_daemonset(KEY, steady, waiting, {}, NOW, "k", tally=tally)
        t_status = timed_after(churn(steady, min(CHURN, n)),
                               functools.partial(sync_daemonset, KEY, steady, waiting, {}, NOW, "k", tally=tally), runs)
        t_status_fresh = timed(functools.partial(sync_daemonset, KEY, steady, waiting, {}, NOW, "k"), runs)
        del steady, check, tally
        gc.collect()

        selecting = settled(cache_with(n, rolling=False, node_selector=True))
        check = sync_daemonset(KEY, selecting, None, {}, NOW, "k")
        assert (check.creates, check.deletes, check.status) == ([], [], None), check.explain
        t_selecting = timed(functools.partial(sync_daemonset, KEY, selecting, None, {}, NOW, "k"), runs)
        del selecting, check
        gc.collect()

        rolling = settled(cache_with(n, rolling=True))
        check = sync_daemonset(KEY, rolling, None, {}, NOW, "k")
        budget = min(-(-n * 10 // 100), 250)  # 10% of the nodes, rounded up, capped at burstReplicas
        assert check.rolled and len(check.deletes) == budget, (len(check.deletes), check.explain)

        def engine(c: Cache = rolling) -> None:
            controllers = Controllers(c)
            controllers.enqueue(KEY)
            outcome = controllers.sync_ready(NOW, "2026-11-22T12:00:00.000000Z")
            assert len(outcome.decisions) == 1

        t_rolling = timed(functools.partial(sync_daemonset, KEY, rolling, None, {}, NOW, "k"), runs)
        tally = StatusTally()
        sync_daemonset(KEY, rolling, None, {}, NOW, "k", tally=tally)
        t_rolling_kept = timed_after(
            churn(rolling, min(CHURN, n)),
            functools.partial(sync_daemonset, KEY, rolling, None, {}, NOW, "k", tally=tally), runs)
        t_engine = timed(engine, runs)
        if profiling is not None:
            profiling.disable()
        # the same with the cache moved out of the collector's sight (gc.freeze(), as a reconciler could
        # do once its cache is loaded): what the full collections cost
        gc.collect()
        gc.freeze()
        try:
            t_frozen = timed(functools.partial(sync_daemonset, KEY, rolling, None, {}, NOW, "k"), runs)
        finally:
            gc.unfreeze()
        del rolling, check
        gc.collect()
        target = TARGETS_MS.get(n, 50.0 * n / 5_000)
        rolling_target = ROLLING_TARGET_MS * n / 5_000
        figures[n] = {"steady": t_steady[0], "rolling": t_rolling[0], "engine": t_engine[0], "frozen": t_frozen[0],
                      "selecting": t_selecting[0], "status_kept": t_status[0], "status_fresh": t_status_fresh[0],
                      "rolling_kept": t_rolling_kept[0]}
        print(f"{n:>6,} nodes: steady {t_steady[0]:6.2f} ms (fastest {t_steady[1]:.2f}; target < {target:.0f} ms, "
              f"ratio {t_steady[0] / target:.2f}) | steady, with a nodeSelector {t_selecting[0]:6.2f} ms (fastest "
              f"{t_selecting[1]:.2f}) | rolling step deleting {budget} old pods {t_rolling[0]:6.2f} ms "
              f"(fastest {t_rolling[1]:.2f}; target < {rolling_target:.0f} ms, "
              f"ratio {t_rolling[0] / rolling_target:.2f}) | the same with actions built "
              f"{t_engine[0]:6.2f} ms (fastest {t_engine[1]:.2f}) | rolling step, cache frozen out of the GC "
              f"{t_frozen[0]:6.2f} ms (fastest {t_frozen[1]:.2f})  (medians of {runs})")
        print(f"{n:>6,} nodes, as the reconciler runs them (the DaemonSet's StatusTally kept, {min(CHURN, n)} pods "
              f"changed before each): status-only sync {t_status[0]:6.2f} ms (fastest {t_status[1]:.2f}; from "
              f"scratch {t_status_fresh[0]:.2f}, ratio {t_status[0] / t_status_fresh[0]:.2f}) | rolling step "
              f"{t_rolling_kept[0]:6.2f} ms (fastest {t_rolling_kept[1]:.2f}; target < {rolling_target:.0f} ms, "
              f"ratio {t_rolling_kept[0] / rolling_target:.2f}; from scratch {t_rolling[0]:.2f})")
    if profile is not None:
        profile.dump_stats("/tmp/daemonset-sync.prof")
        print("profile of the largest size: /tmp/daemonset-sync.prof")
    return figures


# --- rollout ------------------------------------------------------------------------------------
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
    status: dict[str, Any] = {}
    while time.perf_counter() - start < timeout:
        status = (await _json(session, "GET", url)).get("status", {})
        if done(status):
            return time.perf_counter() - start
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a kubus service exited during the benchmark")
        await asyncio.sleep(0.05)  # polling the API for the figure; the services run meanwhile
    raise RuntimeError(f"no convergence within {timeout} s; last status {status}")


async def _wait_nodes_folded(db: Path, nodes: int, procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """Until the reconciler has committed its position in the cluster partition (where the nodes' events
    are) past the nodes' events, read from its SQLite store: it then knows every node."""
    start = time.perf_counter()
    position = 0
    while time.perf_counter() - start < timeout:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                row = conn.execute("SELECT stream_seq FROM consumer_positions WHERE partition = -1").fetchone()
            position = row[0] if row else 0
        except sqlite3.Error:
            position = 0
        if position >= nodes:
            return
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a kubus service exited during the benchmark")
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the reconciler did not fold the {nodes} nodes within {timeout} s (position {position})")


def stop_services(procs: list[subprocess.Popen[bytes]], names: Sequence[str], workdir: Path) -> None:
    """SIGTERM every service, wait up to 60 s for each to stop cleanly, and forget them (`procs` emptied)."""
    for p in procs:
        p.terminate()
    for p, name in zip(procs, names, strict=True):
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{name} did not stop within 60 s of SIGTERM; see {workdir}/{name}.log") from None
    procs.clear()


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _manifest(image: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "updateStrategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": MAX_UNAVAILABLE}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"containers": [{"name": "agent", "image": image}]}}}}


def bare_bodies(nodes: int) -> list[bytes]:
    """The pods the DaemonSet creates (template, daemon tolerations, pinned to their node by affinity),
    without the owner reference (the sim's garbage collector would remove pods of a missing owner)."""
    ds = codec.decode_builtin({**_manifest("registry.k8s.io/agent:1"), "metadata": {
        "name": "agent", "namespace": "default", "uid": "bare"}}, DaemonSet)
    factory = DaemonPodFactory(ds, "bare")
    width = len(str(nodes - 1))
    bodies = []
    for i in range(nodes):
        body = factory.body(f"node-{i:0{width}d}", f"bare/create/{i}")
        del body["metadata"]["ownerReferences"]
        body["metadata"]["name"] = f"agent-bare-{i:06d}"  # names from keys may collide (27^5 of them)
        bodies.append(msgspec.json.encode(body))
    return bodies


async def bench_rollout(nodes: int, termination_seconds: float) -> None:
    print(f"machine: {machine()}")
    sim_flags = ("--nodes", str(nodes), "--kubelet-delay", "0", "--termination-seconds", str(termination_seconds),
                 "--watch-history", str(max(20_000, 20 * nodes)))
    started = time.perf_counter()
    sim = start_sim(*sim_flags)
    sim_start = time.perf_counter() - started
    workdir = Path(tempfile.mkdtemp(prefix="kubus-bench-ds-"))
    server = EmbeddedNats(workdir / "nats")
    procs: list[subprocess.Popen[bytes]] = []
    names = ("ingest", "reconcile", "execute")
    try:
        nats_url = await server.start()
        for service in names:
            log = open(workdir / f"{service}.log", "wb")  # noqa: SIM115 - owned by the child
            # BENCH_PROFILE=1 writes a cProfile of each service to /tmp/<service>.prof
            profile = ["-m", "cProfile", "-o", f"/tmp/{service}.prof"] if os.environ.get("BENCH_PROFILE") else []
            procs.append(subprocess.Popen(
                [sys.executable, *profile, "-m", "kubus", service, "--nats-url", nats_url, "--prefix", "bench",
                 "--data-dir", str(workdir / "data"), "--metrics-port", "0",
                 # (the reconciler never calls the API: it takes no kubeconfig)
                 *([] if service == "reconcile" else ["--kubeconfig", str(sim.kubeconfig)]),
                 *(["--qps", "0"] if service == "execute" else [])], stdout=log, stderr=subprocess.STDOUT))
        base = f"{sim.url}/apis/apps/v1/namespaces/default/daemonsets"
        async with aiohttp.ClientSession() as session:
            # warm-up: a DaemonSet for no node; once its status is written, the services are up and have
            # listed the nodes
            warmup = _manifest("registry.k8s.io/agent:1")
            warmup["metadata"]["name"] = "warmup"
            warmup["spec"]["selector"]["matchLabels"] = warmup["spec"]["template"]["metadata"]["labels"] = {
                "app": "warmup"}
            warmup["spec"]["template"]["spec"]["nodeSelector"] = {"bench.kubus.io/no-such-label": "x"}
            await _json(session, "POST", base, warmup)
            await _wait_status(session, f"{base}/warmup", lambda s: s.get("observedGeneration", 0) >= 1, procs, 300)
            await _wait_nodes_folded(workdir / "data" / "kubus.db", nodes, procs, 300)
            await _json(session, "POST", base, _manifest("registry.k8s.io/agent:1"))
            up = await _wait_status(
                session, f"{base}/agent",
                lambda s: s.get("desiredNumberScheduled") == nodes and s.get("numberAvailable", 0) == nodes,
                procs, 900)
            patch = {"spec": {"template": {"spec": {"containers": [{"name": "agent",
                                                                    "image": "registry.k8s.io/agent:2"}]}}}}
            await _json(session, "PATCH", f"{base}/agent", patch, "application/strategic-merge-patch+json")
            rolled = await _wait_status(
                session, f"{base}/agent",
                lambda s: s.get("observedGeneration", 0) >= 2 and s.get("updatedNumberScheduled", 0) == nodes
                and s.get("numberAvailable", 0) == nodes, procs, 900)
        pids = {"sim": sim.proc.pid, "nats-server": server._proc.pid if server._proc else 0,
                **{name: p.pid for name, p in zip(names, procs, strict=True)}}
        cpu = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        stop_services(procs, names, workdir)
    finally:
        for p in procs:
            p.kill()
        await server.stop()
        sim.stop()
    print(f"sim with {nodes:,} nodes (kubelet delay 0, termination {termination_seconds:g} s) started in "
          f"{sim_start:.1f} s")
    print(f"kubus: DaemonSet applied -> {nodes:,} available in {up:.1f} s ({nodes / up:,.0f} pods/s; target <= 15 s, "
          f"ratio {up / 15:.2f}); kube-controller-manager at its default 20 requests/s: >= {nodes / 20:,.0f} s")
    print(f"kubus: rolling update (maxUnavailable {MAX_UNAVAILABLE}) -> {nodes:,} updated and available in "
          f"{rolled:.1f} s (target <= {ROLLOUT_TARGET_S:g} s, ratio {rolled / ROLLOUT_TARGET_S:.2f}); "
          f"kube-controller-manager at 20 requests/s: "
          f">= {2 * nodes / 20:,.0f} s for the deletes and creates alone")
    print("CPU seconds over both phases: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()), flush=True)
    bare = start_sim(*sim_flags)
    try:
        bodies = bare_bodies(nodes)
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
    print(f"bare client creating the same {nodes:,} pods (16 in flight): {bare_seconds:.1f} s "
          f"({nodes / bare_seconds:,.0f} pods/s); kubus / bare throughput {bare_seconds / up:.2f} (target >= 0.5)")
    print(f"the same bare client until all {nodes:,} pods are Running: {bare_running:.1f} s; "
          f"kubus / bare {bare_running / up:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("sync", "rollout"))
    parser.add_argument("--nodes", type=int, default=5_000, help="rollout: the node count")
    parser.add_argument("--termination-seconds", type=float, default=1.0,
                        help="rollout: the sim's time to finish a graceful pod deletion (its default, 1 s)")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1_000, 5_000],
                        help="sync: node counts, comma-separated")
    parser.add_argument("--runs", type=int, default=20, help="sync: runs per figure")
    args = parser.parse_args()
    if args.part == "sync":
        bench_sync(args.sizes, args.runs)
    else:
        import uvloop

        uvloop.run(bench_rollout(args.nodes, args.termination_seconds))


if __name__ == "__main__":
    main()
