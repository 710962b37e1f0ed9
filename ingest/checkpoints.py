"""Where ingest resumes: the last resourceVersion per kind whose events are all acked by JetStream.

A port with two adapters here (memory, NATS KV); the store package adds a SQL one. A saved
checkpoint promises that every event of the kind up to that version is on the bus, whichever
replica published it, so replicas may share one.

The promise holds for one KUBUS_EVENTS: next to the checkpoints each adapter keeps the identity (the
creation time, runtime.bus.identity) of the stream ingest has relisted every kind into. Checkpoints recorded
for another stream (it was created anew) are not resumed from: every kind is listed again.
"""

from __future__ import annotations

import re
from typing import Protocol

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BucketNotFoundError, KeyNotFoundError
from nats.js.kv import KeyValue


class Checkpoints(Protocol):
    async def get(self, kind: str) -> str | None: ...

    async def save(self, kind: str, rv: str) -> None: ...

    async def stream_identity(self) -> str | None:
        """The KUBUS_EVENTS (its creation time) every kind was last listed into; None: never recorded."""
        ...

    async def save_stream_identity(self, stream: str, created: str) -> None: ...


class MemoryCheckpoints:
    """For tests and a throw-away ingest: a restart of the process starts over with a relist."""

    def __init__(self, initial: dict[str, str] | None = None, stream: str | None = None):
        self.saved: dict[str, str] = dict(initial or {})
        self.stream = stream

    async def stream_identity(self) -> str | None:
        return self.stream

    async def save_stream_identity(self, stream: str, created: str) -> None:
        self.stream = created

    async def get(self, kind: str) -> str | None:
        return self.saved.get(kind)

    async def save(self, kind: str, rv: str) -> None:
        self.saved[kind] = rv


STREAM_KEY = "events-stream-created"  # not a kind's name: kinds are capitalised


def bucket_name(prefix: str) -> str:
    # KV bucket names allow only [A-Za-z0-9_-]; a dotted subject prefix must not break them
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{prefix}_ingest")


class KvCheckpoints:
    """One key per kind in the `<prefix>_ingest` bucket, keeping only the latest value."""

    def __init__(self, kv: KeyValue):
        self._kv = kv

    @classmethod
    async def open(cls, js: JetStreamContext, prefix: str, replicas: int = 1) -> KvCheckpoints:
        """The bucket, created (with `replicas`, as the streams: --stream-replicas) when it is missing."""
        bucket = bucket_name(prefix)
        try:
            kv = await js.key_value(bucket)
        except BucketNotFoundError:
            kv = await js.create_key_value(KeyValueConfig(
                bucket=bucket, history=1, storage=StorageType.FILE, replicas=replicas,
                description="ingest's resume points: kind -> resourceVersion"))
        return cls(kv)

    async def stream_identity(self) -> str | None:
        return await self.get(STREAM_KEY)

    async def save_stream_identity(self, stream: str, created: str) -> None:
        await self.save(STREAM_KEY, created)

    async def get(self, kind: str) -> str | None:
        try:
            entry = await self._kv.get(kind)
        except KeyNotFoundError:  # KeyDeletedError too: a purged checkpoint means relist
            return None
        return entry.value.decode() if entry.value else None

    async def save(self, kind: str, rv: str) -> None:
        await self._kv.put(kind, rv.encode())
