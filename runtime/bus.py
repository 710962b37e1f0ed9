"""Connecting to NATS and creating kubus's streams, at every start.

kubus creates the streams that are missing, as `StreamSettings` says (replicas, byte limits), and checks
the ones that exist: what kubus depends on (subjects, retention, duplicate window, the partition count,
KUBUS_STATE's source) must be as it needs, or the service refuses to start (`StreamError`, one line). It
never rewrites an existing stream: limits and replicas are the operator's once the stream exists
(docs/production.md, "Streams").

The partition count is fixed when the streams are first created and kept in KUBUS_EVENTS's
metadata; later starts read it from there, so every process agrees on the partitioning.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    PubAck,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
    StreamSource,
    SubjectTransform,
)
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from messages import subjects

log = logging.getLogger("kubus.jetstream")

MiB = 1024 * 1024
GiB = 1024 * MiB
# Byte limits kubus gives the streams it creates. JetStream reserves a stream's max_bytes in its store when
# the stream is created (on every replica), so these are what a fresh `kubus up` asks of the disk: ~1.4 GiB.
DEFAULT_EVENTS_MAX_BYTES = 1 * GiB  # --events-max-bytes; the history: oldest events go first
ACTIONS_MAX_BYTES = 128 * MiB  # a work queue: consumed actions leave, so a full one means executors are down
RESULTS_MAX_BYTES = 256 * MiB
DEAD_MAX_BYTES = 32 * MiB
HISTORY_MAX_AGE = 7 * 24 * 3600.0  # seconds KUBUS_EVENTS, KUBUS_RESULTS and KUBUS_DEAD keep a message
EVENTS_DUPLICATE_WINDOW = 120.0  # seconds: two ingest replicas publishing one event store it once
ACTIONS_DUPLICATE_WINDOW = 600.0  # seconds: a relay or an executor publishing again after a crash
PARTITIONS_KEY = "kubus.partitions"  # KUBUS_EVENTS's metadata: the partition count fixed at creation
ENSURE_TIMEOUT = 30.0  # seconds ensure_streams waits out a JetStream that is electing its leaders


class NatsUnavailable(RuntimeError):
    """NATS could not be reached at start: the message says where and how to fix it."""


class StreamError(RuntimeError):
    """A stream kubus needs could not be created, or exists and does not fit what kubus depends on: one
    line naming the stream and the field. The service refuses to start (a start-up failure, exit 2)."""


@dataclass(frozen=True)
class StreamSettings:
    """How kubus creates the streams that do not exist yet; a stream that exists keeps what it has."""

    replicas: int = 1  # --stream-replicas: 3 on a JetStream cluster survives the loss of a server
    events_max_bytes: int = DEFAULT_EVENTS_MAX_BYTES  # --events-max-bytes; -1: no byte limit


@dataclass(frozen=True)
class Bus:
    nc: Client
    js: JetStreamContext
    prefix: str
    partitions: int
    settings: StreamSettings = field(default_factory=StreamSettings)  # what the streams were created with

    def stream(self, base: str) -> str:
        return subjects.stream_name(base, self.prefix)

    def streams(self) -> list[str]:
        """The names of kubus's streams under this prefix."""
        return [self.stream(base) for base in STREAMS]

    def partition_of(self, namespace: str) -> str:
        return subjects.partition_of(namespace, self.partitions)

    def all_partitions(self) -> list[str]:
        return [str(p) for p in range(self.partitions)]


STREAMS = (subjects.EVENTS_STREAM, subjects.STATE_STREAM, subjects.ACTIONS_STREAM, subjects.RESULTS_STREAM,
           subjects.DEAD_STREAM)

HOW = "start nats-server with JetStream (-js) there, or omit --nats-url to run an embedded one"


def seeds(url: str) -> list[str]:
    """The servers of a --nats-url: one URL, or a comma-separated list of a cluster's seed URLs (the client
    learns the rest of the cluster from whichever answers); `host:port` means `nats://host:port`."""
    found = [part.strip() for part in url.split(",") if part.strip()]
    return [part if "://" in part else f"nats://{part}" for part in found]


