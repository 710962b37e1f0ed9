"""The sim's CPU per pod lifecycle, in one process, for instruction counts (issue 25).

    .venv/bin/python -m bench.sim_cpu_bench [PODS] [--daemonset]   # thread CPU of the lifecycle, per pod
    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p \
        .venv/bin/python -m bench.sim_cpu_bench 2000        # and again with 0: the difference is the pods'

A `SimCluster` (100 nodes, kubelet delay 0, termination 0) serves on a local port; one watch of all pods reads every
event, beside watches of the four other kinds ingest watches (nodes, DaemonSets, ReplicaSets, ControllerRevisions:
idle here, but each wakes on every write, as in the pipeline), and a bare client (raw HTTP/1.1 on 16 keep-alive
connections, requests encoded before the clock starts) creates PODS ReplicaSet-like pods with generateName and an
owner, waits until the watch saw each bound and Running, deletes them all with a uid precondition, and waits until
the watch saw each gone. So every pod is created, bound by the scheduler, run by the kubelet, marked deleting,
finished by the kubelet and removed: the sim's whole share of a pod's life in `bench.replicaset_bench scale`, in one
process, with a client that costs little next to it. The run is deterministic enough (seeded uids and names,
PYTHONHASHSEED=0) for callgrind's counts to compare code before and after a change.

With `--daemonset` the pods are instead those a DaemonSet's apply creates (`bench.scale_bench`): the bodies the
reconciler's DaemonPodFactory makes from the sim's stored (defaulted) DaemonSet, with the daemon tolerations and each
pinned by node affinity to its own node of DAEMONSET_NODES (at most that many pods), created, bound and Running; the
apply deletes nothing, so neither does this.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import msgspec

from kube import codec
from kube.apps import DaemonSet
from reconciler.core.daemonset.pods import DaemonPodFactory
from sim import nodes, schema
from sim import resources as R
from sim.cluster import SimCluster, SimConfig

IN_FLIGHT = 16
DAEMONSET_NODES = 1000  # the same for every PODS, so that a run with 0 pods starts the same sim
_IDLE_WATCHES = ("/api/v1/nodes", "/apis/apps/v1/daemonsets", "/apis/apps/v1/replicasets",
                 "/apis/apps/v1/controllerrevisions")
_decode = msgspec.json.decode
_encode = msgspec.json.encode


def _request(method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length:"))
    return status, await reader.readexactly(length)


async def _send_all(port: int, requests: list[bytes]) -> list[bytes]:
    """Each request's response body, IN_FLIGHT connections each sending its share one after the other."""
    answers: list[bytes] = [b""] * len(requests)

    async def worker(first: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(first, len(requests), IN_FLIGHT):
            writer.write(requests[i])
            status, body = await _response(reader)
            if status >= 300:
                raise RuntimeError(f"{status}: {body[:300]!r}")
            answers[i] = body
        writer.close()

    await asyncio.gather(*(worker(i) for i in range(IN_FLIGHT)))
    return answers


class _Watch:
    """Counts the events of one chunked watch (of every pod, unless told another path)."""

    def __init__(self) -> None:
        self.events = 0
        self._wanted = 0
        self._reached = asyncio.Event()
        self.ready = asyncio.Event()  # the sim answered the watch: it sees every write from here on

    async def run(self, port: int, path: str = "/api/v1/pods") -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {path}?watch=true&allowWatchBookmarks=true&resourceVersion=0 HTTP/1.1\r\n"
                     "Host: sim\r\n\r\n".encode())
        await reader.readuntil(b"\r\n\r\n")
        self.ready.set()
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            chunk = await reader.readexactly(size + 2)
            self.events += chunk.count(b"\n") - 1
            if self.events >= self._wanted:
                self._reached.set()

    async def until(self, events: int) -> None:
        self._wanted = events
        self._reached.clear()
        if self.events < events:
            await self._reached.wait()


