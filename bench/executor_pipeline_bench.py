"""The executor process's instructions per action, from JetStream to the API and back (round 11):

    create N    N pods in CreatePods of 50 with an owner (SuccessfulCreate events), as a ReplicaSet's scale-up
    delete N    N DeletePods with an owner (SuccessfulDelete events), each proven by the pod's last state on
                KUBUS_STATE (a direct get), as a ReplicaSet's scale-down
    status N    N UpdateStatus, one for each of N ReplicaSets (a PUT of /status each), as their syncs write them

against a `kubus sim` (100 nodes, kubelet delay 0) and an embedded nats-server, both other processes: the
actions are published to KUBUS_ACTIONS beforehand (for `delete`, the pods are created by a bare client and
their states fed through KUBUS_EVENTS to KUBUS_STATE, as ingest would), then `run_executor` runs in this process,
on uvloop as `kubus execute` does, from its start until every action is acked and its events written. That
part runs inside min()'s key function, so that

    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=builtin_min \\
        .venv/bin/python -m bench.executor_pipeline_bench create 1000

counts the executor's instructions alone (its start-up and stop are a fixed part: take the difference of two
sizes). `--check` prints a digest of the results as published (every field but the times, the executor's name and
the uids and versions the sim made up, in stream order) and of the API requests the executor made, to compare
two trees.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import uvloop
from nats.aio.client import Client

from bench.executor_bench import NAMESPACE, SIM_FLAGS, create_owner
from bench.loadgen import Process, post_all, start_sim
from executor import laststate
from executor.config import ExecutorConfig
from executor.metrics import ACKED, ExecutorMetrics
from executor.service import run_executor
from messages import codec, subjects
from messages.actions import Action, ActionResult, CreatePods, DeletePod, PodToCreate, UpdateStatus
from messages.observed import MODIFIED, ObservedEvent
from runtime.bus import Bus, close, connect, ensure_streams
from runtime.natsserver import EmbeddedNats

PER_ACTION = 50
CONTROLLER = f"ReplicaSet/{NAMESPACE}/bench"
COMPONENT = "replicaset-controller"
ISSUED_AT = "2026-11-29T23:00:00Z"
UID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class Owner(msgspec.Struct):
    """The ReplicaSet `bench`, as the reconciler's actions name it."""

    uid: str
    resource_version: str
    reference: msgspec.Raw  # its object_reference: what the events are recorded on

    @classmethod
    def of(cls, rs: dict[str, object]) -> Owner:
        meta: dict[str, str] = rs["metadata"]  # type: ignore[assignment]
        return cls(meta["uid"], meta["resourceVersion"], msgspec.Raw(msgspec.json.encode({
            "kind": "ReplicaSet", "namespace": NAMESPACE, "name": "bench", "uid": meta["uid"],
            "apiVersion": "apps/v1", "resourceVersion": meta["resourceVersion"]})))


async def get(url: str, path: str) -> dict[str, object]:
    async with aiohttp.ClientSession() as s, s.get(url + path) as r:
        assert r.status == 200, await r.text()
        answer: dict[str, object] = await r.json()
        return answer


async def running_pods(url: str, count: int) -> list[dict[str, object]]:
    """The namespace's pods once all `count` run (the sim's kubelet has written their status: they change no more),
    within a minute."""
    deadline = time.monotonic() + 60
    while True:
        pods: list[dict[str, object]] = (await get(url, f"/api/v1/namespaces/{NAMESPACE}/pods"))["items"]  # type: ignore[assignment]
        if len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods):  # type: ignore[attr-defined]
            return pods
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} pods not running within a minute")
        await asyncio.sleep(0.1)


async def feed_states(bus: Bus, pods: list[dict[str, object]]) -> None:
    """The pods' events on KUBUS_EVENTS, as ingest publishes them; returns once KUBUS_STATE copied the last."""
    partition = bus.partition_of(NAMESPACE)
    for obj in pods:
        meta: dict[str, str] = obj["metadata"]  # type: ignore[assignment]
        event = ObservedEvent(kind="Pod", type=MODIFIED, namespace=NAMESPACE, name=meta["name"], uid=meta["uid"],
                              resource_version=meta["resourceVersion"], observed_at=ISSUED_AT, ingest="ingest-0",
                              object=msgspec.Raw(msgspec.json.encode(obj)))
        await bus.js.publish(subjects.event_subject(partition, "Pod", meta["uid"], bus.prefix), codec.encode(event))
    last = pods[-1]["metadata"]["uid"]  # type: ignore[index]
    deadline = time.monotonic() + 60
    while True:
        try:
            await bus.js.get_last_msg(bus.stream(subjects.STATE_STREAM),
                                      f"{bus.prefix}.state.{partition}.Pod.{last}")
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)  # KUBUS_STATE's copy of KUBUS_EVENTS is the server's, a moment later


