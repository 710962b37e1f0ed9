"""--concurrent-daemonset-syncs and --concurrent-replicaset-syncs bound the actions of each controller kind an
executor applies at once (issue 24): the others wait, fetched and kept in progress, for a slot."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import msgspec
import pytest

from executor import consuming
from executor.delivery import Delivery
from messages.keys import ControllerKind
from runtime.bus import Bus
from tests.executor.builders import create_pods
from tests.executor.conftest import Running, eventually, publish

Start = Callable[..., AbstractAsyncContextManager[Running]]


async def test_each_controller_kind_has_its_own_bound(bus: Bus, namespace: str, executor: Start,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    gate = asyncio.Event()
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    done: Counter[str] = Counter()

    async def held_apply(delivery: Delivery) -> None:
        kind = delivery.action.controller.partition("/")[0]
        running[kind] += 1
        most[kind] = max(most[kind], running[kind])
        try:
            await gate.wait()
        finally:
            running[kind] -= 1
            done[kind] += 1

    monkeypatch.setattr(consuming, "apply", held_apply)
    limits = ((ControllerKind.DAEMON_SET, 2), (ControllerKind.REPLICA_SET, 1))
    async with executor(concurrency=8, concurrent_syncs=limits) as one:
        for i in range(3):
            await publish(bus, create_pods(namespace, 1, stem=f"rs{i}"))
            await publish(bus, msgspec.structs.replace(create_pods(namespace, 1, stem=f"ds{i}"),
                                                       controller=f"DaemonSet/{namespace}/ds{i}"))

        async def all_fetched_and_bounded() -> bool:
            one.check()
            return one.metrics.in_flight == 6 and running == Counter({"DaemonSet": 2, "ReplicaSet": 1})

        await eventually(all_fetched_and_bounded, what="six actions in flight, two DaemonSets' and one ReplicaSet's "
                                                        "applied", running=(one,))
        gate.set()

        async def all_done() -> bool:
            one.check()
            return done == Counter({"DaemonSet": 3, "ReplicaSet": 3})

        await eventually(all_done, what="every action applied", running=(one,))
    assert most == Counter({"DaemonSet": 2, "ReplicaSet": 1}), most
