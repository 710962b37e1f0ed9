"""`kubus reconcile`: the reconciler with its outbox relay and results recorder."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubus.jetstream import Bus
from kubus.serving import Health
from reconciler.consuming import Reconciler
from reconciler.relaying import record_results, relay

log = logging.getLogger("kubus.reconciler")


async def run_reconciler(bus: Bus, store: Any, health: Health, instance: str = "reconciler") -> None:
    reconciler = Reconciler(bus, store, instance=instance)
    health.ready_when("reconciler-caught-up", lambda: reconciler.caught_up)
    health.alive_when("nats", lambda: bus.nc.is_connected or bus.nc.is_reconnecting)
    tasks = [asyncio.create_task(reconciler.run(), name="reconciler"),
             asyncio.create_task(relay(bus, store, reconciler.relay_wakeup), name="outbox-relay"),
             asyncio.create_task(record_results(bus, reconciler), name="results-recorder")]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # a crashed part takes the service down, to be restarted, not half-alive
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
