"""Retention of the audit trail: rows older than a cutoff are deleted, in batches.

What goes, each by its own timestamp: observed events (recorded_at), action results (recorded_at),
outbox rows already sent (created_at; with them their action_targets, by cascade), decisions
(decided_at) that no outbox row refers to any more, and the reconciler's input log (at). A pending
outbox row, and so its decision, is never deleted: the relay still has to publish it. What the
controllers need to run (positions, expectations, backoff, revisions, checkpoints) is not touched.

Each batch is one short transaction, so a prune of millions of rows never holds the reconciler's
writes for long.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from kube.times import parse_typed_time
from store.tables import (
    action_results,
    decisions,
    observed_events,
    outbox,
    reconciler_ticks,
    shadow_acts,
    would_do_actions,
)

BATCH = 5000


@dataclass(slots=True)
class Pruned:
    observed_events: int = 0
    action_results: int = 0
    outbox: int = 0
    decisions: int = 0
    reconciler_ticks: int = 0
    shadow_acts: int = 0
    would_do_actions: int = 0

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    def add(self, other: Pruned) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


async def _delete_some(conn: AsyncConnection, table: sa.Table, pk: sa.Column[Any], where: sa.ColumnElement[bool],
                       limit: int) -> int:
    # DELETE ... LIMIT is not standard (SQLite needs a compile option): delete by primary key instead
    chosen = sa.select(pk).where(where).limit(limit).scalar_subquery()
    result = await conn.execute(sa.delete(table).where(pk.in_(chosen)))
    return int(result.rowcount)


async def prune(conn: AsyncConnection, before: datetime, limit: int = BATCH) -> Pruned:
    """Delete up to `limit` rows of each kind older than `before`, in the caller's transaction.
    Call again until it returns a total of 0 (Store.prune does)."""
    done = Pruned()
    done.observed_events = await _delete_some(conn, observed_events, observed_events.c.stream_seq,
                                              observed_events.c.recorded_at < before, limit)
    done.action_results = await _delete_some(conn, action_results, action_results.c.key,
                                             action_results.c.recorded_at < before, limit)
    # sent rows only, by the (state, created_at) index; action_targets follow by ON DELETE CASCADE
    done.outbox = await _delete_some(conn, outbox, outbox.c.key,
                                     sa.and_(outbox.c.state == "sent", outbox.c.created_at < before), limit)
    unreferenced = ~sa.exists().where(outbox.c.decision_id == decisions.c.id)
    done.decisions = await _delete_some(conn, decisions, decisions.c.id,
                                        sa.and_(decisions.c.decided_at < before, unreferenced), limit)
    done.reconciler_ticks = await _delete_some(conn, reconciler_ticks, reconciler_ticks.c.id,
                                               reconciler_ticks.c.at < before, limit)
    done.shadow_acts = await _delete_some(conn, shadow_acts, shadow_acts.c.id, shadow_acts.c.at < before, limit)
    done.would_do_actions = await _delete_some(conn, would_do_actions, would_do_actions.c.key,
                                               would_do_actions.c.created_at < before, limit)
    return done


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> timedelta:
    """'90s', '15m', '1h', '7d', '2w', or combined: '1h30m'. Raises ValueError saying what is accepted."""
    spec = text.strip().lower()
    pos, seconds = 0, 0.0
    for match in _DURATION.finditer(spec):
        if match.start() != pos:
            break
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not spec or pos != len(spec):
        raise ValueError(f"{text!r} is not a duration; use a number and a unit (s, m, h, d, w), e.g. 90s, 1h30m, 7d")
    return timedelta(seconds=seconds)


def parse_when(text: str, now: datetime) -> datetime:
    """What every `--since` and `--until` takes: a duration ago ('1h', '30m', '2d', '1h30m') or an RFC 3339 time
    ('2026-11-23T05:12:03Z'; without an offset it is UTC). Raises ValueError saying both forms."""
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        return parse_typed_time(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither a duration (90s, 15m, 1h, 7d) nor a timestamp "
                         "(2025-06-01T10:00:00Z)") from None


def parse_retention(text: str) -> timedelta | None:
    """A retention setting: a duration, or 'off' / 'forever' / '0' to keep everything (None)."""
    if text.strip().lower() in ("off", "forever", "none", "0", ""):
        return None
    duration = parse_duration(text)
    return duration if duration > timedelta(0) else None
