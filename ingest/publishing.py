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
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field

from nats.js import JetStreamContext
from nats.js.api import PubAck

from ingest.backoff import Backoff
from ingest.counting import Counters
from runtime.bus import TooLarge, max_payload_of, publish_async_bounded, too_large, wire_size

log = logging.getLogger("kubus.ingest")

MSG_ID = "Nats-Msg-Id"


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


class OrderedPublisher:
    def __init__(self, js: JetStreamContext, kind: str, counters: Counters, *, window: int = 512,
                 ack_timeout: float = 5.0, backoff: Backoff | None = None):
        self._js = js
        self.kind = kind
        self._counters = counters
        self._window = window
        self._ack_timeout = ack_timeout
        self._backoff = backoff or Backoff()
        self._pending: deque[_Entry] = deque()
        self._inflight: dict[str, _Entry] = {}
        self.acked_position: str | None = None
        self.max_seq = 0  # the highest stream sequence an ack reported: a stream that ends before it lost events

    async def publish(self, subject: str, msg_id: str, event_type: str, payload: bytes,
                      position: str | None) -> None:
        """Sends one message; returns once it is on its way (not acked), keeping the window bounded."""
        while subject in self._inflight:
            await self._settle_head()
        while len(self._pending) >= self._window:
            await self._settle_head()
        loop = asyncio.get_running_loop()
        entry = _Entry(subject, msg_id, event_type, payload, position, None, loop.time() + self._ack_timeout)
        try:
            # a write that fails (closed, over its reconnect buffer, too large) is a failed future, its slot
            # of nats-py's window given back: resent in order by _recover
            entry.future = await publish_async_bounded(self._js, subject, payload, {MSG_ID: msg_id})
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # anything else the write raised: resent in order by _recover as well
            entry.future = loop.create_future()
            entry.future.set_exception(exc)
        self._pending.append(entry)
        self._inflight[subject] = entry
        # account for acks that have already arrived, so the resume point keeps up under load
        while self._pending and self._head_done():
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

    async def _settle_head(self) -> None:
        head = self._pending[0]
        if head.future is not None and head.ack is None:
            ack = await self._outcome(head)
            if ack is None:
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
        failed = [e for e in entries if e.future is not None and e.ack is None]
        log.warning("%d of %d %s events were not acked; resending them in order", len(failed),
                    len(entries), self.kind)
        for entry in failed:
            entry.ack = await self._resend(entry)  # None: refused for its size, dropped
        self._pending.clear()
        for entry in entries:
            self._account(entry)

    async def _resend(self, entry: _Entry) -> PubAck | None:
        """The entry's ack once NATS took it; None when NATS refuses it for its size, which no retry changes
        (the watcher fits every event to the limit it reads from the server, so only a server whose
        max_payload shrank since can refuse one): it is logged and dropped, never retried in front of the
        events after it."""
        while True:
            try:
                limit = max_payload_of(self._js)
                if limit is not None and wire_size(entry.payload, {MSG_ID: entry.msg_id}) > limit:
                    raise TooLarge(f"{len(entry.payload)} bytes, over NATS's max_payload {limit}")
                ack = await self._js.publish(entry.subject, entry.payload, timeout=self._ack_timeout,
                                             headers={MSG_ID: entry.msg_id})
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if too_large(exc):
                    self._counters.too_large[self.kind] += 1
                    log.error("dropping %s event %s on %s: NATS refuses it for its size (%s)", self.kind,
                              entry.msg_id, entry.subject, exc)
                    return None
                # NATS away (timeouts, no responders, closed): keep trying, in order
                self._counters.publish_retries[self.kind] += 1
                delay = self._backoff.next()
                log.warning("publishing %s %s failed (%s: %s); retrying in %.1fs", self.kind, entry.msg_id,
                            type(exc).__name__, exc, delay)
                await asyncio.sleep(delay)
                continue
            self._backoff.reset()
            return ack

    def _account(self, entry: _Entry) -> None:
        if entry.future is not None:
            if self._inflight.get(entry.subject) is entry:
                del self._inflight[entry.subject]
            if entry.ack is None:
                pass  # dropped, refused for its size: counted and logged in _resend
            else:
                self.max_seq = max(self.max_seq, entry.ack.seq)
                if entry.ack.duplicate:
                    self._counters.duplicates[self.kind] += 1
                else:
                    self._counters.published[(self.kind, entry.event_type)] += 1
        if entry.position is not None:
            self._advance(entry.position)

    def _advance(self, position: str) -> None:
        self.acked_position = position
        self._counters.last_rv[self.kind] = position
