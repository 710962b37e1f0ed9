"""Events, as upstream's controllers record them through client-go's legacy recorder.

`build_event` makes a core/v1 Event the way record.EventRecorder does, named `<involved name>.<16 hex
digits>` like upstream's `<name>.<UnixNano in hex>`, but taken from a key, so a redelivered action
meets AlreadyExists instead of recording the event twice. `EventRecorder` posts them behind
`SpamFilter`, client-go's EventSourceObjectSpamFilter (tools/record/events_cache.go): a token bucket
per source component and involved object, burst 25, refilled one token every 300 s; an event
without a token is dropped. One recorder per executor process, shared by every delivery.

The events of pod creates and deletes are those of upstream's RealPodControl
(pkg/controller/controller_utils.go), recorded only when the action names its `owner`, and only for
final outcomes; like upstream's they are best-effort: a failure to record one is logged and never
changes the action's result.

Not implemented: the EventCorrelator's aggregator (and its logger that bumps `count`); each event is one POST.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import msgspec

from executor import metrics as m
from executor.effects import Delivery, Effect, failed, succeeded_with
from executor.errors import NAMESPACE_TERMINATING, api_status
from executor.kubeapi import KubeApi
from executor.resources import EVENT
from kube import codec
from kube.core import Event, EventSource
from kube.meta import ObjectMeta, ObjectReference
from kube.times import format_time
from messages.actions import FAILED, SKIPPED, SUCCEEDED, OptionalRaw

log = logging.getLogger("kubus.executor.events")

NORMAL: Final = "Normal"
WARNING: Final = "Warning"

# upstream's reasons (pkg/controller/controller_utils.go)
SUCCESSFUL_CREATE: Final = "SuccessfulCreate"
FAILED_CREATE: Final = "FailedCreate"
SUCCESSFUL_DELETE: Final = "SuccessfulDelete"
FAILED_DELETE: Final = "FailedDelete"

SPAM_BURST: Final = 25  # client-go's defaultSpamBurst
SPAM_REFILL_SECONDS: Final = 300.0  # one token per 300 s: client-go's defaultSpamQPS = 1/300
MAX_SPAM_KEYS: Final = 4096  # client-go's maxLruCacheEntries: the least recently used key is forgotten

SpamKey = tuple[str, str, str, str, str, str]


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


def spam_key(event: Event) -> SpamKey:
    """client-go's getSpamKey: the source component and the involved object (its source host is always
    empty for controllers)."""
    ref = event.involved_object
    return (event.source.component, ref.kind, ref.namespace, ref.name, ref.uid, ref.api_version)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    last: datetime


class SpamFilter:
    """A token bucket per spam key, as golang.org/x/time/rate's AllowN: full at first, refilled by
    elapsed time up to the burst; the times are the caller's clock (Delivery.now), so tests drive it."""

    def __init__(self, burst: int = SPAM_BURST, refill_seconds: float = SPAM_REFILL_SECONDS,
                 max_keys: int = MAX_SPAM_KEYS):
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.max_keys = max_keys
        self._buckets: OrderedDict[SpamKey, _Bucket] = OrderedDict()

    def allow(self, event: Event, now: datetime) -> bool:
        """Takes a token for the event's key; False (the event is to be dropped) when there is none."""
        key = spam_key(event)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
            if len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            elapsed = max(0.0, (now - bucket.last).total_seconds())
            bucket.tokens = min(float(self.burst), bucket.tokens + elapsed / self.refill_seconds)
            bucket.last = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return True
        return False


class EventRecorder:
    """Posts events through the spam filter, counting what became of each."""

    def __init__(self, metrics: m.ExecutorMetrics | None = None, spam_filter: SpamFilter | None = None):
        self.metrics = metrics if metrics is not None else m.ExecutorMetrics()
        self.spam_filter = spam_filter if spam_filter is not None else SpamFilter()
        self._background: set[asyncio.Task[Any]] = set()

    def in_background(self, work: Awaitable[Any]) -> None:
        """Runs `work` without anyone waiting for it: client-go's recorder hands events to a
        broadcaster goroutine too, so a slow events API never holds up the pods' results."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Waits for the events still being recorded (at shutdown, and in tests)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def post(self, api: KubeApi, event: Event, now: datetime) -> Effect:
        """The event POSTed, or SKIPPED when the spam filter drops it; raises TransientError and
        Interrupted from the API call."""
        namespace, name = event.metadata.namespace, event.metadata.name
        if not self.spam_filter.allow(event, now):
            self.metrics.event(m.EVENT_DROPPED)
            ref = event.involved_object
            log.debug("event %s/%s (%s %s on %s %s/%s) dropped by the spam filter", namespace, name, event.type,
                      event.reason, ref.kind, ref.namespace, ref.name)
            return Effect(SKIPPED, reason="SpamFiltered",
                          message=f"dropped: more than {self.spam_filter.burst} events from "
                                  f"{event.source.component} about {ref.kind} {ref.namespace}/{ref.name} "
                                  f"within the spam filter's window")
        reply = await api.call("POST", EVENT.path(namespace), body=codec.encode(event))
        if reply.ok:
            self.metrics.event(m.EVENT_RECORDED)
            return succeeded_with(SUCCEEDED, reply.status, reply.data)
        status = api_status(reply)
        if reply.status == 409 and status.reason == "AlreadyExists":
            self.metrics.event(m.EVENT_DUPLICATE)
            return Effect(SUCCEEDED, 409, "AlreadyExists", "recorded by an earlier attempt")
        self.metrics.event(m.EVENT_FAILED)
        return failed(status)

    async def record(self, api: KubeApi, event: Event, now: datetime) -> None:
        """Best effort: a failure is logged at warning level, never raised."""
        try:
            effect = await self.post(api, event, now)
        except Exception as exc:  # TransientError, Interrupted, or a bug: the action goes on regardless
            self.metrics.event(m.EVENT_FAILED)
            log.warning("event %s/%s (%s: %s) not recorded: %s", event.metadata.namespace, event.metadata.name,
                        event.reason, event.message, str(exc) or type(exc).__name__)
            return
        if effect.outcome == FAILED:
            log.warning("event %s/%s (%s: %s) not recorded: %s %s: %s", event.metadata.namespace,
                        event.metadata.name, event.reason, event.message, effect.code, effect.reason,
                        effect.message)


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


async def record_pod_events(delivery: Delivery, owner: OptionalRaw, component: str, namespace: str,
                            events: list[tuple[str, PodEvent | None]]) -> None:
    """Records, concurrently, best-effort and in the background, each (result key, event) against the
    action's owner; nothing without an owner. The key and reason name the event, so a redelivery
    re-records none."""
    todo = [(key, e) for key, e in events if e is not None]
    if not todo:
        return
    involved = owner_reference(owner)
    if involved is None:
        return
    now = delivery.now()
    delivery.events.in_background(asyncio.gather(*(
        delivery.events.record(delivery.api, build_event(
            involved, namespace=namespace, type=kind, reason=reason, message=message, component=component,
            key=f"{key}/{reason}", now=now), now)
        for key, (kind, reason, message) in todo)))
