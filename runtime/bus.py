"""Connecting to NATS and creating kubus's streams, at every start.

kubus creates the streams that are missing, as `StreamSettings` says (replicas, byte limits), and checks
the ones that exist: what kubus depends on (subjects, retention, duplicate window, the partition count,
KUBUS_STATE's source) must be as it needs, or the service refuses to start (`StreamError`, one line). It
never rewrites an existing stream: limits and replicas are the operator's once the stream exists
(docs/production.md, "Streams"). It only adds, to a KUBUS_STATE made by an earlier kubus, what only kubus
uses: the subject of the cluster's identity, and direct gets (`allow_direct`).

The partition count is fixed when the streams are first created and kept in KUBUS_EVENTS's
metadata; later starts read it from there, so every process agrees on the partitioning.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib.util
import itertools
import json
import logging
import ssl
import weakref
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import msgspec
import nats
import nats.aio.client
import nats.errors
import nats.js.errors
from nats.aio.client import _HEADER_KEY_RE, Client, _validate_subject
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
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
from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

from messages import subjects
from runtime import redact

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


class NatsAuthError(NatsUnavailable):
    """NATS answered and refused this identity (no or wrong credentials, a TLS handshake that failed): one line
    naming the failure and the flags that set the credentials. Retrying cannot fix it: the service exits."""


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

STREAMS_BY_ADMIN = ("a service's least-privilege user reads the streams and cannot create or change them; create "
                    "them first with `kubus streams ensure` as the NATS admin user (docs/production.md, "
                    "\"Securing NATS\")")
HOW = "start nats-server with JetStream (-js) there, or omit --nats-url to run an embedded one"


def seeds(url: str) -> list[str]:
    """The servers of a --nats-url: one URL, or a comma-separated list of a cluster's seed URLs (the client
    learns the rest of the cluster from whichever answers); `host:port` means `nats://host:port`."""
    found = [part.strip() for part in url.split(",") if part.strip()]
    return [part if "://" in part else f"nats://{part}" for part in found]


@dataclass(frozen=True)
class NatsAuth:
    """How a service proves who it is to NATS (runtime.flags.add_bus declares the flags). Every field is
    optional; user:password in the URL itself also works (nats-py reads it from there). The secrets are
    never in a repr, a log line or an error: errors name the flag or the file, not its content."""

    user: str | None = None  # KUBUS_NATS_USER
    password: str | None = field(default=None, repr=False)  # KUBUS_NATS_PASSWORD
    token: str | None = field(default=None, repr=False)  # KUBUS_NATS_TOKEN
    nkey: str | None = None  # --nats-nkey: a file holding an nkey seed (SU...)
    creds: str | None = None  # --nats-creds: a .creds file (a user JWT and its nkey seed)
    tls_ca: str | None = None  # --nats-tls-ca: the CA that signed the server's certificate
    tls_cert: str | None = None  # --nats-tls-cert and --nats-tls-key: a client certificate
    tls_key: str | None = None

    def tls(self) -> ssl.SSLContext | None:
        """The TLS context these flags ask for (None: none asked; a tls:// URL then gets nats-py's default)."""
        if not (self.tls_ca or self.tls_cert or self.tls_key):
            return None
        if bool(self.tls_cert) != bool(self.tls_key):
            raise NatsAuthError("--nats-tls-cert and --nats-tls-key go together: give both, or neither")
        try:
            context = ssl.create_default_context(cafile=self.tls_ca)
            if self.tls_cert and self.tls_key:
                context.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as exc:
            which = ("--nats-tls-ca " + str(self.tls_ca)) if self.tls_ca and not self.tls_cert else (
                f"--nats-tls-cert {self.tls_cert} / --nats-tls-key {self.tls_key}" if not self.tls_ca
                else f"--nats-tls-ca {self.tls_ca}, --nats-tls-cert {self.tls_cert}, --nats-tls-key {self.tls_key}")
            raise NatsAuthError(f"cannot load the NATS TLS files ({which}): {_ssl_why(exc)}") from None
        return context

    def options(self) -> dict[str, Any]:
        """nats.connect's keyword arguments for these credentials (files checked to exist first, so that a
        missing one is named, not a traceback from inside nats-py)."""
        chosen = [name for name, value in (("--nats-creds", self.creds), ("--nats-nkey", self.nkey),
                                           ("KUBUS_NATS_TOKEN", self.token), ("KUBUS_NATS_USER", self.user))
                  if value]
        if len(chosen) > 1:
            raise NatsAuthError(f"NATS credentials given twice ({', '.join(chosen)}): give one way to authenticate")
        if self.password and not self.user:
            raise NatsAuthError("KUBUS_NATS_PASSWORD without KUBUS_NATS_USER")
        options: dict[str, Any] = {}
        for flag, path in (("--nats-creds", self.creds), ("--nats-nkey", self.nkey)):
            if path is None:
                continue
            if not Path(path).is_file():
                raise NatsAuthError(f"{flag} {path}: no such file")
            if importlib.util.find_spec("nkeys") is None:  # nats-py signs the server's nonce with it
                raise NatsAuthError(f"{flag} needs the nkeys package (pip install 'nats-py[nkeys]')")
        if self.creds:
            options["user_credentials"] = self.creds
        if self.nkey:
            options["nkeys_seed"] = self.nkey
        if self.token:
            options["token"] = self.token
        if self.user:
            options["user"] = self.user
            options["password"] = self.password or ""
        tls = self.tls()
        if tls is not None:
            options["tls"] = tls
        return options


NO_AUTH = NatsAuth()


def _ssl_why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or exc.strerror or type(exc).__name__
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc) or type(exc).__name__


def where(url: str) -> str:
    """`url` without the user:password it may carry: what a message may print."""
    out = []
    for server in seeds(url):
        parts = urlsplit(server)
        out.append(f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}")
    return ",".join(out)


def auth_failure(exc: BaseException) -> str | None:
    """Why NATS refused to let this client in, if that is what `exc` says (else None): a missing or wrong
    credential (the server's 'Authorization Violation', an expired or revoked user JWT), or a TLS handshake
    that failed (an unknown CA, a server or client certificate refused)."""
    if isinstance(exc, nats.errors.AuthorizationError):
        return "authorization violation"
    text = str(exc).lower()
    for marker in ("authorization violation", "authentication expired", "authentication revoked",
                   "user authentication", "account authentication"):
        if marker in text:
            return marker
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {_ssl_why(exc)}"
    if "tls required" in text or "secure connection - tls required" in text:
        return "the server requires TLS (use a tls:// URL, or --nats-tls-ca)"
    return None


HOW_AUTH = ("give this service's NATS credentials: KUBUS_NATS_USER and KUBUS_NATS_PASSWORD, KUBUS_NATS_TOKEN, "
            "--nats-nkey or --nats-creds (and --nats-tls-ca for a server certificate of a private CA); "
            "docs/production.md, \"Securing NATS\"")


