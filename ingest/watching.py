"""One kind, forever: list (or resume from the checkpoint), then watch, publishing every event.

The loop keeps two positions. `cursor` is the resourceVersion of the last event handed to the
publisher: a watch that breaks while this process lives resumes from it, because everything up to
it is already queued for publishing, in order, and will be acked or resent. The publisher's
`acked_position` is what a checkpoint may record: a new process resumes from there. A 410 Gone
(from a watch or a list) means the API no longer has the history between the two, so the kind is
listed again and reconciled against the bus.

Checkpoints are good for one KUBUS_EVENTS. `wanted` is the stream (its identity) the kind must be on, `listed`
the one its last list (or its resume from a checkpoint of that stream) went into; when they differ (the stream
was created anew: the service says so through `relist_into`) the kind is listed again, whatever the cursor.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from datetime import UTC, datetime

import msgspec
from kubernetes.client.exceptions import ApiException

from ingest import transport
from ingest.backoff import Backoff
from ingest.checkpoints import Checkpoints
from ingest.counting import Counters
from ingest.kinds import KindSpec
from ingest.observing import (
    BOOKMARK,
    ERROR,
    Origin,
    Unroutable,
    bookmark_rv,
    fitted,
    observe,
    parse_line,
    parse_status,
)
from ingest.publishing import OrderedPublisher, raise_if_cancelling
from ingest.relisting import plan_relist, read_known
from kube.times import format_micro_time
from messages import subjects
from messages.codec import NewerSchema, is_compressed
from messages.observed import ObservedEvent
from runtime import logs
from runtime.bus import Bus, payload_limit
from runtime.deadletter import Halts

log = logging.getLogger("kubus.ingest")

_SUBJECT_BASES = 10_000  # namespaces whose subject (less the uid) a watcher remembers


class Gone(Exception):
    """410: the resourceVersion asked for is older than the API's history."""


class WatchFailed(Exception):
    """The watch stream reported an error (an ERROR frame other than 410, or an unreadable line)."""


def now() -> str:
    return format_micro_time(datetime.now(UTC))


