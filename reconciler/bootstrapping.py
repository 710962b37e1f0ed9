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
from dataclasses import dataclass

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, RawStreamMsg
from nats.js.errors import NotFoundError

from messages import codec, subjects
from reconciler.core import stepping
from reconciler.core.cache import Cache
from runtime.bus import Bus

log = logging.getLogger("kubus.reconciler")

STATE_WAIT = 10.0  # seconds a starting reconciler waits for KUBUS_STATE to catch up with KUBUS_EVENTS
STATE_POLL = 0.02  # seconds between two looks at how far the copy is


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


async def bootstrap(bus: Bus, cache: Cache, reads: Callable[[str], bool]) -> Bootstrapped:
    """Folds KUBUS_STATE's messages whose subjects `reads` into `cache`."""
    consistent = await wait_for_state(bus)
    if await _newest_state(bus.js, bus.stream(subjects.STATE_STREAM), bus.prefix) is None:
        return Bootstrapped(0, 0, 0)  # (the stream may hold the cluster's identity: no object's state)
    loaded = newest = 0
    done = asyncio.Event()

    async def on_state(msg: Msg) -> None:
        nonlocal loaded, newest
        try:
            seq = source_seq(msg.headers)
            newest = max(newest, seq)
            if reads(msg.subject):
                change = stepping.bootstrap_one(cache, msg.data, seq)
                if change is not None and not change.replayed:
                    loaded += 1
        except (codec.BadMessage, msgspec.DecodeError, ValueError) as exc:
            log.warning("skipping unusable state message on %s: %s", msg.subject, exc)
        if msg.metadata.num_pending == 0:
            done.set()

    sub = await bus.js.subscribe(
        f"{bus.prefix}.state.>", stream=bus.stream(subjects.STATE_STREAM), cb=on_state,
        ordered_consumer=True, config=ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT))
    try:
        await done.wait()
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return Bootstrapped(loaded, newest, min(consistent, newest))
