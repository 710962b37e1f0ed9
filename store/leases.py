"""Partition leases and reconciler membership: which reconciler decides for which namespace partition.

A lease is a row of `partition_leases`: an owner, an `epoch` and an expiry. Every acquisition
increments the epoch, a renewal keeps it; so (owner, epoch) names one uninterrupted tenure. A
reconciler commits its decisions with `check_fence` in the same transaction: the commit goes through
only if each partition it decided for is still held by it under the epoch it started with, and not
expired. Safety rests on that check being in the decision's transaction (row locks on PostgreSQL,
the single writer on SQLite), not on clocks: clocks only decide when a lease counts as expired,
that is, when another reconciler may take it over (docs/split.md).

One clock measures every lease: expiry = now + ttl, and a lease is expired once now >= its expiry,
with `now` read from the same clock by whoever renews, takes or checks it. On PostgreSQL that clock
is the database server's (`lease_now`: `clock_timestamp()`, read in the transaction that uses it),
so a reconciler whose host clock is off by more than the ttl neither sees its peers as dead nor is
seen so: heartbeats, expiries and the fence are all one server's time. SQLite is one host, whose
clock every process shares: there `now` is the caller's. The functions below take `now` as an
argument (what `lease_now` returned), so the rule is the same whichever clock fed it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import sql
from store.tables import partition_leases as t
from store.tables import reconciler_members as m

LeaseClock = Literal["database", "local"]
"""Where lease time comes from: "database", PostgreSQL's clock (the default; SQLite has none of its own
and uses the caller's), or "local", the caller's clock on every backend (tests that move time by hand)."""


async def lease_now(conn: AsyncConnection, local: datetime, clock: LeaseClock = "database") -> datetime:
    """The time leases are measured against, in this transaction: PostgreSQL's `clock_timestamp()` (the
    server's clock at this statement, not the transaction's start, which a long batch leaves behind),
    else `local` (the caller's clock: SQLite, or clock="local")."""
    if clock == "local" or conn.dialect.name != "postgresql":
        return local
    value = (await conn.execute(sa.select(sa.func.clock_timestamp()))).scalar_one()
    assert isinstance(value, datetime)
    return value.astimezone(UTC)


class LeaseLost(Exception):
    """The reconciler no longer holds these partitions under the epochs it decided with."""

    def __init__(self, partitions: Iterable[int]) -> None:
        self.partitions = frozenset(partitions)
        super().__init__(f"lease lost on partition(s) {', '.join(map(str, sorted(self.partitions)))}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    partition: int
    owner: str | None  # None: released (or never acquired)
    epoch: int
    expires_at: datetime | None
    acquired_at: datetime | None

    def held_at(self, now: datetime) -> bool:
        """Owned and not expired at `now`."""
        return self.owner is not None and self.expires_at is not None and self.expires_at > now


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    instance: str
    started_at: datetime
    heartbeat_at: datetime
    info: dict[str, Any] = field(default_factory=dict)


# --- membership ----------------------------------------------------------------------------------

async def join(conn: AsyncConnection, instance: str, *, now: datetime, info: Mapping[str, Any] | None = None) -> None:
    """Register (or re-register, after a restart under the same name) `instance` as started now."""
    row = {"instance": instance, "started_at": now, "heartbeat_at": now, "info": dict(info or {})}
    await sql.upsert(conn, m, [row], update=["started_at", "heartbeat_at", "info"])


async def heartbeat(conn: AsyncConnection, instance: str, *, now: datetime,
                    info: Mapping[str, Any] | None = None) -> None:
    """`instance` is alive at `now` (re-inserted if its row was forgotten meanwhile)."""
    row = {"instance": instance, "started_at": now, "heartbeat_at": now, "info": dict(info or {})}
    await sql.upsert(conn, m, [row], update=["heartbeat_at", "info"])


async def leave(conn: AsyncConnection, instance: str) -> None:
    await conn.execute(sa.delete(m).where(m.c.instance == instance))


async def members(conn: AsyncConnection) -> list[Member]:
    """Every registered member, live or not, by name."""
    rows = await conn.execute(sa.select(m).order_by(m.c.instance))
    return [Member(instance=r.instance, started_at=r.started_at, heartbeat_at=r.heartbeat_at, info=dict(r.info))
            for r in rows]


async def live_members(conn: AsyncConnection, *, now: datetime, ttl: float) -> list[str]:
    """The members that heartbeated within the last `ttl` seconds, sorted."""
    stmt = (sa.select(m.c.instance).where(m.c.heartbeat_at > now - timedelta(seconds=ttl))
            .order_by(m.c.instance))
    return [str(i) for i in (await conn.execute(stmt)).scalars()]


# --- leases --------------------------------------------------------------------------------------

def _lease(r: Any) -> Lease:
    """A row of the lease table (its columns in the table's order), as SQLAlchemy or `sql.execute` reads it."""
    partition, owner, epoch, expires_at, acquired_at = r
    return Lease(partition=int(partition), owner=owner, epoch=int(epoch), expires_at=expires_at,
                 acquired_at=acquired_at)


async def leases(conn: AsyncConnection) -> list[Lease]:
    """Every lease row, by partition (partitions never acquired have none)."""
    return [_lease(r) for r in await conn.execute(sa.select(t).order_by(t.c.partition))]


# The statements every commit's fence check runs, built once with their values as parameters (building one costs
# more than running it on SQLite); the same SQL and parameter types as built with the values in place
# (tests/store/test_prebuilt_statements.py compares them). Run by `sql.execute`: on SQLite without SQLAlchemy's
# execution (two of a commit's statements; the fence's partitions are the same list at every commit of a loop).
LOCK = (sa.select(t).where(t.c.partition.in_(sa.bindparam("partitions", expanding=True))).order_by(t.c.partition)
        .with_for_update())
EXTEND = (sa.update(t).where(t.c.partition.in_(sa.bindparam("partitions", expanding=True)))
          .values(expires_at=sa.case((t.c.expires_at < sa.bindparam("until", type_=t.c.expires_at.type),
                                      sa.bindparam("until_then", type_=sa.DateTime(timezone=True))),
                                     else_=t.c.expires_at)))


async def _lock(conn: AsyncConnection, partitions: Collection[int]) -> dict[int, Lease]:
    """The rows of `partitions`, locked until the transaction ends (PostgreSQL; SQLite has one
    writer anyway), always in partition order, so two lease transactions never deadlock."""
    if not partitions:
        return {}
    rows = await sql.execute(conn, ("leases.lock",), lambda: LOCK, {"partitions": sorted(partitions)})
    return {lease.partition: lease for lease in map(_lease, rows)}


async def acquire(conn: AsyncConnection, me: str, partitions: Iterable[int], *, now: datetime,
                  ttl: float) -> dict[int, int]:
    """Take the partitions that are free, expired, or held by `me` under an earlier tenure (a
    restart under the same name); the new epoch of each one taken. Partitions another owner
    holds unexpired are left alone (missing from the result).

    Every acquisition increments the epoch, so whatever decided under the previous one can no
    longer pass `check_fence`.
    """
    taken: dict[int, int] = {}
    expires = now + timedelta(seconds=ttl)
    for partition in sorted(set(partitions)):  # one row at a time, in order: no deadlocks
        stmt = sql.insert(conn, t).values(partition=partition, owner=me, epoch=1, expires_at=expires,
                                          acquired_at=now)
        stmt = stmt.on_conflict_do_update(
            index_elements=[t.c.partition],
            set_={"owner": stmt.excluded.owner, "epoch": t.c.epoch + 1, "expires_at": stmt.excluded.expires_at,
                  "acquired_at": stmt.excluded.acquired_at},
            where=sa.or_(t.c.owner.is_(None), t.c.expires_at.is_(None), t.c.expires_at <= now, t.c.owner == me),
        )
        epoch = (await conn.execute(stmt.returning(t.c.epoch))).scalar()
        if epoch is not None:
            taken[partition] = int(epoch)
    return taken


def _valid(lease: Lease | None, me: str, epoch: int, now: datetime) -> bool:
    return lease is not None and lease.owner == me and lease.epoch == epoch and lease.held_at(now)


async def _extend(conn: AsyncConnection, partitions: Collection[int], until: datetime) -> None:
    if partitions:
        await sql.execute(conn, ("leases.extend",), lambda: EXTEND,
                          {"partitions": sorted(partitions), "until": until, "until_then": until})


async def renew(conn: AsyncConnection, me: str, held: Mapping[int, int], *, now: datetime, ttl: float) -> set[int]:
    """Extend the leases `me` holds ({partition: epoch}) to now + ttl; the partitions renewed.

    A lease that expired is not revived even if nobody took it: its tenure ended, and the keeper
    acquires it afresh (a new epoch) if it still wants it.
    """
    rows = await _lock(conn, held)
    ok = {p for p, epoch in held.items() if _valid(rows.get(p), me, epoch, now)}
    await _extend(conn, ok, now + timedelta(seconds=ttl))
    return ok


async def release(conn: AsyncConnection, me: str, held: Mapping[int, int]) -> set[int]:
    """Give up leases (so another reconciler may take them at once); the partitions released.

    The epoch stays: the next acquisition increments it.
    """
    rows = await _lock(conn, held)
    ok = {p for p, epoch in held.items() if (r := rows.get(p)) is not None and r.owner == me and r.epoch == epoch}
    if ok:
        await conn.execute(sa.update(t).where(t.c.partition.in_(sorted(ok))).values(owner=None, expires_at=None))
    return ok


async def check_fence(conn: AsyncConnection, me: str, fence: Mapping[int, int], *, now: datetime,
                      ttl: float | None = None, clock: LeaseClock = "local") -> None:
    """Inside the transaction that commits decisions: raise LeaseLost unless `me` still holds every
    partition of `fence` ({partition: epoch}) under that epoch and unexpired at `now`.

    The rows stay locked until the transaction ends (PostgreSQL), so no other reconciler can take
    one over between the check and the commit. With `ttl`, the leases are also extended to
    now + ttl (a commit is as good a sign of life as a renewal). An empty fence checks nothing.

    With clock="database", `now` is only the caller's reading: the time checked against is `lease_now`'s,
    read once the rows are locked (the same clock the keeper renews and takes leases by).
    """
    if not fence:
        return
    rows = await _lock(conn, fence)
    now = await lease_now(conn, now, clock)
    lost = {p for p, epoch in fence.items() if not _valid(rows.get(p), me, epoch, now)}
    if lost:
        raise LeaseLost(lost)
    if ttl is not None:
        await _extend(conn, fence, now + timedelta(seconds=ttl))