class _Denials:
    """Permission violations the server reported on one connection: a request to a subject this identity may
    not publish to is dropped by the server, which only says so asynchronously (error_cb); callers that time
    out on a request look here to say why (`denied`)."""

    def __init__(self) -> None:
        self.subjects: list[str] = []


_DENIALS: weakref.WeakKeyDictionary[Client, _Denials] = weakref.WeakKeyDictionary()
# Connections kubus itself is closing (close, _abandon): nats-py calls the disconnect callback from close() too,
# and a deliberate close is no disconnection to warn about.
_CLOSING: weakref.WeakSet[Client] = weakref.WeakSet()


def denied(nc: Client, prefix: str = "") -> str | None:
    """The last subject starting with `prefix` that NATS refused this connection (a permission violation)."""
    found = _DENIALS.get(nc)
    if found is None:
        return None
    for subject in reversed(found.subjects):
        if subject.lower().startswith(prefix.lower()):  # nats-py hands the server's error over lower-cased
            return subject
    return None


def _violation_subject(text: str) -> str | None:
    """The subject of a server's 'Permissions Violation for Publish to "SUBJECT"' (or Subscription)."""
    if "permissions violation" not in text.lower():
        return None
    start, end = text.find('"'), text.rfind('"')
    return text[start + 1:end] if 0 <= start < end else text


async def connect(url: str, name: str, *, reconnect: bool = True, timeout: float | None = None,
                  auth: NatsAuth = NO_AUTH) -> Client:
    """Connects, failing fast with a one-line explanation when nothing answers at `url` (one URL or a
    comma-separated list of seeds), or when NATS refuses `auth` (NatsAuthError); once connected, a lost
    connection is retried for ever, on any server of the cluster (and logged in one line, not a traceback).
    `timeout` bounds the whole first attempt, in seconds."""
    if timeout is None:
        return await _connect(url, name, reconnect, auth)
    try:
        return await asyncio.wait_for(_connect(url, name, reconnect, auth), timeout)
    except TimeoutError:
        raise NatsUnavailable(f"cannot reach NATS at {where(url)} (nothing answered within {timeout}s); {HOW}") \
            from None


