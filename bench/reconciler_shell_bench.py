"""The reconciler's shell per batch when events trickle: transactions, statements and instructions per batch.

    .venv/bin/python -m bench.reconciler_shell_bench --rounds 40
    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_PyEval_CallTracing \\
        .venv/bin/python -m bench.reconciler_shell_bench --rounds 40

The reconciler as `kubus up` runs it (reconciler.service.run_reconciler: the loop, the outbox relay and the results
recorder) on an SQLite store and an embedded nats-server, fed a trickle the way a real API server's watch feeds it:
one ReplicaSet event at a time. An executor of the driver's own answers each action with one succeeded result per
effect and, once it has, the driver publishes the next ReplicaSet: a round is a batch that decides (its commit, the
relay's publish) and a batch that records the results, with the next ReplicaSet's event in it or not as the batch
window falls. Counted in the driver, on the store's engine (SQLAlchemy's events; the store is not changed): the
statements, the write transactions (commits), the outbox scans (`SELECT ... FROM outbox`) and marks (`UPDATE
outbox`); and the batches (the reconciler's ticks). Inside one `sys.call_tracing` call (what callgrind counts with
the options above): everything from the reconciler's start to the last result recorded, the driver's executor
included (the same in every tree). The difference of two round counts gives the cost per round.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
import time
from typing import Any

import msgspec
import sqlalchemy as sa

from bench.loadgen import machine
from kube import codec as kube_codec
from kube.testing import replicaset
from kube.times import format_micro_time, utcnow
from messages import codec, subjects
from messages.actions import SUCCEEDED, ActionResult, CreatePods
from messages.observed import ADDED, ObservedEvent
from reconciler.service import run_reconciler
from runtime.bus import Bus, connect, ensure_streams
from runtime.natsserver import EmbeddedNats
from runtime.serving import Health
from store.engine import Store, open_store
from store.tables import reconciler_ticks as ticks

PODS = 3  # each ReplicaSet's replicas: one CreatePods of 3, three results
NAMESPACES = 8  # spread over partitions, as a cluster's objects are


def replicaset_event(index: int) -> ObservedEvent:
    """ReplicaSet `rs-<index>` asking for PODS pods, its status up to date: its sync issues one CreatePods."""
    namespace = f"ns-{index % NAMESPACES}"
    rs = (replicaset(f"rs-{index}").ns(namespace).rv(str(index + 10)).selector(app=f"rs-{index}").replicas(PODS)
          .observed_generation(1).build())
    rs.status.terminating_replicas = 0  # as the sync counts them (DeploymentReplicaSetTerminatingReplicas is on)
    meta = rs.metadata
    return ObservedEvent(kind="ReplicaSet", type=ADDED, namespace=meta.namespace, name=meta.name, uid=meta.uid,
                         resource_version=meta.resource_version or "1", observed_at=format_micro_time(utcnow()),
                         ingest="bench", object=msgspec.Raw(kube_codec.encode(rs)))


class Counts:
    """What the store's engine executed, by the statement's kind (SQLAlchemy's events on the sync engine)."""

    def __init__(self, store: Store) -> None:
        self.kinds: collections.Counter[str] = collections.Counter()
        engine = store.engine.sync_engine
        sa.event.listen(engine, "before_cursor_execute", self._statement)
        sa.event.listen(engine, "commit", lambda conn: self.kinds.update(["commit"]))

    def _statement(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        self.kinds["statement"] += 1
        head = statement.lstrip()[:60].upper()
        if head.startswith("SELECT") and "FROM OUTBOX" in statement.upper():
            self.kinds["outbox scan"] += 1
        elif head.startswith("UPDATE OUTBOX"):
            self.kinds["outbox mark"] += 1


async def executor(bus: Bus, answered: asyncio.Queue[int]) -> None:
    """Answers every action with one succeeded result per effect (a CreatePods: each pod), as an executor would."""
    sub = await bus.js.pull_subscribe(f"{bus.prefix}.actions.>", durable="bench-executor",
                                      stream=bus.stream(subjects.ACTIONS_STREAM))
    while True:
        try:
            msgs = await sub.fetch(100, timeout=1.0)
        except TimeoutError:
            continue
        for msg in msgs:
            action = codec.decode_action(msg.data)
            keys = [pod.key for pod in action.pods] if isinstance(action, CreatePods) else [action.key]
            partition = msg.subject.rsplit(".", 1)[-1]
            for key in keys:
                result = ActionResult(key=key, action_key=action.key, action=type(action).__struct_config__.tag,
                                      decision_id=action.decision_id, controller=action.controller,
                                      outcome=SUCCEEDED, executor="bench", finished_at=format_micro_time(utcnow()))
                await bus.js.publish(subjects.result_subject(partition, bus.prefix), codec.encode(result),
                                     headers={"Nats-Msg-Id": f"result/{key}"})
            await msg.ack()
            if isinstance(action, CreatePods):
                answered.put_nowait(len(keys))


async def run(bus: Bus, store: Store, rounds: int) -> None:
    """The reconciler fed one ReplicaSet at a time, each after the previous one's results were published; ends
    once every result is recorded."""
    answered: asyncio.Queue[int] = asyncio.Queue()
    reconciler = asyncio.create_task(run_reconciler(bus, store, Health()))
    answering = asyncio.create_task(executor(bus, answered))
    try:
        for index in range(rounds):
            event = replicaset_event(index)
            subject = subjects.event_subject(bus.partition_of(event.namespace), event.kind, event.uid, bus.prefix)
            await bus.js.publish(subject, codec.encode(event), headers={"Nats-Msg-Id": event.msg_id})
            await asyncio.wait_for(answered.get(), 30.0)
        deadline = time.monotonic() + 30.0
        while await recorded(store) < rounds * PODS:  # the last results: committed once the loop took them
            if time.monotonic() > deadline:
                raise TimeoutError("the results were not all recorded")
            await asyncio.sleep(0.05)
    finally:
        for task in (answering, reconciler):
            task.cancel()
        await asyncio.gather(answering, reconciler, return_exceptions=True)


async def recorded(store: Store) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.text("select count(*) from action_results"))).scalar_one())


async def batches(store: Store) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(ticks)
                                       .where(ticks.c.kind == "batch"))).scalar_one())


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedNats(tmp)
        await server.start()
        nc = await connect(server.url, "bench")
        bus = await ensure_streams(nc, prefix="benchshell", partitions=16)
        store = await open_store(None, tmp)
        counts = Counts(store)
        try:
            await run(bus, store, rounds)
            total = await batches(store)
        finally:
            await store.close()
            await nc.close()
            await server.stop()
    kinds = counts.kinds
    shown = ("commit", "statement", "outbox scan", "outbox mark")
    print(f"{rounds} rounds, {total} batches; per batch: "
          + ", ".join(f"{what} {kinds[what] / total:.2f}" for what in shown)
          + "; per round: " + ", ".join(f"{what} {kinds[what] / rounds:.2f}" for what in shown), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    print(f"machine: {machine()}")
    sys.call_tracing(asyncio.run, (main(parser.parse_args().rounds),))
