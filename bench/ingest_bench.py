"""Ingest throughput: watch events/s from `kubus sim` into JetStream, with one and two replicas.

    .venv/bin/python -m bench.ingest_bench                # both parts, 1 and 2 replicas (about 4 minutes)
    .venv/bin/python -m bench.ingest_bench live --pods 5000
    .venv/bin/python -m bench.ingest_bench catchup --replicas 1

events N (`python -m bench.ingest_bench events 400`) ingest's CPU per watch event in one process: N pods' five
         watch lines each through KindWatcher._handle against an embedded nats-server; made to be run under
         `PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=builtin_min` (instructions
         of the measured part alone), as the machine's other load moves CPU times by +-20%.
transport N [K] (`python -m bench.ingest_bench transport 2000`) the watch thread's hand-over per chunk: N watch
         lines, each a chunk of its own (as a watch of a trickle of events reads them; K lines a chunk, as after a
         burst, with K), through ingest.transport.WatchStream
         from its thread to the loop; under the same valgrind command with `--toggle-collect=thread_run` added, so
         that the watch thread's instructions count too.
live     ingest runs while the load generator creates N pods (16 requests in flight); each pod makes
         three watch events (create, binding, Running). Figure: 3N / (time the last of them is in
         KUBUS_EVENTS - first create). The sim's own write rate bounds it: a baseline run first
         measures the events/s the sim emits with no ingest at all (on 2 cores, ingest and
         nats-server take CPU the sim then lacks).
catchup  the N pods are created while ingest is stopped; ingest restarts from its KV checkpoint and
         the sim replays the 3N events from its watch history as fast as ingest takes them: ingest's
         own ceiling. Figure: 3N / (last event stored - first event stored).
updates  the N pods are created while ingest runs, then relabelled while it is stopped; the restarted
         ingest catches up with the N updates of objects it has not published itself, so it reads each
         one's subject before publishing (the per-object order guard, issue 15): its worst case.
         Figure: N / (last update stored - first update stored).

Every ingest replica is a process of its own (as deployed), started by this script; with two, both
publish every event and JetStream stores each once (their `duplicates` counters show the rest).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
from nats.aio.client import Client

from bench.loadgen import Process, machine, pod_body, post_all, start_sim
from ingest.config import IngestConfig
from ingest.observing import Origin
from ingest.service import Ingest
from messages import subjects
from runtime.natsserver import EmbeddedNats

EVENTS_PER_POD = 3  # create, the scheduler's binding, the kubelet's Running


# --- one replica (run as `python -m bench.ingest_bench replica ...`) ---------------------------------

async def replica(nats_url: str, prefix: str, kubeconfig: str, instance: str) -> None:
    ingest = Ingest(IngestConfig(nats_url=nats_url, prefix=prefix, kubeconfig=kubeconfig, instance=instance,
                                 checkpoints="kv"))
    task = asyncio.create_task(ingest.run())
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    while not ingest.synced() or any(ingest.counters()["unacked"].values()):
        if task.done():
            task.result()
        await asyncio.sleep(0.05)  # polling a flag of this process; nothing to wait on instead
    print("ready", flush=True)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    print(json.dumps(ingest.counters()), flush=True)


class Replica:
    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc

    @classmethod
    async def start(cls, nats_url: str, prefix: str, kubeconfig: Path, instance: str) -> Replica:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.ingest_bench", "replica", nats_url, prefix, str(kubeconfig), instance,
            stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 120)
        if line.strip() != b"ready":
            raise RuntimeError(f"ingest replica {instance} did not start: {line!r}")
        return cls(proc)

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()

    async def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.stdout is not None
        out = await asyncio.wait_for(self.proc.stdout.read(), 60)
        await self.proc.wait()
        counters: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        return counters


# --- the measurements ---------------------------------------------------------------------------------

async def sim_rv(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(f"{url}/api/v1/namespaces?limit=1") as resp:
        return int((await resp.json())["metadata"]["resourceVersion"])


async def stored(nc: Client, prefix: str) -> int:
    info = await nc.jetstream().stream_info(subjects.stream_name(subjects.EVENTS_STREAM, prefix))
    return info.state.messages


async def wait_stored(nc: Client, prefix: str, target: int, timeout: float) -> tuple[float, float]:
    """Polls KUBUS_EVENTS until it holds `target` messages: (first time above the start, time reached)."""
    start = await stored(nc, prefix)
    first = 0.0
    deadline = time.perf_counter() + timeout
    while True:
        count = await stored(nc, prefix)
        now = time.perf_counter()
        if count > start and not first:
            first = now
        if count >= target:
            return first, now
        if now > deadline:
            raise TimeoutError(f"KUBUS_EVENTS holds {count} of {target} messages after {timeout}s")
        await asyncio.sleep(0.01)  # the stream has no "count reached" notification; poll it


async def create_namespace(session: aiohttp.ClientSession, url: str, name: str) -> None:
    async with session.post(f"{url}/api/v1/namespaces", json={"metadata": {"name": name}}) as resp:
        assert resp.status == 201, await resp.text()


async def settle(session: aiohttp.ClientSession, url: str, target_rv: int, timeout: float = 300,
                 poll: float = 0.1) -> None:
    deadline = time.perf_counter() + timeout
    while await sim_rv(session, url) < target_rv:
        if time.perf_counter() > deadline:
            raise TimeoutError("the sim did not run every pod")
        await asyncio.sleep(poll)  # waiting for the sim's kubelets; it has no notification for that


def start_bench_sim(pods: int) -> Process:
    # room for every pod (so each makes its three events) and a history the catch-up can resume in
    return start_sim("--nodes", "100", "--node-capacity", "cpu=16,memory=64Gi,pods=500", "--kubelet-delay", "0.2",
                     "--watch-history", str(pods * 4 + 1000))


async def run_baseline(pods: int) -> dict[str, Any]:
    """The same load with no ingest watching: the event rate the sim can offer on this machine."""
    sim = start_bench_sim(pods)
    try:
        async with aiohttp.ClientSession() as session:
            await create_namespace(session, sim.url, "bench-baseline")
            rv0 = await sim_rv(session, sim.url)
            bodies = [pod_body(f"p-{i}") for i in range(pods)]
            start = time.perf_counter()
            post_s, failures = await post_all(sim.url, "/api/v1/namespaces/bench-baseline/pods", bodies)
            await settle(session, sim.url, rv0 + pods * EVENTS_PER_POD, poll=0.01)
            elapsed = time.perf_counter() - start
    finally:
        sim.stop()
    assert failures == 0, f"{failures} creates failed"
    return {"creates_per_s": pods / post_s, "events_per_s": pods * EVENTS_PER_POD / elapsed}


async def run_part(part: str, pods: int, replicas: int, nats_url: str, nc: Client) -> dict[str, Any]:
    sim = start_bench_sim(pods)
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    instances = [f"bench-ingest-{i}" for i in range(replicas)]
    running: list[Replica] = []
    try:
        async with aiohttp.ClientSession() as session:
            running = list(await asyncio.gather(*(Replica.start(nats_url, prefix, sim.kubeconfig, i)
                                                  for i in instances)))
            if part == "updates":
                return await run_updates(session, sim, running, pods, replicas, nats_url, prefix, nc)
            if part == "catchup":
                for r in running:
                    await r.stop()
            ns = f"bench-{part}"
            rv0 = await sim_rv(session, sim.url)
            base = await stored(nc, prefix)  # ingest is idle (or stopped): nothing is in flight
            await create_namespace(session, sim.url, ns)
            target = base + pods * EVENTS_PER_POD  # the namespace's own event is not published: not watched
            bodies = [pod_body(f"p-{i}") for i in range(pods)]
            start = time.perf_counter()
            if part == "live":
                waiter = asyncio.create_task(wait_stored(nc, prefix, target, 600))
                post_s, failures = await post_all(sim.url, f"/api/v1/namespaces/{ns}/pods", bodies)
                _, last = await waiter
                elapsed = last - start
                extra = {"creates_per_s": pods / post_s, "lag_after_last_create_s": last - start - post_s}
            else:
                post_s, failures = await post_all(sim.url, f"/api/v1/namespaces/{ns}/pods", bodies)
                await settle(session, sim.url, rv0 + 1 + pods * EVENTS_PER_POD)
                restart = time.perf_counter()
                waiter = asyncio.create_task(wait_stored(nc, prefix, target, 600))
                running = list(await asyncio.gather(*(Replica.start(nats_url, prefix, sim.kubeconfig, i)
                                                      for i in instances)))
                first, last = await waiter
                elapsed = last - first
                extra = {"including_process_start_s": last - restart}
            assert failures == 0, f"{failures} creates failed"
            counters = [await r.stop() for r in running]
    finally:
        for r in running:  # only after a failure is one still running
            r.kill()
        sim.stop()
    events = pods * EVENTS_PER_POD
    result = {"part": part, "replicas": replicas, "events": events, "seconds": elapsed,
              "events_per_s": events / elapsed, "stored": await stored(nc, prefix) - base,
              "duplicates_suppressed": sum(c["duplicates_total"] for c in counters),
              "superseded": sum(c.get("superseded_total", 0) for c in counters), **extra}
    return result


async def run_updates(session: aiohttp.ClientSession, sim: Process, running: list[Replica], pods: int,
                      replicas: int, nats_url: str, prefix: str, nc: Client) -> dict[str, Any]:
    """The `updates` part, with the replicas running and the sim empty: see the module's docstring."""
    ns = "bench-updates"
    rv0 = await sim_rv(session, sim.url)
    base = await stored(nc, prefix)
    await create_namespace(session, sim.url, ns)
    _, failures = await post_all(sim.url, f"/api/v1/namespaces/{ns}/pods",
                                 [pod_body(f"p-{i}") for i in range(pods)])
    assert failures == 0, f"{failures} creates failed"
    await settle(session, sim.url, rv0 + 1 + pods * EVENTS_PER_POD)
    await wait_stored(nc, prefix, base + pods * EVENTS_PER_POD, 600)
    for r in running:
        await r.stop()
    running.clear()
    before = await stored(nc, prefix)
    await patch_all(session, f"{sim.url}/api/v1/namespaces/{ns}/pods", pods)
    restart = time.perf_counter()
    waiter = asyncio.create_task(wait_stored(nc, prefix, before + pods, 600))
    running.extend(await asyncio.gather(*(Replica.start(nats_url, prefix, sim.kubeconfig, f"bench-ingest-{i}")
                                          for i in range(replicas))))
    first, last = await waiter
    counters = [await r.stop() for r in running]
    running.clear()
    return {"part": "updates", "replicas": replicas, "events": pods, "seconds": last - first,
            "events_per_s": pods / (last - first), "stored": await stored(nc, prefix) - before,
            "duplicates_suppressed": sum(c["duplicates_total"] for c in counters),
            "superseded": sum(c.get("superseded_total", 0) for c in counters),
            "including_process_start_s": last - restart}


