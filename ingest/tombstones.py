"""KUBUS_STATE's tombstones expire: the last event of a deleted object is purged once it is `ttl` old.

KUBUS_STATE keeps the last event of every object, so without this it keeps a DELETED per object ever deleted,
and every bootstrap and relist reads them all. A tombstone is needed only while something may still act on the
deleted object: a lagging ingest replica's stale event (caught by the duplicate window, 120 s), a relist that
compares the bus with the API (an object absent from both is simply absent: an expired tombstone changes
nothing there), a reconciler bootstrapping while the deletion is still on its way. Past `ttl` (default 1 h,
docs/production.md) it goes; a uid never comes back, so nothing newer can be lost with it.

Every ingest replica runs this; a purge is idempotent (purging what a peer purged is a no-op). The scan reads
headers only: the event type is the suffix of the Nats-Msg-Id (`Kind/uid/resourceVersion/TYPE`), the age the
message's stored time on the server. A purge is bounded by the tombstone's sequence, so a message stored on the
subject after the scan is not touched.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from ingest.relisting import read_stream
from messages import subjects
from messages.observed import DELETED, DELETED_FINAL_STATE_UNKNOWN
from runtime.bus import Bus

log = logging.getLogger("kubus.ingest")

DEFAULT_TTL = 3600.0  # seconds: --state-tombstone-ttl's default
TOMBSTONES = (DELETED, DELETED_FINAL_STATE_UNKNOWN)
MAX_INTERVAL = 300.0  # seconds between two scans at the most


def interval_of(ttl: float) -> float:
    """How often to scan: a tombstone lives at most about ttl + ttl/4."""
    return min(max(ttl / 4, 0.5), MAX_INTERVAL)


async def expire(bus: Bus, ttl: float, now: datetime | None = None) -> int:
    """Purges KUBUS_STATE's tombstones stored more than `ttl` seconds before `now`; how many it purged."""
    state = bus.stream(subjects.STATE_STREAM)
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=ttl)
    purged = 0
    async for msg in read_stream(bus.js, state, f"{bus.prefix}.state.>", headers_only=True):
        event_type = str((msg.headers or {}).get("Nats-Msg-Id", "")).rsplit("/", 1)[-1]
        if event_type not in TOMBSTONES or msg.metadata.timestamp > cutoff:
            continue
        # up to and including this message only: whatever a peer stored on the subject since stays
        await bus.js.purge_stream(state, subject=msg.subject, seq=msg.metadata.sequence.stream + 1)
        purged += 1
    return purged


async def expire_forever(bus: Bus, ttl: float) -> None:
    """`expire` every interval_of(ttl) seconds until cancelled; a round NATS cannot answer is the next one's."""
    while True:
        await asyncio.sleep(interval_of(ttl))  # the scan period, not a wait for a condition
        try:
            purged = await expire(bus, ttl)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # NATS away, KUBUS_STATE being rebuilt: the next round does it
            log.warning("expiring KUBUS_STATE's tombstones failed: %s: %s", type(exc).__name__, exc)
            continue
        if purged:
            log.info("expired %d tombstones older than %gs from %s", purged, ttl, bus.stream(subjects.STATE_STREAM))
