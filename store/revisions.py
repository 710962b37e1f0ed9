"""The DaemonSet revision ledger: which ControllerRevision (name, hash) holds which revision number."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import sql
from store.tables import daemonset_revisions as t


@dataclass(frozen=True, slots=True, kw_only=True)
class Revision:
    ds_uid: str
    name: str
    revision: int
    hash: str
    created_at: datetime


async def save(conn: AsyncConnection, rows: Iterable[Revision]) -> None:
    """Insert or update by (ds_uid, name); created_at keeps its first value (a revision bump,
    as upstream does when an old template comes back, is not a new revision object)."""
    values = [{"ds_uid": r.ds_uid, "name": r.name, "revision": r.revision, "hash": r.hash,
               "created_at": r.created_at} for r in rows]
    await sql.upsert(conn, t, values, update=["revision", "hash"])


async def load(conn: AsyncConnection, ds_uid: str) -> list[Revision]:
    """The DaemonSet's revisions, oldest (lowest revision) first."""
    rows = await conn.execute(sa.select(t).where(t.c.ds_uid == ds_uid).order_by(t.c.revision, t.c.name))
    return [Revision(ds_uid=r.ds_uid, name=r.name, revision=r.revision, hash=r.hash, created_at=r.created_at)
            for r in rows]


async def delete(conn: AsyncConnection, ds_uid: str, names: Iterable[str] | None = None) -> None:
    """Delete the named revisions of a DaemonSet, or all of them (the DaemonSet is gone)."""
    stmt = sa.delete(t).where(t.c.ds_uid == ds_uid)
    if names is not None:
        names = list(names)
        if not names:
            return
        stmt = stmt.where(t.c.name.in_(names))
    await conn.execute(stmt)
