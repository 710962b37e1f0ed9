"""A starting reconciler's cache, from KUBUS_STATE: the last event of every object, as the server keeps it.

KUBUS_STATE is sourced from KUBUS_EVENTS by the server, asynchronously and a little behind. The loop
then replays KUBUS_EVENTS from its lowest committed position and skips, per partition, what was already
committed; so an object whose last event is older than a committed position is known only through the
bootstrap, and the bootstrap must not start before the copy has caught up with the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, RawStreamMsg
from nats.js.errors import NotFoundError

from messages import codec, subjects
from reconciler.core import stepping
from reconciler.core.cache import Cache
from runtime.bus import Bus
from runtime.deadletter import STATE, Original, dead_letter

log = logging.getLogger("kubus.reconciler")

STATE_WAIT = 10.0  # seconds a starting reconciler waits for KUBUS_STATE to catch up with KUBUS_EVENTS
STATE_POLL = 0.02  # seconds between two looks at how far the copy is
STATE_IDLE = 2.0  # seconds without a state message before the bootstrap asks the server whether any are left


def source_seq(headers: Mapping[str, str] | None) -> int:
    """The KUBUS_EVENTS sequence a KUBUS_STATE message was copied from (its Nats-Stream-Source header)."""
    parts = str((headers or {}).get("Nats-Stream-Source", "")).split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


async def wait_for_state(bus: Bus, timeout: float = STATE_WAIT) -> int:
    """Waits (up to `timeout`; then logs and goes on) until KUBUS_STATE has copied every event KUBUS_EVENTS
    holds now; returns how far the copy got: every event up to that sequence is in KUBUS_STATE (or superseded
    there by a newer event of its object). Sourcing is in order, so the copy's newest message says how far."""
    js = bus.js
    target = (await js.stream_info(bus.stream(subjects.EVENTS_STREAM))).state.last_seq
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    state = bus.stream(subjects.STATE_STREAM)
    while True:
        sourced = await _copied_to(js, state, bus.prefix)
        if sourced >= target:
            return sourced
        if loop.time() >= deadline:
            log.warning("KUBUS_STATE has copied events up to %d of %d after %.0f s; bootstrapping anyway",
                        sourced, target, timeout)
            return sourced
        await asyncio.sleep(STATE_POLL)  # the polling interval of a wait with a deadline


async def _copied_to(js: JetStreamContext, state: str, prefix: str) -> int:
    """The KUBUS_EVENTS sequence of the newest message KUBUS_STATE holds (0: none). The state keeps one
    message per object, so the newest one seen by stream_info may be superseded (deleted) by the time it is
    asked for: ask for the first message at or after it, which is the newest then or a newer one. The newest
    message may also be the cluster's identity (on a subject of its own, not `<prefix>.state.>`): then the
    newest object state is before it."""
    last = (await js.stream_info(state)).state.last_seq
    if not last:
        return 0
    try:
        msg = await js.get_msg(state, last, subject=f"{prefix}.state.>", next=True)
    except NotFoundError:  # no object's state from `last` on: the identity is newest, or the stream was purged
        newest = await _newest_state(js, state, prefix)
        return 0 if newest is None else source_seq(newest.headers)
    return source_seq(msg.headers)


async def _drained(sub: Any) -> bool:
    """The bootstrap's consumer has nothing left on the server and nothing undelivered in the client."""
    try:
        info = await sub.consumer_info()
    except Exception as exc:  # asking again later is all a failure here can mean
        log.warning("asking how much KUBUS_STATE is left to read failed (%s); waiting on", exc)
        return False
    return bool(info.num_pending == 0 and sub.pending_msgs == 0)


@dataclass(frozen=True)
class Unusable:
    """A KUBUS_STATE message the bootstrap could not use: the copy of the event at `source` in KUBUS_EVENTS,
    which counts in `partition`."""

    original: Original
    source: int
    partition: int
    error: codec.BadMessage


async def _newest_state(js: JetStreamContext, state: str, prefix: str) -> RawStreamMsg | None:
    try:
        return await js.get_last_msg(state, f"{prefix}.state.>")
    except NotFoundError:  # no object's state (yet, or the stream was purged)
        return None


@dataclass(frozen=True)
class Bootstrapped:
    loaded: int  # objects folded into the cache
    newest: int  # the newest event sequence the state held, whoever's partition it was in
    # every event up to this sequence is reflected in the cache (events after it may or may not be: the copy
    # went on while the state was read); what a position recorded for the bootstrapped state may say
    consistent: int
    unusable: list[Unusable] = field(default_factory=list)  # skipped: for dead_letter_unusable


async def bootstrap(bus: Bus, cache: Cache, reads: Callable[[int], bool]) -> Bootstrapped:
    """Folds KUBUS_STATE's messages of the partitions `reads` into `cache`. The unusable ones are skipped and
    returned (see dead_letter_unusable); one of a newer kubus raises codec.NewerSchema: this process cannot
    build its cache until it is upgraded."""
    consistent = await wait_for_state(bus)
    stream = bus.stream(subjects.STATE_STREAM)
    if await _newest_state(bus.js, stream, bus.prefix) is None:
        return Bootstrapped(0, 0, 0)  # (the stream may hold the cluster's identity: no object's state)
    loaded = newest = 0
    unusable: list[Unusable] = []
    done = asyncio.Event()
    newer: list[codec.NewerSchema] = []

    async def on_state(msg: Msg) -> None:
        nonlocal loaded, newest
        if newer:
            return
        seq = source_seq(msg.headers)
        newest = max(newest, seq)
        partition, _ = stepping.classify(msg.subject, bus.partitions)
        if reads(partition):
            try:
                change = stepping.bootstrap_one(cache, msg.subject, msg.data, seq, bus.partitions)
            except codec.BadMessage as exc:
                original = Original(stream, msg.metadata.sequence.stream, msg.subject, msg.data)
                unusable.append(Unusable(original, seq, partition, exc))
            except codec.NewerSchema as exc:
                newer.append(exc)
                done.set()
                return
            else:
                if change is not None and not change.replayed:
                    loaded += 1
        if msg.metadata.num_pending == 0:
            done.set()

    sub = await bus.js.subscribe(
        f"{bus.prefix}.state.>", stream=stream, cb=on_state,
        ordered_consumer=True, config=ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT))
    try:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), STATE_IDLE)
                break
            # nothing for a while: the messages the stream held when asked may be gone since (an ingest purged
            # expired tombstones, the stream was renewed), and then no message ever says "none pending"
            if await _drained(sub):
                break
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    if newer:
        raise newer[0]
    return Bootstrapped(loaded, newest, min(consistent, newest), unusable)


async def dead_letter_unusable(bus: Bus, unusable: list[Unusable], consumed: Mapping[int, int], by: str) -> None:
    """Moves the bootstrap's unusable state messages to KUBUS_DEAD, but those whose event the store's `consumed`
    positions are past: the event loop met that event (and moved it to KUBUS_DEAD as an event) before, so this
    start is not the first to meet the message, and every later start would meet it again (KUBUS_STATE keeps it
    until its object has a newer event)."""
    for bad in unusable:
        if bad.source and bad.source <= consumed.get(bad.partition, 0):
            log.debug("state message %s#%d skipped again: %s", bad.original.stream, bad.original.seq, bad.error)
            continue
        await dead_letter(bus, STATE, bad.original, bad.error.reason, str(bad.error), by)