async def _connect(url: str, name: str, reconnect: bool, auth: NatsAuth = NO_AUTH) -> Client:
    servers = seeds(url)
    if not servers:
        raise NatsUnavailable(f"no NATS URL in {where(url)!r}; {HOW}")
    options = auth.options()
    # nats-py retries a first connection for ever when reconnects are allowed: probe first, and go on when
    # any seed answers (a cluster with a server down still starts)
    probes = await asyncio.gather(*(_probe(server) for server in servers))
    if all(error is not None for error in probes):
        raise NatsUnavailable(f"cannot reach NATS at {where(url)} ({probes[0]}); {HOW}")
    nc = _Client()
    denials = _DENIALS.setdefault(nc, _Denials())
    # nats-py retries a refused first connection for ever too: the first refusal ends the attempt
    refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def on_error(exc: Exception) -> None:
        why = auth_failure(exc)
        if why is not None and not nc.is_connected and not refused.done():
            refused.set_result(why)
            return
        subject = _violation_subject(str(exc))
        if subject is not None:
            denials.subjects = [*denials.subjects[-31:], subject]
        log.warning("NATS %s: %s", name, exc or type(exc).__name__)

    async def on_disconnected() -> None:
        if nc in _CLOSING:
            log.debug("NATS %s: closed", name)
        elif nc.is_closed:  # the server went, or refused us, and this connection does not reconnect
            why = nc.last_error
            log.warning("NATS %s: disconnected; not reconnecting%s", name,
                        f" ({redact.text(str(why)) or type(why).__name__})" if why is not None else "")
        else:
            log.warning("NATS %s: disconnected; reconnecting", name)

    async def on_reconnected() -> None:
        log.info("NATS %s: reconnected to %s", name, _where(nc))

    options.update(servers=servers, name=name, connect_timeout=3, max_reconnect_attempts=-1 if reconnect else 0,
                   allow_reconnect=reconnect, reconnect_time_wait=0.5, error_cb=on_error,
                   disconnected_cb=on_disconnected, reconnected_cb=on_reconnected)
    attempt: asyncio.Future[None] = asyncio.ensure_future(nc.connect(**options))
    try:
        waited: list[asyncio.Future[Any]] = [attempt, refused]
        done, _ = await asyncio.wait(waited, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        if refused.done():
            raise NatsAuthError(f"NATS at {where(url)} refused {name}: {refused.result()}; {HOW_AUTH}")
        if attempt not in done:
            raise TimeoutError("no answer within 10 s")
        attempt.result()
        return nc
    except NatsAuthError:
        await _abandon(nc, attempt)
        raise
    except Exception as exc:  # nats-py raises several unrelated types for "nothing there"
        await _abandon(nc, attempt)
        why = auth_failure(exc)
        if why is not None:
            raise NatsAuthError(f"NATS at {where(url)} refused {name}: {why}; {HOW_AUTH}") from None
        raise NatsUnavailable(f"cannot reach NATS at {where(url)} "
                              f"({type(exc).__name__}: {redact.text(str(exc))}); {HOW}") from None
    finally:
        refused.cancel()


def stream_sequence(msg: Msg) -> int:
    """`msg.metadata.sequence.stream`, the stream sequence of a message a JetStream consumer delivered, read from its
    reply subject (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>`) without
    nats-py's whole Metadata (two dataclasses, a datetime and six ints per message: ~3% of the reconciler's CPU while
    it reads events). Any other reply (the longer form with a domain and an account, none) is nats-py's to read, with
    its errors."""
    reply = msg.reply
    if reply:
        tokens = reply.split(".")
        if len(tokens) == 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
            return int(tokens[5])
    return msg.metadata.sequence.stream


def parse_header_lines(raw: bytes) -> dict[str, str]:
    """nats-py's Client._parse_header_lines (2.16), the same result at less than half the cost: it tests a header's
    name for whitespace one character at a time through a generator, ~2.5 µs of the ~4.5 µs every message with
    headers costs to parse (every event the reconciler reads carries two: Nats-Msg-Id and
    Nats-Expected-Last-Subject-Sequence). A name containing whitespace is skipped, as there: str.split() breaks at
    the characters str.isspace() accepts, so a name splits into itself alone exactly when it has none."""
    out: dict[str, str] = {}
    for line in raw.split(b"\r\n"):
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        if key and key.split() != [key]:
            continue
        out[key] = value.strip().decode("utf-8", "replace")
    return out


class _HeaderBlock:
    """A message's header block as it arrived, parsed when its headers are first read (_Msg): the reconciler reads
    no header of the events it consumes, nor the executor of the events its index of owned pods follows, and parsing
    them was ~12% of the instructions of reading one (bench/bus_bench.py consume). A message whose headers are read
    (a pull consumer's: nats-py looks for a status in every one) pays a little more instead, a Python call per read.

    It is always truthy, where nats-py's parsed headers are None when no line of the block parses: nats-py's
    _process_msg only asks then whether a JetStream message is a control message, which an empty payload's
    `get(STATUS)` answers (parsing the block) and a payload answers without it: no, either way."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def parsed(self) -> dict[str, str] | None:
        """What nats-py's _process_headers makes of a block without an inline status."""
        return parse_header_lines(self.raw[_HEADER_LINES_AT:]) or None

    def get(self, key: str, default: str | None = None) -> str | None:
        return (self.parsed() or {}).get(key, default)


class _Msg(Msg):
    """nats-py's Msg, its headers parsed when first read (see _HeaderBlock and _headers_when_read)."""

    __slots__ = ("_headers",)
    _headers: dict[str, str] | _HeaderBlock | None


def _headers_when_read(msg: _Msg) -> dict[str, str] | None:
    found = msg._headers
    if isinstance(found, _HeaderBlock):
        found = msg._headers = found.parsed()
    return found


# nats-py's field, which Msg.__init__ sets for every message (an ack too): written straight into the slot by its own
# descriptor, with no Python call, and read through _headers_when_read
_Msg.headers = property(_headers_when_read, vars(_Msg)["_headers"].__set__)  # type: ignore[assignment]


class _Client(Client):
    """nats-py's Client, a message's headers parsed with parse_header_lines, and only when read (_Msg); the protocol
    read by _Parser, most messages queued by _deliver, and a message already queued taken at once (_Subscription)."""

    msg_class = _Msg
    _parse_header_lines = staticmethod(parse_header_lines)

    def __init__(self) -> None:
        super().__init__()
        if _AS_NATS_PY:
            self._ps = _Parser(self)

    async def _process_headers(self, headers: bytes | None) -> dict[str, str] | None:
        if not headers:
            return None  # as nats-py, without awaiting a second coroutine for every message without headers
        block = _unparsed(headers)
        if block is not None:
            return block  # type: ignore[return-value]  # handed to _Msg, or asked get()
        return await super()._process_headers(headers)

    def _deliver(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> bool:
        """What nats-py's _process_msg does with a message for a plain subscription (a pull consumer's, the replies of
        async publishes and requests) or a JetStream push consumer's data message in order, with no coroutine:
        counted, made a message, the consumer's sequences followed, queued. False, with nothing done, for any other
        message: an old-style request's, one without a subscription, one with an inline status, a push consumer's
        control message (flow control, a heartbeat: no payload) or one out of an ordered consumer's order (which
        nats-py resets), one its subscription has no room for (nats-py reports a slow consumer); nats-py's
        _process_msg takes those."""
        sub = self._subs.get(sid)
        if sub is None or sub._future is not None:
            return False
        block = None
        if headers:
            block = _unparsed(headers)
            if block is None:
                return False
        size = len(data)
        limit = sub._pending_bytes_limit
        queue = sub._pending_queue
        if (limit > 0 and sub._pending_size + size >= limit) or queue.full():
            return False
        jsi = sub._jsi
        sequences = None
        if jsi is not None:
            if not size:
                return False
            if jsi._ordered and reply:
                sequences = _ordered_sequences(reply, jsi._dseq)
                if sequences is None:
                    return False
        stats = self.stats
        stats["in_msgs"] += 1
        stats["in_bytes"] += size
        sub._received += 1
        if 0 < sub._max_msgs <= sub._received:
            self._subs.pop(sid, None)  # its last message: as nats-py, the subscription goes, its queue stays
        msg = self._build_message(sid, subject, reply, data, block)  # type: ignore[arg-type]  # _Msg takes a block
        if jsi is not None:
            jsi._active = True
            if sequences is not None:
                jsi._sseq, jsi._dseq = sequences
        sub._pending_size += size
        queue.put_nowait(msg)
        if jsi is not None:
            jsi.track_sequences(msg.reply)
        return True

    async def subscribe(self, *args: Any, **kwargs: Any) -> Subscription:
        sub = await super().subscribe(*args, **kwargs)
        # nats-py makes its Subscription by name inside subscribe(): the class is swapped once it is made (the same
        # layout, a method more), before anyone can call it
        if _AS_NATS_PY and type(sub) is Subscription:
            sub.__class__ = _Subscription
        return sub


class _Subscription(Subscription):
    """nats-py's Subscription, whose next_msg hands over a message already received at once.

    nats-py's next_msg makes, for every message, a uuid, a task and a timeout around the queue's get, even when the
    message is there already: a pull consumer's fetch of a batch takes each message with a next_msg (its statuses
    too), and so does the replay's push consumer: the reconciler's ~5,000 results of the 5,000-node apply cost
    ~5,700 tasks. A message waiting in the queue is handed over here as nats-py's would hand it over, its size
    and the queue's task done; anything else (an empty queue, no time left, which nats-py's wait_for answers with a
    timeout even when a message waits, a callback's subscription, a closed connection) is nats-py's next_msg."""

    async def next_msg(self, timeout: float | None = 1.0) -> Msg:
        queue = self._pending_queue
        if queue.empty() or (timeout is not None and timeout <= 0) or self._cb or self._conn.is_closed:
            return await super().next_msg(timeout)
        msg = queue.get_nowait()
        self._pending_size -= len(msg.data)
        queue.task_done()
        return msg


PULL_EXPIRES = 30.0  # seconds a pull request of Pull stays open on the server (it then ends with a 408)
PULL_HEARTBEAT = 5.0  # seconds between the server's heartbeats on an idle pull request (Pull)


class ConsumerDeleted(Exception):
    """The server ended a pull: its consumer was deleted (409 Consumer Deleted). The consumer must be bound again."""


class Pull:
    """A pull consumer's messages taken as they come, through pull requests kept open: `take` hands over what has
    arrived as soon as there is one message, with no request of its own.

    nats-py's fetch(n, timeout) makes a request per call, a task, a wait_for task and a uuid4 for every message it
    waits for, and once its first message came it waits for the rest of its batch until its timeout ends: messages
    that trickle in (a reconciler's results) come in lumps a timeout apart, and an idle consumer costs a request and
    its 408 per timeout. Here one request of `batch` messages stays open for `expires` seconds, and another is made
    when fewer than half the batch are still to come (what a request has delivered is counted off it; its end, a 408
    or 409 from the server, says how many it had left: Nats-Pending-Messages). The server sends a heartbeat every
    `heartbeat` seconds of an idle request: a pull not heard from for two of them is taken for lost (a reconnect to
    a server that never had it, or lost it), as is every pull made before a reconnect, and made again (a request
    wrongly taken for lost only delivers more than the batch: the consumer's max_ack_pending bounds it).
    Statuses: 100 (heartbeat) is kept here; 409 Consumer Deleted raises ConsumerDeleted; 404, 408 and the other 409s
    (Exceeded MaxWaiting, Leadership Change) end a request, with the count of its messages left when the server
    gives it, else taken as ending all (a request is made again); anything else is nats-py's error for it
    (APIError.from_msg), and a request is made again at the next take.

    `close` ends the pull (the server drops requests nobody listens to) and returns what was delivered before, so that
    the caller can hand it back (nak) rather than strand it until its ack wait."""

    def __init__(self, sub: JetStreamContext.PullSubscription, batch: int, *, expires: float = PULL_EXPIRES,
                 heartbeat: float = PULL_HEARTBEAT) -> None:
        if not 0 < heartbeat < expires:
            raise ValueError(f"a pull's heartbeat ({heartbeat} s) must be shorter than its expiry ({expires} s)")
        self._sub: Subscription = sub._sub
        self._nc: Client = sub._nc
        self._subject = sub._nms
        self._inbox = sub._deliver
        self._batch = batch
        self._request = json.dumps({"batch": batch, "expires": int(expires * 1e9),
                                    "idle_heartbeat": int(heartbeat * 1e9)}).encode()
        self._heartbeat = heartbeat
        self._to_come = 0  # messages the open requests may still deliver
        self._heard = 0.0  # the loop's time the server was last heard from on this pull
        self._reconnects = -1  # the connection's reconnect count when the open requests were made

    async def take(self, timeout: float) -> list[Msg]:
        """The messages delivered so far, waiting up to `timeout` seconds for the first: [] when none came."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        queue = self._sub._pending_queue
        taken: list[Msg] = []
        while True:
            while not queue.empty():
                self._took(queue.get_nowait(), taken, loop.time())
            await self._request_more(loop.time())  # before handing over: the server delivers meanwhile
            if taken:
                return taken
            # until the deadline, or until a live pull's heartbeat is overdue: whichever comes first
            wait = min(deadline, self._heard + 2 * self._heartbeat) - loop.time()
            try:
                async with asyncio.timeout(max(wait, 0.0)):
                    msg = await queue.get()
            except TimeoutError:
                if loop.time() >= deadline:
                    return taken
                continue
            self._took(msg, taken, loop.time())

    def _took(self, msg: Msg, taken: list[Msg], now: float) -> None:
        """Accounts for a message taken from the subscription's queue (as nats-py's next_msg does) and keeps it, or
        reads it as the server's status of a request."""
        self._sub._pending_size -= len(msg.data)
        self._sub._pending_queue.task_done()
        self._heard = now
        if msg.reply:  # a JetStream message (its ack subject); the server's statuses have none
            taken.append(msg)
            self._to_come -= 1
        else:
            self._status(msg)

    async def _request_more(self, now: float) -> None:
        reconnects = self._nc.stats["reconnects"]
        if reconnects != self._reconnects or now - self._heard >= 2 * self._heartbeat:
            self._to_come = 0  # made before a reconnect, or not heard from: taken for lost
        if self._to_come * 2 >= self._batch:  # half of a request or more still to come
            return
        await self._nc.publish(self._subject, self._request, reply=self._inbox)
        self._to_come = max(self._to_come, 0) + self._batch
        self._heard, self._reconnects = now, reconnects

    def _status(self, msg: Msg) -> None:
        headers = msg.headers or {}
        status = headers.get("Status")
        if status == "100":
            return
        description = headers.get("Description", "")
        if status == "409" and description.lower() == "consumer deleted":
            raise ConsumerDeleted(f"consumer {self._subject.rsplit('.', 1)[-1]}: {description}")
        if status in ("404", "408", "409"):  # one request ended, with this many of its messages undelivered
            left = headers.get("Nats-Pending-Messages")
            self._to_come = max(self._to_come - int(left), 0) if left and left.isdigit() else 0
            return
        self._to_come = 0  # an error instead of messages (503: no JetStream answered the request): ask again
        nats.js.errors.APIError.from_msg(msg)

    async def close(self) -> list[Msg]:
        """Ends the pull: unsubscribes (the server drops the open requests) once the messages it sent before are in,
        and returns them (not acked), with any not taken yet."""
        sub, nc = self._sub, self._nc
        if sub._closed:
            return []
        if not nc.is_closed and not nc.is_reconnecting:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await nc._send_unsubscribe(sub._id)
                await nc.flush()  # what the server sent before it removed the subscription is in once it answers
        nc._remove_sub(sub._id)
        sub._closed = True
        queue = sub._pending_queue
        left: list[Msg] = []
        while not queue.empty():
            msg = queue.get_nowait()
            queue.task_done()
            if msg.reply:
                left.append(msg)
        sub._pending_size = 0
        return left


def _ordered_sequences(reply: bytes, expected: int) -> tuple[int, int] | None:
    """An ordered consumer's next (stream sequence, consumer sequence) after a message with this reply subject
    (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>`), when its consumer
    sequence is the one `expected`; None when it is not (nats-py resets the consumer), or for a reply of another form
    (nats-py reads it, or refuses it)."""
    tokens = reply.split(b".")
    if len(tokens) != 9 or tokens[0] != b"$JS" or tokens[1] != b"ACK":
        return None
    stream, consumer = tokens[5], tokens[6]
    if not (stream.isdigit() and consumer.isdigit()) or int(consumer) != expected:
        return None
    return int(stream), expected + 1


def _unparsed(headers: bytes) -> _HeaderBlock | None:
    """A header block to parse when read (_HeaderBlock), or None for one nats-py parses at once: an inline status (a
    heartbeat, flow control, a fetch's "404 No Messages"), or every block when fast_mail_parser parses them."""
    if _LAZY_HEADERS and len(headers) > _HEADER_LINES_AT and headers[_INLINE_STATUS_AT] != _SPACE:
        return _HeaderBlock(headers)
    return None


class _Parser(Parser):
    """nats-py's protocol parser, reading the messages a read brought in one loop.

    nats-py's parse matches every control line against its regular expressions (an HMSG against MSG's first), keeps
    each message's fields in a dict, copies its payload twice out of a bytearray it then cuts twice, and awaits
    _process_msg, a coroutine, for every message: an event of ~2.6 kB with its headers cost ~5.8 µs of CPU to read
    and queue, ~3.9 µs here. Here a MSG or HMSG line as nats-server writes it (its fields separated by one space, the
    sizes in digits, headers for an HMSG) is split, its payload sliced once out of the read, and the message handed
    over by _Client._deliver without a coroutine when it can (most can); any other message is awaited in nats-py's
    _process_msg, as before. A message cut by the end of a read is kept, from its control line on, until the reads
    that complete it have come (counted in `_frame`, so that a large one is gathered, not joined again at every
    read).

    Anything else (INFO, PING, PONG, +OK, -ERR, a line nats-py would refuse, a line this does not read as the server
    writes it) is handed, with the rest of the read, to nats-py's parse, which reads it as it always did; and so is
    every read while nats-py is inside a message it began. A reset (a reconnect) during an awaited _process_msg
    ends the loop, as it ends nats-py's."""

    def __init__(self, nc: _Client) -> None:
        self._resets = 0  # reset() counts: before nats-py's __init__, which resets
        self._frame = 0  # bytes the message at the start of `buf` needs in all; 0 when not known
        super().__init__(nc)

    def reset(self) -> None:
        super().reset()
        self._resets += 1
        self._frame = 0

    async def parse(self, data: bytes = b"") -> None:
        if self.state != AWAITING_CONTROL_LINE:
            await super().parse(data)  # nats-py began a message: its own to finish
            return
        if self._frame:
            if len(self.buf) + len(data) < self._frame:
                self.buf.extend(data)  # still not the whole message
                return
            self._frame = 0
        buf = b"".join((self.buf, data)) if self.buf else bytes(data)
        nc: _Client = self.nc
        deliver = nc._deliver
        resets = self._resets
        pos, length = 0, len(buf)
        handover = False
        try:
            while pos < length:
                eol = buf.find(_CRLF, pos)
                if eol < 0:
                    break
                line = buf[pos:eol]
                fields = line.split(b" ")
                count = len(fields)
                verb = fields[0]
                if verb == b"HMSG" and (count == 5 or count == 6):
                    header_size = fields[-2]
                    reply = fields[3] if count == 6 else b""
                elif verb == b"MSG" and (count == 4 or count == 5):
                    header_size = b""
                    reply = fields[3] if count == 5 else b""
                else:
                    handover = True
                    break
                sid, total = fields[2], fields[-1]
                # one space between fields and no other whitespace in the line (tokens split alike at any whitespace)
                if (not (sid.isdigit() and total.isdigit() and (not header_size or header_size.isdigit()))
                        or len(line.split()) != count):
                    handover = True
                    break
                start = eol + 2
                if count == 5 and header_size and not buf.startswith(_HEADER_VERSION, start):
                    # nats-py's expression tries an HMSG's header size as a reply first, and reads on past the line
                    # when what has come after it starts with digits; nats-server's header blocks never do, and
                    # until their start has come nats-py is left to read it with what has come
                    handover = True
                    break
                end = start + int(total)
                if end + 2 > length:
                    self._frame = end + 2 - pos
                    break
                if header_size:
                    at = start + int(header_size)
                    headers: bytes | None = buf[start:at]
                    payload = buf[at:end]
                else:
                    headers, payload = None, buf[start:end]
                pos = end + 2  # nats-py skips the two bytes after a payload without reading them
                number = int(sid)
                subject = fields[1]
                if not deliver(number, subject, reply, payload, headers):
                    await nc._process_msg(number, subject, reply, payload, headers)  # type: ignore[arg-type]
                    if self._resets != resets:
                        return
        finally:
            if self._resets == resets:
                self.buf = bytearray(buf[pos:]) if pos < length else bytearray()
        if handover:
            await super().parse()


async def _abandon(nc: Client, attempt: asyncio.Future[None]) -> None:
    _CLOSING.add(nc)
    attempt.cancel()
    with contextlib.suppress(BaseException):
        await attempt
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), CLOSE_TIMEOUT)


