"""Ingest checkpoints: the last resourceVersion published per kind, to resume a watch after a restart."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store import sql
from store.streams import INGEST
from store.tables import ingest_checkpoints as t


async def load(conn: AsyncConnection, kind: str) -> str | None:
    rv = await conn.scalar(sa.select(t.c.resource_version).where(t.c.kind == kind))
    return None if rv is None else str(rv)


async def load_all(conn: AsyncConnection) -> dict[str, str]:
    rows = await conn.execute(sa.select(t.c.kind, t.c.resource_version))
    return {kind: rv for kind, rv in rows}


async def save(conn: AsyncConnection, kind: str, resource_version: str, *, at: datetime) -> None:
    # Overwrite, not max(): resourceVersions are opaque strings, and after a 410 Gone relist the
    # new one is the truth even if it compares lower.
    row = {"kind": kind, "resource_version": resource_version, "updated_at": at}
    await sql.upsert(conn, t, [row], update=["resource_version", "updated_at"])


class CheckpointStore(Protocol):
    """What SqlCheckpoints needs of the store (store.engine.Store, which imports this module)."""

    async def checkpoint(self, kind: str) -> str | None: ...

    async def save_checkpoint(self, kind: str, resource_version: str) -> None: ...

    async def stream_identity(self, name: str) -> str | None: ...

    async def record_stream_identity(self, name: str, stream: str, created: str) -> None: ...


class SqlCheckpoints:
    """Ingest's resume points in the SQL store: the SQL adapter of ingest.checkpoints.Checkpoints (what
    `kubus ingest` and `kubus up` use, so that a restarted ingest resumes where the store says)."""

    def __init__(self, store: CheckpointStore):
        self.store = store

    async def get(self, kind: str) -> str | None:
        return await self.store.checkpoint(kind)

    async def save(self, kind: str, rv: str) -> None:
        await self.store.save_checkpoint(kind, rv)

    async def stream_identity(self) -> str | None:
        return await self.store.stream_identity(INGEST)

    async def save_stream_identity(self, stream: str, created: str) -> None:
        # next to the checkpoints: a reconciler that found the stream reset waits for this (store/streams.py)
        await self.store.record_stream_identity(INGEST, stream, created)
