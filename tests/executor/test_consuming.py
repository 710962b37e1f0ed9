"""The JetStream side: dead letters, executors sharing the work queue, shutdown, the rate limiter."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest
from nats.js.errors import NotFoundError
from prometheus_client import REGISTRY

from executor.config import ExecutorConfig
from executor.service import run_executor
from messages import codec, subjects
from messages.actions import SUCCEEDED
from messages.observed import SCHEMA_VERSION
from runtime.bus import Bus, NatsUnavailable
from runtime.kubeconfig import KubeconfigError
from tests.executor.builders import create_pods, envelope
from tests.executor.conftest import Running, eventually, pods_of, publish, results_for, stored_results
from tests.poison.conftest import dead_count
from tests.simulation import SimProcess

Start = Callable[..., AbstractAsyncContextManager[Running]]


async def test_poison_messages_are_dead_lettered_and_the_next_action_still_runs(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    """Each unusable message lands in the dead-letter stream with its reason and where it came from, counted in
    kubus_dead_lettered_total{origin="actions"} (the one counter every consumer uses)."""
    subject = subjects.action_subject(bus.partition_of(namespace), bus.prefix)
    poison = [
        (subject, b"not json at all", codec.UNDECODABLE, "not a action message"),
        (subject, msgspec.json.encode({**envelope("x"), "msg": "explode"}), codec.WRONG_KIND, "'explode'"),
        (subject, msgspec.json.encode({**envelope("y"), "msg": "delete_pod"}), codec.MALFORMED,
         "malformed action message"),
        (subject, msgspec.json.encode({**envelope("z"), "msg": "delete_pod", "namespace": namespace, "name": "p",
                                       "uid": "u", "issued_at": "teatime"}), codec.BAD_TIMESTAMP, "issued_at"),
        (f"{bus.prefix}.actions.notapartition", codec.encode(create_pods(namespace, 1, stem="lost")),
         codec.BAD_SUBJECT, "notapartition"),
    ]
    before = {reason: dead_count("actions", reason) for _, _, reason, _ in poison}
    async with executor() as running:
        sequences = [(await bus.js.publish(s, data, headers={"Nats-Msg-Id": f"poison-{i}"})).seq
                     for i, (s, data, _, _) in enumerate(poison)]
        await publish(bus, create_pods(namespace, 2))
        results = await results_for(bus, 2, (running,))
        assert {reason: dead_count("actions", reason) - before[reason] for reason in before} == dict.fromkeys(
            before, 1.0)
        assert "dead_lettered" not in running.metrics.deliveries  # one name for the concept
        assert running.halts.ready()
    assert {r.outcome for r in results} == {SUCCEEDED}
    dead = bus.stream(subjects.DEAD_STREAM)
    stored = [await bus.js.get_msg(dead, seq) for seq in range(1, len(poison) + 1)]
    for msg in stored:
        assert msg.headers is not None
        seq = int(msg.headers["Kubus-Original-Sequence"])
        original_subject, data, reason, text = poison[sequences.index(seq)]
        assert msg.data == data
        assert msg.subject == subjects.dead_subject("actions", bus.prefix)
        assert msg.headers["Kubus-Dead-Reason"] == reason
        assert text in msg.headers["Kubus-Dead-Error"]
        assert msg.headers["Kubus-Original-Subject"] == original_subject
        assert msg.headers["Kubus-Original-Stream"] == bus.stream(subjects.ACTIONS_STREAM)
    assert len(await pods_of(sim, namespace)) == 2


async def test_a_newer_action_is_left_for_a_newer_executor_and_this_one_stops_taking_actions(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not dead-lettered (its controller would wait for a result for ever): NAKed, and this executor takes no
    more actions, /readyz false, until an upgraded one applies it and what came after it."""
    newer = create_pods(namespace, 2, stem="newer")
    data = msgspec.json.encode({**msgspec.json.decode(codec.encode(newer)), "v": SCHEMA_VERSION + 1})
    async with executor() as running:
        await bus.js.publish(subjects.action_subject(bus.partition_of(namespace), bus.prefix), data,
                             headers={"Nats-Msg-Id": newer.key})

        async def halted() -> bool:
            return not running.halts.ready()

        await eventually(halted, what="the executor to stop at the newer action", running=(running,))
        assert "schema version 2; this kubus understands up to 1: upgrade this process" in (
            running.halts.halted["actions"])
        assert REGISTRY.get_sample_value("kubus_consumer_halted", {"consumer": "actions"}) == 1
        await publish(bus, create_pods(namespace, 1, stem="after"))

        async def not_pulling() -> bool:  # a fetch in flight as it halted ends, and is not followed by another
            info = await bus.js.consumer_info(bus.stream(subjects.ACTIONS_STREAM), running.config.durable)
            return info.num_waiting == 0

        await eventually(not_pulling, what="the executor to stop pulling", running=(running,))
        running.check()  # alive
    assert await stored_results(bus) == [] and await pods_of(sim, namespace) == []
    assert (await bus.js.stream_info(bus.stream(subjects.DEAD_STREAM))).state.messages == 0
    monkeypatch.setattr(codec, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    async with executor() as running:
        results = await results_for(bus, 3, (running,))
        assert running.halts.ready()
    assert {r.outcome for r in results} == {SUCCEEDED}
    assert sorted(p["metadata"]["name"] for p in await pods_of(sim, namespace)) == ["after-0", "newer-0", "newer-1"]


async def test_two_executors_split_the_work_and_apply_each_action_once(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    """Both take actions from the one durable consumer; every action is acked once, every pod made once."""
    async with executor(instance="one", concurrency=2) as one, executor(instance="two", concurrency=2) as two:
        stream = bus.stream(subjects.ACTIONS_STREAM)

        async def both_pulling() -> bool:
            try:
                return bool((await bus.js.consumer_info(stream, "executor")).num_waiting >= 2)
            except NotFoundError:  # not created yet
                return False

        await eventually(both_pulling, what="both executors pulling", running=(one, two))
        for i in range(10):
            await publish(bus, create_pods(namespace, 5, stem=f"rs{i}"))
        results = await results_for(bus, 50, (one, two))
    acked = (one.metrics.deliveries["acked"], two.metrics.deliveries["acked"])
    assert sum(acked) == 10 and min(acked) > 0, acked
    assert set(one.metrics.deliveries) == set(two.metrics.deliveries) == {"acked"}  # no redeliveries
    assert {r.outcome for r in results} == {SUCCEEDED} and {r.executor for r in results} == {"one", "two"}
    assert len(await pods_of(sim, namespace)) == 50


@pytest.mark.parametrize("how", ["stop-event", "task-cancelled"])
async def test_a_stopped_executor_leaves_its_unfinished_action_for_another(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, how: str) -> None:
    """Stopping mid-way through slow start NAKs the action at once; the next executor finishes it exactly."""
    async with executor(qps=10, burst=1) as slow:
        await publish(bus, create_pods(namespace, 30))
        await eventually(lambda: _results_at_least(bus, 3), what="the first results", running=(slow,))
        loop = asyncio.get_running_loop()
        stopping_at = loop.time()
        if how == "stop-event":
            slow.stop.set()
            await asyncio.wait_for(slow.task, 5)
        else:
            slow.task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(slow.task, 5)
        assert loop.time() - stopping_at < 1.5  # a rate-limited wait is interrupted, not sat out
    assert slow.metrics.deliveries == {"interrupted": 1}
    partial = len(await pods_of(sim, namespace))
    assert 3 <= partial < 30
    async with executor(instance="next") as running:
        results = await results_for(bus, 30, (running,))
        assert running.metrics.deliveries == {"acked": 1}
    assert {r.outcome for r in results} == {SUCCEEDED}
    assert len(await pods_of(sim, namespace)) == 30


async def test_the_rate_limiter_spaces_api_calls(bus: Bus, namespace: str, executor: Start) -> None:
    """At 20 QPS with a burst of 1, eleven creates take at least half a second."""
    async with executor(qps=20, burst=1) as running:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await publish(bus, create_pods(namespace, 11))
        await results_for(bus, 11, (running,))
        elapsed = loop.time() - started
    assert elapsed >= 0.45, elapsed


async def _results_at_least(bus: Bus, count: int) -> bool:
    stream = bus.stream(subjects.RESULTS_STREAM)
    return bool((await bus.js.stream_info(stream)).state.messages >= count)


async def test_start_up_failures_say_what_is_wrong(config: ExecutorConfig, tmp_path: Path) -> None:
    """A missing kubeconfig and an unreachable NATS each give one line naming the culprit."""
    with pytest.raises(KubeconfigError, match=r"cannot use the kubeconfig at .*missing"):
        await run_executor(replace(config, kubeconfig=str(tmp_path / "missing")))
    with pytest.raises(NatsUnavailable, match=re.escape("cannot reach NATS at nats://127.0.0.1:1 ")):
        await run_executor(replace(config, nats_url="nats://127.0.0.1:1", nats_connect_timeout=0.5))