def _where(nc: Client) -> str:
    """host:port of the server `nc` is connected to: netloc would carry the URL's user and password."""
    url = nc.connected_url
    return f"{url.hostname}:{url.port}" if url is not None else "?"


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
    acks of what it published; what it acked or naked is flushed here. A close through here is logged at debug
    level only: the disconnect warning is for a connection lost."""
    _CLOSING.add(nc)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.flush(), CLOSE_TIMEOUT)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), CLOSE_TIMEOUT)


@contextlib.asynccontextmanager
async def connected(url: str, name: str, *, prefix: str, partitions: int,
                    settings: StreamSettings | None = None, timeout: float | None = None,
                    auth: NatsAuth = NO_AUTH) -> AsyncIterator[Bus]:
    """A connection to `url` as `auth` with kubus's streams ensured, closed on the way out. run_service
    connects every service this way; a service run on its own (tests, benchmarks) connects itself with it too."""
    nc = await connect(url, name, timeout=timeout, auth=auth)
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
    js = jetstream(nc)  # the bus's publishers (the executor's results, the relay's actions) publish with it
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ENSURE_TIMEOUT
    while True:
        try:
            partitions = await _ensure_all(js, prefix, partitions, history_max_age, settings)
            return Bus(nc, js, prefix, partitions, settings)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, ServiceUnavailableError,
                PeersCatchingUp) as exc:
            refused = denied(nc, "$JS.API.STREAM.")
            if refused is not None:  # the server dropped the request: waiting will not change that
                # nats-py lower-cases the server's error; the API's tokens and kubus's stream names are upper-case
                raise StreamError(f"this NATS identity may not publish to {refused.upper()} (a permission "
                                  f"violation): "
                                  f"{STREAMS_BY_ADMIN}") from None
            if _no_responders(exc):  # nothing serves the JetStream API there: no election will change that
                raise StreamError("JetStream does not answer on this NATS: start nats-server with JetStream "
                                  "(-js, or a jetstream block in its configuration)") from None
            # no answer yet, or "JetStream system temporarily unavailable" (a cluster electing leaders)
            if loop.time() > deadline:
                if isinstance(exc, PeersCatchingUp):
                    raise StreamError(f"cannot place the replicas of stream {exc}, for {ENSURE_TIMEOUT:g} s; see "
                                      "--stream-replicas") from None
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
    await _renew_state(js, prefix, partitions, history_max_age, settings)
    return partitions


def identity(info: StreamInfo) -> str:
    """A stream's identity: its creation time as the server reports it. A stream deleted and created again (by an
    operator, or by kubus after JetStream lost its data) has another one, and numbers its messages from 1 again."""
    if info.created is None:  # every nats-server kubus runs on (2.10 and later) reports it
        raise StreamError(f"stream {info.config.name} reports no creation time; kubus needs nats-server 2.10 or later")
    return info.created.isoformat()


async def events_info(bus: Bus) -> StreamInfo:
    """KUBUS_EVENTS's info: its identity (`identity`) and how far it goes."""
    return await bus.js.stream_info(bus.stream(subjects.EVENTS_STREAM))


