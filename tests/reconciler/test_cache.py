"""The cache is a fold of observed events: order, staleness and tombstones."""

from __future__ import annotations

import msgspec
import pytest

from kube import codec
from kube.core import Pod
from kube.testing import pod
from messages.observed import (
    ADDED,
    DELETED,
    DELETED_FINAL_STATE_UNKNOWN,
    MODIFIED,
    QUARANTINED,
    RELISTED,
    ObservedEvent,
)
from reconciler.core.cache import Cache


def event(kind_type: str, rv: str, phase: str = "Pending", uid: str = "u1") -> ObservedEvent:
    obj = pod("p").ns("ns").uid(uid).rv(rv).phase(phase).build()
    return ObservedEvent(kind="Pod", type=kind_type, namespace="ns", name="p", uid=uid, resource_version=rv,
                         observed_at="2026-01-01T00:00:00.000000Z", ingest="test",
                         object=msgspec.Raw(codec.encode(obj)))


@pytest.mark.parametrize(
    ("events", "phase"),
    [
        pytest.param([(event(ADDED, "1"), 1), (event(MODIFIED, "2", "Running"), 2)], "Running", id="in-order"),
        pytest.param([(event(MODIFIED, "2", "Running"), 5), (event(ADDED, "1"), 3)], "Running",
                     id="older-sequence-ignored"),
        pytest.param([(event(ADDED, "1"), 1), (event(DELETED, "2"), 2)], None, id="deleted"),
        pytest.param([(event(ADDED, "1"), 1), (event(DELETED_FINAL_STATE_UNKNOWN, "1"), 2)], None,
                     id="tombstone-after-relist"),
        pytest.param([(event(ADDED, "1"), 1), (event(DELETED, "2"), 2), (event(ADDED, "1"), 1)], None,
                     id="replayed-add-after-delete-ignored"),
        pytest.param([(event(QUARANTINED, "1"), 1)], None, id="quarantined-never-cached"),
    ],
)
def test_fold(events: list[tuple[ObservedEvent, int]], phase: str | None) -> None:
    """Applying events leaves the state of the newest one, whatever order replay delivers them in."""
    cache = Cache()
    for observed, seq in events:
        cache.apply(observed, seq)
    cached = cache.get("Pod", "u1")
    assert (cached.status.phase if cached else None) == phase
    assert [p.metadata.name for p in cache.in_namespace("Pod", "ns")] == (["p"] if phase else [])


def at(kind_type: str, rv: str, phase: str = "Pending", uid: str = "u1",
       observed_at: str = "2026-01-01T00:00:00.000000Z") -> ObservedEvent:
    return msgspec.structs.replace(event(kind_type, rv, phase, uid), observed_at=observed_at)


# Per-object order (issue 15): two ingest replicas, one cut off from NATS for longer than the duplicate window,
# publish an object's events out of order; the cache follows resourceVersions and keeps a deletion final.
# Each case: the events with their stream sequences, the phase left (None: no object), and what the last
# event's change was ("applied", "replayed" or "ignored").
ORDER_CASES = [
    pytest.param([(event(ADDED, "1"), 1), (event(MODIFIED, "3", "Running"), 2), (event(MODIFIED, "2"), 3)],
                 "Running", "ignored", id="stale-update-after-newer"),
    pytest.param([(event(ADDED, "1"), 1), (event(MODIFIED, "3", "Running"), 2),
                  (event(MODIFIED, "3", "Succeeded"), 3)], "Running", "ignored", id="same-version-again"),
    pytest.param([(event(ADDED, "1"), 1), (event(MODIFIED, "2", "Running"), 2), (event(ADDED, "1"), 3)],
                 "Running", "ignored", id="stale-add-after-update"),
    pytest.param([(event(ADDED, "1"), 1), (event(DELETED, "4"), 2), (event(MODIFIED, "3", "Running"), 3)],
                 None, "ignored", id="stale-update-after-delete"),
    pytest.param([(event(ADDED, "1"), 1), (event(DELETED, "4"), 2), (event(MODIFIED, "9", "Running"), 3)],
                 None, "ignored", id="deletion-final-even-for-a-newer-version"),
    pytest.param([(event(ADDED, "1"), 1), (event(DELETED_FINAL_STATE_UNKNOWN, "1"), 2), (event(RELISTED, "5"), 3)],
                 None, "ignored", id="relisted-after-tombstone"),
    pytest.param([(event(ADDED, "1"), 1), (event(DELETED, "4"), 2), (event(DELETED, "4"), 3)],
                 None, "ignored", id="deletion-published-twice"),
    pytest.param([(event(DELETED, "4"), 2), (event(ADDED, "1"), 3)], None, "ignored",
                 id="delete-of-unknown-then-stale-add"),
    pytest.param([(event(ADDED, "1"), 1), (event(MODIFIED, "5", "Running"), 2),
                  (event(DELETED_FINAL_STATE_UNKNOWN, "3"), 3)], "Running", "ignored",
                 id="tombstone-older-than-cached-state"),
    pytest.param([(event(ADDED, "1"), 1), (event(MODIFIED, "5", "Running"), 2),
                  (event(DELETED_FINAL_STATE_UNKNOWN, "5"), 3)], None, "applied", id="tombstone-of-cached-state"),
    pytest.param([(event(ADDED, "1"), 1), (event(MODIFIED, "5", "Running"), 2), (event(DELETED, "3"), 3)],
                 None, "applied", id="a-watch-deletion-is-always-taken"),
    pytest.param([(event(ADDED, "1"), 1), (event(RELISTED, "7", "Running"), 2)], "Running", "applied",
                 id="relisted-newer"),
    pytest.param([(event(ADDED, "1"), 1), (event(MODIFIED, "10", "Running"), 2), (event(MODIFIED, "9"), 3)],
                 "Running", "ignored", id="integers-not-strings"),
    pytest.param([(event(ADDED, "b"), 1), (event(MODIFIED, "a", "Running"), 2)], "Running", "applied",
                 id="unparsable-versions-follow-the-stream"),
    pytest.param([(event(ADDED, "5"), 1), (event(MODIFIED, "x", "Running"), 2)], "Running", "applied",
                 id="one-unparsable-version-follows-the-stream"),
    pytest.param([(event(ADDED, "1"), 1), (event(DELETED, "4"), 5), (event(MODIFIED, "3", "Running"), 4)],
                 None, "replayed", id="history-before-a-deletion-is-replayed"),
    pytest.param([(event(MODIFIED, "3", "Running"), 5), (event(MODIFIED, "2"), 4)], "Running", "replayed",
                 id="history-before-the-state-is-replayed"),
]


