"""A rollout over time: the model `kubus audit timeline` draws (kubus/timeline_view.py), built from the audit trail's
rows (store.audit.timeline_rows) by a pure function, `build`.

One lane per node (a DaemonSet) or per pod (a ReplicaSet); on each lane the changes of its pods, in time:

    created      the pod's first watch event (ADDED, or RELISTED for a pod older than the history)
    available    Ready for the controller's minReadySeconds: its Ready condition's lastTransitionTime +
                 minReadySeconds (the controller's, as its watch events showed it at the time)
    unavailable  a watch event showing it no longer Ready
    deleting     its first watch event with a deletionTimestamp
    deleted      its DELETED watch event

each with the watch event that showed it and, when kubus acted (created it, asked for its deletion), the decision
and the action behind it (the lineage of store/audit.py: the action's result names the pod, the delete its uid).

Revisions are lettered a, b, c... in the order of their ControllerRevision numbers (a DaemonSet's), else in the
order their hashes were first seen (a pod's controller-revision-hash or pod-template-hash label; a ReplicaSet's pod
with neither is of its one pod template); "?" ("#" once available) for a pod whose events name no revision, "*" past
the 26th.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from kube.times import parse_time
from store.audit import DELETIONS, Row, TimelineRows

CREATED, AVAILABLE, UNAVAILABLE, DELETING, DELETED = "created", "available", "unavailable", "deleting", "deleted"
NO_REVISION: Final = "?"
NO_REVISION_AVAILABLE: Final = "#"  # an available pod of no known revision
TEMPLATE: Final = ""  # the hash standing for a ReplicaSet's one template, for its pods without pod-template-hash
MANY_REVISIONS: Final = "*"
NOT_YET: Final = "."  # a lane's glyph before its first pod
GONE: Final = "x"  # a lane's glyph once its pods are deleted and none replaced them
NO_NODE: Final = "(no node)"  # a DaemonSet pod whose events name no node


@dataclass(frozen=True, slots=True)
class Decision:
    """A decision behind a change: what `kubus audit controller` shows of it, and how to replay it."""

    id: int
    at: datetime
    controller: str  # Kind/namespace/name
    reason: str
    trigger: str  # the watch event that queued the sync, or "resync or requeue"
    correlation_id: str
    replay: str  # the `kubus replay --explain` command that re-runs it


@dataclass(frozen=True, slots=True)
class Change:
    at: datetime
    what: str  # CREATED, AVAILABLE, UNAVAILABLE, DELETING, DELETED
    pod: str
    uid: str
    revision: str  # its letter
    seq: int | None = None  # the watch event that showed it (None: available after minReadySeconds, no event)
    decision: int | None = None  # the decision whose action did it
    action: str | None = None  # create_pods, delete_pod
    key: str | None = None  # the action's idempotency key
    outcome: str | None = None  # the executor's result


@dataclass(slots=True)
class Lane:
    name: str  # the node (DaemonSet) or the pod (ReplicaSet)
    changes: list[Change] = field(default_factory=list)  # in time, those before the window included

    def glyph_at(self, when: datetime) -> str:
        """What the lane shows at `when`: its newest live pod's revision letter (upper case once available),
        NOT_YET before its first pod, GONE once every pod of it is deleted."""
        alive: dict[str, tuple[str, bool]] = {}  # uid -> (letter, available), in creation order
        seen = False
        for change in self.changes:
            if change.at > when:
                break
            seen = True
            if change.what == CREATED:
                alive[change.uid] = (change.revision, False)
            elif change.what == DELETED:
                alive.pop(change.uid, None)
            elif change.uid in alive:
                alive[change.uid] = (change.revision, change.what == AVAILABLE)
        if not alive:
            return GONE if seen else NOT_YET
        letter, available = list(alive.values())[-1]
        if not available:
            return letter
        return NO_REVISION_AVAILABLE if letter == NO_REVISION else letter.upper()


@dataclass(frozen=True, slots=True)
class Revision:
    letter: str
    hash: str
    number: int | None  # the ControllerRevision's number, when its events were seen


@dataclass(slots=True)
class Timeline:
    kind: str
    namespace: str
    name: str
    per: str  # "node" or "pod"
    start: datetime | None  # the window drawn (None: nothing to draw)
    end: datetime | None
    revisions: list[Revision] = field(default_factory=list)
    lanes: list[Lane] = field(default_factory=list)  # the lanes with something in the window, in order
    decisions: dict[int, Decision] = field(default_factory=dict)  # behind the window's changes
    pods: int = 0  # pods with a change in the window

    def changes(self) -> list[tuple[str, Change]]:
        """(lane, change) of the window, in time."""
        return sorted(((lane.name, c) for lane in self.lanes for c in lane.changes if self.within(c.at)),
                      key=lambda lc: (lc[1].at, lc[0]))

    def within(self, when: datetime) -> bool:
        return self.start is not None and self.end is not None and self.start <= when <= self.end


def when_text(value: datetime) -> str:
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _letter(index: int) -> str:
    return string.ascii_lowercase[index] if index < len(string.ascii_lowercase) else MANY_REVISIONS


def _revisions(rows: TimelineRows) -> dict[str, Revision]:
    numbers: dict[str, int] = {}
    for e in rows.revisions:
        facts = e["facts"] or {}
        if facts.get("hash") and e["event_type"] not in DELETIONS:
            numbers[facts["hash"]] = int(facts.get("revision") or 0)
    first_seen: dict[str, int] = {}
    for e in rows.pod_events:
        found = _revision_of(rows, e)
        if found is not None:
            first_seen.setdefault(found, e["stream_seq"])
    hashes = sorted(set(numbers) | set(first_seen),
                    key=lambda h: (h not in numbers, numbers.get(h, 0), first_seen.get(h, 0), h))
    return {h: Revision(_letter(i), h, numbers.get(h)) for i, h in enumerate(hashes)}


def _revision_of(rows: TimelineRows, event: Row) -> str | None:
    """The revision hash the pod's event names; a ReplicaSet's pod without pod-template-hash (a ReplicaSet not made
    by a Deployment) is of its one template, TEMPLATE; None: unknown (an event without facts, a DaemonSet's pod
    without controller-revision-hash)."""
    facts = event["facts"]
    if not facts:
        return None
    found: str | None = facts.get("revision")
    return found if found else TEMPLATE if rows.kind == "ReplicaSet" else None


def _min_ready_seconds(rows: TimelineRows) -> list[tuple[datetime, int]]:
    return [(e["observed_at"], int(e["facts"].get("min_ready_seconds") or 0)) for e in rows.controller_events
            if e["facts"] and e["event_type"] not in DELETIONS]


def _mrs_at(history: Sequence[tuple[datetime, int]], when: datetime) -> int:
    found = 0
    for at, seconds in history:
        if at > when:
            break
        found = seconds
    return found


def trigger_text(d: Row) -> str:
    if d.get("trigger_seq") is not None:
        where = f"{d['trigger_namespace']}/{d['trigger_name']}" if d["trigger_namespace"] else d["trigger_name"]
        return f"{d['trigger_kind']} {where} {d['trigger_type']} #{d['trigger_seq']}"
    return d.get("trigger") or "resync or requeue"


def replay_command(controller_key: str, decided_at: datetime) -> str:
    """`kubus replay --explain` of the one tick that took the decision (its bounds are included, to the ms)."""
    since = decided_at.replace(microsecond=decided_at.microsecond // 1000 * 1000)
    until = since + timedelta(milliseconds=1)
    return f"kubus replay --controller {controller_key} --explain --since {when_text(since)} --until {when_text(until)}"


def detail(summary: Any) -> str:
    """What a DaemonSet's sync explained beyond its reason ("synced"): its creates and deletes and its rolling
    update's budget; "" when the summary says nothing more."""
    if not isinstance(summary, dict):
        return ""
    parts = []
    creates, deletes = (len(n) if isinstance(n, list) else n for n in (summary.get("creates"), summary.get("deletes")))
    if isinstance(creates, int) and isinstance(deletes, int) and (creates or deletes):
        parts.append(f"{creates} create{'' if creates == 1 else 's'}, {deletes} delete{'' if deletes == 1 else 's'}")
    rollout = summary.get("rollout")
    if isinstance(rollout, dict):
        parts.append(f"rolling update: maxUnavailable {rollout.get('max_unavailable')}, maxSurge "
                     f"{rollout.get('max_surge')}, desired {rollout.get('desired')}, deleting "
                     f"{len(rollout.get('deleting') or [])}, surging on {len(rollout.get('surging_on') or [])}")
    elif isinstance(rollout, str) and rollout:
        parts.append(rollout)
    return "; ".join(parts)


