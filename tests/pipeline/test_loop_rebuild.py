"""Rebuilding a split reconciler's loop never kills the process (issue 12, the survivor that died).

The survivor of a kill -9 died of two things at once: its bootstrap asked KUBUS_STATE for a message the
compaction had just superseded (NotFoundError), and the results recorder of the loop being replaced waited
for ever on results handed to a loop that had already failed. Each is shown here against a real NATS, and
the service's exit status when a part of it dies anyway.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.errors
import pytest

from kube.testing import replicaset
from messages import codec, subjects
from messages.actions import ActionResult
from messages.observed import ADDED, MODIFIED
from reconciler.bootstrapping import wait_for_state
from reconciler.consuming import Reconciler, Stopped
from reconciler.relaying import RESULTS_CONSUMER, record_results
from runtime.bus import Bus
from runtime.natsserver import EmbeddedNats
from runtime.ports import free_port
from store.results import ResultRow
from tests.leases.test_split_reconcilers import until
from tests.reconciler.builders import observed


async def publish(bus: Bus, obj: Any, event_type: str) -> int:
    event = observed(obj, event_type)
    subject = subjects.event_subject(bus.partition_of(event.namespace), event.kind, event.uid, bus.prefix)
    ack = await bus.js.publish(subject, codec.encode(event), headers={"Nats-Msg-Id": event.msg_id})
    return ack.seq


class SupersedingJetStream:
    """bus.js, except that right after the first look at KUBUS_STATE's newest message, a newer event of the
    same object arrives and the state drops the message that look saw (what a busy cluster does)."""

    def __init__(self, bus: Bus, newer: Any) -> None:
        self._js = bus.js
        self._bus = bus
        self._newer = newer
        self.superseded = 0  # the sequence of the state message that went away

    def __getattr__(self, name: str) -> Any:
        return getattr(self._js, name)

    async def stream_info(self, name: str) -> Any:
        info = await self._js.stream_info(name)
        if name == self._bus.stream(subjects.STATE_STREAM) and not self.superseded:
            self.superseded = info.state.last_seq
            await publish(self._bus, self._newer, MODIFIED)
            while (await self._js.stream_info(name)).state.last_seq == self.superseded:
                await asyncio.sleep(0.01)  # polling the server's copy, with the test's deadline around it
        return info


async def test_the_bootstrap_waits_past_a_superseded_state_message(bus: Bus) -> None:
    rs = replicaset("web").ns("shop").uid("rs-1").rv("10").build()
    first = await publish(bus, rs, ADDED)
    state = bus.stream(subjects.STATE_STREAM)

    async def copied() -> bool:
        return (await bus.js.stream_info(state)).state.last_seq > 0

    await until(copied, "the state's copy of the first event")
    newer = msgspec.structs.replace(rs, metadata=msgspec.structs.replace(rs.metadata, resource_version="11"))
    racing = SupersedingJetStream(bus, newer)
    copied = await asyncio.wait_for(wait_for_state(dataclasses.replace(bus, js=racing)), 20)
    assert racing.superseded, "the race was not set up"
    assert copied >= first  # the copy point, read past the message that went away


class FailingStart(Reconciler):
    """A reconciler whose start-up fails (or hangs) when the test says."""

    def __init__(self, bus: Bus, outcome: asyncio.Future[None]) -> None:
        super().__init__(bus, store=None, instance="r", partitions={0: 1}, lease_ttl=60)
        self.outcome = outcome

    async def _load(self) -> tuple[int, dict[int, int]]:
        await self.outcome
        raise AssertionError("unreachable: the outcome fails or never comes")


def result_for(n: int) -> tuple[list[ActionResult], list[ResultRow]]:
    result = ActionResult(key=f"r{n}", action_key=f"a{n}", action="create_pod", decision_id=0, controller="c",
                          outcome="success", executor="test", finished_at="2026-01-01T00:00:00Z")
    row = ResultRow(key=f"r{n}", action_key=f"a{n}", decision_id=None, action="create_pod", outcome="success",
                    code=None, reason="", message="", object_uid=None, executor="test", attempts=1,
                    finished_at=datetime(2026, 1, 1, tzinfo=UTC), subject=None, resource_version=None)
    return [result], [row]


async def test_results_handed_to_a_loop_whose_start_failed_are_given_back(bus: Bus) -> None:
    outcome: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    loop = FailingStart(bus, outcome)
    running = asyncio.create_task(loop.run())
    handed = asyncio.create_task(loop.record_results(*result_for(1)))
    await asyncio.sleep(0)  # lets the recorder hand its results over before the start fails
    outcome.set_exception(RuntimeError("the bootstrap failed"))
    with pytest.raises(RuntimeError, match="the bootstrap failed"):
        await asyncio.wait_for(running, 5)
    with pytest.raises(Stopped):  # not left waiting for a commit that will never come
        await asyncio.wait_for(handed, 5)
    with pytest.raises(Stopped):  # and a loop that has ended takes no more
        await asyncio.wait_for(loop.record_results(*result_for(2)), 5)


async def test_a_stop_while_starting_ends_the_start(bus: Bus) -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    loop = FailingStart(bus, never)
    running = asyncio.create_task(loop.run())
    handed = asyncio.create_task(loop.record_results(*result_for(1)))
    await asyncio.sleep(0)
    loop.stop()
    await asyncio.wait_for(running, 5)  # not after the bootstrap's own timeouts
    assert never.cancelled()
    with pytest.raises(Stopped):
        await asyncio.wait_for(handed, 5)


async def until_true(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)  # polling interval of the wait, not a synchronisation


class Recorder:
    def __init__(self) -> None:
        self.keys: list[str] = []

    async def record_results(self, results: list[ActionResult], rows: list[ResultRow]) -> None:
        self.keys += [r.key for r in results]


async def test_the_results_recorder_binds_a_deleted_consumer_again(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    from reconciler import relaying

    monkeypatch.setattr(relaying, "CONSUMER_CHECK", 1)  # look for the consumer after every idle fetch
    recorder, stop = Recorder(), asyncio.Event()
    task = asyncio.create_task(record_results(bus, recorder, [0], ack_wait=5, stop=stop))
    stream = bus.stream(subjects.RESULTS_STREAM)
    durable = f"{RESULTS_CONSUMER}-0"
    subject = subjects.result_subject("0", bus.prefix)
    try:
        await bus.js.publish(subject, codec.encode(result_for(1)[0][0]))
        await until_true(lambda: recorder.keys == ["r1"], "the first result")
        await bus.js.delete_consumer(stream, durable)
        await bus.js.publish(subject, codec.encode(result_for(2)[0][0]))
        # the new durable starts from the stream's beginning: r1 comes again, recorded idempotently by the store
        await until_true(lambda: "r2" in recorder.keys, "the result published after the consumer was deleted")
        assert (await bus.js.consumer_info(stream, durable)).name == durable
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


class HeldRecorder(Recorder):
    """Holds its first results until released: the results consumer waits for it meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def record_results(self, results: list[ActionResult], rows: list[ResultRow]) -> None:
        self.holding.set()
        await self.release.wait()
        await super().record_results(results, rows)