def creates(bodies: list[tuple[str, bytes]], owner: Owner) -> list[Action]:
    return [CreatePods(key=f"bench/{n}/create", decision_id=n, controller=CONTROLLER, issued_at=ISSUED_AT,
                       namespace=NAMESPACE, owner=owner.reference, component=COMPONENT,
                       pods=[PodToCreate(key=k, pod=msgspec.Raw(b)) for k, b in bodies[start:start + PER_ACTION]])
            for n, start in enumerate(range(0, len(bodies), PER_ACTION))]


def deletes(pods: list[dict[str, object]], owner: Owner) -> list[Action]:
    out: list[Action] = []
    for n, obj in enumerate(pods):
        meta: dict[str, str] = obj["metadata"]  # type: ignore[assignment]
        out.append(DeletePod(key=f"bench/{n}/delete/{meta['uid']}", decision_id=n, controller=CONTROLLER,
                             issued_at=ISSUED_AT, namespace=NAMESPACE, name=meta["name"], uid=meta["uid"],
                             owner=owner.reference, component=COMPONENT))
    return out


async def replicasets(url: str, count: int) -> list[dict[str, object]]:
    """`count` more ReplicaSets of 0 replicas (`bench-<n>`), as the API answered their creates."""
    created = []
    async with aiohttp.ClientSession() as s:
        for n in range(count):
            rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": f"bench-{n}"},
                  "spec": {"replicas": 0, "selector": {"matchLabels": {"app": f"bench-{n}"}}, "template": {
                      "metadata": {"labels": {"app": f"bench-{n}"}},
                      "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}}}}
            async with s.post(f"{url}/apis/apps/v1/namespaces/{NAMESPACE}/replicasets", json=rs) as r:
                assert r.status == 201, await r.text()
                created.append(await r.json())
    return created


def status_updates(sets: list[dict[str, object]]) -> list[Action]:
    """Each ReplicaSet's status PUT at the version it was synced at (one PUT each), as its sync writes it."""
    out: list[Action] = []
    for n, rs in enumerate(sets):
        meta: dict[str, str] = rs["metadata"]  # type: ignore[assignment]
        out.append(UpdateStatus(
            key=f"bench/{n}/status", decision_id=n, controller=f"ReplicaSet/{NAMESPACE}/{meta['name']}",
            issued_at=ISSUED_AT, kind="ReplicaSet", namespace=NAMESPACE, name=meta["name"], uid=meta["uid"],
            status=msgspec.Raw(msgspec.json.encode({"replicas": 0, "observedGeneration": 1})),
            resource_version=meta["resourceVersion"], metadata=msgspec.Raw(msgspec.json.encode(meta))))
    return out


async def publish(bus: Bus, actions: list[Action]) -> None:
    subject = subjects.action_subject(bus.partition_of(NAMESPACE), bus.prefix)
    acks = [await bus.js.publish_async(subject, codec.encode(a), headers={"Nats-Msg-Id": a.key}) for a in actions]
    await asyncio.gather(*acks)


async def execute(config: ExecutorConfig, actions: int) -> ExecutorMetrics:
    """The executor from its start until it acked `actions` and wrote their events, then stopped."""
    stop, metrics = asyncio.Event(), ExecutorMetrics()
    task = asyncio.create_task(run_executor(config, stop=stop, metrics=metrics))
    while metrics.deliveries[ACKED] < actions or metrics.events_pending:
        if task.done():
            task.result()
            raise RuntimeError("the executor stopped early")
        await asyncio.sleep(0.05)  # a look at two counters: the executor runs meanwhile
    stop.set()
    await task
    return metrics


async def results_digest(nc: Client, bus: Bus) -> tuple[str, dict[str, int]]:
    """The published results, each action's in stream order (the order the executor promises; the actions run
    concurrently), less what differs from run to run; and their outcomes counted."""
    sub = await bus.js.subscribe(f"{bus.prefix}.results.>", ordered_consumer=True)
    info = await bus.js.stream_info(bus.stream(subjects.RESULTS_STREAM))
    by_action: dict[str, list[list[Any]]] = {}
    outcomes: dict[str, int] = {}
    for _ in range(info.state.messages):
        msg = await sub.next_msg(timeout=10)
        r = msgspec.json.decode(msg.data, type=ActionResult)
        outcome = f"{r.action}/{r.outcome}/{r.code}"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        by_action.setdefault(r.action_key, []).append(
            [msg.subject, msg.headers, r.key, r.action, r.decision_id, r.controller, r.outcome, r.code, r.reason,
             r.message, r.attempts, r.subject])
    await sub.unsubscribe()
    in_order = sorted(by_action.values(), key=lambda results: results[0][4])  # by decision_id
    # a delete's key names its pod's uid, which the sim made up
    digest = hashlib.sha256(UID.sub(b"<uid>", msgspec.json.encode(in_order)))
    return digest.hexdigest()[:16], outcomes


def run(part: str, count: int, check: bool) -> None:
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    sim: Process = start_sim(*SIM_FLAGS)
    store = Path(tempfile.mkdtemp(prefix="kubus-exec-pipeline-"))
    server = EmbeddedNats(store)
    try:
        url = loop.run_until_complete(server.start())

        async def setup() -> tuple[Client, Bus, list[Action]]:
            bodies = await create_owner(sim.url, count)
            rs = await get(sim.url, f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets/bench")
            owner = Owner.of(rs)
            nc = await connect(url, "bench")
            bus = await ensure_streams(nc, prefix="bench", partitions=16)
            if part == "create":
                actions = creates(bodies, owner)
            elif part == "delete":
                _, failures = await post_all(sim.url, f"/api/v1/namespaces/{NAMESPACE}/pods", [b for _, b in bodies])
                assert failures == 0, failures
                pods = await running_pods(sim.url, count)
                await feed_states(bus, pods)
                actions = deletes(pods, owner)
            else:
                actions = status_updates(await replicasets(sim.url, count))
            await publish(bus, actions)
            return nc, bus, actions

        nc, bus, actions = loop.run_until_complete(setup())
        # under valgrind an action takes ~50x longer: no timeout of the executor's may be reached meanwhile (a
        # direct get past its 1 s would send every delete of the next 5 s to read its pod first)
        patient = laststate.LastStates.__init__.__kwdefaults__
        assert patient is not None
        patient["timeout"] = 600.0
        config = ExecutorConfig(nats_url=url, prefix="bench", partitions=16, kubeconfig=str(sim.kubeconfig), qps=0,
                                instance="bench-executor", request_timeout=600, ack_wait=600)
        done: list[ExecutorMetrics] = []
        cpu = time.process_time()

        def measured(_: int) -> int:
            done.append(loop.run_until_complete(execute(config, len(actions))))
            return 0

        min([0], key=measured)
        cpu = time.process_time() - cpu
        metrics = done[0].snapshot()
        print(f"{part}: {count:,} operations in {len(actions):,} actions: {cpu / count * 1e6:,.0f} µs CPU each "
              f"(this process, the executor's start-up included); results {metrics['results']}, API requests "
              f"{metrics['api_requests']}, events {metrics['events']}, ownership checks "
              f"{metrics['ownership_checks']}", flush=True)
        if check:
            digest, outcomes = loop.run_until_complete(results_digest(nc, bus))
            print(f"check: results {digest} {outcomes}; API requests {metrics['api_requests']}; events "
                  f"{metrics['events']}; ownership checks {metrics['ownership_checks']}")
        loop.run_until_complete(close(nc))
    finally:
        loop.run_until_complete(server.stop())
        sim.stop()
        shutil.rmtree(store, ignore_errors=True)
        loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("create", "delete", "status"))
    parser.add_argument("count", type=int)
    parser.add_argument("--check", action="store_true", help="print digests of the results and the requests")
    args = parser.parse_args()
    run(args.part, args.count, args.check)


if __name__ == "__main__":
    main()
