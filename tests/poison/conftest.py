"""A real nats-server per test, with streams of the test's own, and what the poison tests share."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from nats.aio.msg import Msg
from prometheus_client import REGISTRY

from messages import subjects
from runtime.bus import Bus, connect, ensure_streams
from runtime.natsserver import EmbeddedNats
from store.engine import Store, open_store

T = TypeVar("T")


@pytest.fixture
async def bus(nats_server: EmbeddedNats) -> AsyncIterator[Bus]:
    nc = await connect(nats_server.url, "test")
    yield await ensure_streams(nc, prefix=f"x{uuid.uuid4().hex[:8]}", partitions=4)
    await nc.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await open_store(f"sqlite:///{tmp_path / 'kubus.db'}", str(tmp_path))
    yield opened
    await opened.close()


def dead_count(origin: str, reason: str) -> float:
    """kubus_dead_lettered_total{origin,reason} in this process (the registry is the process's: compare)."""
    return REGISTRY.get_sample_value("kubus_dead_lettered_total", {"origin": origin, "reason": reason}) or 0.0


def dead_counts() -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.name == "kubus_dead_lettered_total":
                found[(sample.labels["origin"], sample.labels["reason"])] = sample.value
    return found


def halted_gauge(consumer: str) -> float:
    return REGISTRY.get_sample_value("kubus_consumer_halted", {"consumer": consumer}) or 0.0


async def dead_letters(bus: Bus) -> list[Msg]:
    """Every message KUBUS_DEAD holds, in order."""
    stream = bus.stream(subjects.DEAD_STREAM)
    state = (await bus.js.stream_info(stream)).state
    if not state.messages:
        return []
    return [await bus.js.get_msg(stream, seq) for seq in range(state.first_seq, state.last_seq + 1)]


async def eventually(condition: Callable[[], Awaitable[T]], what: str, timeout: float = 20.0,
                     running: tuple[asyncio.Task[Any], ...] = ()) -> T:
    """Awaits `condition` until it returns something truthy; fails at the deadline, or at once when a service
    task (`running`) ended: a poison message must never end one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while True:
        for task in running:
            if task.done():
                raise AssertionError(f"a service ended while waiting for {what}: "
                                     f"{task.exception() if not task.cancelled() else 'cancelled'}")
        last = await condition()
        if last:
            return last  # type: ignore[no-any-return]
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last saw {last!r}")
        await asyncio.sleep(0.05)  # the polling interval of a wait with a deadline
