"""client-go's EventCorrelator, ported: the table-driven cases of tools/record/events_cache_test.go on the
same interval clock, and what kubus adds to pin the port down (the patch, the server's state, the caches)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from executor.correlating import (
    AGGREGATE_MAX_EVENTS,
    SPAM_BURST,
    Correlated,
    EventCorrelator,
    Lru,
    SpamFilter,
    aggregate_key,
    combined_message,
    count_patch,
    event_key,
)
from kube.core import Event, EventSource
from kube.meta import ObjectMeta, ObjectReference
from kube.times import format_time

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
AGGREGATE_INTERVAL_SECONDS = 600


class IntervalClock:
    """k8s.io/utils/clock/testing SimpleIntervalClock: every reading is `step` later than the last."""

    def __init__(self, step: timedelta, start: datetime = T0):
        self.time = start
        self.step = step

    def __call__(self) -> datetime:
        self.time += self.step
        return self.time


# --- events_cache_test.go's builders --------------------------------------------------------------
def object_reference(kind: str, name: str, namespace: str) -> ObjectReference:
    return ObjectReference(kind=kind, name=name, namespace=namespace, uid="C934D34AFB20242", api_version="version",
                           field_path="spec.containers{mycontainer}")


def make_event(reason: str, message: str, involved: ObjectReference) -> Event:
    return Event(reason=reason, message=message, involved_object=involved,
                 source=EventSource(component="kubelet", host="kublet.node1"), count=1, type="Normal",
                 first_timestamp=format_time(T0), last_timestamp=format_time(T0))


def unique_events(count: int) -> list[Event]:
    return [make_event(f"reason-{i}", f"message-{i}", object_reference("Pod", f"pod-{i}", f"ns-{i}"))
            for i in range(count)]


def similar_events(count: int, template: Event, prefix: str) -> list[Event]:
    return [msgspec.structs.replace(template, message=f"{prefix}-{i}-{template.message}") for i in range(count)]


def with_count(event: Event, count: int) -> Event:
    return msgspec.structs.replace(event, count=count)


def at(event: Event, now: datetime) -> Event:
    return msgspec.structs.replace(event, first_timestamp=format_time(now), last_timestamp=format_time(now))


def assert_event(actual: Event, expected: Event) -> None:
    """validateEvent: timestamps set, equal for one occurrence and apart for a count; the name starts
    with the expected one; the rest equal but for the reporting controller."""
    assert actual.first_timestamp and actual.last_timestamp
    assert (actual.first_timestamp == actual.last_timestamp) is (expected.count == 1)
    assert actual.metadata.name.startswith(expected.metadata.name)
    comparable = msgspec.structs.replace(actual, first_timestamp=expected.first_timestamp,
                                         last_timestamp=expected.last_timestamp, metadata=expected.metadata,
                                         reporting_component=expected.reporting_component)
    assert comparable == expected


FIRST = make_event("first", "i am first", object_reference("Pod", "my-pod", "my-ns"))
DUPLICATE = make_event("duplicate", "me again", object_reference("Pod", "my-pod", "my-ns"))
UNIQUE = make_event("unique", "snowflake", object_reference("Pod", "my-pod", "my-ns"))
SIMILAR = make_event("similar", "similar message",
                     msgspec.structs.replace(object_reference("Pod", "my-pod", "my-ns"),
                                             field_path="spec.containers{container1}"))
AGGREGATE = make_event(SIMILAR.reason, combined_message(SIMILAR), SIMILAR.involved_object)
SIMILAR_OTHER_CONTAINER = msgspec.structs.replace(
    SIMILAR, involved_object=msgspec.structs.replace(SIMILAR.involved_object, field_path="spec.containers{container2}"))


def test_events_alike_but_for_the_message_share_an_aggregate_key() -> None:
    """TestEventAggregatorByReasonFunc."""
    ref = object_reference("Pod", "pod1", "other")
    fun, awful, bug = (make_event("end-of-world", "it was fun", ref), make_event("end-of-world", "it was awful", ref),
                       make_event("nevermind", "it was a bug", ref))
    (group1, local1), (group2, local2), (group3, _) = aggregate_key(fun), aggregate_key(awful), aggregate_key(bug)
    assert group1 == group2 and local1 != local2
    assert group1 != group3


def test_the_aggregate_message_is_prefixed() -> None:
    """TestEventAggregatorByReasonMessageFunc."""
    event = make_event("end-of-world", "it was fun", object_reference("Pod", "pod1", "other"))
    assert combined_message(event) == "(combined from similar events): it was fun"


@dataclass(frozen=True)
class Scenario:
    previous: list[Event]
    new: Event
    expected: Event | None  # None: skipped
    interval_seconds: int


@pytest.mark.parametrize("scenario", [
    pytest.param(Scenario([], FIRST, with_count(FIRST, 1), 5), id="create-a-single-event"),
    pytest.param(Scenario([DUPLICATE], DUPLICATE, with_count(DUPLICATE, 2), 5), id="the-same-event-should-just-count"),
    # a larger interval induces aggregation but not spam
    pytest.param(Scenario([DUPLICATE] * AGGREGATE_MAX_EVENTS, DUPLICATE,
                          with_count(DUPLICATE, AGGREGATE_MAX_EVENTS + 1), 30),
                 id="the-same-event-should-just-count-even-if-more-than-aggregate"),
    pytest.param(Scenario([DUPLICATE] * (SPAM_BURST + 1), DUPLICATE, None, 1),
                 id="the-same-event-is-spam-if-happens-too-frequently"),
    pytest.param(Scenario(unique_events(30), UNIQUE, with_count(UNIQUE, 1), 5), id="create-many-unique-events"),
    pytest.param(Scenario(similar_events(AGGREGATE_MAX_EVENTS - 1, SIMILAR, SIMILAR.message), SIMILAR,
                          with_count(AGGREGATE, 1), 5), id="similar-events-should-aggregate-event"),
    pytest.param(Scenario(similar_events(AGGREGATE_MAX_EVENTS, SIMILAR, SIMILAR.message), SIMILAR,
                          with_count(AGGREGATE, 2), 5), id="similar-events-many-times-should-count-the-aggregate"),
    pytest.param(Scenario([SIMILAR_OTHER_CONTAINER], SIMILAR, with_count(SIMILAR, 1), 5),
                 id="events-from-different-containers-do-not-aggregate"),
    pytest.param(Scenario(similar_events(AGGREGATE_MAX_EVENTS - 1, SIMILAR, SIMILAR.message), SIMILAR,
                          with_count(SIMILAR, 1), AGGREGATE_INTERVAL_SECONDS),
                 id="similar-events-whose-interval-is-greater-than-aggregate-interval-do-not-aggregate"),
])
def test_event_correlator(scenario: Scenario) -> None:
    """TestEventCorrelator: counting, aggregation and spam on a clock that moves on at every reading."""
    clock = IntervalClock(timedelta(seconds=scenario.interval_seconds))
    correlator = EventCorrelator(clock)
    for event in scenario.previous:
        result = correlator.correlate(at(event, clock()))
        if result.event is not None:
            correlator.update_state(result.event)
    result = correlator.correlate(at(scenario.new, clock()))
    if scenario.expected is None:
        assert result.skip and result.event is None
        return
    assert not result.skip and result.event is not None
    assert_event(result.event, scenario.expected)
    assert result.update_existing is (scenario.expected.count > 1)


def _by_object_and_reason(event: Event) -> Hashable:
    """events_cache_test.go's spamKeyFuncBasedOnObjectsAndReason."""
    ref = event.involved_object
    return (event.source.component, event.source.host, ref.kind, ref.namespace, ref.name, ref.uid, ref.api_version,
            event.reason)