async def test_results_delivered_to_a_stopped_recorder_are_handed_back_at_once(bus: Bus) -> None:
    """The results consumer's pull stays open: a result it delivered while the recorder was busy, and that the
    recorder then did not take because it was stopped, is handed back (nak), not left to its ack wait."""
    recorder, stop = HeldRecorder(), asyncio.Event()
    task = asyncio.create_task(record_results(bus, recorder, [0], ack_wait=60, stop=stop))
    stream = bus.stream(subjects.RESULTS_STREAM)
    durable = f"{RESULTS_CONSUMER}-0"
    subject = subjects.result_subject("0", bus.prefix)
    try:
        await bus.js.publish(subject, codec.encode(result_for(1)[0][0]))
        await asyncio.wait_for(recorder.holding.wait(), 20)
        await bus.js.publish(subject, codec.encode(result_for(2)[0][0]))

        async def both_delivered() -> bool:
            return (await bus.js.consumer_info(stream, durable)).num_ack_pending == 2

        await until(both_delivered, "r2 delivered while r1 is being recorded")
        stop.set()
        recorder.release.set()
        await asyncio.wait_for(task, 10)
    finally:
        stop.set()
        recorder.release.set()
        await asyncio.wait_for(task, 10)
    assert recorder.keys == ["r1"]
    again = await bus.js.pull_subscribe_bind(durable=durable, stream=stream)
    (msg,) = await again.fetch(1, timeout=10)  # well within the 60 s ack wait: only a nak hands it over this soon
    assert codec.decode_result(msg.data).key == "r2"
    await again.unsubscribe()