async def renew_state(bus: Bus) -> bool:
    """Rebuilds KUBUS_STATE when it was built from an earlier KUBUS_EVENTS (see _renew_state): True if it did."""
    return await _renew_state(bus.js, bus.prefix, bus.partitions, HISTORY_MAX_AGE, bus.settings)


async def _renew_state(js: JetStreamContext, prefix: str, partitions: int, history_max_age: float,
                       settings: StreamSettings) -> bool:
    """KUBUS_STATE is created after KUBUS_EVENTS and copies it; a KUBUS_STATE older than KUBUS_EVENTS holds the
    objects of a stream that is gone, with sequences of that stream (which the reconciler's bootstrap and cache
    order by), and JetStream does not copy the new stream into it (its source waits for the old stream's next
    sequence). It is derived data: deleted and created again, it copies the new KUBUS_EVENTS from its start,
    and ingest's relist into the new stream fills both. Two processes doing it at once cost one more copy."""
    events_name = subjects.stream_name(subjects.EVENTS_STREAM, prefix)
    events, state = await _info(js, events_name), await _info(js, subjects.stream_name(subjects.STATE_STREAM, prefix))
    if events is None or state is None or events.created is None or state.created is None:
        return False
    if state.created >= events.created:
        return False
    log.error("stream %s (created %s) holds the state of an earlier %s, not of the one created %s: "
              "rebuilding it from %s (ingest relists into it)", state.config.name, identity(state), events_name,
              identity(events), events_name)
    want = wanted(prefix, partitions, history_max_age, settings)[1]
    assert want.name is not None and want.name == state.config.name
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(want.name)
    # its limits were the operator's: keep them, as for every stream kubus did not just create
    keep = state.config
    await _ensure(js, dataclasses.replace(want, num_replicas=keep.num_replicas or settings.replicas,
                                          max_bytes=keep.max_bytes, max_age=keep.max_age, placement=keep.placement),
                  settings)
    return True


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
            # the executor reads a deleted object's last event by its subject (executor/laststate.py)
            allow_direct=True,
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
NO_SUITABLE_PEERS = 10005  # JetStream's err_code: no peers for a stream's placement, with the reasons after it


