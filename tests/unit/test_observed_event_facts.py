"""What the audit trail keeps of an observed object for `kubus audit timeline` (store.events.facts_of): its
controller, and a pod's node, revision and Ready time, a controller's minReadySeconds, a revision's number."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from kube import codec
from kube.apps import ControllerRevision
from kube.meta import ObjectMeta
from kube.testing import daemonset, pod, replicaset
from messages.observed import DELETED, QUARANTINED, ObservedEvent
from store.events import facts_of, row_of

T = datetime(2026, 3, 15, 12, 0, 5, tzinfo=UTC)
DS = daemonset("agent").ns("ns").build()
RS = replicaset("web").ns("ns").build()


def event(obj: Any, type_: str = "ADDED", raw: bytes | None = None) -> ObservedEvent:
    meta = obj.metadata
    return ObservedEvent(kind=obj.kind, type=type_, namespace=meta.namespace, name=meta.name, uid=meta.uid or "u",
                         resource_version="7", observed_at="2026-03-15T12:00:06.000000Z", ingest="test",
                         object=msgspec.Raw(raw if raw is not None else codec.encode(obj)))


REVISION = ControllerRevision(metadata=ObjectMeta(
    name="agent-5d8f", namespace="ns", uid="cr-1", labels={"controller-revision-hash": "5d8f"},
    owner_references=pod().owned_by(DS).build().metadata.owner_references), revision=3)


@pytest.mark.parametrize(("obj", "type_", "expected"), [
    pytest.param(pod("agent-x").ns("ns").owned_by(DS).target_node("node-1").labels(
        {"controller-revision-hash": "5d8f"}).build(), "ADDED",
        ("DaemonSet/agent", {"node": "node-1", "revision": "5d8f", "ready_since": None, "deleting": False}),
        id="a daemon pod pinned by affinity, not ready"),
    pytest.param(pod("agent-x").ns("ns").owned_by(DS).on_node("node-2").target_node("node-1").ready(T).build(),
                 "MODIFIED",
                 ("DaemonSet/agent", {"node": "node-2", "revision": None, "ready_since": "2026-03-15T12:00:05Z",
                                      "deleting": False}),
                 id="bound: spec.nodeName wins; Ready since"),
    pytest.param(pod("web-1").ns("ns").owned_by(RS).labels({"pod-template-hash": "77c"}).not_ready(T).deleting(T)
                 .build(), DELETED,
                 ("ReplicaSet/web", {"node": None, "revision": "77c", "ready_since": None, "deleting": True}),
                 id="a ReplicaSet's pod, not Ready, being deleted"),
    pytest.param(pod("lone").ns("ns").build(), "ADDED",
                 (None, {"node": None, "revision": None, "ready_since": None, "deleting": False}),
                 id="no controller"),
    pytest.param(pod("p").ns("ns").owned_by(DS, controller=False).build(), "ADDED",
                 (None, {"node": None, "revision": None, "ready_since": None, "deleting": False}),
                 id="an owner that is not the controller"),
    pytest.param(daemonset("agent").ns("ns").generation(4).build(), "MODIFIED",
                 (None, {"generation": 4, "min_ready_seconds": 0}), id="a DaemonSet"),
    pytest.param(REVISION, "ADDED", ("DaemonSet/agent", {"revision": 3, "hash": "5d8f"}), id="a ControllerRevision"),
])
def test_facts(obj: Any, type_: str, expected: tuple[str | None, dict[str, Any]]) -> None:
    assert facts_of(event(obj, type_)) == expected
    # the reconciler hands the store the object its cache decoded: the same facts, without a second decoding
    assert (row_of(event(obj, type_), 1, obj).owner, row_of(event(obj, type_), 1, obj).facts) == expected


def test_a_replicasets_min_ready_seconds() -> None:
    rs = replicaset("web").ns("ns").generation(2).build()
    rs.spec.min_ready_seconds = 10
    assert facts_of(event(rs)) == (None, {"generation": 2, "min_ready_seconds": 10})


@pytest.mark.parametrize(("type_", "raw"), [(QUARANTINED, b'{"metadata": 5}'), ("ADDED", b'{"metadata": 5}'),
                                            ("ADDED", b"not json")])
def test_what_does_not_decode_has_no_facts(type_: str, raw: bytes) -> None:
    assert facts_of(event(pod("p").ns("ns").build(), type_, raw)) == (None, None)


def test_the_row_carries_them() -> None:
    row = row_of(event(pod("agent-x").ns("ns").owned_by(DS).on_node("node-1").build()), 12)
    assert (row.stream_seq, row.owner, row.facts and row.facts["node"]) == (12, "DaemonSet/agent", "node-1")
