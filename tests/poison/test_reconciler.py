"""Poison and newer messages on every subject the reconciler consumes, over real NATS and SQLite (issue 15).

Before: an event on `<prefix>.events.notapartition...` (`int('foo')`), a bad `observed_at` or a result with a bad
`finished_at` killed the reconciler, again after every restart; an event of a newer schema version was skipped
and the position moved past it. Now each unusable message lands in KUBUS_DEAD with its reason, is counted and the
loop goes on (and a restart does not meet it again); a newer one stops the consumer before it, /readyz false,
until a newer process consumes it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import sqlalchemy as sa

from messages import codec, subjects
from messages.actions import CreatePods
from messages.observed import SCHEMA_VERSION, ObservedEvent
from reconciler.service import run_reconciler
from replay.engine import Engine
from replay.source import Window, live_bundles
from runtime.bus import Bus
from runtime.serving import Health
from store.engine import Store
from tests.pipeline.test_reconciler import publish, replicaset_event
from tests.poison.conftest import dead_counts, dead_letters, eventually, halted_gauge

INSTANCE = "reconciler-poison"


@asynccontextmanager
async def reconciler(bus: Bus, store: Store, lease_ttl: float | None = None
                     ) -> AsyncIterator[tuple[asyncio.Task[None], Health]]:
    """One reconciler service, stopped as SIGTERM stops it: alone (every partition), or with `lease_ttl` a member
    of a split deployment (alone in it, so it holds every partition's lease, through the split code path)."""
    health = Health()
    task = asyncio.create_task(run_reconciler(bus, store, health, instance=INSTANCE, lease_ttl=lease_ttl))
    try:
        yield task, health
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def ready(health: Health) -> tuple[int, str]:
    response = await health.readyz(None)  # type: ignore[arg-type]
    return response.status, str(response.text)


async def controllers_with_actions(bus: Bus) -> set[str]:
    """The controllers that have a CreatePods in KUBUS_ACTIONS (no executor runs: the queue keeps them)."""
    stream = bus.stream(subjects.ACTIONS_STREAM)
    state = (await bus.js.stream_info(stream)).state
    found = set()
    for seq in range(state.first_seq, state.last_seq + 1) if state.messages else ():
        action = codec.decode_action((await bus.js.get_msg(stream, seq)).data or b"")
        assert isinstance(action, CreatePods)
        found.add(action.controller)
    return found


async def publish_raw(bus: Bus, subject: str, data: bytes) -> int:
    return (await bus.js.publish(subject, data)).seq


def poison_events(bus: Bus) -> list[tuple[str, bytes, str]]:
    """(subject, bytes, the reason it is dead-lettered for): one of each fault an event can have."""
    good = replicaset_event("poison", 1)
    as_dict: dict[str, Any] = msgspec.json.decode(codec.encode(good))
    partition = bus.partition_of("poison")
    on = subjects.event_subject(partition, "ReplicaSet", good.uid, bus.prefix)
    not_an_object = msgspec.structs.replace(good, object=msgspec.Raw(b'{"metadata": "nope"}'))
    action = {"msg": "delete_pod", "v": 1, "key": "k", "decision_id": 3, "controller": "ReplicaSet/poison/web",
              "issued_at": "2026-03-15T12:00:00Z", "namespace": "poison", "name": "p", "uid": "u1"}
    return [
        (f"{bus.prefix}.events.notapartition.Pod.x", codec.encode(good), codec.BAD_SUBJECT),
        (f"{bus.prefix}.events.99.Pod.x", codec.encode(good), codec.BAD_SUBJECT),
        (on, b"not json at all", codec.UNDECODABLE),
        (on, msgspec.json.encode({**as_dict, "observed_at": "yesterday"}), codec.BAD_TIMESTAMP),
        (on, msgspec.json.encode(action), codec.WRONG_KIND),
        (on, codec.encode(not_an_object), codec.BAD_OBJECT),
    ]


RESULT: dict[str, Any] = {
    "msg": "result", "v": 1, "key": "good-result", "action_key": "good-result", "action": "create_pods",
    "decision_id": 0, "controller": "ReplicaSet/elsewhere/web", "outcome": "succeeded",
    "finished_at": "2026-03-15T12:00:01Z"}


async def recorded_results(store: Store) -> set[str]:
    async with store.engine.connect() as conn:
        return {row[0] for row in (await conn.execute(sa.text("select key from action_results"))).all()}


async def positions(store: Store) -> dict[int, int]:
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.text("select partition, stream_seq from consumer_positions"))).all()
    return {int(p): int(s) for p, s in rows}


