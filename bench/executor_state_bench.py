"""What the executor's ownership check costs it on NATS per pod (executor/laststate.py), before and after round 9:

    get N [--in-flight K]   N deletes' direct gets of the pod's last event on KUBUS_STATE (LastStates.controlled),
                            K at a time (64 by default: the executor's actions in flight), each answer decoded
    follow N                the index this replaced: an ordered consumer per kind over KUBUS_STATE feeding
                            OwnershipIndex.apply, until it holds the N pods (one message each); it imports
                            executor/ownedindex.py, so it runs on a tree before round 9 (main baf3e96) with this
                            file copied in

against an embedded nats-server, on uvloop as the services run, through a connection made by runtime.bus.connect,
over KUBUS_STATE as ensure_streams makes it, fed through KUBUS_EVENTS with the event ingest publishes of a
DaemonSet's pod (~2.4 kB). The measured part runs inside min()'s key function, so that

    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=builtin_min \\
        .venv/bin/python -m bench.executor_state_bench get 2000

counts its instructions alone (publishing the pods and waiting for KUBUS_STATE's copy is not counted). It prints
the CPU µs per operation of this process and of nats-server (time.process_time and /proc: wall-clock-free, but
moved by +-20% on this shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
from nats.aio.client import Client

from messages import codec, subjects
from messages.observed import MODIFIED, ObservedEvent
from runtime.bus import Bus, close, connect, ensure_streams
from runtime.natsserver import EmbeddedNats

NS = "bench"
DS_UID = "6f1c2b8e-0000-4000-8000-000000000001"
WARM_UP = 200


def pod(i: int) -> dict[str, object]:
    """A DaemonSet's pod as the API server sends it to ingest, running on its node."""
    node = f"node-{i:05d}"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": f"agent-{i:05d}", "generateName": "agent-", "namespace": NS, "uid": uid(i),
            "resourceVersion": str(100_000 + i), "creationTimestamp": "2026-11-29T16:00:00Z",
            "labels": {"app": "agent", "controller-revision-hash": "5d8f7c9b6", "pod-template-generation": "1"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": DS_UID,
                                 "controller": True, "blockOwnerDeletion": True}]},
        "spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
            "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.9", "resources": {},
                            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                            "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "nodeName": node, "schedulerName": "default-scheduler",
            "securityContext": {}, "priority": 0, "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [{"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": e} for t, e in (
                ("not-ready", "NoExecute"), ("unreachable", "NoExecute"), ("disk-pressure", "NoSchedule"),
                ("memory-pressure", "NoSchedule"), ("pid-pressure", "NoSchedule"), ("unschedulable", "NoSchedule"))]},
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.244.0.1", "startTime": "2026-11-29T16:00:01Z",
            "conditions": [{"type": c, "status": "True", "lastTransitionTime": "2026-11-29T16:00:02Z"}
                           for c in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": "agent", "ready": True, "restartCount": 0, "started": True,
                                   "image": "registry.k8s.io/pause:3.9", "imageID": "", "containerID": "sim://1",
                                   "state": {"running": {"startedAt": "2026-11-29T16:00:02Z"}}}]}}


def uid(i: int) -> str:
    return f"0a1b2c3d-0000-4000-8000-{i:012d}"


async def publish_pods(bus: Bus, first: int, count: int) -> None:
    """The pods' events on KUBUS_EVENTS, as ingest publishes them; returns once KUBUS_STATE copied the last."""
    partition = bus.partition_of(NS)
    for i in range(first, first + count):
        obj = pod(i)
        event = ObservedEvent(kind="Pod", type=MODIFIED, namespace=NS, name=f"agent-{i:05d}", uid=uid(i),
                              resource_version=str(100_000 + i), observed_at="2026-11-29T16:00:03Z",
                              ingest="ingest-0", object=msgspec.Raw(msgspec.json.encode(obj)))
        await bus.js.publish(subjects.event_subject(partition, "Pod", uid(i), bus.prefix), codec.encode(event))
    state, last = bus.stream(subjects.STATE_STREAM), f"{bus.prefix}.state.{partition}.Pod.{uid(first + count - 1)}"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while True:
        try:
            await bus.js.get_last_msg(state, last)
            return
        except Exception:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)  # KUBUS_STATE's copy of KUBUS_EVENTS is the server's, a moment later


