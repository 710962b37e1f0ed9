"""store/audit.py's questions (what `kubus audit` prints) on SQLite and PostgreSQL, over the scripted
history: each returns exactly the rows the scenario implies."""

from __future__ import annotations

from datetime import UTC, datetime

from store import audit
from store.audit import TimeRange
from store.engine import Store
from tests.audit.scenario import DS, RS, Scenario, at


def pick(rows: list[dict[str, object]], *columns: str) -> list[tuple[object, ...]]:
    return [tuple(r[c] for c in columns) for r in rows]


async def test_a_deleted_pods_lifecycle(store: Store, history: Scenario) -> None:
    """Its creation and deletion, each with its decision (reason, trigger) and confirming event."""
    async with store.engine.connect() as conn:
        pod = await audit.pod_history(conn, "default", "web-m4q9z")
    assert pod is not None
    c2, c3 = history.correlation[2], history.correlation[3]
    assert pick(pod.actions, "action", "idempotency_key", "decision_id", "outcome", "code", "confirmed_by",
                "confirmed_seq", "confirmed_at") == [
        ("create_pods", f"{c2}/create/1", history.decision_ids[2], "succeeded", 201, "ADDED", 6, at(62.5)),
        ("delete_pod", f"{c3}/delete/pod-w2", history.decision_ids[3], "succeeded", 200, "DELETED", 10, at(125)),
    ]
    assert pick(pod.decisions, "decision_id", "decision_reason", "trigger_kind", "trigger_type", "trigger_seq",
                "decided_at") == [
        (history.decision_ids[2], "too few replicas: creating 3", "ReplicaSet", "ADDED", 4, at(61)),
        (history.decision_ids[3], "too many replicas: deleting 2", "ReplicaSet", "MODIFIED", 8, at(120.5)),
    ]
    assert pod.decisions[1]["summary"]["deleting"] == ["web-m4q9z", "web-d5f8h"]
    assert pick(pod.events, "stream_seq", "event_type", "uid") == [(6, "ADDED", "pod-w2"), (9, "MODIFIED", "pod-w2"),
                                                                   (10, "DELETED", "pod-w2")]


async def test_a_pod_that_was_never_created(store: Store, history: Scenario) -> None:
    """A refused create still names the pod: its action and the API's error, no watch event."""
    async with store.engine.connect() as conn:
        pod = await audit.pod_history(conn, "default", "agent-bbbbb")
    assert pod is not None
    assert pick(pod.actions, "outcome", "code", "reason", "confirmed_seq") == [("failed", 403, "Forbidden", None)]
    assert pod.events == []


async def test_a_pod_renamed_by_the_executor_is_found_by_its_real_name(store: Store, history: Scenario) -> None:
    """The executor reports the name it created (result_subject); the pod is found under it too."""
    async with store.engine.connect() as conn:
        await conn.exec_driver_sql("UPDATE action_results SET subject = 'default/agent-zzzzz' "
                                   "WHERE subject = 'default/agent-ccccc'")
        await conn.commit()
        pod = await audit.pod_history(conn, "default", "agent-zzzzz")
    assert pod is not None
    assert pick(pod.actions, "target_name", "result_subject") == [("agent-ccccc", "default/agent-zzzzz")]


async def test_unknown_pod_and_controller_are_none(store: Store, history: Scenario) -> None:
    async with store.engine.connect() as conn:
        assert await audit.pod_history(conn, "default", "web-nope") is None
        assert await audit.pod_history(conn, "kube-system", "web-x7k2p") is None
        assert await audit.controller_history(conn, "default", "nope") is None
        assert await audit.controller_history(conn, "default", "web", kind="DaemonSet") is None


async def test_a_controllers_syncs_and_actions_in_a_range(store: Store, history: Scenario) -> None:
    window = TimeRange(datetime(2025, 6, 1, 10, 0, tzinfo=UTC), datetime(2025, 6, 1, 11, 0, tzinfo=UTC))
    async with store.engine.connect() as conn:
        agent = await audit.controller_history(conn, "default", "agent", window=window)
        web = await audit.controller_history(conn, "default", "web", kind="ReplicaSet")
        later = await audit.controller_history(conn, "default", "agent", window=TimeRange(since=at(3600 * 5)))
    assert agent is not None and web is not None and later is not None
    assert agent.kinds == ["DaemonSet"]
    assert pick(agent.syncs, "decision_id", "controller_key") == [(history.decision_ids[1], DS)]
    assert pick(agent.actions, "action", "target_name", "outcome") == [
        ("create_pods", "agent-aaaaa", "succeeded"), ("create_pods", "agent-bbbbb", "failed"),
        ("update_status", "agent", "succeeded")]
    assert [s["decision_id"] for s in web.syncs] == [history.decision_ids[n] for n in (2, 3, 33)]
    assert pick(web.actions, "action", "target_name", "state") == [
        ("create_pods", "web-x7k2p", "sent"), ("create_pods", "web-m4q9z", "sent"),
        ("create_pods", "web-d5f8h", "sent"), ("delete_pod", "web-m4q9z", "sent"), ("delete_pod", "web-d5f8h", "sent"),
        ("update_status", "web", "pending")]
    assert (later.syncs, later.actions, later.latest) == ([], [], at(5500))


async def test_a_controller_limit_keeps_the_newest(store: Store, history: Scenario) -> None:
    async with store.engine.connect() as conn:
        web = await audit.controller_history(conn, "default", "web", limit=2)
    assert web is not None and web.truncated
    assert [s["decision_id"] for s in web.syncs] == [history.decision_ids[3], history.decision_ids[33]]


async def test_failures_slowest_and_creations_per_minute(store: Store, history: Scenario) -> None:
    async with store.engine.connect() as conn:
        failed = await audit.failures(conn)
        none_later = await audit.failures(conn, TimeRange(since=at(10)))
        only_web = await audit.failures(conn, controller_key=RS)
        slow = await audit.slowest(conn, limit=2)
        slow_after_ten_past = await audit.slowest(conn, TimeRange(since=at(600)))
        per_minute = await audit.created_per_minute(conn)
        first_hour = await audit.created_per_minute(conn, TimeRange(until=at(3600)))
    assert pick(failed, "target_name", "code", "reason", "finished_at") == [("agent-bbbbb", 403, "Forbidden", at(2))]
    assert none_later == [] and only_web == []
    assert pick(slow, "duration_ms", "controller_key", "trigger_name") == [(75.0, RS, "web"), (40.0, RS, "web")]
    assert pick(slow_after_ten_past, "duration_ms", "trigger_kind") == [(20.0, "Node"), (1.0, None)]
    assert pick(per_minute, "minute", "pods") == [("2025-06-01 10:00", 1), ("2025-06-01 10:01", 3),
                                                  ("2025-06-01 11:30", 1)]
    assert pick(first_hour, "minute", "pods") == [("2025-06-01 10:00", 1), ("2025-06-01 10:01", 3)]