async def patch_all(session: aiohttp.ClientSession, pods_url: str, pods: int, in_flight: int = 16) -> None:
    """Labels pods p-0 .. p-<pods-1> (one watch event each), `in_flight` requests at a time."""
    names = iter(range(pods))

    async def worker() -> None:
        for i in names:
            async with session.patch(f"{pods_url}/p-{i}", data=b'{"metadata":{"labels":{"step":"2"}}}',
                                     headers={"Content-Type": "application/merge-patch+json"}) as resp:
                assert resp.status == 200, await resp.text()
    await asyncio.gather(*(worker() for _ in range(in_flight)))


def report(r: dict[str, Any]) -> None:
    line = (f"{r['part']:10} {r['replicas']} replica(s): {r['events']:,} events in {r['seconds']:.2f} s = "
            f"{r['events_per_s']:,.0f} events/s (target >= 5,000); stored {r['stored']:,}, "
            f"duplicates suppressed {r['duplicates_suppressed']:,}, superseded {r['superseded']:,}")
    if "creates_per_s" in r:
        line += f"; sim creates {r['creates_per_s']:,.0f} pods/s, last event {r['lag_after_last_create_s']:.2f} s "
        line += "after the last create"
    if "including_process_start_s" in r:
        line += f"; {r['including_process_start_s']:.2f} s including the replicas' start"
    print(line, flush=True)


