"""Events, as upstream's controllers record them through client-go's legacy recorder.

`build_event` makes a core/v1 Event the way record.EventRecorder does, named `<involved name>.<16 hex
digits>` like upstream's `<name>.<UnixNano in hex>`, but taken from a key, so a redelivered action
meets AlreadyExists instead of recording the event twice. `EventRecorder` writes them as client-go's
recordToSink does, through the EventCorrelator (executor/correlating.py): similar events aggregated
into "(combined from similar events): ...", a repeated event counted on the existing Event with a
strategic merge PATCH of `count`, `lastTimestamp` and `message` (a PATCH answered 404 falls back to
a POST), and the spam filter (25 per source and object, then one per 300 s) dropping the rest.
One recorder per executor process, shared by every delivery; like upstream's single broadcaster
goroutine it writes the events about one object one at a time, in the order they were correlated,
so a count is never patched onto an Event still being created.

An event the process has already written under the same name (its action redelivered) is not
correlated again: it is reported a duplicate without an API call.

The events of pod creates and deletes are those of upstream's RealPodControl
(pkg/controller/controller_utils.go), recorded only when the action names its `owner`, and only for
final outcomes; like upstream's they are best-effort: a failure to record one is logged and never
changes the action's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Hashable
from datetime import datetime
from typing import Any, Final

import msgspec

from executor import metrics as m
from executor.correlating import Correlated, EventCorrelator, Lru, SpamFilter
from executor.effects import Effect, failed, succeeded_with
from executor.errors import NAMESPACE_TERMINATING, api_status
from executor.kubeapi import KubeApi
from executor.resources import EVENT, PATCH_TYPES
from kube import codec
from kube.core import Event, EventSource
from kube.meta import ObjectMeta, ObjectReference
from kube.times import Clock, format_time, utcnow
from messages.actions import FAILED, SKIPPED, SUCCEEDED, OptionalRaw

log = logging.getLogger("kubus.executor.events")

NORMAL: Final = "Normal"
WARNING: Final = "Warning"

# upstream's reasons (pkg/controller/controller_utils.go)
SUCCESSFUL_CREATE: Final = "SuccessfulCreate"
FAILED_CREATE: Final = "FailedCreate"
SUCCESSFUL_DELETE: Final = "SuccessfulDelete"
FAILED_DELETE: Final = "FailedDelete"

MAX_WRITTEN_NAMES: Final = 16384  # the event names remembered as written, for redeliveries


def event_name(involved_name: str, key: str) -> str:
    return f"{involved_name}.{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def event_namespace(involved: ObjectReference, fallback: str) -> str:
    """Where the event goes: the involved object's namespace (as client-go's recorder), else the action's."""
    return involved.namespace or fallback or "default"


def build_event(involved: ObjectReference, *, namespace: str, type: str, reason: str, message: str,
                component: str, key: str, now: datetime) -> Event:
    """A core/v1 Event as client-go's legacy recorder makes it; `key` names it (see the module's doc)."""
    at = format_time(now)
    return Event(
        metadata=ObjectMeta(name=event_name(involved.name, key), namespace=event_namespace(involved, namespace)),
        involved_object=involved, reason=reason, message=message, type=type,
        source=EventSource(component=component), reporting_component=component,
        first_timestamp=at, last_timestamp=at, count=1)


def _object_of(event: Event) -> Hashable:
    """The involved object: every correlator key includes it, so its events are written in turn."""
    ref = event.involved_object
    return ref.kind, ref.namespace, ref.name, ref.uid


