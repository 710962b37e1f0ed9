"""Connecting to NATS and creating kubus's streams, idempotently, at every start.

The partition count is fixed when the streams are first created and kept in KUBUS_EVENTS's
metadata; later starts read it from there, so every process agrees on the partitioning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    PubAck,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamSource,
    SubjectTransform,
)
from nats.js.errors import APIError, NotFoundError

from messages import subjects

log = logging.getLogger("kubus.jetstream")


class NatsUnavailable(RuntimeError):
    """NATS could not be reached at start: the message says where and how to fix it."""


@dataclass(frozen=True)
class Bus:
    nc: Client
    js: JetStreamContext
    prefix: str
    partitions: int

    def stream(self, base: str) -> str:
        return subjects.stream_name(base, self.prefix)

    def partition_of(self, namespace: str) -> str:
        return subjects.partition_of(namespace, self.partitions)

    def all_partitions(self) -> list[str]:
        return [str(p) for p in range(self.partitions)]


HOW = "start nats-server with JetStream (-js) there, or omit --nats-url to run an embedded one"


async def connect(url: str, name: str, *, reconnect: bool = True, timeout: float | None = None) -> Client:
    """Connects, failing fast with a one-line explanation when nothing answers at `url`; once
    connected, a lost connection is retried for ever (and logged in one line, not a traceback).
    `timeout` bounds the whole first attempt, in seconds."""
    if timeout is None:
        return await _connect(url, name, reconnect)
    try:
        return await asyncio.wait_for(_connect(url, name, reconnect), timeout)
    except TimeoutError:
        raise NatsUnavailable(f"cannot reach NATS at {url} (nothing answered within {timeout}s); {HOW}") from None


async def _connect(url: str, name: str, reconnect: bool) -> Client:
    target = urlsplit(url if "://" in url else f"nats://{url}")
    try:
        # nats-py retries a first connection for ever when reconnects are allowed: probe first
        _, writer = await asyncio.wait_for(asyncio.open_connection(target.hostname, target.port or 4222), 3)
        writer.close()
    except (OSError, TimeoutError) as exc:
        raise NatsUnavailable(f"cannot reach NATS at {url} ({exc or type(exc).__name__}); {HOW}") from None

    async def on_error(exc: Exception) -> None:
        log.warning("NATS %s: %s", name, exc or type(exc).__name__)

    async def on_disconnected() -> None:
        log.warning("NATS %s: disconnected; reconnecting", name)

    async def on_reconnected() -> None:
        log.info("NATS %s: reconnected", name)

    try:
        return await asyncio.wait_for(nats.connect(
            url, name=name, connect_timeout=3, max_reconnect_attempts=-1 if reconnect else 0,
            allow_reconnect=reconnect, reconnect_time_wait=0.5, error_cb=on_error,
            disconnected_cb=on_disconnected, reconnected_cb=on_reconnected), timeout=10)
    except Exception as exc:  # nats-py raises several unrelated types for "nothing there"
        raise NatsUnavailable(f"cannot reach NATS at {url} ({type(exc).__name__}: {exc}); {HOW}") from None


CLOSE_TIMEOUT = 3.0  # seconds a closing service gives NATS to take what it still has to send


async def close(nc: Client) -> None:
    """Flush, then close; each bounded. Not drain: a drain waits for every subscription's pending messages
    to be taken, and a pull subscription can hold messages that arrived after its last fetch returned,
    which nobody will take (nats-py then waits out its 30 s drain timeout). Every service has awaited the
    acks of what it published; what it acked or naked is flushed here."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.flush(), CLOSE_TIMEOUT)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), CLOSE_TIMEOUT)


@contextlib.asynccontextmanager
async def connected(url: str, name: str, *, prefix: str, partitions: int,
                    timeout: float | None = None) -> AsyncIterator[Bus]:
    """A connection to `url` with kubus's streams ensured, closed on the way out. run_service connects
    every service this way; a service run on its own (tests, benchmarks) connects itself with it too."""
    nc = await connect(url, name, timeout=timeout)
    try:
        yield await ensure_streams(nc, prefix=prefix, partitions=partitions)
    finally:
        await close(nc)