class UnansweredJetStream:
    """bus.js, except that the first `times` binds of a consumer get no answer within nats-py's timeout, as while
    a killed nats-server's stream and meta leaderships are elected again elsewhere."""

    def __init__(self, bus: Bus, times: int) -> None:
        self._js = bus.js
        self.left = times

    def __getattr__(self, name: str) -> Any:
        return getattr(self._js, name)

    async def pull_subscribe(self, *args: Any, **kwargs: Any) -> Any:
        if self.left:
            self.left -= 1
            raise nats.errors.TimeoutError()
        return await self._js.pull_subscribe(*args, **kwargs)


async def test_the_results_recorder_outlives_a_jetstream_that_does_not_answer(bus: Bus) -> None:
    """Found by tests/chaos: a reconciler whose loop started as a nats-server was killed exited 1 ("reconciler
    stopped: TimeoutError: nats: timeout"), its recorder's bind having timed out. It binds again instead."""
    recorder, stop = Recorder(), asyncio.Event()
    silent = UnansweredJetStream(bus, times=2)
    task = asyncio.create_task(record_results(dataclasses.replace(bus, js=silent), recorder, [0], ack_wait=5,
                                              stop=stop))
    try:
        await bus.js.publish(subjects.result_subject("0", bus.prefix), codec.encode(result_for(1)[0][0]))
        await until_true(lambda: recorder.keys == ["r1"] or task.done(), "the result, once the bind is answered")
        assert not task.done(), task.exception()
        assert recorder.keys == ["r1"] and silent.left == 0
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_the_results_recorder_says_when_its_stream_is_gone(bus: Bus) -> None:
    from reconciler.relaying import StreamMissing

    await bus.js.delete_stream(bus.stream(subjects.RESULTS_STREAM))
    with pytest.raises(StreamMissing, match="is gone"):
        await asyncio.wait_for(record_results(bus, Recorder(), [0], ack_wait=5), 10)


async def test_a_service_whose_part_dies_exits_non_zero_with_one_line(nats_server: EmbeddedNats,
                                                                      tmp_path: Path) -> None:
    """A part that stops on its own once running (here: the reconciler, whose KUBUS_RESULTS was deleted under it)
    makes the service exit 1 with one line. (This test used a missing kubeconfig, which is a start-up input and
    exits 2: issue 21, item 5.)"""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kubus", "reconcile", "--nats-url", nats_server.url, "--data-dir", str(tmp_path),
        "--metrics-port", str(port), "--instance", "dies", stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE)
    try:
        async def ready() -> bool:
            return await asyncio.to_thread(_ready, port) or proc.returncode is not None

        await until(ready, "the reconciler ready", timeout=60)
        assert proc.returncode is None
        nc = await nats.connect(nats_server.url)
        try:
            await nc.jetstream().delete_stream(subjects.stream_name(subjects.RESULTS_STREAM, subjects.PREFIX))
        finally:
            await nc.close()
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    stderr = err.decode()
    assert proc.returncode == 1, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("kubus reconcile: reconciler stopped: StreamMissing: "), last
    assert "Traceback" not in stderr


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return int(resp.status) == 200
    except OSError:
        return False