@pytest.mark.parametrize(("events", "phase", "last"), ORDER_CASES)
def test_per_object_order(events: list[tuple[ObservedEvent, int]], phase: str | None, last: str) -> None:
    cache = Cache()
    change = None
    for observed, seq in events:
        change = cache.apply(observed, seq)
    cached = cache.get("Pod", "u1")
    assert (cached.status.phase if cached else None) == phase
    assert [p.metadata.name for p in cache.in_namespace("Pod", "ns")] == (["p"] if phase else [])
    assert [f.metadata.name for f in cache.owned_or_orphans("Pod", "ns", "nobody")] == (["p"] if phase else [])
    assert ("ignored" if change is None else "replayed" if change.replayed else "applied") == last
    assert cache.stale == (1 if last == "ignored" else 0)


def test_deleted_uids_are_forgotten_after_the_memory_window() -> None:
    """The memory of deleted uids is bounded by DELETED_MEMORY of the deletions' own observed_at: a uid
    deleted longer ago than that is forgotten at the next deletion, one deleted within it is not."""
    cache = Cache()
    cache.apply(at(ADDED, "1", uid="old"), 1)
    cache.apply(at(DELETED, "2", uid="old", observed_at="2026-01-01T00:00:00.000000Z"), 2)
    cache.apply(at(ADDED, "3", uid="recent"), 3)
    cache.apply(at(DELETED, "4", uid="recent", observed_at="2026-01-01T00:30:00.000000Z"), 4)
    assert set(cache.deleted) == {"old", "recent"}
    cache.apply(at(ADDED, "5", uid="next"), 5)
    # an hour and a second after the first deletion, half an hour after the second
    cache.apply(at(DELETED, "6", uid="next", observed_at="2026-01-01T01:00:01.000000Z"), 6)
    assert set(cache.deleted) == {"recent", "next"}
    assert cache.apply(at(MODIFIED, "9", uid="recent"), 7) is None  # still final
    assert not cache.seqs  # live objects only


def test_deleted_memory_ignores_unreadable_and_older_times() -> None:
    """A deletion with an unreadable observed_at, or one older than the newest (another replica's clock), neither
    moves the clock back nor breaks the fold."""
    cache = Cache()
    cache.apply(at(DELETED, "2", uid="a", observed_at="2026-01-01T02:00:00.000000Z"), 1)
    cache.apply(at(DELETED, "3", uid="b", observed_at="not a time"), 2)
    cache.apply(at(DELETED, "4", uid="c", observed_at="2026-01-01T00:00:00.000000Z"), 3)
    assert set(cache.deleted) == {"a", "b", "c"}
    cache.apply(at(DELETED, "5", uid="d", observed_at="2026-01-01T03:30:00.000000Z"), 4)
    assert set(cache.deleted) == {"d"}  # all three were remembered from the clock at 02:00


def decoded(observed: ObservedEvent) -> ObservedEvent:
    """The event with its object in the model already, as a replay's reader decodes a pod's with its line."""
    return msgspec.structs.replace(observed, object=codec.decode(observed.object, Pod))


@pytest.mark.parametrize(("events", "phase", "last"), ORDER_CASES)
@pytest.mark.parametrize("final_state", [True, False])
def test_an_object_decoded_already_folds_as_its_bytes(events: list[tuple[ObservedEvent, int]], phase: str | None,
                                                      last: str, final_state: bool) -> None:
    """`Cache.apply` takes an event's object already decoded into its kind's model as it is: the changes and
    what the cache holds are those of the same events with their objects as bytes (replayed changes and a
    deletion's final state included)."""
    as_bytes, as_objects = Cache(), Cache()
    for observed, seq in events:
        change = as_bytes.apply(observed, seq, final_state)
        assert as_objects.apply(decoded(observed), seq, final_state) == change
        assert isinstance(observed.object, msgspec.Raw)  # (the event given the first cache is left as it was)
    for cache in (as_bytes, as_objects):
        cache.journals = cache.label_sets = {}  # (not compared: the label sets are shared dicts, equal anyway)
    assert as_objects == as_bytes
