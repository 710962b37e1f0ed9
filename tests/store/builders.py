"""Builders for store rows: defaults for everything a test does not care about."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from store.backoff import BackoffRow
from store.decisions import Decision
from store.events import ObservedEventRow
from store.expectations import ExpectationsRow
from store.outbox import OutboxRow
from store.results import ResultRow as ActionResult

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


class FakeClock:
    """The store's clock, moved by the test."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float = 1.0) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def decision(correlation_id: str = "c-1", *, key: str = "ns/ds", seq: int = 1, **kw: Any) -> Decision:
    fields: dict[str, Any] = {
        "controller_kind": "DaemonSet", "partition": 0, "trigger": f"pod:uid:{seq}:MODIFIED",
        "decided_at": at(seq), "duration_ms": 1.5, "summary": {"create": ["node-1"], "why": "missing pod"},
    }
    fields.update(kw)
    return Decision(correlation_id=correlation_id, controller_key=key, stream_seq=seq, **fields)


def action(key: str, decision_id: int, *, created: float = 0, payload: bytes = b"{}") -> OutboxRow:
    return OutboxRow(key=key, decision_id=decision_id, subject="kubus.actions.0", payload=payload,
                     created_at=at(created))


def result(key: str, *, decision_id: int | None = 1, outcome: str = "succeeded", **kw: Any) -> ActionResult:
    fields: dict[str, Any] = {
        "action_key": f"action-{key}", "action": "CreatePod", "code": 201, "reason": "", "message": "",
        "object_uid": "uid-1", "executor": "executor-0", "attempts": 1, "finished_at": at(5),
    }
    fields.update(kw)
    return ActionResult(key=key, decision_id=decision_id, outcome=outcome, **fields)


def event(seq: int, *, name: str = "pod-1", kind: str = "Pod", namespace: str = "ns") -> ObservedEventRow:
    return ObservedEventRow(stream_seq=seq, msg_id=f"{kind}:uid-{name}:{seq}:MODIFIED", kind=kind,
                            event_type="MODIFIED", namespace=namespace, name=name, uid=f"uid-{name}",
                            resource_version=str(seq), observed_at=at(seq))


def expectations(key: str = "ns/ds", *, adds: int = 0, dels: int = 0, deleting: frozenset[str] = frozenset(),
                 set_at: float = 0) -> ExpectationsRow:
    return ExpectationsRow(controller_key=key, adds=adds, dels=dels, deletion_keys=deleting, set_at=at(set_at))


def backoff(key: str, delay: float = 1.0, *, updated: float = 0) -> BackoffRow:
    return BackoffRow(key=key, delay_seconds=delay, last_update=at(updated))