class KindWatcher:
    def __init__(self, spec: KindSpec, *, bus: Bus, publisher: OrderedPublisher, call: transport.ListCall,
                 checkpoints: Checkpoints, counters: Counters, instance: str, backoff: Backoff,
                 watch_timeout: float, list_page_size: int, halts: Halts | None = None):
        self.spec = spec
        self.publisher = publisher
        self.cursor: str | None = None
        self._bus = bus
        self._call = call
        self._checkpoints = checkpoints
        self._counters = counters
        self._instance = instance
        self._backoff = backoff
        self._watch_timeout = watch_timeout
        self._page_size = list_page_size
        self._stream: transport.WatchStream | None = None
        self._halts = halts or Halts()
        self.wanted: str | None = None  # the KUBUS_EVENTS (identity) the kind must be listed into
        self.listed: str | None = None  # the one it was: by its last list, or its resume from a checkpoint
        self._subject_base: dict[str, str] = {}  # namespace -> the subject of its objects but their uid

    def relist_into(self, stream: str) -> None:
        """Lists the kind again, into the stream `stream` (created anew): the watch open now is ended."""
        self.wanted = stream
        self.close()

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def _halt_name(self) -> str:
        return f"relist-{self.kind}"  # the consumer named by kubus_consumer_halted

    async def run(self) -> None:
        self._halts.clear(self._halt_name)
        checkpoint = await self._resume_point()
        # a checkpoint of another stream than the one wanted says nothing of what this one holds
        self.cursor = checkpoint if self.listed == self.wanted else None
        if self.cursor is None:
            self.listed = None
        while True:
            try:
                raise_if_cancelling()
                if self.listed != self.wanted:
                    self.cursor = None
                if self.cursor is None:
                    self.cursor = await self._relist()
                started = asyncio.get_running_loop().time()
                await self._watch(self.cursor)
                if asyncio.get_running_loop().time() - started < 1.0:
                    # an API that ends watches at once would otherwise be asked again in a tight loop
                    await asyncio.sleep(self._backoff.next())
            except asyncio.CancelledError:
                raise
            except NewerSchema as exc:
                # the bus holds a newer kubus's event of this kind: relisting against what cannot be read would
                # publish wrong events for those objects; this kind waits for this ingest to be upgraded
                self._halts.halt(self._halt_name, f"the bus's last {self.kind} events", str(exc))
                await asyncio.Event().wait()  # until cancelled: the process runs on, not ready
            except Gone as exc:
                log.info("%s: %s; relisting", self.kind, exc)
                self._counters.gone[self.kind] += 1
                if self.cursor is None:  # the list itself was refused: do not ask again at once
                    await asyncio.sleep(self._backoff.next())
                self.cursor = None
            except Exception as exc:  # API or NATS trouble: everything handed over stays queued; retry
                raise_if_cancelling()
                delay = self._backoff.next()
                self._counters.api_reconnects[self.kind] += 1
                log.warning("%s: %s: %s; retrying in %.1fs", self.kind, type(exc).__name__,
                            _short(exc), delay)
                await asyncio.sleep(delay)
            finally:
                self._counters.watching[self.kind] = False

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()

    async def _resume_point(self) -> str | None:
        while True:
            try:
                return await self._checkpoints.get(self.kind)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the checkpoint store is away: wait for it rather than relist
                delay = self._backoff.next()
                log.warning("%s: reading the checkpoint failed (%s); retrying in %.1fs", self.kind, exc, delay)
                await asyncio.sleep(delay)

    async def _relist(self) -> str:
        # what this process sent must be on the bus before the bus is compared with the list
        await self.publisher.drain()
        into = self.wanted
        if into != self.listed:
            self.publisher.forget()  # a new stream: what the publisher knows of the old one does not hold in it
        origin = Origin(self._instance, now())
        rv, listed = await asyncio.to_thread(self._list, origin)
        known = await read_known(self._bus, self.kind, self._instance)
        events = plan_relist(self.kind, known, listed, origin, rv)
        log.info("%s: listed %d objects at %s, the bus knew %d: publishing %d events", self.kind,
                 len(listed), rv, len(known), len(events))
        for event in events:
            await self._publish(event, position=None)
        raise_if_cancelling()
        self.publisher.mark(rv)
        await self.publisher.drain()  # listed means stored: a reconciler waiting for the relist reads it next
        self.listed = into
        self._counters.lists[self.kind] += 1
        return rv

    def _list(self, origin: Origin) -> tuple[str, list[ObservedEvent]]:
        """Runs in a worker thread: the HTTP calls and the decoding of a possibly large list."""
        try:
            rv, items = transport.list_raw(self._call, page_size=self._page_size, timeout=self._watch_timeout)
        except ApiException as exc:
            if exc.status == 410:
                raise Gone(f"list: {exc.reason}") from None
            raise
        events = []
        for raw in items:
            event = self._observe("ADDED", raw, origin)
            if event is not None:
                events.append(event)
        return rv, events

    async def _watch(self, rv: str) -> None:
        open_response = functools.partial(
            self._call, watch=True, resource_version=rv, allow_watch_bookmarks=True,
            timeout_seconds=int(self._watch_timeout), _preload_content=False,
            _request_timeout=(10, self._watch_timeout + 30))
        stream = self._stream = transport.WatchStream(open_response, name=f"watch-{self.kind}")
        if self.listed != self.wanted:  # a relist was asked for since this watch was decided on
            stream.close()
        try:
            async for batch in stream.batches():
                if not batch:  # the API answered: the connection is good again
                    self._backoff.reset()
                    self._counters.watching[self.kind] = True
                else:
                    raise_if_cancelling()
                    origin = Origin(self._instance, now())
                    for line in batch:
                        await self._handle(line, origin)
                if stream.idle():
                    # nothing else to send: let the acks arrive so the resume point catches up
                    await self.publisher.drain()
                raise_if_cancelling()  # before waiting for the next batch, which may be long in coming
        except ApiException as exc:
            if exc.status == 410:
                raise Gone(f"watch: {exc.reason}") from None
            raise
        finally:
            stream.close()
            self._stream = None

    async def _handle(self, line: bytes, origin: Origin) -> None:
        try:
            frame = parse_line(line)
        except msgspec.DecodeError as exc:
            raise WatchFailed(f"unreadable watch line ({exc}): {line[:200]!r}") from None
        if frame.type == BOOKMARK:
            self.cursor = bookmark_rv(frame.object)
            self.publisher.mark(self.cursor)
            return
        if frame.type == ERROR:
            status = parse_status(frame.object)
            if status.code == 410:
                raise Gone(f"watch from {self.cursor}: {status.message}")
            raise WatchFailed(f"watch error {status.code}: {status.message}")
        event = self._observe(frame.type, frame.object, origin)
        if event is not None:
            # an object without a resourceVersion (malformed) is published but cannot be resumed from
            await self._publish(event, position=event.resource_version or None)
            self.cursor = event.resource_version or self.cursor

    def _subject_of(self, namespace: str) -> str:
        """The subject of this kind's objects in `namespace`, less the uid, remembered: the partition is a crc32
        of the namespace, the same for every event of it."""
        if len(self._subject_base) >= _SUBJECT_BASES:
            self._subject_base.clear()  # namespaces come and go: bounded, not a leak
        base = self._subject_base[namespace] = subjects.event_subject(
            self._bus.partition_of(namespace), self.kind, "", self._bus.prefix)
        return base

    def _observe(self, event_type: str, raw: msgspec.Raw, origin: Origin) -> ObservedEvent | None:
        try:
            event = observe(self.spec, event_type, raw, origin)
        except Unroutable as exc:
            self._counters.unroutable[self.kind] += 1
            log.error("%s: dropping an object that cannot be routed: %s", self.kind, exc)
            return None
        if event.error is not None:
            self._counters.quarantined[self.kind] += 1
            log.error("quarantined %s %s/%s: %s", self.kind, event.namespace, event.name, event.error,
                      extra=logs.fields(kind=self.kind, namespace=event.namespace or None, name=event.name or None))
        return event

    async def _publish(self, event: ObservedEvent, position: str | None) -> None:
        base = self._subject_base.get(event.namespace)
        if base is None:
            base = self._subject_of(event.namespace)
        subject = base + event.uid
        # the limit as the server's INFO says now (it is read again at every reconnect)
        payload, too_large = fitted(event, payload_limit(self._bus.nc))
        if too_large is not None:
            self._counters.too_large[self.kind] += 1
            self._counters.quarantined[self.kind] += 1
            log.error("quarantined %s: %s", self.kind, too_large,
                      extra=logs.fields(kind=self.kind, namespace=event.namespace or None, name=event.name or None))
        elif is_compressed(payload):
            self._counters.compressed[self.kind] += 1
        await self.publisher.publish(subject, event.msg_id, event.type, payload, position,
                                     event.resource_version)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""
