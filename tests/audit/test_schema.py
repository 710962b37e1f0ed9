"""Migration 0003 and what the reconciler writes for it: the views exist on both backends, outbox rows
from before 0003 get their targets, and each action type names the objects its effects are on."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from messages import codec
from messages.actions import (
    Action,
    BumpCollisionCount,
    CreateControllerRevision,
    CreatePods,
    DeleteControllerRevision,
    DeletePod,
    PatchControllerRevision,
    PatchPod,
    PodToCreate,
    RecordEvent,
    UpdateStatus,
)
from reconciler.core.audit_targets import targets_of
from reconciler.core.owner_actions import Common
from store import decisions, migrating, outbox
from store.audit_views import VIEWS
from store.engine import Store
from store.outbox import OutboxRow, Target
from tests.store.builders import action, at, decision

COMMON = Common(decision_id=7, controller="ReplicaSet/ns/web", issued_at="2025-06-01T10:00:00Z")
RAW = msgspec.Raw(b"{}")


def pod(name: str, key: str, generate: bool = False) -> PodToCreate:
    meta = {"generateName": name} if generate else {"name": name}
    return PodToCreate(key=key, pod=msgspec.Raw(msgspec.json.encode({"metadata": meta})))


def ref(kind: str, name: str, uid: str, namespace: str = "ns") -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode({"kind": kind, "namespace": namespace, "name": name, "uid": uid}))


@pytest.mark.parametrize(("act", "expected"), [
    (CreatePods(key="c/create", namespace="ns", pods=[pod("web-a", "c/create/0"), pod("web-", "c/create/1", True)],
                **COMMON),
     [Target(key="c/create/0", action="create_pods", kind="Pod", namespace="ns", name="web-a"),
      Target(key="c/create/1", action="create_pods", kind="Pod", namespace="ns", name="web-")]),
    (DeletePod(key="c/delete/u1", namespace="ns", name="web-a", uid="u1", **COMMON),
     [Target(key="c/delete/u1", action="delete_pod", kind="Pod", namespace="ns", name="web-a", uid="u1")]),
    (PatchPod(key="c/adopt/u1", namespace="ns", name="web-a", uid="u1", patch_type="strategic", patch=RAW, **COMMON),
     [Target(key="c/adopt/u1", action="patch_pod", kind="Pod", namespace="ns", name="web-a", uid="u1")]),
    (CreateControllerRevision(key="c/rev", namespace="ns", revision=msgspec.Raw(b'{"metadata":{"name":"ds-7d9"}}'),
                              **COMMON),
     [Target(key="c/rev", action="create_controller_revision", kind="ControllerRevision", namespace="ns",
             name="ds-7d9")]),
    (PatchControllerRevision(key="c/p", namespace="ns", name="ds-7d9", uid="r1", patch_type="merge", patch=RAW,
                             **COMMON),
     [Target(key="c/p", action="patch_controller_revision", kind="ControllerRevision", namespace="ns", name="ds-7d9",
             uid="r1")]),
    (DeleteControllerRevision(key="c/d", namespace="ns", name="ds-7d9", uid="r1", **COMMON),
     [Target(key="c/d", action="delete_controller_revision", kind="ControllerRevision", namespace="ns",
             name="ds-7d9", uid="r1")]),
    (UpdateStatus(key="c/status", kind="ReplicaSet", namespace="ns", name="web", uid="rs1", status=RAW, **COMMON),
     [Target(key="c/status", action="update_status", kind="ReplicaSet", namespace="ns", name="web", uid="rs1")]),
    (BumpCollisionCount(key="c/cc", namespace="ns", name="ds", uid="ds1", seen=0, **COMMON),
     [Target(key="c/cc", action="bump_collision_count", kind="DaemonSet", namespace="ns", name="ds", uid="ds1")]),
    (RecordEvent(key="c/event/0", namespace="ns", involved=ref("ReplicaSet", "web", "rs1"), type="Warning",
                 reason="FailedCreate", message="m", component="replicaset-controller", **COMMON),
     [Target(key="c/event/0", action="record_event", kind="ReplicaSet", namespace="ns", name="web", uid="rs1")]),
], ids=lambda v: type(v).__name__ if not isinstance(v, list) else "")
def test_targets_of_each_action(act: Action, expected: list[Target]) -> None:
    assert targets_of(act) == expected


async def test_the_views_exist(store: Store) -> None:
    async with store.engine.connect() as conn:
        names = await conn.run_sync(lambda c: set(sa.inspect(c).get_view_names()))
    assert names == set(VIEWS)


def _targets(conn: Connection) -> list[tuple[str | None, ...]]:
    rows = conn.execute(sa.text("SELECT key, action_key, action, kind, namespace, name, uid FROM action_targets "
                                "ORDER BY key"))
    return [tuple(r) for r in rows]


async def test_upgrade_fills_in_targets_of_older_outbox_rows(store: Store) -> None:
    """Rows a kubus before 0003 enqueued get their targets from their payloads; the views see them."""
    await migrating.downgrade(store.engine, "0002")
    create = CreatePods(key="c/create", namespace="ns", pods=[pod("web-a", "c/create/0")], **COMMON)
    delete = DeletePod(key="c/delete/u1", namespace="ns", name="web-b", uid="u1", **COMMON)
    async with store.engine.begin() as conn:
        (decision_id,) = await decisions.insert(conn, [decision("c", key="ReplicaSet/ns/web")])
        await outbox.enqueue(conn, [action(a.key, decision_id, payload=codec.encode(a)) for a in (create, delete)])
        await outbox.enqueue(conn, [action("junk", decision_id, payload=b"not json")])
    await migrating.upgrade(store.engine)
    async with store.engine.connect() as conn:
        assert await conn.run_sync(_targets) == [
            ("c/create/0", "c/create", "create_pods", "Pod", "ns", "web-a", None),
            ("c/delete/u1", "c/delete/u1", "delete_pod", "Pod", "ns", "web-b", "u1")]
        rows = (await conn.exec_driver_sql("SELECT idempotency_key, controller_key, state FROM audit_actions "
                                           "ORDER BY idempotency_key")).all()
    assert [tuple(r) for r in rows] == [("c/create/0", "ReplicaSet/ns/web", "pending"),
                                        ("c/delete/u1", "ReplicaSet/ns/web", "pending")]


async def test_downgrade_removes_the_audit_schema(store: Store) -> None:
    await migrating.downgrade(store.engine, "0002")
    async with store.engine.connect() as conn:
        def inspect(c: Connection) -> tuple[set[str], set[str], set[str]]:
            i = sa.inspect(c)
            return (set(i.get_view_names()), set(i.get_table_names()),
                    {col["name"] for col in i.get_columns("action_results")})
        views, tables, columns = await conn.run_sync(inspect)
    assert views == set() and "action_targets" not in tables
    assert not {"subject", "resource_version"} & columns
    await migrating.upgrade(store.engine)


async def test_targets_are_written_with_the_outbox_row_once(store: Store) -> None:
    """A replayed decision enqueues the same keys: its targets are not written twice, nor fail."""
    row = OutboxRow(key="c/create", decision_id=0, subject="s", payload=b"{}", created_at=at(0),
                    targets=(Target(key="c/create/0", action="create_pods", kind="Pod", namespace="ns", name="a"),))
    async with store.transaction() as tx:
        decision_id = await tx.insert_decision(decision("c"))
        row = dataclasses.replace(row, decision_id=decision_id)
        assert await tx.enqueue([row]) == ["c/create"]
        assert await tx.enqueue([row]) == []
    async with store.engine.connect() as conn:
        assert await conn.run_sync(_targets) == [("c/create/0", "c/create", "create_pods", "Pod", "ns", "a", None)]
