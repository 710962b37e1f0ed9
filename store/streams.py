"""Stream generations: which KUBUS_EVENTS the stored positions and checkpoints refer to, and its resets.

A JetStream sequence means something only in the stream that assigned it. KUBUS_EVENTS deleted and created
again (by an operator, or by kubus after its data was lost) numbers its events from 1 again, and the
reconciler's positions then lie past its end: without a check it would skip every new event, silently. So
the stream's identity (its creation time, `stream_info().created`) is recorded next to what refers to it:

- `reconciler`: the consumer positions. Every reconciler compares it with the stream at start and in its
  loop; the commit fence checks it (a reconciler still deciding on the old stream commits nothing);
- `ingest`: ingest's checkpoints, recorded once ingest has relisted every kind into that stream.

`reset` starts the reconciler over on a new stream generation, in one transaction: the positions go, the
identity moves, a `stream_resets` row says what happened, and the audit trail's earlier events are moved to
sequences at or below 0 so the new stream's 1, 2, ... do not collide with them (`shifted_by`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import sql
from store.tables import consumer_positions, decisions, observed_events, stream_identities, stream_resets

RECONCILER = "reconciler"  # the identity the consumer positions refer to
INGEST = "ingest"  # the identity ingest has relisted into


class StreamChanged(Exception):
    """The commit's positions refer to a stream generation the store no longer records: the stream was reset
    (by another reconciler) since this one started. Nothing was committed; the loop starts over."""


@dataclass(frozen=True, slots=True)
class Reset:
    """A reset as `stream_resets` records it."""

    stream: str
    old_created: str | None
    new_created: str
    reason: str
    positions: Mapping[int, int]
    last_seq: int
    instance: str


# Built once (every commit checks the identity): building a select costs more than running it on SQLite.
IDENTITY = sa.select(stream_identities.c.created).where(stream_identities.c.name == sa.bindparam("name"))


async def identity(conn: AsyncConnection, name: str) -> str | None:
    """The stream creation time `name` refers to; None when never recorded."""
    rows = await sql.execute(conn, ("identity",), lambda: IDENTITY, {"name": name})
    return str(rows[0][0]) if rows else None


async def record(conn: AsyncConnection, name: str, stream: str, created: str, *, at: datetime) -> None:
    """Records (or moves) `name`'s identity."""
    row = {"name": name, "stream": stream, "created": created, "updated_at": at}
    await sql.upsert(conn, stream_identities, [row], update=["stream", "created", "updated_at"])


async def check(conn: AsyncConnection, name: str, created: str | None) -> None:
    """Raises StreamChanged unless `name`'s recorded identity is `created` (None: nothing to check)."""
    if created is None:
        return
    have = await identity(conn, name)
    if have is not None and have != created:
        raise StreamChanged(f"the store's positions now refer to the stream created at {have}, this reconciler "
                            f"started on the one created at {created}")


async def reset(conn: AsyncConnection, consumer: str, done: Reset, *, at: datetime) -> bool:
    """Starts `consumer` over on the stream created at `done.new_created`, unless a peer did already (the
    recorded identity is not `done.old_created` any more): True when this call reset."""
    have = await identity(conn, RECONCILER)
    if have != done.old_created:
        return False
    await conn.execute(sa.delete(consumer_positions).where(consumer_positions.c.consumer == consumer))
    shift = await _shift_events(conn)
    await record(conn, RECONCILER, done.stream, done.new_created, at=at)
    await conn.execute(sa.insert(stream_resets).values(
        at=at, stream=done.stream, old_created=done.old_created, new_created=done.new_created, reason=done.reason,
        positions={str(p): s for p, s in sorted(done.positions.items())}, last_seq=done.last_seq, shifted_by=shift,
        instance=done.instance))
    return True


async def _shift_events(conn: AsyncConnection) -> int:
    """Moves every recorded event (and the decisions' stream_seq with them) below 1, keeping their order, so
    that the new stream's sequences are free: returns the amount subtracted. The new range lies wholly below
    the old one, so no row takes a key another still holds (both databases check the key row by row)."""
    low, high = (await conn.execute(sa.select(sa.func.min(observed_events.c.stream_seq),
                                              sa.func.max(observed_events.c.stream_seq)))).one()
    top = max(high or 0, int(await conn.scalar(sa.select(sa.func.max(decisions.c.stream_seq))) or 0))
    if top < 1:
        return 0
    shift = top + 1 - min(low if low is not None else 1, 1)
    await conn.execute(sa.update(observed_events).values(stream_seq=observed_events.c.stream_seq - shift))
    await conn.execute(sa.update(decisions).values(stream_seq=decisions.c.stream_seq - shift))
    return shift


async def resets(conn: AsyncConnection) -> list[dict[str, object]]:
    """Every reset, oldest first (what `kubus status` and tests read)."""
    rows = await conn.execute(sa.select(stream_resets).order_by(stream_resets.c.id))
    return [dict(row._mapping) for row in rows]