async def bench(parts: list[str], pods: int, replica_counts: list[int]) -> None:
    print(f"machine: {machine()}; {pods:,} pods, 100 nodes", flush=True)
    with tempfile.TemporaryDirectory(prefix="kubus-ingest-bench-") as tmp:
        server = EmbeddedNats(Path(tmp) / "jetstream")
        await server.start()
        nc = await nats.connect(server.url)
        try:
            if "live" in parts:
                base = await run_baseline(pods)
                print(f"baseline   no ingest: the sim creates {base['creates_per_s']:,.0f} pods/s and emits "
                      f"{base['events_per_s']:,.0f} events/s: the most the live part can see", flush=True)
            for part in parts:
                for replicas in replica_counts:
                    report(await run_part(part, pods, replicas, server.url, nc))
        finally:
            await nc.close()
            await server.stop()


# --- ingest's CPU per watch event, in one process (run as `python -m bench.ingest_bench events ...`) -----------

def watched_pod(i: int, rv: int, phase: str, node: str | None, deleting: bool) -> dict[str, Any]:
    """Pod i as the API shows it at one step of its life (a ReplicaSet's pod, ~2 kB of JSON)."""
    meta: dict[str, Any] = {
        "name": f"web-abcde-{i:05d}", "generateName": "web-abcde-", "namespace": f"ns{i % 7}",
        "uid": f"{i:08x}-0000-4000-8000-{i:012d}", "resourceVersion": str(rv),
        "creationTimestamp": "2026-11-29T06:00:00Z", "labels": {"app": "bench", "pod-template-hash": "abcde"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abcde",
                             "uid": "11111111-2222-3333-4444-555555555555", "controller": True,
                             "blockOwnerDeletion": True}]}
    if deleting:
        meta.update(deletionTimestamp="2026-11-29T06:01:00Z", deletionGracePeriodSeconds=0)
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                        "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300}]}
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase, "qosClass": "Burstable"}
    if phase == "Running":
        status.update({
            "hostIP": "10.0.0.1", "podIP": f"10.1.{i // 250 % 250}.{i % 250}", "startTime": "2026-11-29T06:00:01Z",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-11-29T06:00:01Z"}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": "app", "ready": True, "restartCount": 0,
                                   "image": "registry.k8s.io/pause:3.9", "imageID": "",
                                   "state": {"running": {"startedAt": "2026-11-29T06:00:01Z"}}}]})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def watch_lines(first: int, pods: int) -> list[bytes]:
    """The watch lines of pods first.. first+pods-1 created, scheduled, Running, deleted (5 events each), 64 pods
    at a time going through each step together, as a ReplicaSet's do."""
    lines, rv = [], 1000 + 5 * first
    steps = [("ADDED", "Pending", None, False), ("MODIFIED", "Pending", "node-1", False),
             ("MODIFIED", "Running", "node-1", False), ("MODIFIED", "Running", "node-1", True),
             ("DELETED", "Running", "node-1", True)]
    for group in range(first, first + pods, 64):
        for event_type, phase, node, deleting in steps:
            for i in range(group, min(group + 64, first + pods)):
                rv += 1
                lines.append(msgspec.json.encode({"type": event_type,
                                                  "object": watched_pod(i, rv, phase, node, deleting)}))
    return lines