class PeersCatchingUp(Exception):
    """JetStream placed no replicas only because a peer is offline to its meta leader: a server restarting, or a
    cluster just started whose leader has not heard from every peer yet. ensure_streams waits for it."""


def peers_catching_up(exc: APIError) -> bool:
    """Whether a stream's placement failed for offline peers alone ("no suitable peers for placement, peer
    offline"), which passes as they report in; not for too little storage or too few servers, which does not."""
    if exc.err_code != NO_SUITABLE_PEERS:
        return False
    _, _, reasons = (exc.description or "").partition("placement")
    found = {r.strip() for r in reasons.strip(" ,:").split(",") if r.strip()}
    return bool(found) and found <= {"peer offline"}


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
            if peers_catching_up(exc):
                raise PeersCatchingUp(f"{want.name}: {exc.description}") from None
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
    if want.allow_direct and not have.allow_direct:
        await _allow_direct(js, want.name)
    if have.num_replicas != settings.replicas:
        # the operator's (or an earlier start's) choice stands: kubus never rewrites a stream
        log.info("stream %s keeps its %s replicas (--stream-replicas %d applies to streams kubus creates)",
                 want.name, have.num_replicas, settings.replicas)


async def _add_identity_subject(js: JetStreamContext, want: StreamConfig, have: StreamConfig) -> bool:
    """KUBUS_STATE made by a kubus before issue 15 has no subject of its own; the cluster's identity needs one
    (`<prefix>.cluster`). One of the two changes kubus makes to an existing stream (`_allow_direct` the other),
    once: it adds what only kubus uses and touches nothing else, through the server's own view of the
    configuration (nats-py's StreamConfig would drop fields it does not know). Returns whether it changed the
    stream."""
    assert want.name is not None
    if have.subjects or not want.sources or not want.subjects:
        return False
    if incompatibilities(replace(want, subjects=None), have):
        return False  # another problem: say so rather than change anything
    answer = await _stream_api(js, "INFO", want.name)
    if "error" in answer:
        raise StreamError(f"cannot read stream {want.name}: {answer['error'].get('description', answer['error'])}")
    config = answer["config"]
    if config.get("subjects"):
        return False  # another service added it meanwhile
    config["subjects"] = list(want.subjects)
    answer = await _stream_api(js, "UPDATE", want.name, config)
    if "error" in answer:
        raise StreamError(f"cannot add subject {want.subjects[0]} to stream {want.name} (the cluster's identity): "
                          f"{answer['error'].get('description', answer['error'])}; {FIX}")
    log.info("stream %s: added its subject %s, where ingest records the cluster's identity", want.name,
             want.subjects[0])
    return True


async def _allow_direct(js: JetStreamContext, name: str) -> None:
    """Turns direct gets on for a KUBUS_STATE made before the executor read it by them (issue 25), as
    `_add_identity_subject` adds its subject: through the server's view of the configuration. Only the admin
    identity may (docs/nats-permissions.conf); refused, the stream stays as it is and the executor reads every
    object it deletes first (executor/laststate.py), until `kubus streams ensure` runs as the admin."""
    refusal = None
    try:
        answer = await _stream_api(js, "INFO", name)
        if "error" not in answer:
            answer = await _stream_api(js, "UPDATE", name, answer["config"] | {"allow_direct": True})
        if "error" in answer:
            refusal = str(answer["error"].get("description", answer["error"]))
    except nats.errors.TimeoutError:  # a permission violation drops the request: the server never answers it
        refusal = f"{denied(js._nc, '$JS.API.STREAM.') or 'no answer'} (is this the admin identity?)"
    if refusal is not None:
        log.warning("stream %s: cannot turn on allow_direct (%s): executors read each object they delete first; "
                    "run `kubus streams ensure` as the NATS admin user", name, refusal)
        return
    log.info("stream %s: turned on allow_direct, which executors read deleted objects' last events by", name)