async def connect(url: str, name: str, *, reconnect: bool = True, timeout: float | None = None) -> Client:
    """Connects, failing fast with a one-line explanation when nothing answers at `url` (one URL or a
    comma-separated list of seeds); once connected, a lost connection is retried for ever, on any server
    of the cluster (and logged in one line, not a traceback). `timeout` bounds the whole first attempt, in
    seconds."""
    if timeout is None:
        return await _connect(url, name, reconnect)
    try:
        return await asyncio.wait_for(_connect(url, name, reconnect), timeout)
    except TimeoutError:
        raise NatsUnavailable(f"cannot reach NATS at {url} (nothing answered within {timeout}s); {HOW}") from None


async def _connect(url: str, name: str, reconnect: bool) -> Client:
    servers = seeds(url)
    if not servers:
        raise NatsUnavailable(f"no NATS URL in {url!r}; {HOW}")
    # nats-py retries a first connection for ever when reconnects are allowed: probe first, and go on when
    # any seed answers (a cluster with a server down still starts)
    probes = await asyncio.gather(*(_probe(server) for server in servers))
    if all(error is not None for error in probes):
        raise NatsUnavailable(f"cannot reach NATS at {url} ({probes[0]}); {HOW}")

    async def on_error(exc: Exception) -> None:
        log.warning("NATS %s: %s", name, exc or type(exc).__name__)

    async def on_disconnected() -> None:
        log.warning("NATS %s: disconnected; reconnecting", name)

    async def on_reconnected() -> None:
        log.info("NATS %s: reconnected to %s", name, nc.connected_url.netloc if nc.connected_url else "?")

    try:
        nc: Client = await asyncio.wait_for(nats.connect(
            servers=servers, name=name, connect_timeout=3, max_reconnect_attempts=-1 if reconnect else 0,
            allow_reconnect=reconnect, reconnect_time_wait=0.5, error_cb=on_error,
            disconnected_cb=on_disconnected, reconnected_cb=on_reconnected), timeout=10)
        return nc
    except Exception as exc:  # nats-py raises several unrelated types for "nothing there"
        raise NatsUnavailable(f"cannot reach NATS at {url} ({type(exc).__name__}: {exc}); {HOW}") from None


async def _probe(server: str) -> str | None:
    """None when something listens at `server`, else why not."""
    target = urlsplit(server)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(target.hostname, target.port or 4222), 3)
    except (OSError, TimeoutError) as exc:
        return str(exc) or type(exc).__name__
    writer.close()
    return None


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
                    settings: StreamSettings | None = None, timeout: float | None = None) -> AsyncIterator[Bus]:
    """A connection to `url` with kubus's streams ensured, closed on the way out. run_service connects
    every service this way; a service run on its own (tests, benchmarks) connects itself with it too."""
    nc = await connect(url, name, timeout=timeout)
    try:
        yield await ensure_streams(nc, prefix=prefix, partitions=partitions, settings=settings)
    finally:
        await close(nc)


async def ensure_streams(nc: Client, *, prefix: str = subjects.PREFIX,
                         partitions: int = subjects.DEFAULT_PARTITIONS,
                         history_max_age: float = HISTORY_MAX_AGE, settings: StreamSettings | None = None) -> Bus:
    """Creates the streams that are missing and checks those that exist (StreamError when one does not fit);
    changes none. A JetStream that does not answer yet (a cluster electing its leaders) is waited for, up to
    ENSURE_TIMEOUT."""
    settings = settings or StreamSettings()
    js = nc.jetstream()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ENSURE_TIMEOUT
    while True:
        try:
            partitions = await _ensure_all(js, prefix, partitions, history_max_age, settings)
            return Bus(nc, js, prefix, partitions, settings)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, ServiceUnavailableError) as exc:
            if _no_responders(exc):  # nothing serves the JetStream API there: no election will change that
                raise StreamError("JetStream does not answer on this NATS: start nats-server with JetStream "
                                  "(-js, or a jetstream block in its configuration)") from None
            # no answer yet, or "JetStream system temporarily unavailable" (a cluster electing leaders)
            if loop.time() > deadline:
                raise StreamError(f"JetStream did not answer within {ENSURE_TIMEOUT:g} s ({_why(exc)}); is it "
                                  "enabled (-js) and, on a cluster, does it have a quorum?") from None
            log.info("waiting for JetStream: %s", _why(exc))
            await asyncio.sleep(0.5)  # between attempts at a JetStream that is electing its leaders