class EventRecorder:
    """Writes events through the process's EventCorrelator, counting what became of each."""

    def __init__(self, metrics: m.ExecutorMetrics | None = None, spam_filter: SpamFilter | None = None,
                 clock: Clock = utcnow):
        self.metrics = metrics if metrics is not None else m.ExecutorMetrics()
        self.correlator = EventCorrelator(clock, spam_filter=spam_filter)
        self._background: set[asyncio.Future[Any]] = set()
        self._turns: dict[Hashable, tuple[asyncio.Lock, list[int]]] = {}
        self._written: Lru[tuple[str, str], bool] = Lru(MAX_WRITTEN_NAMES)

    @property
    def spam_filter(self) -> SpamFilter:
        return self.correlator.spam_filter

    def in_background(self, work: Awaitable[Any]) -> None:
        """Runs `work` without anyone waiting for it: client-go's recorder hands events to a
        broadcaster goroutine too, so a slow events API never holds up the pods' results."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        self.metrics.events_pending += 1
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)
        self.metrics.events_pending -= 1

    async def drain(self) -> None:
        """Waits for the events still being recorded (at shutdown, and in tests)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def post(self, api: KubeApi, event: Event) -> Effect:
        """The event correlated and written: SUCCEEDED with the Event written (created, or counted with a
        PATCH), SKIPPED when the spam filter drops it; raises TransientError and Interrupted from the API
        call."""
        async with self._turn(_object_of(event)):
            effect = await self._post_in_turn(api, event)
        return self._dropped(event) if effect is None else effect

    async def record(self, api: KubeApi, events: list[Event]) -> None:
        """Best effort: a failure is logged at warning level, never raised. `events`, all about one object, are
        recorded one after the other in one task that holds the object's turn across them: they are correlated
        in the order given, none of another writer's between them. (A task per event, each queued on the turn in
        the order the tasks were made, would give the same order, but its task and lock wait cost as much as
        correlating an event the spam filter drops.)"""
        async with self._turn(_object_of(events[0])):
            for event in events:
                await self._record_in_turn(api, event)

    async def _post_in_turn(self, api: KubeApi, event: Event) -> Effect | None:
        """`post` once the object's turn is held; None when the spam filter drops the event (counted and logged
        here, the Effect saying so built only by `post`, for `record` has no use for it)."""
        name = (event.metadata.namespace, event.metadata.name)
        if self._written.get(name):
            self.metrics.event(m.EVENT_DUPLICATE)
            return Effect(SUCCEEDED, 409, "AlreadyExists", "recorded by an earlier attempt")
        result = self.correlator.correlate(event)
        if result.event is None:
            self.metrics.event(m.EVENT_DROPPED)
            ref = event.involved_object
            log.debug("event %s/%s (%s %s on %s %s/%s) dropped by the spam filter", event.metadata.namespace,
                      event.metadata.name, event.type, event.reason, ref.kind, ref.namespace, ref.name)
            return None
        self._written.add(name, True)
        try:
            effect = await self._write(api, result)
        except BaseException:
            self._written.add(name, False)  # a redelivery may try again
            raise
        if effect.outcome == FAILED:
            self._written.add(name, False)
        return effect

    async def _record_in_turn(self, api: KubeApi, event: Event) -> None:
        try:
            effect = await self._post_in_turn(api, event)
        except Exception as exc:  # TransientError, Interrupted, or a bug: the action goes on regardless
            self.metrics.event(m.EVENT_FAILED)
            log.warning("event %s/%s (%s: %s) not recorded: %s", event.metadata.namespace, event.metadata.name,
                        event.reason, event.message, str(exc) or type(exc).__name__)
            return
        if effect is not None and effect.outcome == FAILED:
            log.warning("event %s/%s (%s: %s) not recorded: %s %s: %s", event.metadata.namespace,
                        event.metadata.name, event.reason, event.message, effect.code, effect.reason,
                        effect.message)

    async def _write(self, api: KubeApi, result: Correlated) -> Effect:
        """client-go's recordEvent: PATCH the count onto the existing Event, or POST the event (also when
        the Event to patch is gone); the Event written updates the correlator."""
        event = result.event
        assert event is not None
        namespace = event.metadata.namespace
        if result.update_existing and result.patch is not None:
            reply = await api.call("PATCH", EVENT.path(namespace, event.metadata.name), body=result.patch,
                                   content_type=PATCH_TYPES["strategic"])
            if reply.ok:
                self._written_back(reply.data, event)
                self.metrics.event(m.EVENT_COUNTED)
                return succeeded_with(SUCCEEDED, reply.status, reply.data)
            if reply.status != 404:
                self.metrics.event(m.EVENT_FAILED)
                return failed(api_status(reply))
            event = msgspec.structs.replace(event, metadata=msgspec.structs.replace(event.metadata,
                                                                                      resource_version=""))
        reply = await api.call("POST", EVENT.path(namespace), body=codec.encode(event))
        if reply.ok:
            self._written_back(reply.data, event)
            self.metrics.event(m.EVENT_RECORDED)
            return succeeded_with(SUCCEEDED, reply.status, reply.data)
        status = api_status(reply)
        if reply.status == 409 and status.reason == "AlreadyExists":
            self.metrics.event(m.EVENT_DUPLICATE)
            return Effect(SUCCEEDED, 409, "AlreadyExists", "recorded by an earlier attempt")
        self.metrics.event(m.EVENT_FAILED)
        return failed(status)

    def _written_back(self, data: bytes, sent: Event) -> None:
        try:
            written = codec.decode(data, Event)
        except (codec.DecodeError, msgspec.DecodeError):
            written = sent
        self.correlator.update_state(written)

    def _dropped(self, event: Event) -> Effect:
        ref = event.involved_object
        return Effect(SKIPPED, reason="SpamFiltered",
                      message=f"dropped: more than {self.spam_filter.burst} events from "
                              f"{event.source.component} about {ref.kind} {ref.namespace}/{ref.name} "
                              f"within the spam filter's window")

    @contextlib.asynccontextmanager
    async def _turn(self, key: Hashable) -> AsyncIterator[None]:
        """One writer at a time per involved object, first come first served."""
        turn = self._turns.get(key)
        if turn is None:
            turn = self._turns[key] = (asyncio.Lock(), [0])
        lock, waiting = turn
        waiting[0] += 1
        try:
            async with lock:
                yield
        finally:
            waiting[0] -= 1
            if not waiting[0]:
                del self._turns[key]


