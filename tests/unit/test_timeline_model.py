"""store.timeline.build: the audit trail's rows -> a rollout's lanes, table-driven (no database: rows as
store.audit.timeline_rows returns them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from store.audit import TimelineRows
from store.timeline import AVAILABLE, CREATED, DELETED, DELETING, UNAVAILABLE, Timeline, as_data, build, detail

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def iso(seconds: float) -> str:
    return at(seconds).isoformat().replace("+00:00", "Z")


@dataclass
class History:
    """A controller's rows, written as a test reads them."""

    kind: str = "DaemonSet"
    seq: int = 0
    rows: TimelineRows = field(default_factory=lambda: TimelineRows("DaemonSet", "ns", "agent"))

    def __post_init__(self) -> None:
        self.rows = TimelineRows(self.kind, "ns", "agent" if self.kind == "DaemonSet" else "web")

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def controller(self, when: float, min_ready_seconds: int = 0) -> None:
        self.rows.controller_events.append(self._event(when, "MODIFIED", self.rows.kind, self.rows.name, "ctl",
                                                       {"generation": 1, "min_ready_seconds": min_ready_seconds}))

    def revision(self, when: float, hash_: str, number: int) -> None:
        self.rows.revisions.append(self._event(when, "ADDED", "ControllerRevision", f"agent-{hash_}", hash_,
                                               {"revision": number, "hash": hash_}))

    def pod(self, when: float, name: str, type_: str = "ADDED", *, node: str | None = None, rev: str | None = "h1",
            ready: float | None = None, deleting: bool = False) -> int:
        self.rows.pod_events.append(self._event(when, type_, "Pod", name, f"uid-{name}", {
            "node": node, "revision": rev, "ready_since": None if ready is None else iso(ready),
            "deleting": deleting}))
        return self.seq

    def act(self, decision: int, when: float, action: str, pod: str, *, outcome: str = "succeeded") -> None:
        key = f"d{decision}/{action}/{pod}"
        self.rows.actions.append({
            "decision_id": decision, "decided_at": at(when), "action": action, "idempotency_key": key,
            "target_name": pod, "target_uid": None if action == "create_pods" else f"uid-{pod}",
            "object_uid": f"uid-{pod}" if action == "create_pods" and outcome == "succeeded" else None,
            "result_subject": f"ns/{pod}" if outcome == "succeeded" else None, "outcome": outcome})
        if all(d["decision_id"] != decision for d in self.rows.decisions):
            self.rows.decisions.append({
                "decision_id": decision, "decided_at": at(when), "controller_key": f"{self.rows.kind}/ns/agent",
                "correlation_id": f"c{decision}", "decision_reason": f"reason {decision}", "decision_error": None,
                "trigger": None, "trigger_seq": None, "summary": {}})

    def _event(self, when: float, type_: str, kind: str, name: str, uid: str, facts: dict[str, Any]) -> dict[str, Any]:
        return {"stream_seq": self._next(), "kind": kind, "event_type": type_, "namespace": "ns", "name": name,
                "uid": uid, "observed_at": at(when), "owner": f"{self.rows.kind}/{self.rows.name}", "facts": facts}


def glyphs(t: Timeline, *seconds: float) -> dict[str, str]:
    return {lane.name: "".join(lane.glyph_at(at(s)) for s in seconds) for lane in t.lanes}


def rolling_update() -> History:
    """node-1 and node-2 run revision 1 (h1) from 0 s; revision 2 (h2) replaces node-1's at 10 s (decision 2
    deletes, decision 3 creates); minReadySeconds 5."""
    h = History()
    h.controller(0, min_ready_seconds=5)
    h.revision(0, "h1", 1)
    h.act(1, 0, "create_pods", "a-1")
    h.act(1, 0, "create_pods", "a-2")
    h.pod(1, "a-1", node="node-1")
    h.pod(1, "a-2", node="node-2")
    h.pod(2, "a-1", "MODIFIED", node="node-1", ready=2)  # available at 7
    h.pod(2, "a-2", "MODIFIED", node="node-2", ready=2)
    h.revision(9, "h2", 2)
    h.act(2, 10, "delete_pod", "a-1")
    h.pod(10.5, "a-1", "MODIFIED", node="node-1", ready=2, deleting=True)
    h.pod(11, "a-1", "DELETED", node="node-1", ready=2, deleting=True)
    h.act(3, 11.5, "create_pods", "b-1")
    h.pod(12, "b-1", node="node-1", rev="h2")
    h.pod(13, "b-1", "MODIFIED", node="node-1", rev="h2", ready=13)  # available at 18
    return h