async def _stream_api(js: JetStreamContext, verb: str, name: str, config: dict[str, Any] | None = None,
                      ) -> dict[str, Any]:
    """JetStream's answer to `$JS.API.STREAM.<verb>.<name>` with `config`, as the server sent it (nats-py's
    StreamConfig would drop fields it does not know)."""
    body = b"" if config is None else json.dumps(config).encode()
    answer: dict[str, Any] = json.loads((await js._nc.request(f"$JS.API.STREAM.{verb}.{name}", body, timeout=5)).data)
    return answer


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
    """nats-py's JetStreamContext with a leaner asynchronous publish, whose futures also fail when JetStream answers
    an error.

    The error: nats-py (2.16) builds the error of an async publish's answer with `APIError.from_error`, which
    raises instead of returning: the exception ends its reply callback, and the future is never resolved (its
    caller waits out its own timeout, and the publish slot is held until then). Here the error fails the future, as
    it fails a synchronous publish.

    The cost: ingest publishes every watch event, the executor every result and the relay every action this way,
    and nats-py spends on each, besides the write, a NUID and two random bytes for the reply's token, a timeout
    context around taking a slot of the pending window, copies of the reply subject, and on its ack `json.loads`
    and a PubAck built field by field. Here the token is a counter (unique under the reply prefix, itself a new
    NUID for every context), the slot is taken without a timeout context when one is free, and a plain ack
    decodes straight into its PubAck. What is sent, what a future holds, the window, and the errors are nats-py's:
    a publish with nats-py's other options (`stream`, `msg_ttl`, `wait_stall`) and an answer that is not a plain
    ack go through nats-py's own code."""

    def __init__(self, conn: Client, **options: Any) -> None:
        super().__init__(conn, **options)
        self._tokens = itertools.count()
        self._reply_prefix = ""  # _async_reply_prefix as text, once nats-py has made it
        self._token_at = 0  # where the token starts in a reply subject

    async def publish_async(self, subject: str, payload: bytes = b"", wait_stall: float | None = None,
                            stream: str | None = None, headers: dict[str, Any] | None = None,
                            msg_ttl: float | None = None) -> asyncio.Future[PubAck]:
        if wait_stall is not None or stream is not None or msg_ttl is not None:
            return await super().publish_async(subject, payload, wait_stall=wait_stall, stream=stream,
                                               headers=headers, msg_ttl=msg_ttl)
        if not self._reply_prefix:
            if not self._async_reply_prefix:
                await self._init_async_reply()
            assert self._async_reply_prefix is not None
            self._reply_prefix = self._async_reply_prefix.decode()
            self._token_at = len(self._reply_prefix)
        try:  # a slot of the window, waited for when none is free; a cancellation meanwhile is nats-py's error
            await self._publish_async_pending_semaphore.acquire()
        except asyncio.CancelledError:
            raise nats.js.errors.TooManyStalledMsgsError from None
        token = str(next(self._tokens))
        future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        future.add_done_callback(functools.partial(self._settled, token))
        self._publish_async_futures[token] = future
        if self._publish_async_completed_event.is_set():
            self._publish_async_completed_event.clear()
        await self._write(subject, payload, self._reply_prefix + token, headers)
        return future

    async def _write(self, subject: str, payload: bytes, reply: str, headers: dict[str, Any] | None) -> None:
        """`self._nc.publish(subject, payload, reply=reply, headers=headers)`: the same bytes handed to the
        connection's pending buffer, the same errors, the same statistics and flush.

        nats-py builds a message's headers with a bytearray extended piece by piece, a regular expression
        matched against every key, a strip, translate and encode of every value, then copies the payload twice
        into the command (`hdr + payload`, `+ CRLF`); for ingest's ~2,5 kB events with their two headers that
        was its largest own cost per event. Here the keys seen are validated and encoded once, a value is only
        translated when it holds a CR or LF, and the command is joined once. The checks nats-py makes first (the
        subjects, the connection's state, the payload's size) are its own: only a connected client, a payload
        within max_payload and headers whose keys nats-py keeps as they are take this path; anything else (and
        any nats-py but the one this copies, _NATS_PY) goes through nc.publish, which raises what it raises."""
        nc = self._nc
        if (not _AS_NATS_PY or not headers or nc._status != Client.CONNECTED
                or len(payload) > nc._max_payload):
            await nc.publish(subject, payload, reply=reply, headers=headers)
            return
        if not nc._skip_subject_validation:
            _validate_subject(subject)
            _validate_subject(reply)
        parts = [_HEADER_LINE]
        keys = _HEADER_KEYS
        for key, value in headers.items():
            name = keys.get(key)
            if name is None:
                if not _plain_header_key(key):
                    await nc.publish(subject, payload, reply=reply, headers=headers)  # skips or refuses it
                    return
                name = keys[key] = key.encode() + b": "
            value = value.strip()
            if "\r" in value or "\n" in value:
                value = value.translate(_HEADER_VALUE_NEWLINES)
            parts.append(name)
            parts.append(value.encode())
            parts.append(_CRLF)
        parts.append(_CRLF)
        head = b"".join(parts)
        command = b"".join((f"HPUB {subject} {reply} {len(head)} {len(head) + len(payload)}\r\n".encode(),
                            head, payload, _CRLF))
        nc.stats["out_msgs"] += 1
        nc.stats["out_bytes"] += len(payload)
        await nc._send_command(command)
        if nc._flush_queue is not None and nc._flush_queue.empty():
            await nc._flush_pending()

    def _settled(self, token: str, _: asyncio.Future[PubAck]) -> None:
        """nats-py's done-callback of an async publish: forgets the future and gives its slot back."""
        futures = self._publish_async_futures
        futures.pop(token, None)
        if not futures:
            self._publish_async_completed_event.set()
        self._publish_async_pending_semaphore.release()

    async def _handle_async_reply(self, msg: Msg) -> None:
        if self._token_at and not msg.headers:
            future = self._publish_async_futures.get(msg.subject[self._token_at:])
            if future is None or future.done():
                return
            try:
                ack = _PLAIN_ACK.decode(msg.data)
            except msgspec.DecodeError:
                pass  # an error, or an ack with more than a plain one says: nats-py reads it
            else:
                future.set_result(PubAck(stream=ack.stream, seq=ack.seq, domain=ack.domain, duplicate=ack.duplicate))
                return
        try:
            await super()._handle_async_reply(msg)
        except APIError as exc:
            # the token, as nats-py cuts it out of the reply subject
            token = msg.subject[len(self._nc._inbox_prefix) + 22 + 2:]
            future = self._publish_async_futures.get(token)
            if future is not None and not future.done():
                future.set_exception(exc)


# JetStream._write writes a message as this nats-py's Client._send_publish does (tests/pipeline/test_publish_async.py
# compares the bytes), and _Client hands over a message's headers as its _process_headers does
# (tests/unit/test_bus_lazy_headers.py); another version's may differ, so it is left to nats-py's own code
_NATS_PY: Final = "2.16.0"
_AS_NATS_PY: Final = nats.aio.client.__version__ == _NATS_PY
# nats-py parses header blocks with its _parse_header_lines unless fast_mail_parser is installed: then they are its
_LAZY_HEADERS: Final = _AS_NATS_PY and nats.aio.client.parse_email is None  # type: ignore[attr-defined]
_HEADER_LINE: Final = b"NATS/1.0\r\n"
_HEADER_VERSION: Final = b"NATS/"  # how every header block nats-server sends begins
# a header block's lines start after _HEADER_LINE; an inline status (a heartbeat, flow control, "404 No Messages")
# follows the version after a space instead of its CRLF
_HEADER_LINES_AT: Final = len(_HEADER_LINE)
_INLINE_STATUS_AT: Final = _HEADER_LINE.index(b"\r")
_SPACE: Final = ord(" ")
_CRLF: Final = b"\r\n"
_HEADER_VALUE_NEWLINES: Final = str.maketrans({"\r": " ", "\n": " "})  # nats-py's: a CR or LF becomes a space
# header key -> its bytes and ": ", for the keys already found plain (the few kubus sends: Nats-Msg-Id and the like)
_HEADER_KEYS: dict[str, bytes] = {}


def _plain_header_key(key: object) -> bool:
    """A key nats-py writes as it is: a str of a header token's characters only (nats-py's _HEADER_KEY_RE, which
    has no space, so its strip() changes nothing); it strips spaces around one, skips an empty one and refuses
    other characters."""
    return isinstance(key, str) and _HEADER_KEY_RE.fullmatch(key) is not None


class _PlainAck(msgspec.Struct, forbid_unknown_fields=True):
    """A JetStream publish ack with nothing but what PubAck.from_response would take of it (an error, a batch's
    fields or a counter's value are other fields, and go through nats-py's reading)."""

    stream: str
    seq: int
    domain: str | None = None
    duplicate: bool | None = None


_PLAIN_ACK: Final = msgspec.json.Decoder(_PlainAck)


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


