"""Read-only summaries for `kubus status`: the outbox's backlog, per action subject."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store.tables import outbox


@dataclass(frozen=True, slots=True)
class Backlog:
    pending: int
    oldest: datetime | None  # created_at of the oldest pending row


async def outbox_backlog(conn: AsyncConnection) -> dict[str, Backlog]:
    """Pending outbox rows per subject (`<prefix>.actions.<partition>`), with the oldest's creation."""
    # min() takes the column's type, so the timestamp comes back aware on both backends
    stmt = (sa.select(outbox.c.subject, sa.func.count(), sa.func.min(outbox.c.created_at))
            .where(outbox.c.state == "pending").group_by(outbox.c.subject))
    return {str(subject): Backlog(int(count), oldest) for subject, count, oldest in await conn.execute(stmt)}
