"""Executor throughput: pod creates/s through JetStream -> executor -> sim, against a bare asyncio client.

    .venv/bin/python -m bench.executor_bench                 # 10,000 pods in actions of 50
    .venv/bin/python -m bench.executor_bench --pods 4000 --runs 3

Both sides create the same pre-encoded pod bodies (named, with their idempotency key) in a fresh
`kubus sim` of the same kind (100 nodes, kubelet delay 0, so the sim also binds and runs each pod):

- bare: one aiohttp session POSTing them with 16 requests in flight (bench/loadgen.post_all);
- kubus: the bodies published beforehand as CreatePods actions of 50 pods to KUBUS_ACTIONS on an
  embedded nats-server, then `run_executor` (in this process, rate limiter disabled: qps=0) from
  its start until the last per-pod result is stored in KUBUS_RESULTS. Slow start, the idempotency
  annotation check, result publishing with JetStream acks and action acks are all included.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import aiohttp
import msgspec
import nats

from bench.loadgen import Process, machine, post_all, start_sim
from executor.config import ExecutorConfig
from executor.metrics import ExecutorMetrics
from executor.service import run_executor
from messages import codec, subjects
from messages.actions import IDEMPOTENCY_ANNOTATION, CreatePods, PodToCreate
from runtime.bus import Bus, ensure_streams
from runtime.natsserver import EmbeddedNats

NAMESPACE = "bench"
SIM_FLAGS = ("--nodes", "100", "--kubelet-delay", "0")


def pod_bodies(count: int, owner_uid: str) -> list[tuple[str, bytes]]:
    """(key, body) pairs: what the reconciler would send for the ReplicaSet `bench` (uid `owner_uid`, which the
    executor's ownership check reads once), pre-encoded before either client starts."""
    out = []
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "bench", "uid": owner_uid, "controller": True,
             "blockOwnerDeletion": True}
    for i in range(count):
        key = f"{NAMESPACE}/bench/{i}"
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"bench-{i:06d}", "labels": {"app": "bench"},
                             "annotations": {IDEMPOTENCY_ANNOTATION: key}, "ownerReferences": [owner]},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                                         "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
        out.append((key, msgspec.json.encode(body)))
    return out


async def create_owner(url: str, count: int) -> list[tuple[str, bytes]]:
    """The namespace and the ReplicaSet `bench` (0 replicas: nothing else acts on its pods), and the pods to create
    for it."""
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{url}/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}}) as r:
            assert r.status == 201, await r.text()
        labels = {"app": "bench"}
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "bench"},
              "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
                  "metadata": {"labels": labels},
                  "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}}}}
        async with s.post(f"{url}/apis/apps/v1/namespaces/{NAMESPACE}/replicasets", json=rs) as r:
            assert r.status == 201, await r.text()
            uid = (await r.json())["metadata"]["uid"]
    return pod_bodies(count, uid)


async def bare(count: int) -> float:
    sim = start_sim(*SIM_FLAGS)
    try:
        bodies = await create_owner(sim.url, count)
        seconds, failures = await post_all(sim.url, f"/api/v1/namespaces/{NAMESPACE}/pods", [b for _, b in bodies])
        assert failures == 0, failures
        return len(bodies) / seconds
    finally:
        sim.stop()


async def publish_actions(bus: Bus, bodies: list[tuple[str, bytes]], per_action: int) -> int:
    subject = subjects.action_subject(bus.partition_of(NAMESPACE), bus.prefix)
    acks = []
    for n, start in enumerate(range(0, len(bodies), per_action)):
        pods = [PodToCreate(key=k, pod=msgspec.Raw(b)) for k, b in bodies[start:start + per_action]]
        action = CreatePods(key=f"bench/{n}", decision_id=n, controller=f"ReplicaSet/{NAMESPACE}/bench",
                            issued_at="2026-01-01T00:00:00Z", namespace=NAMESPACE, pods=pods)
        acks.append(await bus.js.publish_async(subject, codec.encode(action), headers={"Nats-Msg-Id": action.key}))
    await asyncio.gather(*acks)
    return len(acks)


async def kubus(count: int, per_action: int) -> tuple[float, float, ExecutorMetrics]:
    sim: Process = start_sim(*SIM_FLAGS)
    store = Path(tempfile.mkdtemp(prefix="kubus-bench-nats-"))
    server = EmbeddedNats(store)
    try:
        url = await server.start()
        bodies = await create_owner(sim.url, count)
        nc = await nats.connect(url)
        bus = await ensure_streams(nc, prefix="bench", partitions=16)
        actions = await publish_actions(bus, bodies, per_action)
        config = ExecutorConfig(nats_url=url, prefix="bench", partitions=16, kubeconfig=str(sim.kubeconfig),
                                qps=0, instance="bench-executor")
        stop, metrics = asyncio.Event(), ExecutorMetrics()
        started, cpu = time.perf_counter(), time.process_time()
        task = asyncio.create_task(run_executor(config, stop=stop, metrics=metrics))
        results = bus.stream(subjects.RESULTS_STREAM)
        while (await bus.js.stream_info(results)).state.messages < len(bodies):
            if task.done():
                task.result()
                raise RuntimeError("the executor stopped early")
            await asyncio.sleep(0.02)  # polling the stream's count; the executor runs meanwhile
        elapsed = time.perf_counter() - started
        # this process's CPU, every thread of it: the executor (and the loop polling the stream, a few ms)
        cpu_ms_per_pod = (time.process_time() - cpu) * 1000 / len(bodies)
        stop.set()
        await task
        await nc.close()
        assert metrics.deliveries["acked"] == actions, metrics.snapshot()
        assert metrics.results[("create_pods", "succeeded")] == len(bodies), metrics.snapshot()
        return len(bodies) / elapsed, cpu_ms_per_pod, metrics
    finally:
        await server.stop()
        sim.stop()
        shutil.rmtree(store, ignore_errors=True)


async def main_async(pods: int, per_action: int, runs: int) -> None:
    print(f"machine: {machine()}")
    for run in range(1, runs + 1):
        bare_rate = await bare(pods)
        kubus_rate, cpu_ms, metrics = await kubus(pods, per_action)
        print(f"run {run}: kubus executor {kubus_rate:,.0f} pods/s (target >= 500), bare aiohttp loop "
              f"{bare_rate:,.0f} pods/s, ratio {kubus_rate / bare_rate:.2f} (target >= 0.5); {pods:,} pods in "
              f"actions of {per_action}, rate limiter disabled (qps=0), 16 API calls in flight, sim with "
              f"100 nodes and kubelet delay 0; executor CPU {cpu_ms:.3f} ms per pod")
        print(f"  executor API calls: {metrics.snapshot()['api_requests']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--per-action", type=int, default=50)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--no-uvloop", action="store_true", help="run on asyncio's own event loop")
    args = parser.parse_args()
    if args.no_uvloop:
        asyncio.run(main_async(args.pods, args.per_action, args.runs))
    else:
        import uvloop

        uvloop.run(main_async(args.pods, args.per_action, args.runs))


if __name__ == "__main__":
    main()
