"""Benchmarks of `kubus sim`: creates/s, watch events/s, list latency, memory at scale.

    .venv/bin/python -m bench.sim_bench            # everything (about 2 minutes on 2 cores)
    .venv/bin/python -m bench.sim_bench creates    # one part: creates | watch | list | memory

Each figure is printed with its target and, for creates, the ratio to a bare aiohttp+msgspec
server measured in the same run (bench/bare_server.py). The sim and the load generator run in
separate processes, so on 2 cores each has one.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp
import msgspec

from bench.loadgen import Process, machine, pod_body, post_all, start_bare, start_sim

CREATE_PODS = 10_000
WATCHERS = 4
WATCH_PODS = 10_000
LIST_PODS = 5_000
MEMORY_NODES, MEMORY_PODS = 5_000, 50_000


def create_ns(url: str, name: str) -> None:
    async def go() -> None:
        async with aiohttp.ClientSession() as s, s.post(f"{url}/api/v1/namespaces",
                                                        json={"metadata": {"name": name}}) as r:
            assert r.status == 201, await r.text()

    asyncio.run(go())


def fill(proc: Process, namespace: str, count: int, prefix: str = "p") -> tuple[float, int]:
    bodies = [pod_body(f"{prefix}-{i}") for i in range(count)]
    return asyncio.run(post_all(proc.url, f"/api/v1/namespaces/{namespace}/pods", bodies))


def bench_creates() -> dict[str, float]:
    bare = start_bare()
    try:
        bare_s, bare_fail = fill(bare, "default", CREATE_PODS)
    finally:
        bare.stop()
    sim = start_sim("--nodes", "100", "--kubelet-delay", "0.5")
    try:
        sim_s, sim_fail = fill(sim, "default", CREATE_PODS)
    finally:
        sim.stop()
    assert bare_fail == 0 and sim_fail == 0, (bare_fail, sim_fail)
    bare_rate, sim_rate = CREATE_PODS / bare_s, CREATE_PODS / sim_s
    print(f"creates: sim {sim_rate:,.0f} pods/s (target >= 2,000), bare aiohttp+msgspec {bare_rate:,.0f}/s, "
          f"ratio {sim_rate / bare_rate:.2f} (target >= 0.25); {CREATE_PODS:,} pods, 16 in flight, "
          f"100 nodes, scheduler and kubelets on")
    return {"sim_creates_per_s": sim_rate, "bare_creates_per_s": bare_rate}


async def _watch(url: str, path: str, expect: int, ready: asyncio.Event | None = None) -> float:
    """Reads watch frames until `expect` events arrived; returns the time the last one came."""
    seen = 0
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    async with aiohttp.ClientSession(timeout=timeout) as s, s.get(url + path) as resp:
        if ready is not None:
            ready.set()
        async for _line in resp.content:
            seen += 1
            if seen >= expect:
                return time.perf_counter()
    raise RuntimeError(f"watch ended after {seen} of {expect} events")


def bench_watch() -> dict[str, float]:
    sim = start_sim("--nodes", "0", "--no-kubelet", "--watch-history", str(WATCH_PODS * 3))
    try:
        create_ns(sim.url, "w")

        async def live() -> tuple[float, float]:
            readies = [asyncio.Event() for _ in range(WATCHERS)]
            path = "/api/v1/namespaces/w/pods?watch=true&resourceVersion=0"
            watchers = [asyncio.create_task(_watch(sim.url, path, WATCH_PODS, r)) for r in readies]
            await asyncio.gather(*(r.wait() for r in readies))
            start = time.perf_counter()
            bodies = [pod_body(f"w-{i}", scheduler="unscheduled") for i in range(WATCH_PODS)]
            await post_all(sim.url, "/api/v1/namespaces/w/pods", bodies)
            created = time.perf_counter()
            ends = await asyncio.gather(*watchers)
            return created - start, max(ends) - start

        create_s, live_s = asyncio.run(live())
        # history replay: every event since resourceVersion 1, as fast as the watchers can read
        total_events = int(asyncio.run(_rv(sim.url))) - 1

        async def replay() -> float:
            path = "/api/v1/namespaces/w/pods?watch=true&resourceVersion=1"
            start = time.perf_counter()
            ends = await asyncio.gather(*(_watch(sim.url, path, WATCH_PODS) for _ in range(WATCHERS)))
            return max(ends) - start

        replay_s = asyncio.run(replay())
    finally:
        sim.stop()
    live_rate = WATCHERS * WATCH_PODS / live_s
    replay_rate = WATCHERS * WATCH_PODS / replay_s
    print(f"watch: {replay_rate:,.0f} events/s delivered to {WATCHERS} watchers replaying history "
          f"(target >= 20,000); live while creating: {live_rate:,.0f} events/s, the last watcher "
          f"{(live_s - create_s) * 1000:.0f} ms behind the last create; {total_events:,} events in the store")
    return {"watch_replay_events_per_s": replay_rate, "watch_live_events_per_s": live_rate}


async def _rv(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/api/v1/namespaces/w/pods?limit=1") as r:
        data = await r.json()
        return str(data["metadata"]["resourceVersion"])


def bench_list() -> dict[str, float]:
    sim = start_sim("--nodes", "50", "--kubelet-delay", "0")
    try:
        fill(sim, "default", LIST_PODS)

        async def measure(path: str, rounds: int) -> list[float]:
            out = []
            async with aiohttp.ClientSession() as s:
                for _ in range(rounds):
                    start = time.perf_counter()
                    cont = ""
                    while True:
                        async with s.get(sim.url + path + cont) as r:
                            data = await r.json(loads=msgspec.json.decode)
                        token = data["metadata"].get("continue")
                        if not token:
                            break
                        cont = f"&continue={token}"
                    out.append(time.perf_counter() - start)
            return out

        full = asyncio.run(measure("/api/v1/namespaces/default/pods?x=1", 20))
        paged = asyncio.run(measure("/api/v1/namespaces/default/pods?limit=500", 20))
    finally:
        sim.stop()
    p50, p95 = statistics.median(full) * 1000, sorted(full)[int(len(full) * 0.95) - 1] * 1000
    pp50 = statistics.median(paged) * 1000
    print(f"list: {LIST_PODS:,} pods in one response p50 {p50:.0f} ms, p95 {p95:.0f} ms (client decode "
          f"included); in pages of 500 (as kubectl does) p50 {pp50:.0f} ms")
    return {"list_5000_p50_ms": p50, "list_5000_paged_p50_ms": pp50}


def bench_memory() -> dict[str, float]:
    sim = start_sim("--nodes", str(MEMORY_NODES), "--kubelet-delay", "0")
    try:
        idle = sim.rss_mib()
        namespaces = 10
        for n in range(namespaces):
            create_ns(sim.url, f"m{n}")
        start = time.perf_counter()
        for n in range(namespaces):
            fill(sim, f"m{n}", MEMORY_PODS // namespaces, prefix=f"m{n}")
        elapsed = time.perf_counter() - start

        async def running() -> int:
            async with aiohttp.ClientSession() as s, s.get(
                    f"{sim.url}/api/v1/pods?fieldSelector=status.phase%3DRunning&limit=1") as r:
                data = await r.json()
                return 1 + int(data["metadata"].get("remainingItemCount", 0)) if data["items"] else 0

        deadline = time.monotonic() + 300
        while asyncio.run(running()) < MEMORY_PODS:
            if time.monotonic() > deadline:
                raise RuntimeError("pods did not all reach Running within 300 s")
            time.sleep(0.5)
        settled = time.perf_counter() - start
        rss = sim.rss_mib()
    finally:
        sim.stop()
    print(f"memory: {rss:,.0f} MiB RSS with {MEMORY_NODES:,} nodes and {MEMORY_PODS:,} running pods "
          f"(target < 1,024 MiB; {idle:,.0f} MiB with the nodes alone); the pods were created in {elapsed:.1f} s "
          f"and all Running after {settled:.1f} s")
    return {"memory_mib": rss}


PARTS = {"creates": bench_creates, "watch": bench_watch, "list": bench_list, "memory": bench_memory}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", nargs="*", help="which parts to run (default all)")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    for name in args.parts or list(PARTS):
        PARTS[name]()


if __name__ == "__main__":
    main()
