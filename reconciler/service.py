"""`kubus reconcile`: the reconciler with its outbox relay and results recorder."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubus.jetstream import Bus
from kubus.serving import Health
from reconciler.consuming import Reconciler
from reconciler.leases import LeaseKeeper
from reconciler.partitioned import PartitionedReconciler
from reconciler.relaying import record_results, relay

log = logging.getLogger("kubus.reconciler")


RETENTION_INTERVAL = 600.0  # seconds between two prunes of the audit trail


async def run_reconciler(bus: Bus, store: Any, health: Health, instance: str = "reconciler",
                         retention: timedelta | None = None, lease_ttl: float | None = None) -> None:
    """With `lease_ttl`, one member of a split deployment: it holds leases on its share of the
    partitions (docs/split.md). Without, alone by construction (`kubus up`): every partition, unfenced."""
    health.alive_when("nats", lambda: bus.nc.is_connected or bus.nc.is_reconnecting)
    if lease_ttl is None:
        reconciler = Reconciler(bus, store, instance=instance)
        health.ready_when("reconciler-caught-up", lambda: reconciler.caught_up)
        tasks = [asyncio.create_task(reconciler.run(), name="reconciler"),
                 asyncio.create_task(relay(bus, store, reconciler.relay_wakeup), name="outbox-relay"),
                 asyncio.create_task(record_results(bus, reconciler), name="results-recorder")]
    else:
        keeper = LeaseKeeper(store, instance, bus.partitions, ttl=lease_ttl,
                             info={"host": socket.gethostname(), "pid": os.getpid()})
        split = PartitionedReconciler(bus, store, keeper, instance)
        health.ready_when("reconciler-caught-up", lambda: split.caught_up)
        tasks = [asyncio.create_task(keeper.run(), name="lease-keeper"),
                 asyncio.create_task(split.run(), name="reconciler"),
                 asyncio.create_task(relay(bus, store, split.relay_wakeup, subjects_of=split.action_subjects),
                                     name="outbox-relay")]
    if retention is not None:
        tasks.append(asyncio.create_task(enforce_retention(store, retention), name="retention"))
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # a crashed part takes the service down, to be restarted, not half-alive
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def enforce_retention(store: Any, retention: timedelta, interval: float = RETENTION_INTERVAL,
                            clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
    """Deletes the audit trail's rows older than `retention` (store/retention.py), now and then every
    `interval` seconds. A failed prune (the database away) is retried at the next round."""
    while True:
        try:
            pruned = await store.prune(clock() - retention)
        except Exception as exc:
            log.warning("audit trail retention paused: %s", exc)
        else:
            if pruned.total:
                log.info("audit trail retention: deleted %s", pruned.as_dict())
        await asyncio.sleep(interval)  # a timer: the next prune is due then