async def _ensure_all(js: JetStreamContext, prefix: str, partitions: int, history_max_age: float,
                      settings: StreamSettings) -> int:
    """Ensures every stream; returns the partition count the streams were created with."""
    events = subjects.stream_name(subjects.EVENTS_STREAM, prefix)
    existing = await _info(js, events)
    if existing is not None:
        partitions = _recorded_partitions(existing.config, partitions)
    for config in wanted(prefix, partitions, history_max_age, settings):
        await _ensure(js, config, settings)
    return partitions


def wanted(prefix: str, partitions: int, history_max_age: float, settings: StreamSettings) -> list[StreamConfig]:
    """The streams kubus creates, in the order they must be created (KUBUS_STATE sources KUBUS_EVENTS).
    Limits are explicit: discard OLD for a history (the oldest message goes to make room), discard NEW for
    the work queue (a full queue refuses a new action, which its publisher retries: none is lost)."""
    events = subjects.stream_name(subjects.EVENTS_STREAM, prefix)

    def stream(**fields: Any) -> StreamConfig:
        return StreamConfig(storage=StorageType.FILE, num_replicas=settings.replicas, **fields)

    return [
        stream(
            name=events, subjects=[f"{prefix}.events.>"], retention=RetentionPolicy.LIMITS,
            max_age=history_max_age, max_bytes=settings.events_max_bytes, discard=DiscardPolicy.OLD,
            duplicate_window=EVENTS_DUPLICATE_WINDOW, metadata={PARTITIONS_KEY: str(partitions)},
            description="every watch event ingest published: the history replay reads"),
        stream(
            name=subjects.stream_name(subjects.STATE_STREAM, prefix), subjects=[subjects.cluster_subject(prefix)],
            retention=RetentionPolicy.LIMITS,
            # one message per object: bounded by the cluster's size, never by bytes (a byte limit would drop
            # the state of objects that still exist)
            max_msgs_per_subject=1, max_bytes=-1, discard=DiscardPolicy.OLD,
            sources=[StreamSource(name=events, subject_transforms=[
                SubjectTransform(src=f"{prefix}.events.>", dest=f"{prefix}.state.>")])],
            description="the last event of every object: what a reconciler bootstraps from; and the cluster's "
                        "identity"),
        stream(
            name=subjects.stream_name(subjects.ACTIONS_STREAM, prefix), subjects=[f"{prefix}.actions.>"],
            retention=RetentionPolicy.WORK_QUEUE, max_bytes=ACTIONS_MAX_BYTES, discard=DiscardPolicy.NEW,
            duplicate_window=ACTIONS_DUPLICATE_WINDOW,
            description="commands for executors, each taken by one executor"),
        stream(
            name=subjects.stream_name(subjects.RESULTS_STREAM, prefix), subjects=[f"{prefix}.results.>"],
            retention=RetentionPolicy.LIMITS, max_age=history_max_age, max_bytes=RESULTS_MAX_BYTES,
            discard=DiscardPolicy.OLD, duplicate_window=ACTIONS_DUPLICATE_WINDOW,
            description="what the executors did"),
        stream(
            name=subjects.stream_name(subjects.DEAD_STREAM, prefix), subjects=[f"{prefix}.dead.>"],
            retention=RetentionPolicy.LIMITS, max_age=history_max_age, max_bytes=DEAD_MAX_BYTES,
            discard=DiscardPolicy.OLD, description="messages that could not be used, with the reason"),
    ]


