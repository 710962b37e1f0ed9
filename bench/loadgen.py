"""Shared pieces of the benchmarks: a sim subprocess, a fast asyncio load generator, RSS readings."""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import yaml

ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, {platform.system()}"


class Process:
    """A subprocess serving HTTP, whose URL is read from a kubeconfig it writes."""

    def __init__(self, args: list[str], kubeconfig: Path):
        self.kubeconfig = kubeconfig
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not kubeconfig.exists():
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"{args[2:4]} exited: {err}")
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start within 60 s")
            time.sleep(0.02)
        self.url = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def profiling(name: str) -> list[str]:
    """The interpreter arguments that write a cProfile of a benchmark's process `name` when BENCH_PROFILE is set:
    to BENCH_PROFILE_DIR (default /tmp) as <name>.prof; timed by the main thread's CPU clock when it is `cpu`
    (bench.cpuprofile), else by the wall clock. Empty otherwise."""
    how = os.environ.get("BENCH_PROFILE")
    if not how:
        return []
    out = str(Path(os.environ.get("BENCH_PROFILE_DIR", "/tmp")) / f"{name}.prof")
    return ["-m", "bench.cpuprofile", "-o", out] if how == "cpu" else ["-m", "cProfile", "-o", out]


def start_sim(*flags: str, profile: str = "") -> Process:
    """A `kubus sim` with `flags`; profiled as `profile` (see `profiling`) when it is named."""
    tmp = Path(tempfile.mkdtemp(prefix="kubus-bench-"))
    kubeconfig = tmp / "kubeconfig"
    args = [sys.executable, *(profiling(profile) if profile else []), "-m", "kubus", "sim",
            "--kubeconfig", str(kubeconfig), "--port", "0",
            "--log-level", "warning", *flags]
    return Process(args, kubeconfig)


def start_bare() -> Process:
    tmp = Path(tempfile.mkdtemp(prefix="kubus-bench-"))
    kubeconfig = tmp / "kubeconfig"
    return Process([sys.executable, str(ROOT / "bench" / "bare_server.py"), str(kubeconfig)], kubeconfig)


def pod_body(name: str, labels: dict[str, str] | None = None, scheduler: str | None = None) -> bytes:
    spec = {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler  # no scheduler claims it: the pod's only event is its creation
    return msgspec.json.encode({"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": name, "labels": labels or {"app": "bench"}}, "spec": spec})


async def post_all(url: str, path: str, bodies: list[bytes], in_flight: int = 16) -> tuple[float, int]:
    """POSTs every body with `in_flight` requests outstanding; returns (seconds, failures)."""
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    failures = 0
    connector = aiohttp.TCPConnector(limit=in_flight)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal failures
            while not queue.empty():
                body = queue.get_nowait()
                async with session.post(url + path, data=body,
                                        headers={"Content-Type": "application/json"}) as resp:
                    await resp.read()
                    if resp.status >= 300:
                        failures += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return time.perf_counter() - start, failures


async def get_json(url: str, path: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url + path) as resp:
        return msgspec.json.decode(await resp.read())