async def direct_gets(bus: Bus, first: int, count: int, in_flight: int) -> int:
    """`count` pods' last states read as the executor's deletes read them, `in_flight` at a time; how many were
    found controlled by the DaemonSet."""
    from executor.laststate import LastStates  # round 9's: on a tree before it, only `follow` runs

    # under valgrind a get takes far longer than the executor's timeout, after which it reads objects instead
    states = LastStates(bus.nc, bus.stream(subjects.STATE_STREAM), bus.prefix, bus.partitions, timeout=600)
    found = 0

    async def worker(indexes: range) -> None:
        nonlocal found
        for i in indexes:
            entry = await states.controlled("Pod", NS, uid(i))
            found += entry is not None and entry.controller_uid == DS_UID

    await asyncio.gather(*(worker(range(first + k, first + count, in_flight)) for k in range(in_flight)))
    return found


async def followed(bus: Bus, count: int) -> int:
    """The index round 9 replaced, fed from KUBUS_STATE's start until it holds `count` pods."""
    from executor.ownedindex import OwnershipIndex, follow  # type: ignore[import-not-found]

    full = asyncio.get_running_loop().create_future()

    class Index(OwnershipIndex):  # type: ignore[misc]
        def apply(self, subject: str, data: bytes) -> None:
            super().apply(subject, data)
            if len(self) == count and not full.done():
                full.set_result(None)

    index, stop = Index(), asyncio.Event()
    task = asyncio.create_task(follow(bus, index, stop))
    await asyncio.wait_for(full, 600)  # under valgrind, on a loaded machine, minutes
    stop.set()
    await task
    return len(index)


def server_cpu(server: EmbeddedNats) -> float:
    """nats-server's CPU seconds so far (user + system), from /proc."""
    assert server._proc is not None
    fields = Path(f"/proc/{server._proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks (USER_HZ 100)


def run(part: str, count: int, in_flight: int) -> None:
    import uvloop

    loop = uvloop.new_event_loop()
    with tempfile.TemporaryDirectory(prefix="kubus-state-bench-") as tmp:
        server = EmbeddedNats(Path(tmp) / "jetstream")
        loop.run_until_complete(server.start())

        async def setup() -> tuple[Client, Bus]:
            nc = await connect(server.url, "bench")
            bus = await ensure_streams(nc, partitions=16)
            await publish_pods(bus, 0, count + (WARM_UP if part == "get" else 0))
            if part == "get":
                await direct_gets(bus, count, WARM_UP, in_flight)  # warm-up: first calls, on other pods
            return nc, bus

        nc, bus = loop.run_until_complete(setup())
        measure: Callable[[], Awaitable[int]] = ((lambda: direct_gets(bus, 0, count, in_flight)) if part == "get"
                                                 else (lambda: followed(bus, count)))
        done: list[int] = []
        cpu, server_before = time.process_time(), server_cpu(server)

        def measured(_: int) -> int:
            done.append(loop.run_until_complete(measure()))
            return 0

        min([0], key=measured)
        cpu, served = time.process_time() - cpu, server_cpu(server) - server_before
        print(f"{part}: {count:,} pods ({done[0]:,} found): {cpu / count * 1e6:.1f} µs CPU each here, "
              f"{served / count * 1e6:.1f} µs in nats-server", flush=True)
        loop.run_until_complete(close(nc))
        loop.run_until_complete(server.stop())
    loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("get", "follow"))
    parser.add_argument("count", type=int)
    parser.add_argument("--in-flight", type=int, default=64)
    args = parser.parse_args()
    run(args.part, args.count, args.in_flight)


if __name__ == "__main__":
    main()