def _decision(d: Row) -> Decision:
    reason = d["decision_reason"] or "-"
    if d.get("decision_error"):
        reason = f"{reason}; error: {d['decision_error']}"
    more = detail(d.get("summary")) if d["controller_key"].startswith("DaemonSet/") else ""  # a ReplicaSet's says it
    if more and more not in reason:
        reason = f"{reason} ({more})"
    return Decision(id=d["decision_id"], at=d["decided_at"], controller=d["controller_key"], reason=reason,
                    trigger=trigger_text(d), correlation_id=d["correlation_id"],
                    replay=replay_command(d["controller_key"], d["decided_at"]))


@dataclass(slots=True)
class _Acts:
    """The controller's pod actions, by what they name."""

    creates_by_uid: dict[str, Row] = field(default_factory=dict)
    creates_by_name: dict[str, Row] = field(default_factory=dict)
    deletes_by_uid: dict[str, Row] = field(default_factory=dict)
    deletes_by_name: dict[str, Row] = field(default_factory=dict)

    @classmethod
    def of(cls, actions: Sequence[Row], namespace: str) -> _Acts:
        acts = cls()
        for a in actions:  # oldest first: a later one (a retry's decision) wins
            if a["action"] == "create_pods":
                if a["object_uid"]:
                    acts.creates_by_uid[a["object_uid"]] = a
                subject = a["result_subject"] or ""
                name = subject.partition("/")[2] if subject.startswith(f"{namespace}/") else a["target_name"]
                if name and (a["outcome"] in (None, "succeeded")):
                    acts.creates_by_name[name] = a
            else:
                if a["target_uid"]:
                    acts.deletes_by_uid.setdefault(a["target_uid"], a)
                if a["target_name"]:
                    acts.deletes_by_name.setdefault(a["target_name"], a)
        return acts

    def create(self, uid: str, name: str) -> Row | None:
        return self.creates_by_uid.get(uid) or self.creates_by_name.get(name)

    def delete(self, uid: str, name: str) -> Row | None:
        return self.deletes_by_uid.get(uid) or self.deletes_by_name.get(name)


