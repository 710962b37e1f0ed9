"""The audit trail's common questions, in SQLAlchemy Core over the audit views (store/audit_views.py),
so they run the same on SQLite and PostgreSQL. `kubus audit` prints their answers.

Every function returns plain rows (dicts keyed by the views' column names, timestamps as aware UTC
datetimes, JSON decoded); the ones about a named object return None when the audit trail has never
heard of it, so a caller can tell "unknown" from "nothing in this time range".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store.audit_views import audit_actions as actions
from store.audit_views import audit_syncs as syncs
from store.tables import observed_events as events

Row = dict[str, Any]

CONTROLLER_KINDS = ("ReplicaSet", "DaemonSet")
DELETIONS = ("DELETED", "DELETED_FINAL_STATE_UNKNOWN")


@dataclass(frozen=True, slots=True)
class TimeRange:
    """A time range, either end open."""

    since: datetime | None = None
    until: datetime | None = None

    def where(self, column: sa.ColumnElement[Any]) -> list[sa.ColumnElement[bool]]:
        clauses = []
        if self.since is not None:
            clauses.append(column >= self.since)
        if self.until is not None:
            clauses.append(column < self.until)
        return clauses


ALL_TIME = TimeRange()  # both ends open


@dataclass(slots=True)
class PodHistory:
    namespace: str
    name: str
    actions: list[Row] = field(default_factory=list)  # audit_actions rows on the pod, oldest first
    decisions: list[Row] = field(default_factory=list)  # audit_syncs rows of the decisions that acted on it
    events: list[Row] = field(default_factory=list)  # its observed watch events, in stream order


@dataclass(slots=True)
class ControllerHistory:
    namespace: str
    name: str
    kinds: list[str]  # the controller kinds found under that name
    syncs: list[Row] = field(default_factory=list)  # audit_syncs rows in the window, oldest first
    actions: list[Row] = field(default_factory=list)  # audit_actions rows of those decisions
    truncated: bool = False  # more syncs in the window than the limit: the newest are shown
    latest: datetime | None = None  # the newest decision at all, to say where to look when the window is empty


def _rows(result: sa.CursorResult[Any]) -> list[Row]:
    return [dict(r) for r in result.mappings()]


_EVENT_COLUMNS = (events.c.stream_seq, events.c.kind, events.c.event_type, events.c.namespace, events.c.name,
                  events.c.uid, events.c.resource_version, events.c.observed_at, events.c.msg_id)


async def pod_history(conn: AsyncConnection, namespace: str, name: str) -> PodHistory | None:
    """Every action on the pod (with its decision, result and confirming event), the decisions that
    took them, and the pod's watch events; None when neither an action nor an event names it."""
    history = PodHistory(namespace, name)
    on_pod = sa.and_(actions.c.target_kind == "Pod", actions.c.target_namespace == namespace,
                     sa.or_(actions.c.target_name == name, actions.c.result_subject == f"{namespace}/{name}"))
    history.actions = _rows(await conn.execute(
        sa.select(actions).where(on_pod).order_by(actions.c.decided_at, actions.c.idempotency_key)))
    ids = sorted({a["decision_id"] for a in history.actions})
    if ids:
        history.decisions = _rows(await conn.execute(
            sa.select(syncs).where(syncs.c.decision_id.in_(ids)).order_by(syncs.c.decided_at, syncs.c.decision_id)))
    history.events = _rows(await conn.execute(
        sa.select(*_EVENT_COLUMNS)
        .where(events.c.kind == "Pod", events.c.namespace == namespace, events.c.name == name)
        .order_by(events.c.stream_seq)))
    if not history.actions and not history.events:
        return None
    return history


def controller_keys(namespace: str, name: str, kind: str | None = None) -> list[str]:
    """decisions.controller_key of a ReplicaSet or DaemonSet (both when the kind is not given)."""
    return [f"{k}/{namespace}/{name}" for k in ([kind] if kind else CONTROLLER_KINDS)]


async def controller_history(conn: AsyncConnection, namespace: str, name: str, kind: str | None = None,
                             window: TimeRange = TimeRange(), limit: int = 500) -> ControllerHistory | None:
    """The controller's decisions in the window (the newest `limit`) and every action they took;
    None when no decision of it and no watch event of it was ever recorded."""
    keys = controller_keys(namespace, name, kind)
    kinds = [kind] if kind else list(CONTROLLER_KINDS)
    found = await conn.execute(
        sa.select(syncs.c.controller_kind, sa.func.max(syncs.c.decided_at).label("latest"))
        .where(syncs.c.controller_key.in_(keys)).group_by(syncs.c.controller_kind))
    latest = {k: at for k, at in found}
    observed = set((await conn.execute(
        sa.select(events.c.kind).distinct()
        .where(events.c.kind.in_(kinds), events.c.namespace == namespace, events.c.name == name))).scalars())
    if not latest and not observed:
        return None
    history = ControllerHistory(namespace, name, sorted(set(latest) | observed))
    history.latest = max((at for at in latest.values() if at is not None), default=None)
    newest = _rows(await conn.execute(
        sa.select(syncs).where(syncs.c.controller_key.in_(keys), *window.where(syncs.c.decided_at))
        .order_by(syncs.c.decided_at.desc(), syncs.c.decision_id.desc()).limit(limit + 1)))
    history.truncated = len(newest) > limit
    history.syncs = list(reversed(newest[:limit]))
    ids = [s["decision_id"] for s in history.syncs]
    for chunk in _chunks(ids, 500):
        history.actions += _rows(await conn.execute(
            sa.select(actions).where(actions.c.decision_id.in_(chunk))))
    history.actions.sort(key=lambda a: (a["decided_at"], a["decision_id"], a["idempotency_key"]))
    return history


