"""A scripted history for the audit trail, written through the store's own repositories the way the
reconciler and the results recorder write it (actions built as the controllers build them, their
targets by reconciler.core.audit_targets), so the views see what a live pipeline would leave.

On 2025-06-01 (UTC), namespace `default`:

    10:00:00  DaemonSet agent ADDED (#1) -> decision 1 (12.5 ms): create a pod on node-1 and on node-2,
              write status. node-1's pod agent-aaaaa is created (ADDED #2), node-2's is refused (403,
              quota); the status write is confirmed (MODIFIED #3).
    10:01:00  ReplicaSet web ADDED (#4) -> decision 2 (40 ms): create 3 pods, web-x7k2p, web-m4q9z and
              web-d5f8h, all created (ADDED #5, #6, #7).
    10:02:00  web scaled to 1 (MODIFIED #8) -> decision 3 (75 ms): delete web-m4q9z and web-d5f8h (both
              confirmed: DELETED #10 and #11, after web-m4q9z's graceful deletion began, MODIFIED #9),
              and a status write still pending in the outbox.
    11:30:00  Node node-3 ADDED (#12) -> decision 4 (20 ms): agent's pod on node-3, agent-ccccc, created
              (ADDED #13).
    11:31:40  a resync of agent (no trigger) -> decision 5 (1 ms): nothing to do.

Pod events carry their owner and facts (node, revision, Ready time) as store.events.facts_of records them, for the
timeline (tests/audit/test_timeline.py); no pod of the scenario becomes Ready.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from messages import codec
from messages.actions import Action, CreatePods, DeletePod, PodToCreate, UpdateStatus
from reconciler.core.audit_targets import targets_of
from store.decisions import Decision
from store.engine import Store
from store.events import ObservedEventRow
from store.outbox import OutboxRow
from store.results import ResultRow
from tests.store.builders import FakeClock

T0 = datetime(2025, 6, 1, 10, 0, tzinfo=UTC)
NS = "default"
DS = "DaemonSet/default/agent"
RS = "ReplicaSet/default/web"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


def _pod(name: str, key: str) -> PodToCreate:
    body = {"metadata": {"name": name, "namespace": NS, "annotations": {"kubus.io/idempotency-key": key}}}
    return PodToCreate(key=key, pod=msgspec.Raw(msgspec.json.encode(body)))


@dataclass
class Scenario:
    decision_ids: dict[int, int] = field(default_factory=dict)  # scenario number -> decisions.id
    correlation: dict[int, str] = field(default_factory=dict)  # scenario number -> correlation id
    events: dict[int, ObservedEventRow] = field(default_factory=dict)  # by stream_seq
    keys: dict[str, str] = field(default_factory=dict)  # what -> effect key


def _event(seq: int, kind: str, type_: str, name: str, uid: str, rv: int, when: float, namespace: str = NS,
           owner: str | None = None, facts: dict[str, Any] | None = None) -> ObservedEventRow:
    if facts is None and kind in ("DaemonSet", "ReplicaSet"):
        facts = {"generation": 1, "min_ready_seconds": 0}
    return ObservedEventRow(stream_seq=seq, msg_id=f"{kind}/{uid}/{rv}/{type_}", kind=kind, event_type=type_,
                            namespace=namespace, name=name, uid=uid, resource_version=str(rv),
                            observed_at=at(when), owner=owner, facts=facts)


def pod_facts(node: str | None = None, revision: str | None = None, ready_since: float | None = None,
              deleting: bool = False) -> dict[str, Any]:
    """An observed pod's facts, as store.events.facts_of records them."""
    return {"node": node, "revision": revision, "deleting": deleting,
            "ready_since": None if ready_since is None else _iso(at(ready_since))}


