"""plan_relist: what a relist publishes, given what the bus knows and what the API listed."""

from __future__ import annotations

import msgspec
import pytest

from ingest.observing import Origin
from ingest.relisting import plan_relist
from messages.observed import (
    ADDED,
    DELETED,
    DELETED_FINAL_STATE_UNKNOWN,
    MODIFIED,
    QUARANTINED,
    RELISTED,
    ObservedEvent,
)

ORIGIN = Origin("ingest-now", "2026-01-02T00:00:00.000000Z")


def ev(uid: str, rv: str, event_type: str = ADDED, body: bytes = b"{}") -> ObservedEvent:
    return ObservedEvent(kind="Pod", type=event_type, namespace="shop", name=f"pod-{uid}", uid=uid,
                         resource_version=rv, observed_at="earlier", ingest="ingest-then", object=msgspec.Raw(body))


@pytest.mark.parametrize(("known", "listed", "expected"), [
    pytest.param([], [ev("a", "5")], [(ADDED, "a", "5")], id="never-seen-is-added"),
    pytest.param([ev("a", "5", MODIFIED)], [ev("a", "5")], [], id="unchanged-publishes-nothing"),
    pytest.param([ev("a", "5")], [ev("a", "9")], [(RELISTED, "a", "9")], id="changed-is-relisted"),
    pytest.param([ev("a", "5")], [], [(DELETED_FINAL_STATE_UNKNOWN, "a", "5")], id="vanished-gets-a-tombstone"),
    pytest.param([ev("a", "6", DELETED)], [], [], id="known-deleted-stays-quiet"),
    pytest.param([ev("a", "6", DELETED_FINAL_STATE_UNKNOWN)], [], [], id="known-tombstoned-stays-quiet"),
    pytest.param([ev("a", "5")], [ev("a", "9", QUARANTINED)], [(QUARANTINED, "a", "9")],
                 id="changed-into-undecodable-stays-quarantined"),
    pytest.param([ev("a", "5"), ev("b", "6"), ev("c", "7")], [ev("d", "8"), ev("b", "9"), ev("c", "7")],
                 [(ADDED, "d", "8"), (RELISTED, "b", "9"), (DELETED_FINAL_STATE_UNKNOWN, "a", "5")],
                 id="listed-order-then-tombstones"),
])
def test_plan_relist(known: list[ObservedEvent], listed: list[ObservedEvent],
                     expected: list[tuple[str, str, str]]) -> None:
    """ADDED for new objects, RELISTED for moved rvs, tombstones for vanished ones, nothing for the rest."""
    planned = plan_relist("Pod", {e.uid: e for e in known}, listed, ORIGIN)
    assert [(e.type, e.uid, e.resource_version) for e in planned] == expected


@pytest.mark.parametrize(("known_rv", "list_rv", "tombstone"), [
    pytest.param("5", "7", True, id="known-before-the-list"),
    pytest.param("7", "7", True, id="known-at-the-list"),
    pytest.param("8", "7", False, id="published-after-the-list"),
    pytest.param("8", "", True, id="no-list-version"),
    pytest.param("x", "7", True, id="unparsable-version"),
])
def test_no_tombstone_for_an_object_newer_than_the_list(known_rv: str, list_rv: str, tombstone: bool) -> None:
    """Another replica published an object created after this replica's list: the list cannot say it is gone,
    and a tombstone would be final (issue 15)."""
    planned = plan_relist("Pod", {"a": ev("a", known_rv)}, [], ORIGIN, list_rv)
    assert [(e.type, e.uid) for e in planned] == ([(DELETED_FINAL_STATE_UNKNOWN, "a")] if tombstone else [])


def test_a_tombstone_carries_the_last_known_state() -> None:
    last = ev("a", "5", MODIFIED, body=b'{"metadata":{"name":"pod-a"},"spec":{"nodeName":"n1"}}')
    [tombstone] = plan_relist("Pod", {"a": last}, [], ORIGIN)
    assert bytes(tombstone.object) == bytes(last.object)
    assert (tombstone.namespace, tombstone.name, tombstone.ingest) == ("shop", "pod-a", "ingest-now")
    assert tombstone.msg_id == "Pod/a/5/DELETED_FINAL_STATE_UNKNOWN"  # the same from every replica