ORIGINAL = make_event("original", "i am first", object_reference("Pod", "my-pod", "my-ns"))
DIFFERENT_REASON = make_event("duplicate", "me again", object_reference("Pod", "my-pod", "my-ns"))
SPAM = make_event("original", "me again", object_reference("Pod", "my-pod", "my-ns"))


@pytest.mark.parametrize(("new", "key", "skipped"), [
    pytest.param(DIFFERENT_REASON, None, True, id="the-default-key-is-the-object-whatever-the-reason"),
    pytest.param(DIFFERENT_REASON, _by_object_and_reason, False, id="a-key-with-the-reason-lets-another-reason-pass"),
    pytest.param(SPAM, _by_object_and_reason, True, id="a-key-with-the-reason-stops-another-message"),
])
def test_event_spam_filter(new: Event, key: Callable[[Event], Hashable] | None, skipped: bool) -> None:
    """TestEventSpamFilter: a burst of 1, with upstream's key or one that adds the reason."""
    spam = SpamFilter(burst=1) if key is None else SpamFilter(burst=1, key=key)
    correlator = EventCorrelator(IntervalClock(timedelta(seconds=1)), spam_filter=spam)
    first = correlator.correlate(ORIGINAL)
    assert first.event is not None
    correlator.update_state(first.event)
    result = correlator.correlate(new)
    assert result.skip is skipped
    if not skipped:
        assert result.event is not None
        assert_event(result.event, new)