async def handle_all(watcher: Any, lines: list[bytes], chunk: int = 32) -> None:
    origin = Origin("bench", "2026-11-29T06:00:00.000000Z")
    for first in range(0, len(lines), chunk):
        for line in lines[first:first + chunk]:
            await watcher._handle(line, origin)
        await asyncio.sleep(0)  # between two chunks of the watch: the loop reads the acks in
    await watcher.publisher.drain()


def events(pods: int) -> None:
    """N pods' watch lines through KindWatcher._handle (parse, observe, fit, publish in order) against an embedded
    nats-server, on uvloop as `kubus ingest` runs. The measured part runs inside min()'s key function, so that
    `valgrind --tool=callgrind --collect-atstart=no --toggle-collect=builtin_min` counts it alone."""
    import uvloop

    from ingest.backoff import Backoff
    from ingest.counting import Counters
    from ingest.kinds import KINDS
    from ingest.publishing import OrderedPublisher
    from ingest.watching import KindWatcher
    from runtime.bus import close, connect, ensure_streams, jetstream

    loop = uvloop.new_event_loop()
    with tempfile.TemporaryDirectory(prefix="kubus-ingest-events-") as tmp:
        server = EmbeddedNats(Path(tmp) / "jetstream")
        loop.run_until_complete(server.start())

        async def setup() -> tuple[Client, KindWatcher, Counters]:
            nc = await connect(server.url, "bench")
            bus = await ensure_streams(nc, prefix="bench", partitions=subjects.DEFAULT_PARTITIONS)
            counters = Counters()
            publisher = OrderedPublisher(jetstream(nc, publish_async_max_pending=512 * 5 + 1), "Pod", counters,
                                         stream=bus.stream(subjects.EVENTS_STREAM),
                                         subjects_filter=f"{bus.prefix}.events.*.Pod.*", window=512)
            watcher = KindWatcher(KINDS["Pod"], bus=bus, publisher=publisher, call=None,  # type: ignore[arg-type]
                                  checkpoints=None, counters=counters,  # type: ignore[arg-type]
                                  instance="bench", backoff=Backoff(), watch_timeout=60, list_page_size=500)
            return nc, watcher, counters

        nc, watcher, counters = loop.run_until_complete(setup())
        loop.run_until_complete(handle_all(watcher, watch_lines(10 ** 7, 200)))  # warm-up: other pods
        lines = watch_lines(0, pods)
        cpu = time.process_time()

        def measured(_: int) -> int:
            loop.run_until_complete(handle_all(watcher, lines))
            return 0

        min([0], key=measured)
        cpu = time.process_time() - cpu
        snap = counters.snapshot()
        print(f"{len(lines):,} watch events: {cpu / len(lines) * 1e6:.1f} µs CPU each; published "
              f"{snap['published_total']:,} (with the warm-up's), superseded {snap['superseded_total']}", flush=True)
        loop.run_until_complete(close(nc))
        loop.run_until_complete(server.stop())
    loop.close()