def _recorded_partitions(config: StreamConfig, asked: int) -> int:
    """The partition count KUBUS_EVENTS was created with: it wins over the flag, so every process agrees."""
    recorded = (config.metadata or {}).get(PARTITIONS_KEY)
    if recorded is None or not recorded.isdigit() or int(recorded) < 1:
        found = "missing" if recorded is None else repr(recorded)
        raise StreamError(f"stream {config.name} does not fit kubus: its metadata {PARTITIONS_KEY} is {found} "
                          "(the partition count kubus records when it creates the stream); " + FIX)
    if int(recorded) != asked:
        log.info("streams were created with %s partitions; using that, not %d", recorded, asked)
    return int(recorded)


FIX = "change the stream back, delete it (losing its messages), or give this kubus another --prefix"


async def _info(js: JetStreamContext, name: str) -> StreamInfo | None:
    try:
        return await js.stream_info(name)
    except NotFoundError:
        return None


STREAM_NAME_IN_USE = 10058  # JetStream's err_code: a stream of that name exists with another configuration


async def _ensure(js: JetStreamContext, want: StreamConfig, settings: StreamSettings) -> None:
    assert want.name is not None
    info = await _info(js, want.name)
    if info is None:
        try:
            await js.add_stream(want)
            log.info("created stream %s (%d replicas, max_bytes %s)", want.name, settings.replicas,
                     _bytes(want.max_bytes))
            return
        except ServiceUnavailableError:
            raise  # JetStream is electing its leaders: ensure_streams waits for it
        except APIError as exc:
            if exc.err_code != STREAM_NAME_IN_USE:  # else another service created it first: checked below
                raise StreamError(f"cannot create stream {want.name} ({settings.replicas} replicas, max_bytes "
                                  f"{_bytes(want.max_bytes)}): {exc.description or exc}; see --stream-replicas "
                                  "and --events-max-bytes") from None
            info = await _info(js, want.name)
            if info is None:
                raise StreamError(f"stream {want.name} was reported created and is not there") from None
    if await _add_identity_subject(js, want, info.config):
        info = await js.stream_info(want.name)
    problems = incompatibilities(want, info.config)
    if problems:
        raise StreamError(f"stream {want.name} does not fit kubus: {'; '.join(problems)}; {FIX}")
    have = info.config
    if have.num_replicas != settings.replicas:
        # the operator's (or an earlier start's) choice stands: kubus never rewrites a stream
        log.info("stream %s keeps its %s replicas (--stream-replicas %d applies to streams kubus creates)",
                 want.name, have.num_replicas, settings.replicas)


async def _add_identity_subject(js: JetStreamContext, want: StreamConfig, have: StreamConfig) -> bool:
    """KUBUS_STATE made by a kubus before issue 15 has no subject of its own; the cluster's identity needs one
    (`<prefix>.cluster`). This one change kubus makes to an existing stream, once: it adds what only kubus
    uses and touches nothing else, through the server's own view of the configuration (nats-py's
    StreamConfig would drop fields it does not know). Returns whether it changed the stream."""
    if have.subjects or not want.sources or not want.subjects:
        return False
    if incompatibilities(replace(want, subjects=None), have):
        return False  # another problem: say so rather than change anything
    api = f"$JS.API.STREAM.%s.{want.name}"
    answer = json.loads((await js._nc.request(api % "INFO", b"", timeout=5)).data)
    if "error" in answer:
        raise StreamError(f"cannot read stream {want.name}: {answer['error'].get('description', answer['error'])}")
    config = answer["config"]
    if config.get("subjects"):
        return False  # another service added it meanwhile
    config["subjects"] = list(want.subjects)
    answer = json.loads((await js._nc.request(api % "UPDATE", json.dumps(config).encode(), timeout=5)).data)
    if "error" in answer:
        raise StreamError(f"cannot add subject {want.subjects[0]} to stream {want.name} (the cluster's identity): "
                          f"{answer['error'].get('description', answer['error'])}; {FIX}")
    log.info("stream %s: added its subject %s, where ingest records the cluster's identity", want.name,
             want.subjects[0])
    return True