def owner_reference(owner: OptionalRaw) -> ObjectReference | None:
    """The action's owner; None when it has none (unset or null) or it is not an ObjectReference."""
    if owner is msgspec.UNSET:
        return None
    data = bytes(owner).strip()
    if not data or data == b"null":
        return None
    try:
        return codec.decode(data, ObjectReference)
    except (codec.DecodeError, msgspec.DecodeError) as exc:
        log.warning("owner %r is not an ObjectReference (%s): no event recorded", data[:200], exc)
        return None


PodEvent = tuple[str, str, str]  # type, reason, message


def create_event(effect: Effect, pod_name: str) -> PodEvent | None:
    """The event RealPodControl.CreatePods records for a create's final outcome: none for a skipped pod,
    a NamespaceTerminating refusal, or a pod the executor refused to send (no API call made)."""
    if effect.outcome == SUCCEEDED:
        return NORMAL, SUCCESSFUL_CREATE, f"Created pod: {pod_name}"
    if effect.outcome == FAILED and effect.reason not in (NAMESPACE_TERMINATING, "NotIdempotent"):
        return WARNING, FAILED_CREATE, f"Error creating: {effect.error}"
    return None


def delete_event(effect: Effect, pod_name: str) -> PodEvent | None:
    """The event RealPodControl.DeletePod records: none when the pod was not there (404) or was not the
    one meant (the uid precondition failed)."""
    if effect.outcome == SUCCEEDED and 200 <= effect.code < 300:
        return NORMAL, SUCCESSFUL_DELETE, f"Deleted pod: {pod_name}"
    if effect.outcome == FAILED:
        return WARNING, FAILED_DELETE, f"Error deleting: {effect.error}"
    return None


async def record_pod_events(recorder: EventRecorder, api: KubeApi, clock: Clock,
                            owner: OptionalRaw, component: str, namespace: str,
                            events: list[tuple[str, PodEvent | None]]) -> None:
    """Records with `recorder`, best-effort and in the background, each (result key, event) against the
    action's owner, in the order given; nothing without an owner. The key and reason name the event, so a
    redelivery re-records none. `clock` is read only when there is an event to record."""
    todo = [(key, e) for key, e in events if e is not None]
    if not todo:
        return
    involved = owner_reference(owner)
    if involved is None:
        return
    now = clock()
    recorder.in_background(recorder.record(api, [
        build_event(involved, namespace=namespace, type=kind, reason=reason, message=message, component=component,
                    key=f"{key}/{reason}", now=now)
        for key, (kind, reason, message) in todo]))