def _chunks(items: Sequence[int], size: int) -> list[Sequence[int]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


async def failures(conn: AsyncConnection, window: TimeRange = TimeRange(), limit: int = 100,
                   controller_key: str | None = None) -> list[Row]:
    """Failed actions (by the time the executor finished them), oldest first, with the API's error."""
    stmt = sa.select(actions).where(actions.c.outcome == "failed", *window.where(actions.c.finished_at))
    if controller_key is not None:
        stmt = stmt.where(actions.c.controller_key == controller_key)
    newest = _rows(await conn.execute(
        stmt.order_by(actions.c.finished_at.desc(), actions.c.idempotency_key.desc()).limit(limit)))
    return list(reversed(newest))


async def slowest(conn: AsyncConnection, window: TimeRange = TimeRange(), limit: int = 10) -> list[Row]:
    """The syncs that took longest, longest first."""
    return _rows(await conn.execute(
        sa.select(syncs).where(*window.where(syncs.c.decided_at))
        .order_by(syncs.c.duration_ms.desc(), syncs.c.decision_id).limit(limit)))


async def created_per_minute(conn: AsyncConnection, window: TimeRange = TimeRange()) -> list[Row]:
    """Pods the executors created, per minute (UTC) of their creation, oldest minute first."""
    pods = sa.func.count().label("pods")
    return _rows(await conn.execute(
        sa.select(actions.c.finished_minute.label("minute"), pods)
        .where(actions.c.action == "create_pods", actions.c.outcome == "succeeded",
               *window.where(actions.c.finished_at))
        .group_by(actions.c.finished_minute).order_by(actions.c.finished_minute)))


@dataclass(slots=True)
class TimelineRows:
    """What `kubus audit timeline` reads of one DaemonSet or ReplicaSet (store.timeline.build makes the timeline):
    every row up to the window's end, so that the window's first moment shows the pods as they were then."""

    kind: str
    namespace: str
    name: str
    pod_events: list[Row] = field(default_factory=list)  # its pods' watch events (observed_events), by sequence
    revisions: list[Row] = field(default_factory=list)  # its ControllerRevisions' events, by sequence
    controller_events: list[Row] = field(default_factory=list)  # its own watch events, by sequence
    actions: list[Row] = field(default_factory=list)  # its create_pods and delete_pod effects (audit_actions)
    decisions: list[Row] = field(default_factory=list)  # the decisions that took them (audit_syncs)


_TIMELINE_EVENT_COLUMNS = (*_EVENT_COLUMNS, events.c.owner, events.c.facts)
POD_ACTIONS = ("create_pods", "delete_pod")


async def timeline_rows(conn: AsyncConnection, kind: str, namespace: str, name: str,
                        until: datetime | None = None) -> TimelineRows | None:
    """The rows a timeline of the controller is made of, up to `until`; None when no decision of it and no watch
    event of it was ever recorded."""
    key = f"{kind}/{namespace}/{name}"
    before = TimeRange(None, until)
    rows = TimelineRows(kind, namespace, name)
    rows.controller_events = _rows(await conn.execute(
        sa.select(*_TIMELINE_EVENT_COLUMNS)
        .where(events.c.kind == kind, events.c.namespace == namespace, events.c.name == name,
               *before.where(events.c.observed_at))
        .order_by(events.c.stream_seq)))
    known = rows.controller_events or (await conn.execute(
        sa.select(syncs.c.decision_id).where(syncs.c.controller_key == key).limit(1))).first()
    if not known:
        return None
    owned = sa.and_(events.c.namespace == namespace, events.c.owner == f"{kind}/{name}",
                    *before.where(events.c.observed_at))
    rows.pod_events = _rows(await conn.execute(
        sa.select(*_TIMELINE_EVENT_COLUMNS).where(owned, events.c.kind == "Pod").order_by(events.c.stream_seq)))
    rows.revisions = _rows(await conn.execute(
        sa.select(*_TIMELINE_EVENT_COLUMNS).where(owned, events.c.kind == "ControllerRevision")
        .order_by(events.c.stream_seq)))
    rows.actions = _rows(await conn.execute(
        sa.select(actions).where(actions.c.controller_key == key, actions.c.action.in_(POD_ACTIONS),
                                 *before.where(actions.c.decided_at))
        .order_by(actions.c.decided_at, actions.c.idempotency_key)))
    ids = sorted({a["decision_id"] for a in rows.actions})
    for chunk in _chunks(ids, 500):
        rows.decisions += _rows(await conn.execute(sa.select(syncs).where(syncs.c.decision_id.in_(chunk))))
    rows.decisions.sort(key=lambda d: (d["decided_at"], d["decision_id"]))
    return rows
