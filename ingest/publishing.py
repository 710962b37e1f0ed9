"""Publishing one kind's events to JetStream in watch order, pipelined, without losing or reordering.

Messages go out with `publish_async`, at most `window` of them unacked. Two rules keep every
object's history in order even when NATS fails mid-window:

- an object (a subject) has at most one unacked message: its next event waits for the ack, so
  a resend can never land behind a later event of the same object;
- after any failure every outstanding ack is awaited (or timed out) first, then exactly the
  messages that were not acked are resent one by one, in their original order, until NATS takes
  them. A resend of a message that did arrive is answered `duplicate` thanks to its Nats-Msg-Id.

`acked_position` is the resume point: the last position (a resourceVersion) such that it and
everything published before it is acked. Only it may be checkpointed.

An object's subject never moves backwards (issue 15). Two replicas publish every event; the duplicate
window catches the second copy only for 120 s, so a replica cut off from NATS for longer would append its
stale events after the other's newer ones (and KUBUS_STATE, which keeps each subject's last message,
would bring a deleted object back). So every message goes out with `Nats-Expected-Last-Subject-Sequence`:
the sequence of the subject's last message as this publisher knows it (from its own acks; 0 for the ADDED
of a new object; read from the stream first for any other event of an object it has not published, as
after a restart). JetStream stores the message only if nothing was stored on the subject since; otherwise
(another replica was first, or this one's memory is old) the publisher reads the subject's last message
and decides on what it carries, as the reconciler's cache does (reconciler/core/cache.py): an event is
published only if it is newer than the stored one by resourceVersion (a relist's tombstone: at least as
new; a DELETED: always) and the stored one is not a deletion, which is final for the uid. An event already
stored (the same Nats-Msg-Id) counts as a duplicate; anything else counts as `superseded` and is dropped
(with two healthy replicas, most of the slower one's events: the faster one stored them, or a newer
state, first). Versions that are not integers fall back to the stream's order (published). The guard runs
on the server, so it holds whichever replica publishes first, however late. Events of one kind keep their
watch order in the stream, except that an event refused and then published after all (another replica
stored a version this one never saw) lands after the other objects' events sent meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field

from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, PubAck
from nats.js.errors import APIError, NotFoundError

from ingest.backoff import Backoff
from ingest.counting import Counters
from ingest.relisting import read_stream
from messages.codec import BadMessage, decode_observed
from messages.observed import ADDED, DELETED, DELETED_FINAL_STATE_UNKNOWN
from runtime.bus import TooLarge, max_payload_of, publish_async_bounded, too_large, wire_size

log = logging.getLogger("kubus.ingest")

MSG_ID = "Nats-Msg-Id"
EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
WRONG_LAST_SEQUENCE = 10071  # JetStream's err_code: the subject's last sequence is not the expected one


@dataclass(frozen=True, slots=True)
class Stored:
    """What a subject's last message in the stream is, as far as this publisher knows."""

    seq: int
    resource_version: str
    event_type: str
    msg_id: str


def may_follow(resource_version: str, event_type: str, stored: Stored | None) -> bool:
    """Whether an event may be stored after `stored` (None: nothing on the subject): the rules of the
    reconciler's cache (reconciler/core/cache.py), applied before the stream takes the event."""
    if stored is None:
        return True
    if stored.event_type in (DELETED, DELETED_FINAL_STATE_UNKNOWN):
        return False  # a deletion is final for its uid
    if event_type == DELETED:
        return True  # the object's last event, carrying the deletion's own version
    theirs, ours = resource_version, stored.resource_version
    if not (theirs.isascii() and theirs.isdigit() and ours.isascii() and ours.isdigit()):
        return True  # not etcd revisions: the stream's order decides
    if event_type == DELETED_FINAL_STATE_UNKNOWN:
        return int(theirs) >= int(ours)  # a relist's tombstone carries the last version it knew
    return int(theirs) > int(ours)