def test_a_rolling_update_per_node() -> None:
    t = build(rolling_update().rows)
    assert [(r.letter, r.hash, r.number) for r in t.revisions] == [("a", "h1", 1), ("b", "h2", 2)]
    assert (t.per, t.start, t.end, t.pods) == ("node", at(1), at(18), 3)
    #                     before  created  ready  available  deleting  gone   b created  b available
    assert glyphs(t, 0.5, 1.5, 3, 8, 10.7, 11.2, 12.5, 18) == {"node-1": ".aaAaxbB", "node-2": ".aaAAAAA"}
    node1 = t.lanes[0]
    assert [(c.what, c.pod, c.revision, c.decision) for c in node1.changes] == [
        (CREATED, "a-1", "a", 1), (AVAILABLE, "a-1", "a", None), (DELETING, "a-1", "a", 2),
        (DELETED, "a-1", "a", None), (CREATED, "b-1", "b", 3), (AVAILABLE, "b-1", "b", None)]
    # available after minReadySeconds: no watch event shows it (the Ready event was at 2 s, 13 s)
    assert [(c.at, c.seq) for c in node1.changes if c.what == AVAILABLE] == [(at(7), None), (at(18), None)]
    assert sorted(t.decisions) == [1, 2, 3]
    assert t.decisions[2].replay == ("kubus replay --controller DaemonSet/ns/agent --explain "
                                     "--since 2026-01-01T10:00:10.000Z --until 2026-01-01T10:00:10.001Z")


@pytest.mark.parametrize(("since", "until", "at_start", "pods", "decisions"), [
    pytest.param(None, None, {"node-1": "a", "node-2": "a"}, 3, [1, 2, 3], id="everything"),
    pytest.param(12, None, {"node-1": "b", "node-2": "A"}, 1, [3], id="node-2 only lives through the window"),
    pytest.param(None, 5, {"node-1": "a", "node-2": "a"}, 2, [1], id="until: the first pods only"),
    pytest.param(-5, 0.5, {}, 0, [], id="before any pod: no lane"),
])
def test_the_window(since: float | None, until: float | None, at_start: dict[str, str], pods: int,
                    decisions: list[int]) -> None:
    t = build(rolling_update().rows, None if since is None else at(since), None if until is None else at(until))
    data = as_data(t)
    assert ({lane["name"]: lane["at_start"] for lane in data["lanes"]}, t.pods, sorted(t.decisions)) == (
        at_start, pods, decisions)
    assert all(t.within(c["at"]) for lane in data["lanes"] for c in lane["changes"])


@pytest.mark.parametrize(("events", "expected", "whats"), [
    pytest.param([("ADDED", 1, {}), ("MODIFIED", 2, {"ready": 2})], ".aAA", [CREATED, AVAILABLE], id="ready"),
    pytest.param([("ADDED", 1, {}), ("MODIFIED", 2, {"ready": 2}), ("MODIFIED", 3.5, {})], ".aAa",
                 [CREATED, AVAILABLE, UNAVAILABLE], id="ready, then not"),
    pytest.param([("ADDED", 1, {}), ("DELETED", 2.5, {})], ".axx", [CREATED, DELETED], id="never ready"),
    pytest.param([("ADDED", 1, {"rev": None}), ("MODIFIED", 2, {"rev": None, "ready": 2})], ".aAA",
                 [CREATED, AVAILABLE], id="no pod-template-hash: the ReplicaSet's one template"),
    pytest.param([("ADDED", 1, {}), ("MODIFIED", 2.5, {"ready": 2.5, "deleting": True}), ("DELETED", 3.5, {})],
                 ".aAx", [CREATED, DELETING, AVAILABLE, DELETED], id="deleted gracefully"),
    pytest.param([("RELISTED", 1, {"ready": -50})], ".AAA", [CREATED, AVAILABLE],
                 id="older than the history: available since before it, drawn from its first event"),
])
def test_a_pods_changes(events: list[tuple[str, float, dict[str, Any]]], expected: str, whats: list[str]) -> None:
    """A ReplicaSet: one lane per pod; minReadySeconds 0."""
    h = History(kind="ReplicaSet")
    h.controller(0)
    for type_, when, facts in events:
        h.pod(when, "web-1", type_, **facts)
    t = build(h.rows)
    assert t.per == "pod"
    assert glyphs(t, 0.5, 1.5, 3, 4)["web-1"] == expected
    assert [c.what for c in t.lanes[0].changes] == whats


