"""A shadow's acts as the store keeps them (docs/shadow.md): what the comparator reads back is what was recorded,
the would-do tie classes and the marks of upstream's acts the shadow could not decide (early, awaited)."""

from __future__ import annotations

from datetime import UTC, datetime

from reconciler.core.shadow import CREATE_POD, DELETE_POD, KUBUS, UPDATE_STATUS, UPSTREAM, Act
from store import shadow
from store.engine import Store
from store.shadow import ShadowActRow

AT = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
DS = "DaemonSet/default/agent"


async def test_acts_read_back_as_recorded(store: Store) -> None:
    acts = [
        Act(KUBUS, DS, "uid-ds", DELETE_POD, "n1", "old", 1, "key-1", ties=("n1", "n2")),
        Act(KUBUS, DS, "uid-ds", CREATE_POD, "n2", "new", 1, "key-2", ties=("n2",)),
        Act(UPSTREAM, DS, "uid-ds", CREATE_POD, "n3", "new", 2, "Pod/u3/1/ADDED", early=True),
        Act(UPSTREAM, DS, "uid-ds", DELETE_POD, "n0", "old", 3, "Pod/u0/2/MODIFIED", awaited=True),
        Act(UPSTREAM, DS, "uid-ds", DELETE_POD, "n4", "old", 4, "Pod/u4/2/MODIFIED"),
        Act(UPSTREAM, DS, "uid-ds", UPDATE_STATUS, seq=5, ref="DaemonSet/uid-ds/9/MODIFIED",
            fields={"numberReady": 3}),
    ]
    async with store.transaction() as tx:
        await shadow.record(tx.conn, [ShadowActRow(act=act, at=AT) for act in acts])
    async with store.engine.connect() as conn:
        loaded = [row.act for row in await shadow.load(conn)]
    assert loaded == acts