class _Chunks:
    """Stands in for urllib3's response to a watch: the body read one chunk at a time."""

    def __init__(self, chunks: list[bytes]):
        self.chunks = chunks

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        return iter(self.chunks)

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


def transport(lines: int, per_chunk: int = 1) -> None:
    """N watch lines, each its own chunk, from a WatchStream's thread to the loop (uvloop, as `kubus ingest` runs);
    measured inside min()'s key function, with the thread's own work counted through its thread_run."""
    import uvloop

    from ingest.transport import WatchStream

    body = [line + b"\n" for line in watch_lines(0, -(-lines // 5))][:lines]
    chunks = [b"".join(body[i:i + per_chunk]) for i in range(0, len(body), per_chunk)]

    async def read_all() -> int:
        stream = WatchStream(lambda: _Chunks(chunks), name="bench-watch")  # type: ignore[arg-type,return-value]
        return sum([len(batch) async for batch in stream.batches()])

    loop = uvloop.new_event_loop()
    # no warm-up: its thread's instructions would be counted too (thread_run), and there is little to warm
    cpu = time.process_time()
    read: list[int] = []

    def measured(_: int) -> int:
        read.append(loop.run_until_complete(read_all()))
        return 0

    min([0], key=measured)
    cpu = time.process_time() - cpu
    print(f"{read[0]:,} watch lines, {per_chunk} a chunk: {cpu / read[0] * 1e6:.1f} µs CPU each", flush=True)
    loop.close()


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "events":
        events(int(sys.argv[2]))
        return
    if len(sys.argv) > 2 and sys.argv[1] == "transport":
        transport(*map(int, sys.argv[2:4]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "replica":
        with contextlib.suppress(ImportError):
            import uvloop
            uvloop.install()
        asyncio.run(replica(*sys.argv[2:6]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", nargs="*", help="live, catchup and/or updates (default live and catchup)")
    parser.add_argument("--pods", type=int, default=20_000)
    parser.add_argument("--replicas", type=int, action="append", help="replica counts to run (default 1 and 2)")
    args = parser.parse_args()
    if unknown := set(args.parts) - {"live", "catchup", "updates"}:
        parser.error(f"unknown parts {sorted(unknown)}: choose from live, catchup, updates")
    asyncio.run(bench(args.parts or ["live", "catchup"], args.pods, args.replicas or [1, 2]))


if __name__ == "__main__":
    main()