# --- beyond upstream's tests ------------------------------------------------------------------------
def test_a_repeat_is_the_first_event_counted_with_its_patch() -> None:
    """eventObserve: the first one's name, resourceVersion and firstTimestamp, count + 1, and the patch
    CreateTwoWayMergePatch makes (count, lastTimestamp, message; keys sorted as Go writes them)."""
    clock = IntervalClock(timedelta(seconds=5))
    correlator = EventCorrelator(clock)
    first = correlator.correlate(at(msgspec.structs.replace(DUPLICATE, metadata=ObjectMeta(name="my-pod.a")), clock()))
    assert first.event is not None and first.patch is None and not first.update_existing
    written = msgspec.structs.replace(first.event, metadata=ObjectMeta(name="my-pod.a", resource_version="42"))
    correlator.update_state(written)  # the server's copy: its resourceVersion
    again = at(msgspec.structs.replace(DUPLICATE, metadata=ObjectMeta(name="my-pod.b")), clock())
    result = correlator.correlate(again)
    assert result.event is not None and result.update_existing
    assert (result.event.metadata.name, result.event.metadata.resource_version, result.event.count) == (
        "my-pod.a", "42", 2)
    assert result.event.first_timestamp == first.event.first_timestamp != result.event.last_timestamp
    assert result.patch == (b'{"count":2,"lastTimestamp":"' + (again.last_timestamp or "").encode()
                            + b'","message":"me again"}')


@pytest.mark.parametrize(("event", "patch"), [
    pytest.param(Event(count=3, last_timestamp="2024-05-01T12:00:05Z", message="m"),
                 b'{"count":3,"lastTimestamp":"2024-05-01T12:00:05Z","message":"m"}', id="all-three"),
    pytest.param(Event(count=2, last_timestamp="2024-05-01T12:00:05Z"),
                 b'{"count":2,"lastTimestamp":"2024-05-01T12:00:05Z"}', id="no-message-no-field"),
    pytest.param(Event(count=2, last_timestamp="1970-01-01T00:00:00Z", message="m"), b'{"count":2,"message":"m"}',
                 id="an-epoch-timestamp-is-no-change"),
])
def test_count_patch(event: Event, patch: bytes) -> None:
    assert count_patch(event) == patch


def test_a_combined_event_is_a_new_event_then_counted_under_the_aggregate_key() -> None:
    """The 10th distinct message makes a combined event (count 1, the triggering event's name, no reporting
    fields, as upstream's copy); the 11th counts onto it with a patch; ten minutes of quiet start over."""
    clock = IntervalClock(timedelta(seconds=1))
    correlator = EventCorrelator(clock)
    ref = object_reference("ReplicaSet", "web", "ns")

    def created(i: int) -> Correlated:
        event = msgspec.structs.replace(make_event("SuccessfulCreate", f"Created pod: web-{i}", ref),
                                        metadata=ObjectMeta(name=f"web.{i}", namespace="ns"),
                                        reporting_component="replicaset-controller")
        return correlator.correlate(at(event, clock()))

    plain = [created(i) for i in range(9)]
    assert all(r.event is not None and r.event.count == 1 and not r.update_existing for r in plain)
    tenth = created(9)
    assert tenth.event is not None and not tenth.update_existing
    assert (tenth.event.message, tenth.event.metadata.name, tenth.event.metadata.namespace, tenth.event.count,
            tenth.event.reporting_component) == ("(combined from similar events): Created pod: web-9", "web.9", "ns",
                                                 1, "")
    correlator.update_state(tenth.event)
    eleventh = created(10)
    assert eleventh.event is not None and eleventh.update_existing
    assert (eleventh.event.metadata.name, eleventh.event.count, eleventh.event.message) == (
        "web.9", 2, "(combined from similar events): Created pod: web-10")
    clock.time += timedelta(seconds=AGGREGATE_INTERVAL_SECONDS + 1)
    fresh = created(11)
    assert fresh.event is not None and (fresh.event.message, fresh.event.count) == ("Created pod: web-11", 1)


