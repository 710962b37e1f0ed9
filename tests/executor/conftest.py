"""Fixtures for the executor's tests: a real nats-server, the shared `kubus sim`, a running executor.

The nats-server lives for the module (on the module's event loop); every test gets streams of its
own through a unique subject prefix, a namespace of its own, and executors it starts and stops.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import nats
import pytest
import pytest_asyncio

from executor.config import ExecutorConfig
from executor.metrics import ExecutorMetrics
from executor.service import run_executor
from messages import codec, subjects
from messages.actions import Action, ActionResult
from runtime.bus import Bus, ensure_streams
from runtime.deadletter import Halts
from runtime.natsserver import EmbeddedNats
from tests.simulation import SimProcess

T = TypeVar("T")
_counter = itertools.count()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def nats_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    server = EmbeddedNats(tmp_path_factory.mktemp("nats"))
    yield await server.start()
    await server.stop()


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A subject prefix (and so streams) of the test's own."""
    return f"t{next(_counter)}-{re.sub(r'[^a-z0-9]+', '-', request.node.name.lower())[:30].strip('-')}"


@pytest_asyncio.fixture
async def bus(nats_url: str, prefix: str) -> AsyncIterator[Bus]:
    nc = await nats.connect(nats_url)
    yield await ensure_streams(nc, prefix=prefix, partitions=4)
    await nc.close()



SIM_FAULT_TIMEOUT = 5.0  # how long `kubus sim` holds a request it times out (SimConfig.fault_timeout)


@pytest.fixture
def faults(sim: SimProcess) -> Iterator[Callable[..., None]]:
    """Sets the sim's fault rules for this test (and, if given, how long a `timeout` fault holds a
    request); clears them after it."""
    held: list[float] = []

    def set_rules(*rules: str, seed: int = 1, timeout_seconds: float | None = None) -> None:
        body: dict[str, Any] = {"rules": list(rules), "seed": seed}
        if timeout_seconds is not None:
            body["timeoutSeconds"] = timeout_seconds
            held.append(timeout_seconds)
        code, got = sim.request("PUT", "/sim/faults", body)
        assert code == 200, got

    yield set_rules
    sim.request("DELETE", "/sim/faults")
    if held:
        code, got = sim.request("PUT", "/sim/faults", {"rules": [], "timeoutSeconds": SIM_FAULT_TIMEOUT})
        assert code == 200, got


@pytest.fixture
def config(nats_url: str, prefix: str, sim: SimProcess) -> ExecutorConfig:
    """Test settings: no rate limit, quick backoffs and redeliveries, a short fetch wait for fast stops; no
    ownership check, as these tests create pods for ReplicaSets that do not exist (test_ownership.py turns it
    on, and every pipeline test runs with it)."""
    return ExecutorConfig(nats_url=nats_url, prefix=prefix, partitions=4, kubeconfig=str(sim.kubeconfig),
                          qps=0, concurrency=16, instance=f"executor-{prefix}", request_timeout=10,
                          backoff_initial=0.01, redelivery_delay=0.1, ack_wait=5, fetch_timeout=0.2,
                          shutdown_grace=10, check_ownership=False)


@dataclass
class Running:
    config: ExecutorConfig
    metrics: ExecutorMetrics
    stop: asyncio.Event
    task: asyncio.Task[None]
    halts: Halts  # what its /readyz reads: stopped at an action of a newer kubus

    def check(self) -> None:
        """Fails the test at once if the executor died, instead of at a wait's deadline."""
        if self.task.done():
            self.task.result()
            raise AssertionError("the executor returned before it was stopped")


@pytest.fixture
def executor(config: ExecutorConfig) -> Callable[..., AbstractAsyncContextManager[Running]]:
    """`async with executor(**overrides) as running:` runs one executor until the block ends."""

    @asynccontextmanager
    async def start(**overrides: Any) -> AsyncIterator[Running]:
        cfg = replace(config, **overrides)
        stop, metrics, halts = asyncio.Event(), ExecutorMetrics(), Halts()
        task = asyncio.create_task(run_executor(cfg, stop=stop, metrics=metrics, halts=halts))
        try:
            yield Running(cfg, metrics, stop, task, halts)
        finally:
            stop.set()
            if not task.cancelled():
                await asyncio.wait_for(task, 30)

    return start


async def publish(bus: Bus, action: Action, msg_id: str | None = None) -> None:
    subject = subjects.action_subject(bus.partition_of(action.namespace), bus.prefix)
    await bus.js.publish(subject, codec.encode(action), headers={"Nats-Msg-Id": msg_id or action.key})


async def stored_results(bus: Bus) -> list[ActionResult]:
    """Every result in the stream, in order: what a reader of the stream sees, duplicates removed."""
    stream = bus.stream(subjects.RESULTS_STREAM)
    state = (await bus.js.stream_info(stream)).state
    return [codec.decode_result((await bus.js.get_msg(stream, seq)).data or b"")
            for seq in range(state.first_seq, state.last_seq + 1) if state.messages]


async def eventually(condition: Callable[[], Awaitable[T]], *, timeout: float = 20.0, what: str = "condition",
                     running: tuple[Running, ...] = ()) -> T:
    """Awaits `condition` until it returns something truthy; fails at the deadline (or when an executor dies)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while True:
        for r in running:
            r.check()
        try:
            result = await condition()
        except AssertionError as exc:
            last = exc
        else:
            if result:
                return result
            last = result
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last saw: {last!r}")
        await asyncio.sleep(0.05)  # polling interval, not synchronisation


async def results_for(bus: Bus, count: int, running: tuple[Running, ...] = (), timeout: float = 20.0
                      ) -> list[ActionResult]:
    """Waits until the stream holds `count` results and returns them."""

    async def enough() -> list[ActionResult]:
        got = await stored_results(bus)
        assert len(got) <= count, f"more results than expected: {got}"
        return got if len(got) == count else []

    return await eventually(enough, timeout=timeout, what=f"{count} results", running=running)


def pods_in(sim: SimProcess, namespace: str) -> list[dict[str, Any]]:
    code, body = sim.request("GET", f"/api/v1/namespaces/{namespace}/pods")
    assert code == 200, body
    items: list[dict[str, Any]] = body["items"]
    return items


async def pods_of(sim: SimProcess, namespace: str) -> list[dict[str, Any]]:
    """The namespace's pods, read off the event loop (the sim client is synchronous)."""
    return await asyncio.to_thread(pods_in, sim, namespace)