# What a message's headers cost beyond their text ("NATS/1.0\r\n", ": " and "\r\n" per header, the closing
# "\r\n"), with room to spare: the server counts headers and payload together against max_payload.
HEADER_OVERHEAD = 64
# Room kept below max_payload for what is added around a payload after its size was decided: the headers
# (Nats-Msg-Id and the like), and the decision id the store writes into an action planned with 0.
ENVELOPE_HEADROOM = 4096
# JetStream's answer for a message larger than a stream's max_msg_size (NATS's JSStreamMessageExceedsMaximumErr)
MESSAGE_TOO_LARGE = 10054


def bus_away(exc: BaseException) -> bool:
    """Whether `exc` means NATS did not answer (a server restarting, a stream electing its leader, the
    connection reconnecting): the caller waits and tries the whole unit of work again, as for a database
    that is away (store.errors.database_away). False for what a retry cannot fix."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, _BUS_AWAY):
            return True
        if isinstance(current, APIError) and current.code == 503:
            return True  # JetStream "no leader" / not available: an election under way
        current = current.__cause__ or current.__context__
    return False


_BUS_AWAY = (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.errors.ConnectionClosedError,
             nats.errors.NoServersError, nats.errors.ConnectionReconnectingError, nats.errors.StaleConnectionError,
             nats.errors.FlushTimeoutError, ServiceUnavailableError)


def wire_size(payload: bytes, headers: dict[str, str] | None = None) -> int:
    """What NATS counts against max_payload for a message: its payload and its headers together."""
    if not headers:
        return len(payload)
    size = len(payload) + HEADER_OVERHEAD
    for key, value in headers.items():  # a loop, not sum() over a generator: called for every message published
        size += len(key) + len(value) + 4
    return size


def payload_limit(nc: Client) -> int:
    """The largest payload kubus plans to publish on `nc`: the server's max_payload (from its INFO, read at
    every (re)connect) less ENVELOPE_HEADROOM."""
    return max(nc.max_payload - ENVELOPE_HEADROOM, 1)


class TooLarge(ValueError):
    """A message NATS will never take: larger than max_payload (or than the stream's max_msg_size)."""


def too_large(exc: BaseException | None) -> bool:
    """Whether NATS refused a message for its size: nats-py's own check against the server's max_payload
    ("nats: maximum payload exceeded") or JetStream's for the stream's max_msg_size. Publishing it again
    cannot succeed."""
    if isinstance(exc, TooLarge | nats.errors.MaxPayloadError):
        return True
    if isinstance(exc, APIError):
        return exc.err_code == MESSAGE_TOO_LARGE or "maximum payload" in (exc.description or "").lower()
    return exc is not None and "maximum payload exceeded" in str(exc).lower()


# nats-py's publish_async takes a slot of its pending window (a semaphore) and registers the ack's future
# before it writes the message; when the write raises (the payload over max_payload, the reconnect buffer
# full, the connection closed) the future is never resolved and the slot never given back. Every such
# failure would shrink the window for good, until publish_async blocks for ever. These are the errors the
# write raises after the future was registered (and nothing else can have run in between).
_AFTER_REGISTERING = (nats.errors.MaxPayloadError, nats.errors.OutboundBufferLimitError,
                      nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError,
                      nats.errors.BadSubjectError)


async def publish_async_bounded(js: JetStreamContext, subject: str, payload: bytes,
                                headers: dict[str, str]) -> asyncio.Future[PubAck]:
    """js.publish_async that never leaks a slot of nats-py's window, and never writes a message NATS would
    refuse for its size (the server counts the headers too and closes the connection of a client that
    sends more than max_payload): such a message, or a write that failed, is a future holding the error
    (TooLarge for the size), to be handled with the others' acks."""
    size, limit = wire_size(payload, headers), max_payload_of(js)
    if limit is not None and size > limit:
        return _failed(TooLarge(f"{size} bytes on {subject}, over NATS's max_payload {limit}"))
    try:
        return await js.publish_async(subject, payload, headers=headers)
    except asyncio.CancelledError:
        raise
    except _AFTER_REGISTERING as exc:
        _release_orphan(js)
        return _failed(exc)


def _failed(exc: BaseException) -> asyncio.Future[PubAck]:
    """A future holding `exc`: made only when a publish fails, not for every message beforehand."""
    failed: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
    failed.set_exception(exc)
    return failed


def max_payload_of(js: JetStreamContext) -> int | None:
    """The max_payload of the connection `js` publishes on (None for a stand-in without one, in tests)."""
    nc: Client | None = getattr(js, "_nc", None)
    return None if nc is None else nc.max_payload


def _release_orphan(js: JetStreamContext) -> None:
    """Resolves the future publish_async registered before its write raised: the last one registered (the
    write raises synchronously after registering, so no other publish can have come in between), which
    gives its slot back through nats-py's own done-callback."""
    futures: dict[str, asyncio.Future[Any]] | None = getattr(js, "_publish_async_futures", None)
    if not futures:
        return
    orphan = next(reversed(futures.values()))
    if not orphan.done():
        orphan.cancel()


async def publish_async(js: JetStreamContext, subject: str, payload: bytes, headers: dict[str, str]) -> Sent:
    """publish_async, keeping what was sent, so that `stored` can publish it again (a failed write is a
    failed ack: see publish_async_bounded)."""
    return Sent(await publish_async_bounded(js, subject, payload, headers), subject, payload, headers)


async def stored(js: JetStreamContext, sent: Sequence[Sent], *, timeout: float = 30.0,
                 ack_wait: float = ACK_WAIT, refused: list[Sent] | None = None) -> None:
    """Returns once JetStream has stored every message `sent`; raises the last error after `timeout`.

    nats-py's publish_async futures never time out: an ack lost to a reconnect (the server restarted, or the
    leader moved) would be waited for for ever, and every later publish waited behind it. A message whose ack
    has not come within `ack_wait`, or that failed, is published again, synchronously, with the same
    Nats-Msg-Id (which every kubus message carries): JetStream stores it once whatever the first attempt did.
    An error JetStream answers (an APIError: the payload too large, no stream) is raised at once; with
    `refused`, a message NATS refuses for its size (`too_large`) is added to it instead, and the others are
    still waited for: publishing it again could never succeed, and must not hold back the rest."""
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
        if refused is not None and too_large(error):
            refused.append(message)
            continue
        if isinstance(error, APIError | TooLarge):
            raise error
        while True:
            wait = max(0.1, min(ack_wait, deadline - loop.time()))
            try:
                await js.publish(message.subject, message.payload, timeout=wait, headers=message.headers)
                break
            except (APIError, nats.errors.MaxPayloadError) as exc:
                if refused is not None and too_large(exc):
                    refused.append(message)
                    break
                raise
            except Exception as exc:  # no answer (reconnecting, no responders yet): try again until the deadline
                if loop.time() >= deadline:
                    raise TimeoutError(f"JetStream did not store a message on {message.subject} within "
                                       f"{timeout:g} s: {exc}") from exc
                await asyncio.sleep(0.2)  # between attempts at a server that is coming back
