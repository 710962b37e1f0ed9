"""The cache is a fold of observed events: order, staleness and tombstones."""

from __future__ import annotations

import msgspec
import pytest

from kube import codec
from kube.testing import pod
from messages.observed import ADDED, DELETED, DELETED_FINAL_STATE_UNKNOWN, MODIFIED, QUARANTINED, ObservedEvent
from reconciler.core.cache import Cache


def event(kind_type: str, rv: str, phase: str = "Pending", uid: str = "u1") -> ObservedEvent:
    obj = pod("p").ns("ns").phase(phase).build()
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