@pytest.mark.parametrize("lease_ttl", [None, 2.0], ids=["alone", "split"])
async def test_poison_on_every_subject_is_dead_lettered_counted_and_skipped_once(
        bus: Bus, store: Store, lease_ttl: float | None) -> None:
    poison = poison_events(bus)
    before = dead_counts()
    # published before the reconciler starts: its bootstrap meets their KUBUS_STATE copies, and the loop of one
    # alone the events (it replays the whole history; a split one resumes after what its bootstrap reflects)
    early = [await publish_raw(bus, subject, data) for subject, data, _ in poison]
    await publish(bus, replicaset_event("first", 2))
    state_copies = {codec.BAD_SUBJECT: 2, codec.UNDECODABLE: 0, codec.BAD_TIMESTAMP: 0, codec.WRONG_KIND: 0,
                    codec.BAD_OBJECT: 1}  # one object per subject: the last of the four on `on` is the one kept
    async with reconciler(bus, store, lease_ttl) as (task, health):
        await eventually(lambda: _has(bus, "ReplicaSet/first/web"), "first's pods asked for", running=(task,))
        # and once it runs: every loop meets these
        late = [await publish_raw(bus, subject, data) for subject, data, _ in poison]
        # results: an unusable one of each fault, then a good one
        results_subject = subjects.result_subject("0", bus.prefix)
        await publish_raw(bus, results_subject, b"{")
        await publish_raw(bus, results_subject, msgspec.json.encode({**RESULT, "key": "bad", "finished_at": "noon"}))
        await publish_raw(bus, results_subject, msgspec.json.encode({**RESULT, "msg": "observed"}))
        await publish_raw(bus, results_subject, msgspec.json.encode(RESULT))
        await eventually(lambda: _recorded(store, "good-result"), "the good result recorded", running=(task,))
        # and the next good event after all of them is decided on
        await publish(bus, replicaset_event("second", 1))
        await eventually(lambda: _has(bus, "ReplicaSet/second/web"), "second's pods asked for", running=(task,))
        status, text = await eventually(lambda: _ready(health), "/readyz", running=(task,))
        assert status == 200, text

    after = dead_counts()
    grew = {key: after.get(key, 0) - before.get(key, 0) for key in after if after.get(key, 0) != before.get(key, 0)}
    rounds = 2 if lease_ttl is None else 1
    want_events = {("events", reason): float(rounds * sum(1 for _, _, r in poison if r == reason))
                   for _, _, reason in poison}
    want_state = {("state", reason): float(n) for reason, n in state_copies.items() if n}
    want_results = {("results", codec.UNDECODABLE): 1.0, ("results", codec.BAD_TIMESTAMP): 1.0,
                    ("results", codec.WRONG_KIND): 1.0}
    assert grew == {**want_events, **want_state, **want_results}

    dead = await dead_letters(bus)
    events_stream = bus.stream(subjects.EVENTS_STREAM)
    from_events = [m for m in dead if m.subject == subjects.dead_subject("events", bus.prefix)]
    sequences = [*early, *late] if lease_ttl is None else late
    assert sorted((int(m.headers["Kubus-Original-Sequence"]), m.headers["Kubus-Dead-Reason"], m.data)
                  for m in from_events if m.headers) == sorted(
        (seq, reason, data) for seq, (_, data, reason) in zip(sequences, poison * rounds, strict=True))
    for msg in from_events:
        assert msg.headers is not None
        assert msg.headers["Kubus-Original-Stream"] == events_stream
        assert msg.headers["Kubus-Dead-By"] == INSTANCE
        assert msg.headers["Nats-Msg-Id"] == f"dead/{events_stream}/{msg.headers['Kubus-Original-Sequence']}"
        assert msg.headers["Kubus-Dead-Error"]  # what is wrong, in words
        original = (poison * rounds)[sequences.index(int(msg.headers["Kubus-Original-Sequence"]))]
        assert msg.headers["Kubus-Original-Subject"] == original[0]
    assert {m.headers["Kubus-Original-Stream"] for m in dead if m.headers
            and m.subject == subjects.dead_subject("state", bus.prefix)} == {bus.stream(subjects.STATE_STREAM)}
    results = [m for m in dead if m.subject == subjects.dead_subject("results", bus.prefix)]
    assert sorted(m.data for m in results)[0] == b"{" and len(results) == 3
    assert "finished_at 'noon'" in " ".join(m.headers["Kubus-Dead-Error"] for m in results if m.headers)
    # the positions moved past every unusable event: the malformed subjects count in partition 0
    committed = await positions(store)
    assert committed[0] >= max(late[:2])
    assert committed[int(bus.partition_of("poison"))] >= max(late[2:])

    # a restart meets none of them again (not its loop, not its bootstrap of KUBUS_STATE, not its results)
    before_restart = dead_counts()
    stored_dead = len(dead)
    async with reconciler(bus, store, lease_ttl) as (task, health):
        await eventually(lambda: _ready(health), "/readyz after the restart", running=(task,))
        await publish(bus, replicaset_event("third", 1))
        await eventually(lambda: _has(bus, "ReplicaSet/third/web"), "third's pods asked for", running=(task,))
    assert dead_counts() == before_restart
    assert len(await dead_letters(bus)) == stored_dead

    # and the replay of what the live loops recorded decides the same: it skips what they dead-lettered
    found = await live_bundles(store, bus, Window())
    assert found is not None
    bundles, close = found
    seen = [b async for b in bundles]
    await close()
    engine = Engine(compare=True)
    engine.run(seen)
    assert engine.divergence is None, engine.divergence
    assert engine.stats.decisions >= 3