def incompatibilities(want: StreamConfig, have: StreamConfig) -> list[str]:
    """What of an existing stream `have` breaks what kubus depends on, as `want` states it: its subjects, its
    retention, a duplicate window at least as long, KUBUS_STATE's one message per subject and its source.
    Limits, replicas, storage and descriptions are the operator's and not compared."""
    problems = []
    if want.subjects is not None and sorted(have.subjects or []) != sorted(want.subjects):
        problems.append(f"subjects are {have.subjects or []}, kubus needs {want.subjects}")
    if _text(have.retention) != _text(want.retention):
        problems.append(f"retention is {_text(have.retention)}, kubus needs {_text(want.retention)}")
    if want.duplicate_window and (have.duplicate_window or 0) < want.duplicate_window:
        problems.append(f"duplicate window is {have.duplicate_window or 0:g} s, kubus needs at least "
                        f"{want.duplicate_window:g} s")
    if want.max_msgs_per_subject != -1 and have.max_msgs_per_subject != want.max_msgs_per_subject:
        problems.append(f"max_msgs_per_subject is {have.max_msgs_per_subject}, kubus needs "
                        f"{want.max_msgs_per_subject}")
    if want.sources is not None and _sources(have.sources) != _sources(want.sources):
        problems.append(f"sources are {_sources(have.sources) or 'none'}, kubus needs {_sources(want.sources)}")
    return problems


def _text(value: object) -> str:
    """An enum as the server spells it ("limits", "workqueue"); a field the server sent back as text stays."""
    return str(getattr(value, "value", value))


def _sources(sources: list[StreamSource] | None) -> list[str]:
    """Each source as `name (src -> dest, ...)`: the stream and the subject transform kubus depends on."""
    found = []
    for source in sources or []:
        transforms = ", ".join(f"{t.src} -> {t.dest}" for t in source.subject_transforms or [])
        found.append(f"{source.name} ({transforms or 'no subject transform'})")
    return sorted(found)


def _bytes(n: int | None) -> str:
    if n is None or n < 0:
        return "unlimited"
    for unit, size in (("GiB", GiB), ("MiB", MiB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def _no_responders(exc: Exception) -> bool:
    """No JetStream at all: nats-py reports a request nobody subscribes to as NoRespondersError, or, on the
    JetStream API, as a ServiceUnavailableError that carries no JetStream error code."""
    if isinstance(exc, nats.errors.NoRespondersError):
        return True
    return isinstance(exc, ServiceUnavailableError) and exc.err_code is None


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class JetStream(JetStreamContext):
    """A JetStreamContext whose publish_async futures fail when JetStream answers an error.

    nats-py (2.16) builds the error of an async publish's answer with `APIError.from_error`, which raises
    instead of returning: the exception ends its reply callback, and the future is never resolved (its
    caller waits out its own timeout, and the publish slot is held until then). Here the error fails the
    future, as it fails a synchronous publish."""

    async def _handle_async_reply(self, msg: Msg) -> None:
        try:
            await super()._handle_async_reply(msg)
        except APIError as exc:
            # the token, as nats-py cuts it out of the reply subject
            token = msg.subject[len(self._nc._inbox_prefix) + 22 + 2:]
            future = self._publish_async_futures.get(token)
            if future is not None and not future.done():
                future.set_exception(exc)


def jetstream(nc: Client, **options: Any) -> JetStreamContext:
    """nc.jetstream(**options), with async publishes that fail on JetStream's errors (JetStream above)."""
    return JetStream(nc, **options)


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
