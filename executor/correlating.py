"""client-go's EventCorrelator (tools/record/events_cache.go): what becomes of an event before it is written.

A purely computational port: no I/O, and the only clock is the one passed in (upstream's
`clock.PassiveClock`), read where upstream reads it. The recorder in executor/events.py does the
writing:

    correlator = EventCorrelator(clock)
    result = correlator.correlate(event)   # skip it, or write result.event: PATCH result.patch onto
                                           # the existing Event when its count is above 1, else POST
    correlator.update_state(written)       # the Event the server answered with

`EventCorrelator.correlate` runs upstream's three steps in upstream's order, each over an LRU cache
of 4096 keys (maxLruCacheEntries):

1. `EventAggregator` (EventAggregatorByReasonFunc): events alike but for their message (same source,
   involved object, type, reason, reporting controller and instance) seen with 10 distinct messages,
   each within 10 minutes of the previous one, become one event "(combined from similar events):
   <message>", correlated from then on under the aggregate key.
2. `EventLogger`: an event identical to one already written (getEventKey: source, involved object
   with its fieldPath, type, reason, message) becomes that Event with count + 1 and this
   lastTimestamp, written as the strategic merge patch `{"count", "lastTimestamp", "message"}`.
3. `SpamFilter` (EventSourceObjectSpamFilter): a token bucket per source, involved object and type,
   burst 25, one token per 300 s; an event without a token is skipped. As upstream, it looks at
   the event after the first two steps, and the logger has counted the event even when it is skipped.

Where kubus differs: keys are tuples rather than concatenated strings (upstream's "ab"+"c" equals
"a"+"bc"); when the aggregator's set of messages is full it forgets the oldest (upstream's
`PopAny` forgets a random one); and a combined event keeps the name of the event that triggered it
(kubus names every event from its action's key, `<involved name>.<16 hex digits>`, in the place of
upstream's `<involved name>.<UnixNano in hex>`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Generic, TypeVar

import msgspec

from kube.core import Event
from kube.meta import ObjectMeta
from kube.times import Clock, format_time

MAX_LRU_CACHE_ENTRIES: Final = 4096  # maxLruCacheEntries
AGGREGATE_MAX_EVENTS: Final = 10  # defaultAggregateMaxEvents
AGGREGATE_INTERVAL: Final = timedelta(seconds=600)  # defaultAggregateIntervalInSeconds
SPAM_BURST: Final = 25  # defaultSpamBurst
SPAM_REFILL_SECONDS: Final = 300.0  # one token per 300 s: defaultSpamQPS = 1/300
COMBINED_PREFIX: Final = "(combined from similar events): "  # EventAggregatorByReasonMessageFunc
EPOCH: Final = "1970-01-01T00:00:00Z"  # the lastTimestamp eventObserve diffs the counted event against

EventKey = tuple[str, ...]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lru(Generic[K, V]):
    """k8s.io/utils/lru: Get and Add make a key the most recently used; Add beyond the size forgets the least."""

    def __init__(self, size: int = MAX_LRU_CACHE_ENTRIES):
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def add(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


# --- keys ---------------------------------------------------------------------------------------------
def event_key(event: Event) -> EventKey:
    """getEventKey: what makes two events the same event (counted rather than written again)."""
    ref = event.involved_object
    return (event.source.component, event.source.host, ref.kind, ref.namespace, ref.name, ref.field_path,
            ref.uid, ref.api_version, event.type, event.reason, event.message)


def spam_key(event: Event) -> EventKey:
    """getSpamKey (with the type, as since client-go 1.32): the source, the involved object and the type."""
    ref = event.involved_object
    return (event.source.component, event.source.host, ref.kind, ref.namespace, ref.name, ref.uid,
            ref.api_version, event.type)


def aggregate_key(event: Event) -> tuple[EventKey, str]:
    """EventAggregatorByReasonFunc: the group of similar events (everything but the message, and the
    involved object's fieldPath), and the event's key within it (its message)."""
    ref = event.involved_object
    return ((event.source.component, event.source.host, ref.kind, ref.namespace, ref.name, ref.uid,
             ref.api_version, event.type, event.reason, event.reporting_component, event.reporting_instance),
            event.message)


def combined_message(event: Event) -> str:
    """EventAggregatorByReasonMessageFunc."""
    return COMBINED_PREFIX + event.message


# --- the spam filter ----------------------------------------------------------------------------------
@dataclass(slots=True)
class _Bucket:
    tokens: float
    last: datetime


class SpamFilter:
    """EventSourceObjectSpamFilter: a token bucket per spam key, as golang.org/x/time/rate's AllowN: full
    at first, refilled by elapsed time up to the burst. The time is the caller's."""

    def __init__(self, burst: int = SPAM_BURST, refill_seconds: float = SPAM_REFILL_SECONDS,
                 max_keys: int = MAX_LRU_CACHE_ENTRIES, key: Callable[[Event], Hashable] = spam_key):
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.max_keys = max_keys
        self._key = key
        self._buckets: OrderedDict[Hashable, _Bucket] = OrderedDict()

    def allow(self, event: Event, now: datetime) -> bool:
        """Takes a token for the event's key; False (the event is to be dropped) when there is none."""
        key = self._key(event)
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


# --- the aggregator -----------------------------------------------------------------------------------
@dataclass(slots=True)
class _Aggregate:
    local_keys: dict[str, None]  # an insertion-ordered set of the messages seen
    last: datetime


class EventAggregator:
    """EventAggregator with EventAggregatorByReasonFunc and EventAggregatorByReasonMessageFunc."""

    def __init__(self, clock: Clock, max_events: int = AGGREGATE_MAX_EVENTS,
                 max_interval: timedelta = AGGREGATE_INTERVAL, size: int = MAX_LRU_CACHE_ENTRIES):
        self._clock = clock
        self.max_events = max_events
        self.max_interval = max_interval
        self._cache: Lru[EventKey, _Aggregate] = Lru(size)

    def aggregate(self, event: Event) -> tuple[Event, EventKey]:
        """EventAggregate: the event to write (the event itself, or a combined one) and its cache key for
        the logger (the event's own key, or the aggregate key for a combined event)."""
        now = self._clock()
        group, local = aggregate_key(event)
        record = self._cache.get(group)
        if record is None or now - record.last > self.max_interval:
            record = _Aggregate({}, now)
        record.local_keys[local] = None
        record.last = now
        self._cache.add(group, record)
        if len(record.local_keys) < self.max_events:
            return event, event_key(event)
        del record.local_keys[next(iter(record.local_keys))]  # do not grow the set beyond the maximum
        at = format_time(now)
        combined = Event(
            metadata=ObjectMeta(name=event.metadata.name, namespace=event.metadata.namespace),
            count=1, first_timestamp=at, last_timestamp=at, involved_object=event.involved_object,
            message=combined_message(event), type=event.type, reason=event.reason, source=event.source)
        return combined, group


# --- the logger ---------------------------------------------------------------------------------------
class _Observation(msgspec.Struct, frozen=True, gc=False):
    """eventLog: what the cache remembers of an event written (or about to be). A frozen msgspec Struct: one is
    built per event, in C (a frozen dataclass sets each field through object.__setattr__ in Python)."""

    count: int
    first_timestamp: str | None
    name: str
    resource_version: str


class EventLogger:
    """eventLogger: counts the occurrences of each event, keyed as the aggregator says."""

    def __init__(self, size: int = MAX_LRU_CACHE_ENTRIES):
        self._cache: Lru[EventKey, _Observation] = Lru(size)

    def observe(self, event: Event, key: EventKey) -> tuple[Event, bool]:
        """eventObserve: the event as it is to be written, and whether it is a repeat of one seen (to be
        written as its `count_patch`, which the caller builds only if the spam filter lets the event through)."""
        last = self._cache.get(key)
        repeat = False
        if last is not None and last.count > 0:
            repeat = True
            event = msgspec.structs.replace(
                event, metadata=msgspec.structs.replace(event.metadata, name=last.name,
                                                        resource_version=last.resource_version),
                first_timestamp=last.first_timestamp, count=last.count + 1)
        self._remember(key, event)
        return event, repeat

    def update_state(self, event: Event) -> None:
        """updateState: the server's copy of an event written, under its own event key."""
        self._remember(event_key(event), event)

    def _remember(self, key: EventKey, event: Event) -> None:
        self._cache.add(key, _Observation(event.count, event.first_timestamp, event.metadata.name,
                                          event.metadata.resource_version))


_patch_encoder = msgspec.json.Encoder()


def count_patch(event: Event) -> bytes:
    """What eventObserve's strategicpatch.CreateTwoWayMergePatch makes of an event against a copy with no
    count, an epoch lastTimestamp and no message: those three fields, in Go's (sorted) key order."""
    patch: dict[str, object] = {"count": event.count}
    if event.last_timestamp != EPOCH:
        patch["lastTimestamp"] = event.last_timestamp
    if event.message:
        patch["message"] = event.message
    return _patch_encoder.encode(patch)


# --- the correlator -----------------------------------------------------------------------------------
class Correlated(msgspec.Struct, frozen=True):
    """EventCorrelateResult: the event to write (None: skip it), and the patch for a repeat. A frozen msgspec
    Struct, built in C, for one is made per event."""

    event: Event | None
    patch: bytes | None = None

    @property
    def skip(self) -> bool:
        return self.event is None

    @property
    def update_existing(self) -> bool:
        """recordToSink's `result.Event.Count > 1`: PATCH the existing Event rather than POST."""
        return self.event is not None and self.event.count > 1 and self.patch is not None


class EventCorrelator:
    """NewEventCorrelator: aggregate, count, then spam-filter each event (see the module's doc)."""

    def __init__(self, clock: Clock, *, spam_filter: SpamFilter | None = None,
                 max_events: int = AGGREGATE_MAX_EVENTS, max_interval: timedelta = AGGREGATE_INTERVAL,
                 cache_size: int = MAX_LRU_CACHE_ENTRIES):
        self._clock = clock
        self.spam_filter = spam_filter if spam_filter is not None else SpamFilter(max_keys=cache_size)
        self.aggregator = EventAggregator(clock, max_events, max_interval, cache_size)
        self.logger = EventLogger(cache_size)

    def correlate(self, event: Event) -> Correlated:
        """EventCorrelate."""
        aggregated, key = self.aggregator.aggregate(event)
        observed, repeat = self.logger.observe(aggregated, key)
        if not self.spam_filter.allow(observed, self._clock()):
            return Correlated(None)
        return Correlated(observed, count_patch(observed) if repeat else None)

    def update_state(self, event: Event) -> None:
        """UpdateState: after a write, with the Event the server answered with."""
        self.logger.update_state(event)