def test_a_full_aggregate_forgets_its_oldest_message() -> None:
    """Past the threshold the set of messages stays at 9 (upstream pops any; kubus the oldest): a message
    still held is an event of its own again, one forgotten makes the set full again."""
    clock = IntervalClock(timedelta(seconds=1))
    correlator = EventCorrelator(clock)
    ref = object_reference("Pod", "p", "ns")
    results = [correlator.correlate(at(make_event("r", f"m{i}", ref), clock())) for i in range(10)]
    assert results[-1].event is not None and results[-1].event.message == combined_message(make_event("r", "m9", ref))
    held = correlator.correlate(at(make_event("r", "m5", ref), clock()))
    assert held.event is not None and (held.event.message, held.event.count) == ("m5", 2)
    forgotten = correlator.correlate(at(make_event("r", "m0", ref), clock()))
    assert forgotten.event is not None and forgotten.event.message == combined_message(make_event("r", "m0", ref))


def test_identical_events_differ_by_any_field_of_the_event_key() -> None:
    base = make_event("r", "m", object_reference("Pod", "p", "ns"))
    variants = [
        msgspec.structs.replace(base, source=EventSource(component="other", host=base.source.host)),
        msgspec.structs.replace(base, source=EventSource(component=base.source.component, host="elsewhere")),
        msgspec.structs.replace(base, involved_object=msgspec.structs.replace(base.involved_object, field_path="x")),
        msgspec.structs.replace(base, type="Warning"),
        msgspec.structs.replace(base, reason="other"),
        msgspec.structs.replace(base, message="other"),
    ]
    assert len({event_key(e) for e in [base, *variants]}) == len(variants) + 1
    same = msgspec.structs.replace(base, count=7, metadata=ObjectMeta(name="n", resource_version="9"),
                                   reporting_component="c", first_timestamp="2024-05-01T12:00:00Z")
    assert event_key(same) == event_key(base)


def test_the_lru_forgets_the_least_recently_used() -> None:
    lru: Lru[str, int] = Lru(2)
    lru.add("a", 1)
    lru.add("b", 2)
    assert lru.get("a") == 1  # a is now the most recently used
    lru.add("c", 3)
    assert (lru.get("a"), lru.get("b"), lru.get("c"), len(lru)) == (1, None, 3, 2)


def test_the_count_patch_is_built_only_for_a_repeat_the_spam_filter_lets_through(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A repeat is counted by the logger whether or not the spam filter drops it, but its patch is built only
    when it is to be written: past a large scale's burst nearly every event is a dropped repeat."""
    built: list[int] = []

    def counting_patch(event: Event) -> bytes:
        built.append(event.count)
        return count_patch(event)

    monkeypatch.setattr("executor.correlating.count_patch", counting_patch)
    clock = IntervalClock(timedelta(seconds=1))
    correlator = EventCorrelator(clock, spam_filter=SpamFilter(burst=2))
    first = correlator.correlate(at(DUPLICATE, clock()))
    assert first.event is not None and first.patch is None
    correlator.update_state(first.event)
    second, third, fourth = (correlator.correlate(at(DUPLICATE, clock())) for _ in range(3))
    assert second.event is not None and second.patch == count_patch(second.event) and second.event.count == 2
    assert third.skip and fourth.skip
    assert built == [2]
    clock.time += timedelta(seconds=SpamFilter().refill_seconds)  # a token again
    fifth = correlator.correlate(at(DUPLICATE, clock()))
    assert fifth.event is not None and fifth.event.count == 5  # the dropped ones were counted all the same
    assert fifth.patch == count_patch(fifth.event) and built == [2, 5]