async def build(store: Store, clock: FakeClock) -> Scenario:
    s = Scenario()

    async def observe(*events: ObservedEventRow) -> None:
        clock.now = max(e.observed_at for e in events) + timedelta(seconds=0.05)  # recorded_at
        async with store.transaction() as tx:
            await tx.record_events(events)
        for e in events:
            s.events[e.stream_seq] = e

    async def decide(number: int, key: str, kind: str, seq: int, trigger: ObservedEventRow | None, when: float,
                     ms: float, summary: dict[str, Any], actions: list[Action], sent: bool = True) -> None:
        correlation = f"{key}@{seq}~{int(at(when).timestamp() * 1_000_000)}"
        clock.now = at(when)
        async with store.transaction() as tx:
            decision_id = await tx.insert_decision(Decision(
                correlation_id=correlation, controller_key=key, controller_kind=kind, partition=0, stream_seq=seq,
                trigger=None if trigger is None else trigger.msg_id, decided_at=at(when), duration_ms=ms,
                summary=summary))
            rows = []
            for action in actions:
                action = msgspec.structs.replace(action, key=f"{correlation}/{action.key}", decision_id=decision_id)
                if isinstance(action, CreatePods):
                    action = msgspec.structs.replace(action, pods=[
                        msgspec.structs.replace(p, key=f"{correlation}/{p.key}") for p in action.pods])
                rows.append(OutboxRow(key=action.key, decision_id=decision_id, subject="kubus.actions.0",
                                      payload=codec.encode(action), created_at=at(when),
                                      targets=tuple(targets_of(action))))
            await tx.enqueue(rows)
        s.decision_ids[number] = decision_id
        s.correlation[number] = correlation
        if sent:
            clock.now = at(when + 0.1)
            await store.mark_sent([r.key for r in rows])

    async def result(number: int, key: str, action: str, outcome: str, code: int, when: float, subject: str,
                     uid: str | None = None, rv: str | None = None, reason: str = "", message: str = "") -> None:
        correlation = s.correlation[number]
        action_key = f"{correlation}/{key.split('/')[0]}" if action == "create_pods" else f"{correlation}/{key}"
        clock.now = at(when + 0.2)
        await store.record_results([ResultRow(
            key=f"{correlation}/{key}", action_key=action_key, decision_id=s.decision_ids[number], action=action,
            outcome=outcome, code=code, reason=reason, message=message, object_uid=uid, executor="executor-0",
            attempts=1, finished_at=at(when), subject=subject, resource_version=rv)])

    common: dict[str, Any] = {"decision_id": 0, "issued_at": _iso(T0)}

    # 10:00 -- the DaemonSet
    ds_added = _event(1, "DaemonSet", "ADDED", "agent", "ds-1", 100, 0)
    await observe(ds_added)
    await decide(1, DS, "DaemonSet", 1, ds_added, 1, 12.5,
                 {"reason": "manage: 2 nodes need a daemon pod", "creates": ["node-1", "node-2"], "deletes": []},
                 [CreatePods(key="create", namespace=NS, controller=DS, **common,
                             pods=[_pod("agent-aaaaa", "create/node-1"), _pod("agent-bbbbb", "create/node-2")]),
                  UpdateStatus(key="status", kind="DaemonSet", namespace=NS, name="agent", uid="ds-1",
                               status=msgspec.Raw(b"{}"), controller=DS, **common)])
    await result(1, "create/node-1", "create_pods", "succeeded", 201, 2, f"{NS}/agent-aaaaa", "pod-a", "101")
    await result(1, "create/node-2", "create_pods", "failed", 403, 2, f"{NS}/agent-bbbbb", reason="Forbidden",
                 message='pods "agent-bbbbb" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, '
                         'limited: pods=2')
    await result(1, "status", "update_status", "succeeded", 200, 3, f"{NS}/agent", "ds-1", "103")
    await observe(_event(2, "Pod", "ADDED", "agent-aaaaa", "pod-a", 101, 2.5, owner="DaemonSet/agent",
                         facts=pod_facts("node-1", "5d8f")),
                  _event(3, "DaemonSet", "MODIFIED", "agent", "ds-1", 103, 3.5))

    # 10:01 -- the ReplicaSet, and three pods
    rs_added = _event(4, "ReplicaSet", "ADDED", "web", "rs-1", 200, 60)
    await observe(rs_added)
    names = ["web-x7k2p", "web-m4q9z", "web-d5f8h"]
    await decide(2, RS, "ReplicaSet", 4, rs_added, 61, 40.0,
                 {"reason": "too few replicas: creating 3", "replicas": 3, "active": 0, "diff": -3, "creates": 3},
                 [CreatePods(key="create", namespace=NS, controller=RS, **common,
                             pods=[_pod(n, f"create/{i}") for i, n in enumerate(names)])])
    for i, n in enumerate(names):
        await result(2, f"create/{i}", "create_pods", "succeeded", 201, 62, f"{NS}/{n}", f"pod-w{i + 1}",
                     str(201 + i))
    await observe(*(_event(5 + i, "Pod", "ADDED", n, f"pod-w{i + 1}", 201 + i, 62.5, owner="ReplicaSet/web",
                           facts=pod_facts()) for i, n in enumerate(names)))

    # 10:02 -- scaled down to 1
    rs_scaled = _event(8, "ReplicaSet", "MODIFIED", "web", "rs-1", 210, 120)
    await observe(rs_scaled)
    await decide(3, RS, "ReplicaSet", 8, rs_scaled, 120.5, 75.0,
                 {"reason": "too many replicas: deleting 2", "replicas": 1, "active": 3, "diff": 2,
                  "deleting": ["web-m4q9z", "web-d5f8h"], "deletes": ["web-m4q9z", "web-d5f8h"]},
                 [DeletePod(key=f"delete/{uid}", namespace=NS, name=name, uid=uid, controller=RS, **common)
                  for name, uid in (("web-m4q9z", "pod-w2"), ("web-d5f8h", "pod-w3"))])
    await result(3, "delete/pod-w2", "delete_pod", "succeeded", 200, 121, f"{NS}/web-m4q9z", "pod-w2", "211")
    await result(3, "delete/pod-w3", "delete_pod", "succeeded", 200, 121, f"{NS}/web-d5f8h", "pod-w3", "213")
    await decide(33, RS, "ReplicaSet", 8, None, 121.5, 2.0, {"reason": "replicas match"},
                 [UpdateStatus(key="status", kind="ReplicaSet", namespace=NS, name="web", uid="rs-1",
                               status=msgspec.Raw(b"{}"), controller=RS, **common)], sent=False)
    await observe(_event(9, "Pod", "MODIFIED", "web-m4q9z", "pod-w2", 211, 121.2, owner="ReplicaSet/web",
                         facts=pod_facts(deleting=True)),
                  _event(10, "Pod", "DELETED", "web-m4q9z", "pod-w2", 212, 125, owner="ReplicaSet/web",
                         facts=pod_facts(deleting=True)),
                  _event(11, "Pod", "DELETED", "web-d5f8h", "pod-w3", 213, 125, owner="ReplicaSet/web",
                         facts=pod_facts()))

    # 11:30 -- a new node, a new daemon pod; then a resync
    node = _event(12, "Node", "ADDED", "node-3", "node-3-uid", 300, 5399, namespace="")
    await observe(node)
    await decide(4, DS, "DaemonSet", 12, node, 5400, 20.0,
                 {"reason": "manage: 1 node needs a daemon pod", "creates": ["node-3"], "deletes": []},
                 [CreatePods(key="create", namespace=NS, controller=DS, **common,
                             pods=[_pod("agent-ccccc", "create/node-3")])])
    await result(4, "create/node-3", "create_pods", "succeeded", 201, 5401, f"{NS}/agent-ccccc", "pod-c", "301")
    await observe(_event(13, "Pod", "ADDED", "agent-ccccc", "pod-c", 301, 5401.5, owner="DaemonSet/agent",
                         facts=pod_facts("node-3", "5d8f")))
    await decide(5, DS, "DaemonSet", 13, None, 5500, 1.0, {"reason": "expectations satisfied: nothing to do"}, [])
    return s