def _by(action: Row | None) -> dict[str, Any]:
    if action is None:
        return {}
    return {"decision": action["decision_id"], "action": action["action"], "key": action["idempotency_key"],
            "outcome": action["outcome"]}


def _time(text: Any) -> datetime | None:
    """A Ready condition's lastTransitionTime; None when missing or unreadable (never available, as upstream's
    IsPodAvailable with minReadySeconds)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_time(text)
    except ValueError:
        return None


def _pod_changes(rows: TimelineRows, events: Sequence[Row], letters: dict[str, Revision],
                 mrs: Sequence[tuple[datetime, int]], acts: _Acts) -> list[Change]:
    """One pod's changes from its watch events (by sequence)."""
    first = events[0]
    uid, name = first["uid"], first["name"]
    changes: list[Change] = []
    letter = NO_REVISION
    available_at: datetime | None = None  # when the pod is (or will be, minReadySeconds on) available
    deleted = deleting = False
    for e in events:
        facts = e["facts"] or {}
        revision = _revision_of(rows, e)
        if revision is not None and revision in letters:
            letter = letters[revision].letter
        at: datetime = e["observed_at"]
        if not changes:
            changes.append(Change(at, CREATED, name, uid, letter, e["stream_seq"], **_by(acts.create(uid, name))))
        if e["event_type"] in DELETIONS:
            changes.append(Change(at, DELETED, name, uid, letter, e["stream_seq"],
                                  **({} if deleting else _by(acts.delete(uid, name)))))
            deleted = True
            break
        if facts.get("deleting") and not deleting:
            deleting = True
            changes.append(Change(at, DELETING, name, uid, letter, e["stream_seq"], **_by(acts.delete(uid, name))))
        ready = _time(facts.get("ready_since"))
        if ready and available_at is None:
            since = ready
            available_at = max(since + timedelta(seconds=_mrs_at(mrs, at)), changes[0].at)
            # drawn when it happened; the event shows it when already due, else no event does (minReadySeconds on)
            changes.append(Change(available_at, AVAILABLE, name, uid, letter,
                                  e["stream_seq"] if available_at <= at else None))
        elif not ready and available_at is not None and "ready_since" in facts:
            available_at = None
            changes.append(Change(at, UNAVAILABLE, name, uid, letter, e["stream_seq"]))
    if deleted:  # an availability due after the pod was gone never happened
        gone = changes[-1].at
        changes = [c for c in changes if c.what != AVAILABLE or c.at <= gone]
    changes.sort(key=lambda c: (c.at, c.what != CREATED))
    return changes