async def _has(bus: Bus, controller: str) -> bool:
    return controller in await controllers_with_actions(bus)


async def _recorded(store: Store, key: str) -> bool:
    return key in await recorded_results(store)


async def _ready(health: Health) -> tuple[int, str] | None:
    status, text = await ready(health)
    return (status, text) if status == 200 else None


async def _not_ready(health: Health) -> tuple[int, str] | None:
    status, text = await ready(health)
    return (status, text) if status != 200 else None


def newer(event: ObservedEvent) -> bytes:
    return msgspec.json.encode({**msgspec.json.decode(codec.encode(event)), "v": SCHEMA_VERSION + 1})


async def test_a_newer_event_stops_the_loop_before_it_until_a_newer_reconciler_consumes_it(
        bus: Bus, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    async with reconciler(bus, store) as (task, health):
        await publish(bus, replicaset_event("one", 1))
        await eventually(lambda: _has(bus, "ReplicaSet/one/web"), "one's pods asked for", running=(task,))
        await eventually(lambda: _ready(health), "/readyz", running=(task,))
        two = replicaset_event("two", 1)
        partition = int(bus.partition_of("two"))
        seq_two = await publish_raw(bus, subjects.event_subject(str(partition), "ReplicaSet", two.uid, bus.prefix),
                                    newer(two))
        await publish(bus, replicaset_event("three", 1))
        status, text = await eventually(lambda: _not_ready(health), "/readyz to fail", running=(task,))
        assert status == 503 and "[-]reconciler-no-newer-messages failed" in text, text
        assert halted_gauge("events") == 1
        # stopped, not crashed, and not past the newer event: nothing after it was consumed
        assert not task.done()
        assert all(seq < seq_two for seq in (await positions(store)).values())
        assert await controllers_with_actions(bus) == {"ReplicaSet/one/web"}
        assert await dead_letters(bus) == []
        assert (await health.healthz(None)).status == 200  # type: ignore[arg-type]  # alive: not restarted
    # an upgraded reconciler (a newer SCHEMA_VERSION) consumes it and what follows
    monkeypatch.setattr(codec, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    async with reconciler(bus, store) as (task, health):
        await eventually(lambda: _has(bus, "ReplicaSet/three/web"), "three's pods asked for", running=(task,))
        assert await controllers_with_actions(bus) == {f"ReplicaSet/{n}/web" for n in ("one", "two", "three")}
        await eventually(lambda: _ready(health), "/readyz after the upgrade", running=(task,))
        assert halted_gauge("events") == 0
    assert await dead_letters(bus) == []


async def test_a_newer_state_message_stops_the_start_until_a_newer_reconciler_bootstraps(
        bus: Bus, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A newer kubus's event in KUBUS_STATE: no cache can be built from it, so nothing is decided (not the
    objects before it either), the service runs on, not ready; an upgraded one starts."""
    await publish(bus, replicaset_event("old", 1))
    late = replicaset_event("late", 1)
    await publish_raw(bus, subjects.event_subject(bus.partition_of("late"), "ReplicaSet", late.uid, bus.prefix),
                      newer(late))
    async with reconciler(bus, store) as (task, health):
        await eventually(lambda: _halted("state"), "the state consumer halted", running=(task,))
        status, text = await ready(health)
        assert status == 503 and "[-]reconciler-no-newer-messages failed" in text, text
        assert not task.done() and await controllers_with_actions(bus) == set()
        assert await positions(store) == {}
    monkeypatch.setattr(codec, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    async with reconciler(bus, store) as (task, health):
        await eventually(lambda: _ready(health), "/readyz after the upgrade", running=(task,))
        await eventually(lambda: _has(bus, "ReplicaSet/late/web"), "late's pods asked for", running=(task,))
        assert "ReplicaSet/old/web" in await controllers_with_actions(bus)
    assert await dead_letters(bus) == []


async def _halted(consumer: str) -> bool:
    return halted_gauge(consumer) == 1


async def test_a_newer_result_stops_the_results_consumer_not_the_events(
        bus: Bus, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    results_subject = subjects.result_subject("1", bus.prefix)
    async with reconciler(bus, store) as (task, health):
        await eventually(lambda: _ready(health), "/readyz", running=(task,))
        await publish_raw(bus, results_subject, msgspec.json.encode({**RESULT, "key": "newer",
                                                                     "v": SCHEMA_VERSION + 1}))
        await publish_raw(bus, results_subject, msgspec.json.encode({**RESULT, "key": "after"}))
        _, text = await eventually(lambda: _not_ready(health), "/readyz to fail", running=(task,))
        assert "[-]reconciler-no-newer-messages failed" in text and halted_gauge("results") == 1
        # the events loop goes on deciding
        await publish(bus, replicaset_event("busy", 1))
        await eventually(lambda: _has(bus, "ReplicaSet/busy/web"), "busy's pods asked for", running=(task,))
        assert await recorded_results(store) == set()
    monkeypatch.setattr(codec, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    async with reconciler(bus, store) as (task, health):
        await eventually(lambda: _recorded(store, "after"), "both results recorded", running=(task,))
        assert await recorded_results(store) == {"newer", "after"}
        await eventually(lambda: _ready(health), "/readyz after the upgrade", running=(task,))
    assert await dead_letters(bus) == []
