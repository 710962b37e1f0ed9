"""Shadow mode's acts in SQL (table `shadow_acts`, migration 0007; docs/shadow.md): written with the batch that
decided them (the would-do side) or that consumed the events showing them (the upstream side), read back by
`kubus shadow report` and the shadow's divergence counter."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from kube.times import parse_time
from reconciler.core.batch import Commit
from reconciler.core.shadow import Act
from store import outbox, sql
from store.tables import shadow_acts as t
from store.tables import would_do_actions


@dataclass(frozen=True, slots=True, kw_only=True)
class ShadowActRow:
    act: Act
    at: datetime  # kubus: decided_at; upstream: observed_at
    decision_id: int | None = None
    id: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def rows_of(commit: Commit, ids: Sequence[int]) -> list[ShadowActRow]:
    """The acts of a shadow's commit: its decisions' would-do acts (with the ids the store gave the decisions)
    and the acting controller's, timed by when ingest observed their events."""
    if not commit.shadow:
        return []
    rows = [ShadowActRow(act=act, at=commit.at, decision_id=decision_id)
            for acts, decision_id in zip(commit.would_do, ids, strict=True) for act in acts]
    observed = {seq: event.observed_at for event, seq in commit.events}
    rows.extend(ShadowActRow(act=act, at=parse_time(observed[act.seq]) if act.seq in observed else commit.at)
                for act in commit.upstream)
    return rows


def _values(row: ShadowActRow) -> dict[str, Any]:
    act = row.act
    fields: dict[str, Any] = dict(act.fields)
    if act.ties:
        fields = {**fields, "ties": list(act.ties)}
    if act.early:
        fields = {**fields, "early": True}
    if act.awaited:
        fields = {**fields, "awaited": True}
    return {"side": act.side, "controller_kind": act.controller_key.split("/", 1)[0],
            "controller_key": act.controller_key, "owner_uid": act.owner_uid, "verb": act.verb,
            "target": act.target, "hash": act.hash, "fields": fields, "stream_seq": act.seq,
            "decision_id": row.decision_id, "ref": act.ref, "at": row.at}


async def record_actions(conn: AsyncConnection, commit: Commit, ids: Sequence[int]) -> None:
    """A shadow's actions whole, as the outbox would hold them (insert-or-ignore: a decision replayed after a
    crash keeps its keys)."""
    values = [{"key": row.key, "decision_id": row.decision_id, "payload": row.payload, "created_at": row.created_at}
              for sync, decision_id in zip(commit.decisions, ids, strict=True)
              for row in outbox.rows_of(sync, decision_id, commit.at)]
    if values:
        await sql.insert_or_ignore(conn, would_do_actions, values, returning=would_do_actions.c.key)


async def record(conn: AsyncConnection, rows: Iterable[ShadowActRow]) -> None:
    values = [_values(row) for row in rows]
    if values:
        await conn.execute(sa.insert(t), values)


async def load(conn: AsyncConnection, since: datetime | None = None, until: datetime | None = None,
               controller_key: str | None = None) -> list[ShadowActRow]:
    """The acts in a time range (of one controller), in event order."""
    query = sa.select(t)
    if since is not None:
        query = query.where(t.c.at >= since)
    if until is not None:
        query = query.where(t.c.at < until)
    if controller_key is not None:
        query = query.where(t.c.controller_key == controller_key)
    rows = []
    for r in (await conn.execute(query.order_by(t.c.stream_seq, t.c.id))).mappings():
        fields = dict(r["fields"] or {})
        ties = tuple(fields.pop("ties", ()) if r["side"] == "kubus" and r["verb"] in ("delete_pod", "create_pod")
                     else ())
        upstream_act = r["side"] == "upstream" and r["verb"] != "update_status"
        ahead = bool(fields.pop("early", False)) if upstream_act else False
        awaited = bool(fields.pop("awaited", False)) if upstream_act else False
        act = Act(r["side"], r["controller_key"], r["owner_uid"], r["verb"], r["target"], r["hash"],
                  int(r["stream_seq"]), r["ref"], ties, fields, ahead, awaited)
        rows.append(ShadowActRow(act=act, at=r["at"], decision_id=r["decision_id"], id=int(r["id"])))
    return rows


async def lineage(conn: AsyncConnection, decision_ids: Sequence[int], msg_ids: Sequence[str],
                  namespace: str, since: datetime, until: datetime, limit: int = 50) -> dict[str, Any]:
    """What a divergence's report shows beside its acts: the shadow's decisions (audit_syncs rows, by id), the
    watch events that showed upstream's acts (by msg_id), and the watch events of the owner's namespace the
    shadow consumed in the window (the cluster it decided on), oldest first."""
    from store.audit_views import audit_syncs as syncs
    from store.tables import observed_events as events

    def plain(row: Any) -> dict[str, Any]:
        return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in dict(row).items()}

    found_decisions = []
    if decision_ids:
        query = sa.select(syncs.c.decision_id, syncs.c.correlation_id, syncs.c.controller_key, syncs.c.decided_at,
                          syncs.c.stream_seq, syncs.c.trigger, syncs.c.decision_reason, syncs.c.trigger_kind,
                          syncs.c.trigger_type, syncs.c.trigger_name).where(
            syncs.c.decision_id.in_(sorted(set(decision_ids)))).order_by(syncs.c.decision_id)
        found_decisions = [plain(r) for r in (await conn.execute(query)).mappings()]
    columns = (events.c.stream_seq, events.c.msg_id, events.c.kind, events.c.event_type, events.c.namespace,
               events.c.name, events.c.observed_at)
    upstream = []
    if msg_ids:
        query = sa.select(*columns).where(events.c.msg_id.in_(sorted(set(msg_ids)))).order_by(events.c.stream_seq)
        upstream = [plain(r) for r in (await conn.execute(query)).mappings()]
    seen_query = sa.select(*columns).where(events.c.namespace == namespace, events.c.observed_at >= since,
                                           events.c.observed_at <= until).order_by(events.c.stream_seq).limit(limit)
    seen = [plain(r) for r in (await conn.execute(seen_query)).mappings()]
    return {"decisions": found_decisions, "upstream_events": upstream, "events_seen": seen}