def build(rows: TimelineRows, since: datetime | None = None, until: datetime | None = None) -> Timeline:
    """The timeline of `rows` (every row up to `until`), drawn from `since` (default: its first change) to `until`
    (default: its last change)."""
    per = "node" if rows.kind == "DaemonSet" else "pod"
    letters = _revisions(rows)
    mrs = _min_ready_seconds(rows)
    acts = _Acts.of(rows.actions, rows.namespace)
    by_uid: dict[str, list[Row]] = {}
    for e in rows.pod_events:
        by_uid.setdefault(e["uid"], []).append(e)
    lanes: dict[str, Lane] = {}
    for events in by_uid.values():
        changes = _pod_changes(rows, events, letters, mrs, acts)
        if per == "node":
            node = next((e["facts"]["node"] for e in events if e["facts"] and e["facts"].get("node")), None)
            lane = lanes.setdefault(node or NO_NODE, Lane(node or NO_NODE))
        else:
            lane = lanes.setdefault(events[0]["uid"], Lane(events[0]["name"]))
        lane.changes.extend(changes)
    for lane in lanes.values():
        lane.changes.sort(key=lambda c: (c.at, c.what != CREATED, c.pod))
    every = [c.at for lane in lanes.values() for c in lane.changes]
    start = since if since is not None else min(every, default=None)
    end = until if until is not None else max(every, default=None)
    timeline = Timeline(rows.kind, rows.namespace, rows.name, per, start, end,
                        revisions=sorted(letters.values(), key=lambda r: r.letter if r.letter != MANY_REVISIONS
                                         else "{"))
    if start is None or end is None:
        return timeline
    for lane in lanes.values():  # a lane is drawn when it changes in the window, or has a live pod through it
        if any(start <= c.at <= end for c in lane.changes) or lane.glyph_at(start) not in (NOT_YET, GONE):
            timeline.lanes.append(lane)
    if per == "node":
        timeline.lanes.sort(key=lambda lane: (lane.name == NO_NODE, _natural(lane.name)))
    else:
        timeline.lanes.sort(key=lambda lane: (lane.changes[0].at if lane.changes else start, lane.name))
    decisions = {d["decision_id"]: d for d in rows.decisions}
    shown = timeline.changes()
    timeline.pods = len({c.uid for _, c in shown})
    for _, change in shown:
        if change.decision is not None and change.decision in decisions:
            timeline.decisions.setdefault(change.decision, _decision(decisions[change.decision]))
    timeline.decisions = dict(sorted(timeline.decisions.items()))
    return timeline


def _natural(name: str) -> tuple[Any, ...]:
    """node-2 before node-10."""
    parts: list[Any] = []
    digits = ""
    text = ""
    for ch in name:
        if ch.isdigit():
            if text:
                parts.append((1, text))
                text = ""
            digits += ch
        else:
            if digits:
                parts.append((0, int(digits)))
                digits = ""
            text += ch
    if text:
        parts.append((1, text))
    if digits:
        parts.append((0, int(digits)))
    return tuple(parts)


def as_data(timeline: Timeline) -> dict[str, Any]:
    """The model as plain data, for -o json|yaml: the window's changes per lane, with the lane's glyph at its
    start, and the decisions behind them."""
    lanes = []
    for lane in timeline.lanes:
        assert timeline.start is not None
        lanes.append({"name": lane.name, "at_start": lane.glyph_at(timeline.start),
                      "changes": [_change_data(c) for c in lane.changes if timeline.within(c.at)]})
    return {
        "controller": f"{timeline.kind}/{timeline.namespace}/{timeline.name}",
        "per": timeline.per,
        "start": timeline.start,
        "end": timeline.end,
        "revisions": [{"letter": r.letter, "hash": r.hash, "number": r.number} for r in timeline.revisions],
        "pods": timeline.pods,
        "lanes": lanes,
        "decisions": [{"id": d.id, "at": d.at, "controller": d.controller, "reason": d.reason, "trigger": d.trigger,
                       "correlation_id": d.correlation_id, "replay": d.replay} for d in timeline.decisions.values()],
    }


def _change_data(c: Change) -> dict[str, Any]:
    return {"at": c.at, "what": c.what, "pod": c.pod, "uid": c.uid, "revision": c.revision, "seq": c.seq,
            "decision": c.decision, "action": c.action, "key": c.key, "outcome": c.outcome}