def raise_if_cancelling() -> None:
    """Raises CancelledError in a task asked to stop whose cancellation got lost on the way: nats-py turns one into
    its own error (publish_async's TooManyStalledMsgsError while it waits for a slot), and Python 3.11's wait_for
    (under every NATS request) drops one that races with the answer. A watcher that went on would hold up the
    whole ingest's stop for ever (its task group waits for it)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _wrong_last_sequence(exc: BaseException | None) -> bool:
    return isinstance(exc, APIError) and exc.err_code == WRONG_LAST_SEQUENCE


def _conflicted(entry: _Entry) -> bool:
    """The entry's publish was refused because its subject's last sequence was not the expected one."""
    future = entry.future
    return (future is not None and future.done() and not future.cancelled()
            and _wrong_last_sequence(future.exception()))


@dataclass(eq=False, slots=True)
class _Entry:
    subject: str
    msg_id: str
    event_type: str
    payload: bytes
    position: str | None  # the resume point once this entry and all before it are acked
    future: asyncio.Future[PubAck] | None  # None: a position marker only (bookmark, end of a list)
    deadline: float = 0.0
    ack: PubAck | None = field(default=None)
    resource_version: str = ""
    stale: bool = False  # not published: the stream holds a newer state of the object, or its deletion


class OrderedPublisher:
    def __init__(self, js: JetStreamContext, kind: str, counters: Counters, *, stream: str = "",
                 subjects_filter: str = "", window: int = 512, ack_timeout: float = 5.0,
                 backoff: Backoff | None = None):
        """`stream`: the stream the subjects are in (KUBUS_EVENTS), where a subject's last message is read;
        `subjects_filter`: all of this kind's subjects there (`<prefix>.events.*.<kind>.*`), whose last
        messages a publisher learns in one pass when it first needs one (None: it asks per subject)."""
        self._js = js
        self._stream = stream
        self._subjects_filter = subjects_filter
        self._preloaded = False
        self.kind = kind
        self._counters = counters
        self._window = window
        self._ack_timeout = ack_timeout
        self._backoff = backoff or Backoff()
        self._pending: deque[_Entry] = deque()
        self._inflight: dict[str, _Entry] = {}
        # subject -> its last message as this publisher knows it: the objects it published, until their
        # deletion (a later event of a forgotten subject finds the deletion in the stream)
        self._stored: dict[str, Stored] = {}
        self.max_seq = 0  # the highest stream sequence an ack reported: a stream that ends before it lost events
        self.acked_position: str | None = None

    async def publish(self, subject: str, msg_id: str, event_type: str, payload: bytes,
                      position: str | None, resource_version: str = "") -> None:
        """Sends one message; returns once it is on its way (not acked), keeping the window bounded.
        `resource_version` is the object's, which the stream's last message of the subject is compared with."""
        while subject in self._inflight:
            await self._settle_head()
        while len(self._pending) >= self._window:
            await self._settle_head()
        stored = self._stored.get(subject)
        if stored is None and event_type != ADDED:
            # an object this publisher has not published (it restarted, or another replica did): learn where its
            # subject is before sending, so that the events of one kind reach the stream in watch order (a refused
            # publish is resent after the ones behind it). An ADDED is a new object: its subject is empty. The
            # first time, every subject of the kind is learnt in one pass over the stream's headers; an object
            # that pass did not see is new since (or deleted: a refused publish finds that out).
            if not self._preloaded and self._subjects_filter:
                await self._preload()
            stored = self._stored.get(subject) if self._preloaded else await self._read_stored(subject)
            raise_if_cancelling()
        if not may_follow(resource_version, event_type, stored):
            self._drop_stale(subject, msg_id, stored)  # known stale already: nothing to ask the stream
            if position is not None:
                self.mark(position)
            return
        loop = asyncio.get_running_loop()
        entry = _Entry(subject, msg_id, event_type, payload, position, None, loop.time() + self._ack_timeout,
                       resource_version=resource_version)
        try:
            # a write that fails (closed, over its reconnect buffer, too large) is a failed future, its slot
            # of nats-py's window given back: resent in order by _recover
            entry.future = await publish_async_bounded(self._js, subject, payload, self._headers(entry))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # anything else the write raised: resent in order by _recover as well
            raise_if_cancelling()  # (nats-py's TooManyStalledMsgsError may be our own cancellation)
            entry.future = loop.create_future()
            entry.future.set_exception(exc)
        self._pending.append(entry)
        self._inflight[subject] = entry
        # account for acks that have already arrived, so the resume point keeps up under load
        self._settle_acked()
        while self._pending and self._head_done():  # a failure among them: resent or recovered, in order
            await self._settle_head()

    def mark(self, position: str) -> None:
        """A resume point with no message (a bookmark, the end of a relist): reached once all before it are acked."""
        if not self._pending:
            self._advance(position)
        else:
            self._pending.append(_Entry("", "", "", b"", position, None))

    async def drain(self) -> None:
        """Returns once every message published so far is acked."""
        while self._pending:
            await self._settle_head()

    @property
    def unacked(self) -> int:
        return len(self._pending)

    def _head_done(self) -> bool:
        head = self._pending[0]
        return head.future is None or head.future.done()

    def _headers(self, entry: _Entry) -> dict[str, str]:
        stored = self._stored.get(entry.subject)
        return {MSG_ID: entry.msg_id, EXPECTED_LAST_SUBJECT_SEQ: str(stored.seq if stored is not None else 0)}

    def _settle_acked(self) -> None:
        """What _settle_head does for the heads that are position markers or whose ack is in, without a coroutine
        per head (under load most publishes find one or two acked); stops at the first head it would wait for, or
        whose publish failed (_settle_head resends or recovers those)."""
        pending = self._pending
        while pending:
            head = pending[0]
            future = head.future
            if future is not None and head.ack is None and not head.stale:
                if not future.done() or future.cancelled() or future.exception() is not None:
                    return
                head.ack = future.result()
            pending.popleft()
            self._account(head)

    async def _settle_head(self) -> None:
        head = self._pending[0]
        if head.future is not None and head.ack is None and not head.stale:
            ack = await self._outcome(head)
            if ack is None and _conflicted(head):
                # the subject moved on since this publisher last looked: only this subject is concerned, the
                # entries behind it stay in flight
                ack = await self._resend(head)
            elif ack is None:
                await self._recover()
                return
            head.ack = ack
        self._pending.popleft()
        self._account(head)

    async def _outcome(self, entry: _Entry) -> PubAck | None:
        """The entry's ack, or None if it failed or did not come by its deadline."""
        future = entry.future
        assert future is not None
        if not future.done():
            left = entry.deadline - asyncio.get_running_loop().time()
            await asyncio.wait([future], timeout=max(left, 0.0))
        if not future.done():
            future.cancel()  # also frees its slot in nats-py's publish_async window
            return None
        if future.cancelled() or future.exception() is not None:
            return None
        return future.result()

    async def _recover(self) -> None:
        entries = list(self._pending)
        # first learn which messages the stream holds: every outstanding ack arrives or times out
        for entry in entries:
            if entry.future is not None and entry.ack is None:
                entry.ack = await self._outcome(entry)
        failed = [e for e in entries if e.future is not None and e.ack is None and not e.stale]
        log.warning("%d of %d %s events were not acked; resending them in order", len(failed),
                    len(entries), self.kind)
        for entry in failed:
            entry.ack = await self._resend(entry)
        self._pending.clear()
        for entry in entries:
            self._account(entry)

    async def _resend(self, entry: _Entry) -> PubAck | None:
        """Publishes `entry` synchronously until the stream has it; None when it turns out stale (then
        `entry.stale`), or when NATS refuses it for its size (dropped). A message whose first attempt did
        arrive is found as the subject's last message."""
        while True:
            try:
                limit = max_payload_of(self._js)
                if limit is not None and wire_size(entry.payload, self._headers(entry)) > limit:
                    raise TooLarge(f"{len(entry.payload)} bytes, over NATS's max_payload {limit}")
                ack = await self._js.publish(entry.subject, entry.payload, timeout=self._ack_timeout,
                                             headers=self._headers(entry))
            except asyncio.CancelledError:
                raise
            except APIError as exc:
                if not _wrong_last_sequence(exc):  # JetStream refused it for another reason: as NATS away, below
                    await self._retry_after(entry, exc)
                    continue
                stored = await self._read_stored(entry.subject)
                if stored is not None and stored.msg_id == entry.msg_id:
                    self._backoff.reset()
                    return PubAck(stream=self._stream, seq=stored.seq, duplicate=True)  # the first attempt's
                if not may_follow(entry.resource_version, entry.event_type, stored):
                    self._drop_stale(entry.subject, entry.msg_id, stored)
                    entry.stale = True
                    return None
                continue  # newer than what the stream holds: publish it after that
            except Exception as exc:
                if too_large(exc):
                    # no retry changes it (the watcher fits every event to the limit it reads from the server, so
                    # only a server whose max_payload shrank since can refuse one): dropped, never retried in
                    # front of the events after it
                    self._counters.too_large[self.kind] += 1
                    log.error("dropping %s event %s on %s: NATS refuses it for its size (%s)", self.kind,
                              entry.msg_id, entry.subject, exc)
                    return None
                await self._retry_after(entry, exc)  # NATS away (timeouts, no responders, closed): in order
                continue
            self._backoff.reset()
            return ack

    async def _retry_after(self, entry: _Entry, exc: Exception) -> None:
        self._counters.publish_retries[self.kind] += 1
        delay = self._backoff.next()
        log.warning("publishing %s %s failed (%s: %s); retrying in %.1fs", self.kind, entry.msg_id,
                    type(exc).__name__, exc, delay)
        await asyncio.sleep(delay)

    async def _read_stored(self, subject: str) -> Stored | None:
        """The subject's last message in the stream (None: it has none), remembered as the subject's state."""
        while True:
            try:
                msg = await self._js.get_last_msg(self._stream, subject)
            except asyncio.CancelledError:
                raise
            except NotFoundError:
                self._stored.pop(subject, None)
                return None
            except Exception as exc:  # NATS away: keep trying; nothing behind this subject's entry waits on it
                delay = self._backoff.next()
                log.warning("reading the last %s message on %s failed (%s: %s); retrying in %.1fs", self.kind,
                            subject, type(exc).__name__, exc, delay)
                await asyncio.sleep(delay)
                continue
            msg_id = str((msg.headers or {}).get(MSG_ID, ""))
            try:
                event = decode_observed(msg.data or b"")
                stored = Stored(msg.seq or 0, event.resource_version, event.type, msg_id)
            except BadMessage:  # unreadable: nothing to compare with, the stream's order decides
                stored = Stored(msg.seq or 0, "", "", msg_id)
            self._stored[subject] = stored
            return stored

    async def _preload(self) -> None:
        """The last message of every subject of the kind, from the stream's headers (the Nats-Msg-Id says
        kind/uid/resourceVersion/type). Deleted objects are left out: their subjects stay unknown, and a late
        event of one is refused by the stream and then finds the deletion. On failure (NATS away) the publisher
        reads subjects one by one instead."""
        loaded: dict[str, Stored] = {}
        try:
            async for msg in read_stream(self._js, self._stream, self._subjects_filter, DeliverPolicy.LAST_PER_SUBJECT,
                                         headers_only=True):
                msg_id = str((msg.headers or {}).get(MSG_ID, ""))
                parts = msg_id.split("/")
                rv, event_type = (parts[2], parts[3]) if len(parts) >= 4 else ("", "")
                if event_type not in (DELETED, DELETED_FINAL_STATE_UNKNOWN):
                    loaded[msg.subject] = Stored(msg.metadata.sequence.stream, rv, event_type, msg_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # NATS away: ask per subject instead
            log.warning("reading the last %s messages failed (%s: %s); reading them one by one", self.kind,
                        type(exc).__name__, exc)
            self._subjects_filter = ""
            return
        for subject, stored in loaded.items():
            self._stored.setdefault(subject, stored)  # what this publisher stored meanwhile is newer
        self._preloaded = True
        log.info("%s: learnt the last message of %d subjects", self.kind, len(loaded))

    def _drop_stale(self, subject: str, msg_id: str, stored: Stored | None) -> None:
        self._counters.superseded[self.kind] += 1
        log.debug("not publishing %s: the stream holds %s on %s", msg_id,
                  "nothing" if stored is None else f"{stored.event_type} {stored.resource_version}", subject)

    def _account(self, entry: _Entry) -> None:
        if entry.future is not None:
            if self._inflight.get(entry.subject) is entry:
                del self._inflight[entry.subject]
            if entry.stale:
                pass  # counted when it was found stale
            elif entry.ack is None:
                pass  # dropped, refused for its size: counted and logged in _resend
            # inc(), not `+= 1`: that reads the series' value first (under its lock) to add the difference
            elif entry.ack.duplicate:
                self._counters.duplicates.inc(self.kind)
            else:
                self._counters.published.inc((self.kind, entry.event_type))
            if entry.ack is not None:
                self.max_seq = max(self.max_seq, entry.ack.seq)
                self._remember(entry, entry.ack)
        if entry.position is not None:
            self._advance(entry.position)

    def _remember(self, entry: _Entry, ack: PubAck) -> None:
        """The subject's last message is now this entry's. A deleted object's subject is forgotten: its
        deletion is final, and a later event for it finds the deletion in the stream."""
        if entry.event_type in (DELETED, DELETED_FINAL_STATE_UNKNOWN):
            self._stored.pop(entry.subject, None)
            return
        known = self._stored.get(entry.subject)
        if known is None or known.seq <= ack.seq:
            self._stored[entry.subject] = Stored(ack.seq, entry.resource_version, entry.event_type, entry.msg_id)

    def forget(self) -> None:
        """Forgets what this publisher knows of the stream: it was created anew (stream loss), and the sequences
        and versions it remembers are the old stream's. Called between a drain and a relist into the new stream,
        in the task that publishes, so that no ack of the old stream arrives after it: a relisted object at the
        version stored in the old stream would otherwise be dropped as stale and never reach the new one."""
        assert not self._pending, "forget() with messages in flight"
        self._stored.clear()
        self._preloaded = False
        self.max_seq = 0

    def _advance(self, position: str) -> None:
        self.acked_position = position
        self._counters.last_rv[self.kind] = position
