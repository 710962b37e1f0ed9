"""The action outbox: actions written with their decision, relayed to JetStream afterwards.

The reconciler enqueues in the decision's transaction; the relay publishes `pending` rows (with
the row's key as Nats-Msg-Id, so a publish repeated after a crash is dropped by JetStream) and
then marks them sent. A crash between any two steps loses nothing and duplicates nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import msgspec
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from messages import codec
from reconciler.core.audit_targets import Target
from reconciler.core.batch import Sync
from store import sql
from store.tables import action_targets
from store.tables import outbox as t

OutboxState = Literal["pending", "sent"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxRow:
    key: str  # the action's idempotency key
    decision_id: int
    subject: str
    payload: bytes
    created_at: datetime
    state: OutboxState = "pending"
    attempts: int = 0
    sent_at: datetime | None = None
    targets: tuple[Target, ...] = ()  # written with the row; not read back by pending() and by_decision()


def rows_of(sync: Sync, decision_id: int, at: datetime) -> list[OutboxRow]:
    """The outbox rows of a decision's actions, each payload carrying the decision's id (assigned by the
    store as it inserted the decision: the actions were planned with 0)."""
    return [OutboxRow(key=action.key, decision_id=decision_id, subject=sync.subject, created_at=at,
                      payload=codec.encode(msgspec.structs.replace(action, decision_id=decision_id)),
                      targets=tuple(sync.targets(action)))
            for action in sync.actions]


async def enqueue(conn: AsyncConnection, rows: Iterable[OutboxRow]) -> list[str]:
    """Insert the rows whose key is new, as pending; the keys inserted.

    Insert-or-ignore: a decision replayed after a crash yields the same keys, and must not
    queue its actions a second time (nor reset a row the relay already sent).
    """
    rows = list(rows)
    # column by column (sql.insert_new_returning, sql.insert_new): each statement's SQL built once, its values
    # bound a column at a time, where SQLAlchemy built a parameter dictionary per row and processed every value
    inserted = [str(k) for k in await sql.insert_new_returning(
        conn, t, sql.columns_of(t, rows, state="pending", attempts=0, sent_at=None), returning=t.c.key)]
    new = set(inserted)
    targets = [(x.key, r.key, x.action, x.kind, x.namespace, x.name, x.uid)  # action_targets' columns, in order
               for r in rows if r.key in new for x in r.targets]
    if targets:
        await sql.insert_new(conn, action_targets, list(zip(*targets, strict=True)))
    return inserted


async def pending(conn: AsyncConnection, limit: int, subjects: Collection[str] | None = None) -> list[OutboxRow]:
    """Up to `limit` pending rows, oldest first (key breaks ties, so the order is total); with
    `subjects`, only rows bound for those (a reconciler of a split deployment relays its partitions')."""
    if subjects is None:
        rows = await conn.execute(PENDING, {"limit": limit})
    elif subjects:
        rows = await conn.execute(PENDING_FOR, {"subjects": sorted(subjects), "limit": limit})
    else:
        return []
    return [OutboxRow(**r._asdict()) for r in rows]


# Built once (the relay scans after every commit that queued actions, and on its timer), as MARK_SENT below.
PENDING = (sa.select(t).where(t.c.state == "pending").order_by(t.c.created_at, t.c.key)
           .limit(sa.bindparam("limit", type_=sa.Integer)))
PENDING_FOR = (sa.select(t).where(t.c.state == "pending", t.c.subject.in_(sa.bindparam("subjects", expanding=True)))
               .order_by(t.c.created_at, t.c.key).limit(sa.bindparam("limit", type_=sa.Integer)))


# Built once (the relay marks every batch it publishes): building an update costs more than running it on SQLite.
# The same SQL and parameter types as built with the values in place (tests/store/test_prebuilt_statements.py).
MARK_SENT = (sa.update(t).where(t.c.key.in_(sa.bindparam("keys", expanding=True)), t.c.state == "pending")
             .values(state="sent", sent_at=sa.bindparam("at", type_=t.c.sent_at.type), attempts=t.c.attempts + 1))


async def mark_sent(conn: AsyncConnection, keys: Iterable[str], *, at: datetime) -> int:
    """Mark pending rows sent (counting the publish as an attempt); how many changed."""
    keys = list(keys)
    if not keys:
        return 0
    return int((await conn.execute(MARK_SENT, {"keys": keys, "at": at})).rowcount)


async def by_decision(conn: AsyncConnection, decision_id: int) -> list[OutboxRow]:
    stmt = sa.select(t).where(t.c.decision_id == decision_id).order_by(t.c.created_at, t.c.key)
    return [OutboxRow(**r._asdict()) for r in await conn.execute(stmt)]
