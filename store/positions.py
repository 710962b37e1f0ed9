"""Consumer positions: the last stream sequence a reconciler applied, per partition.

Written in the same transaction as the decisions the events produced, so that after a crash the
consumer resumes exactly after what it committed (eventsourcing's "tracking" record).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import sql
from store.tables import consumer_positions as t


async def load(conn: AsyncConnection, consumer: str, partition: int) -> int:
    """The last applied sequence, 0 when the consumer never applied anything on the partition."""
    seq = await conn.scalar(sa.select(t.c.stream_seq).where(t.c.consumer == consumer, t.c.partition == partition))
    return 0 if seq is None else int(seq)


async def load_all(conn: AsyncConnection, consumer: str) -> dict[int, int]:
    rows = await conn.execute(sa.select(t.c.partition, t.c.stream_seq).where(t.c.consumer == consumer))
    return {int(p): int(s) for p, s in rows}


async def advance(conn: AsyncConnection, consumer: str, partition: int, seq: int, *, at: datetime) -> None:
    """Move the position forward to `seq`; a lower or equal `seq` changes nothing.

    Monotonic in SQL (the WHERE of the upsert), so a late, stale writer cannot move it back.
    """
    await advance_all(conn, consumer, {partition: seq}, at=at)


async def advance_all(conn: AsyncConnection, consumer: str, seqs: Mapping[int, int], *, at: datetime) -> None:
    """`advance` for several partitions ({partition: seq}), in one statement."""
    if not seqs:
        return

    def build() -> sql.Insert:
        stmt = sql.insert(conn, t)
        return stmt.on_conflict_do_update(
            index_elements=[t.c.consumer, t.c.partition],
            set_={"stream_seq": stmt.excluded.stream_seq, "updated_at": stmt.excluded.updated_at},
            where=t.c.stream_seq < stmt.excluded.stream_seq,
        )

    await sql.execute(conn, ("advance",), build, [{"consumer": consumer, "partition": partition, "stream_seq": seq,
                                                   "updated_at": at} for partition, seq in seqs.items()])