def _replicaset_pods(sim: SimCluster, pods: int) -> list[bytes]:
    """PODS creates of one small ReplicaSet-like pod (generateName, an owner)."""
    rs = sim.registry.create(R.REPLICASETS, "default", {
        "metadata": {"name": "web"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}}}})
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": rs.obj["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    body = _encode({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"generateName": "web-", "namespace": "default", "labels": {"app": "web"},
                                 "ownerReferences": [owner]},
                    "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}})
    return [_request("POST", "/api/v1/namespaces/default/pods", body)] * pods


def _daemonset_pods(sim: SimCluster, pods: int) -> list[bytes]:
    """The creates of a DaemonSet's pods on the first PODS nodes, as the executor sends them."""
    stored = sim.registry.create(R.DAEMONSETS, "default", {
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "agent", "image": "registry.k8s.io/agent:1"}]}}}})
    factory = DaemonPodFactory(codec.decode_builtin(stored.clone(), DaemonSet), "5d8f6b9c7d")
    names = [e.obj["metadata"]["name"] for e in sim.store.iter(R.NODES)][:pods]
    return [_request("POST", "/api/v1/namespaces/default/pods",
                     _encode(factory.body(name, f"bench/create/{name}"))) for name in names]


async def lifecycle(pods: int, daemonset: bool = False) -> float:
    """Runs `pods` pods through their lives; returns the thread CPU seconds that took."""
    config = SimConfig(nodes=nodes.generate(DAEMONSET_NODES if daemonset else 100), kubelet_delay=0.0,
                       termination_seconds=0.0, seed=1, history_size=max(20_000, 4 * DAEMONSET_NODES))
    sim = SimCluster(config)
    await sim.start()
    # The Pod's schema is built (its status's models imported, ~120 M instructions) at a process's first pod, once:
    # built here, so that a run of 0 pods pays it too and the difference of two runs is the pods' own work
    schema.root("Pod")
    port = int(sim.url.rsplit(":", 1)[1])
    try:
        if daemonset and pods > DAEMONSET_NODES:
            raise ValueError(f"--daemonset: at most {DAEMONSET_NODES} pods, one a node")
        creates = _daemonset_pods(sim, pods) if daemonset else _replicaset_pods(sim, pods)
        watch = _Watch()
        watching = asyncio.create_task(watch.run(port))
        idle = [_Watch() for _ in _IDLE_WATCHES]
        idling = [asyncio.create_task(w.run(port, path)) for w, path in zip(idle, _IDLE_WATCHES, strict=True)]
        await asyncio.gather(*(w.ready.wait() for w in (watch, *idle)))
        start = time.thread_time()
        created = await _send_all(port, creates)
        await watch.until(3 * pods)  # ADDED, bound, Running
        if not daemonset:
            deletes = []
            for answer in created:
                meta: dict[str, Any] = _decode(answer)["metadata"]
                options = _encode({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": meta["uid"]}})
                deletes.append(_request("DELETE", f"/api/v1/namespaces/default/pods/{meta['name']}", options))
            await _send_all(port, deletes)
            await watch.until(5 * pods)  # marked deleting, DELETED
        seconds = time.thread_time() - start
        for task in (watching, *idling):
            task.cancel()
        assert sim.store.count(R.PODS) == (pods if daemonset else 0)
        return seconds
    finally:
        await sim.stop()


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--daemonset"]
    daemonset = "--daemonset" in sys.argv[1:]
    pods = int(args[0]) if args else (DAEMONSET_NODES if daemonset else 2000)
    seconds = asyncio.run(lifecycle(pods, daemonset))
    if pods:
        kind = "DaemonSet" if daemonset else "ReplicaSet"
        print(f"sim in-process {kind} lifecycle: {pods:,} pods, {seconds:.2f} s thread CPU (sim and client), "
              f"{seconds * 1000 / pods:.3f} ms per pod")


if __name__ == "__main__":
    main()