async def ensure_streams(nc: Client, *, prefix: str = subjects.PREFIX,
                         partitions: int = subjects.DEFAULT_PARTITIONS,
                         history_max_age: float = 7 * 24 * 3600) -> Bus:
    js = nc.jetstream()
    events = subjects.stream_name(subjects.EVENTS_STREAM, prefix)
    try:
        info = await js.stream_info(events)
        recorded = (info.config.metadata or {}).get("kubus.partitions")
        if recorded and int(recorded) != partitions:
            log.info("streams were created with %s partitions; using that, not %d", recorded, partitions)
            partitions = int(recorded)
    except NotFoundError:
        pass
    await _ensure(js, StreamConfig(
        name=events, subjects=[f"{prefix}.events.>"], retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE, max_age=history_max_age, duplicate_window=120.0,
        metadata={"kubus.partitions": str(partitions)},
        description="every watch event ingest published: the history replay reads"))
    await _ensure(js, StreamConfig(
        name=subjects.stream_name(subjects.STATE_STREAM, prefix), storage=StorageType.FILE,
        retention=RetentionPolicy.LIMITS, max_msgs_per_subject=1, discard=DiscardPolicy.OLD,
        sources=[StreamSource(name=events, subject_transforms=[
            SubjectTransform(src=f"{prefix}.events.>", dest=f"{prefix}.state.>")])],
        description="the last event of every object: what a reconciler bootstraps from"))
    await _ensure(js, StreamConfig(
        name=subjects.stream_name(subjects.ACTIONS_STREAM, prefix), subjects=[f"{prefix}.actions.>"],
        retention=RetentionPolicy.WORK_QUEUE, storage=StorageType.FILE, duplicate_window=600.0,
        description="commands for executors, each taken by one executor"))
    await _ensure(js, StreamConfig(
        name=subjects.stream_name(subjects.RESULTS_STREAM, prefix), subjects=[f"{prefix}.results.>"],
        retention=RetentionPolicy.LIMITS, storage=StorageType.FILE, max_age=history_max_age,
        duplicate_window=600.0, description="what the executors did"))
    await _ensure(js, StreamConfig(
        name=subjects.stream_name(subjects.DEAD_STREAM, prefix), subjects=[f"{prefix}.dead.>"],
        retention=RetentionPolicy.LIMITS, storage=StorageType.FILE, max_age=history_max_age,
        description="messages that could not be used, with the reason"))
    return Bus(nc, js, prefix, partitions)


async def _ensure(js: JetStreamContext, config: StreamConfig) -> None:
    assert config.name is not None
    try:
        await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config)
        return
    await js.update_stream(config)


ACK_WAIT = 5.0  # seconds an async publish's ack may take before the message is published again


@dataclass(frozen=True)
class Sent:
    """A message published with publish_async, and the future of its ack."""

    ack: asyncio.Future[PubAck]
    subject: str
    payload: bytes
    headers: dict[str, str]


async def publish_async(js: JetStreamContext, subject: str, payload: bytes, headers: dict[str, str]) -> Sent:
    """publish_async, keeping what was sent, so that `stored` can publish it again."""
    return Sent(await js.publish_async(subject, payload, headers=headers), subject, payload, headers)


async def stored(js: JetStreamContext, sent: Sequence[Sent], *, timeout: float = 30.0,
                 ack_wait: float = ACK_WAIT) -> None:
    """Returns once JetStream has stored every message `sent`; raises the last error after `timeout`.

    nats-py's publish_async futures never time out: an ack lost to a reconnect (the server restarted, or the
    leader moved) would be waited for for ever, and every later publish waited behind it. A message whose ack
    has not come within `ack_wait`, or that failed, is published again, synchronously, with the same
    Nats-Msg-Id (which every kubus message carries): JetStream stores it once whatever the first attempt did.
    An error JetStream answers (an APIError: the payload too large, no stream) is raised at once."""
    if not sent:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    _, late = await asyncio.wait([s.ack for s in sent], timeout=ack_wait)
    for future in late:
        future.cancel()  # gives its publish slot back
    again = [s for s in sent if s.ack in late or s.ack.exception() is not None]
    for message in again:
        error = None if message.ack.cancelled() else message.ack.exception()
        if isinstance(error, APIError):
            raise error
        while True:
            wait = max(0.1, min(ack_wait, deadline - loop.time()))
            try:
                await js.publish(message.subject, message.payload, timeout=wait, headers=message.headers)
                break
            except APIError:
                raise
            except Exception as exc:  # no answer (reconnecting, no responders yet): try again until the deadline
                if loop.time() >= deadline:
                    raise TimeoutError(f"JetStream did not store a message on {message.subject} within "
                                       f"{timeout:g} s: {exc}") from exc
                await asyncio.sleep(0.2)  # between attempts at a server that is coming back