def test_availability_due_after_the_pod_was_deleted_never_happened() -> None:
    h = History(kind="ReplicaSet")
    h.controller(0, min_ready_seconds=30)
    h.pod(1, "web-1", ready=1)
    h.pod(5, "web-1", "DELETED", ready=1)
    assert [c.what for c in build(h.rows).lanes[0].changes] == [CREATED, DELETED]


def test_a_replicasets_lanes_are_its_pods_in_creation_order_and_failed_creates_name_no_pod() -> None:
    h = History(kind="ReplicaSet")
    h.controller(0)
    h.act(1, 0, "create_pods", "web-b")
    h.act(1, 0, "create_pods", "web-z", outcome="failed")
    h.pod(1, "web-b")
    h.pod(0.5, "web-a")  # not kubus's: adopted, or created before kubus
    t = build(h.rows)
    assert [lane.name for lane in t.lanes] == ["web-a", "web-b"]
    assert [(c.pod, c.decision) for lane in t.lanes for c in lane.changes] == [("web-a", None), ("web-b", 1)]


def test_nodes_sort_naturally_and_revisions_by_number() -> None:
    h = History()
    h.revision(0, "zzz", 2)
    h.revision(0, "aaa", 1)
    for i in (10, 2, 1):
        h.pod(i, f"p-{i}", node=f"node-{i}", rev="zzz")
    h.pod(3, "orphan", node=None, rev="new")
    t = build(h.rows)
    assert [lane.name for lane in t.lanes] == ["node-1", "node-2", "node-10", "(no node)"]
    assert [(r.letter, r.hash) for r in t.revisions] == [("a", "aaa"), ("b", "zzz"), ("c", "new")]


def test_nothing_to_draw() -> None:
    t = build(History().rows)
    assert (t.start, t.end, t.lanes, as_data(t)["lanes"]) == (None, None, [], [])


@pytest.mark.parametrize(("summary", "expected"), [
    pytest.param({"reason": "synced", "creates": [], "deletes": ["p-1", "p-2"],
                  "rollout": {"max_surge": 0, "max_unavailable": 2, "desired": 8, "deleting": ["p-1", "p-2"],
                              "surging_on": []}},
                 "0 creates, 2 deletes; rolling update: maxUnavailable 2, maxSurge 0, desired 8, deleting 2, "
                 "surging on 0", id="a rolling update's step"),
    pytest.param({"creates": ["node-1"], "deletes": [], "rollout": "waiting for manage's creates and deletes"},
                 "1 create, 0 deletes; waiting for manage's creates and deletes", id="manage's creates"),
    pytest.param({"creates": 0, "deletes": 0}, "", id="nothing done"),
    pytest.param({"reason": "invalid selector"}, "", id="no counts"),
    pytest.param(None, "", id="no summary"),
])
def test_what_a_daemonsets_sync_explained(summary: Any, expected: str) -> None:
    assert detail(summary) == expected


def test_a_daemon_pod_of_no_known_revision() -> None:
    h = History()
    h.revision(0, "h1", 1)
    h.pod(1, "p", node="node-1", rev=None)
    h.pod(2, "p", "MODIFIED", node="node-1", rev=None, ready=2)
    t = build(h.rows)
    assert glyphs(t, 0.5, 1.5, 3) == {"node-1": ".?#"}
    assert [(r.letter, r.hash) for r in t.revisions] == [("a", "h1")]
