"""`kubus reconcile`: the reconciler with its outbox relay and results recorder."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
from datetime import timedelta

from kube.features import FeatureGates
from kube.times import Clock, utcnow
from reconciler import metrics
from reconciler.consuming import SoleReconciler
from reconciler.core.controllers import DEFAULT_MIN_RESYNC_PERIOD, Settings, resync_period
from reconciler.leases import LeaseKeeper
from reconciler.partitioned import PartitionedReconciler
from reconciler.relaying import RelayProgress, record_results, relay
from runtime import collecting
from runtime.bus import Bus, payload_limit
from runtime.deadletter import Halts
from runtime.serving import Health
from store.engine import Store

log = logging.getLogger("kubus.reconciler")


RETENTION_INTERVAL = 600.0  # seconds between two prunes of the audit trail


async def run_reconciler(bus: Bus, store: Store, health: Health, instance: str = "reconciler",
                         retention: timedelta | None = None, lease_ttl: float | None = None,
                         feature_gates: FeatureGates | None = None,
                         min_resync_period: timedelta = DEFAULT_MIN_RESYNC_PERIOD,
                         shadow: timedelta | None = None,
                         controllers: frozenset[str] | None = None) -> None:
    """With `lease_ttl`, one member of a split deployment: it holds leases on its share of the
    partitions (docs/split.md). Without, alone by construction (`kubus up`): every partition, unfenced.

    `feature_gates` and `min_resync_period` are kube-controller-manager's flags of those names: the
    controllers built under this call (one, or one per change of the partitions held) take them, with the
    resync period ResyncPeriod draws from `min_resync_period` (its factor derived from `instance`). `controllers`:
    the kinds whose controllers run (--controllers; None: every one).

    With `shadow` (the comparison window), a shadow (docs/shadow.md): the decisions' actions are recorded as
    would-do acts and never relayed, so no relay runs and no results are awaited; a task counts the
    divergences of each window that closed (kubus_shadow_divergences_total)."""
    collecting.install()  # the cache's long-lived objects out of full collections' sight (runtime/collecting.py)
    # actions are cut to fit the server's max_payload as its INFO said at this start (recorded for replay)
    settings = dataclasses.replace(settings_of(feature_gates, min_resync_period, instance),
                                   max_action_bytes=payload_limit(bus.nc))
    if controllers is not None:
        settings = dataclasses.replace(settings, controllers=frozenset(controllers))
    if shadow is not None:
        settings = dataclasses.replace(settings, shadow=True, shadow_window=shadow)
        log.info("shadow mode: acting on nothing, recording would-do actions; comparison window %s", shadow)
    log.info("controllers %s; feature gates %s; informers' resync every %s; actions up to %d bytes",
             ",".join(sorted(settings.controllers)), settings.feature_gates.as_dict(),
             settings.resync_period or "never", settings.max_action_bytes)
    health.alive_when("nats", lambda: bus.nc.is_connected or bus.nc.is_reconnecting)
    # a consumer stopped at a message of a newer kubus: not ready, still alive (docs/production.md, "Upgrades")
    halts = Halts()
    health.ready_when("reconciler-no-newer-messages", halts.ready)
    progress = RelayProgress()
    health.alive_when("outbox-relay", progress.healthy)  # false once its rounds fail for RELAY_STALL_LIMIT
    stop = asyncio.Event()
    keeper_task: asyncio.Task[None] | None = None
    loop: SoleReconciler | PartitionedReconciler
    if lease_ttl is None:
        loop = reconciler = SoleReconciler(bus, store, instance=instance, settings=settings, halts=halts)
        metrics.held(bus.partitions, None)
        health.ready_when("reconciler-caught-up", lambda: reconciler.caught_up)
        tasks = [asyncio.create_task(reconciler.run(), name="reconciler")]
        if shadow is None:
            tasks += [asyncio.create_task(relay(bus, store, reconciler.relay_wakeup, stop=stop, progress=progress,
                                                outgoing=reconciler.outgoing),
                                          name="outbox-relay"),
                      asyncio.create_task(record_results(bus, reconciler, stop=stop, by=instance, halts=halts),
                                          name="results-recorder")]
    else:
        keeper = LeaseKeeper(store, instance, bus.partitions, ttl=lease_ttl,
                             info={"host": socket.gethostname(), "pid": os.getpid()})
        loop = split = PartitionedReconciler(bus, store, keeper, instance, settings=settings, halts=halts)
        metrics.held(bus.partitions, lambda: keeper.owned)
        health.ready_when("reconciler-caught-up", lambda: split.caught_up)
        keeper_task = asyncio.create_task(keeper.run(), name="lease-keeper")
        tasks = [keeper_task, asyncio.create_task(split.run(), name="reconciler")]
        if shadow is None:
            tasks.append(asyncio.create_task(relay(bus, store, split.relay_wakeup, subjects_of=split.action_subjects,
                                                   stop=stop, progress=progress), name="outbox-relay"))
    if shadow is not None:
        from reconciler.shadowing import count_divergences

        tasks.append(asyncio.create_task(count_divergences(store, shadow, stop=stop), name="shadow-comparator"))
    if retention is not None:
        tasks.append(asyncio.create_task(enforce_retention(store, retention, stop=stop), name="retention"))
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # a crashed part takes the service down, to be restarted, not half-alive
    finally:
        await _stop(loop, stop, [t for t in tasks if t is not keeper_task], keeper_task)


STOP_GRACE = 10.0  # seconds the parts of a stopping reconciler get to finish what they are writing


async def _stop(loop: SoleReconciler | PartitionedReconciler, stop: asyncio.Event, parts: list[asyncio.Task[None]],
                keeper: asyncio.Task[None] | None) -> None:
    """A clean stop: the loop finishes its batch, the relay and retention their round, the recorders their
    fetch; only then the keeper leaves (releasing the leases in a transaction of its own). Cancelling them
    in the middle of a write could leave a connection with an open transaction, and on SQLite its lock
    then held every later writer (the leave among them) for the busy timeout. What has not ended within
    STOP_GRACE is cancelled."""
    stop.set()
    loop.stop()
    _, stuck = await asyncio.wait(parts, timeout=STOP_GRACE)
    for task in stuck:
        log.warning("%s did not stop within %.0f s; cancelling it", task.get_name(), STOP_GRACE)
        task.cancel()
    if keeper is not None:
        keeper.cancel()  # its run() leaves the group as it ends
    await asyncio.gather(*parts, *([keeper] if keeper is not None else []), return_exceptions=True)


def settings_of(feature_gates: FeatureGates | None, min_resync_period: timedelta, instance: str) -> Settings:
    """The controllers' settings from the service's flags: the gates, and the resync period ResyncPeriod draws
    from --min-resync-period (the factor derived from the instance name, see controllers.resync_period)."""
    return Settings(feature_gates or FeatureGates(), resync_period(min_resync_period, instance))


async def enforce_retention(store: Store, retention: timedelta, interval: float = RETENTION_INTERVAL,
                            clock: Clock = utcnow,
                            stop: asyncio.Event | None = None) -> None:
    """Deletes the audit trail's rows older than `retention` (store/retention.py), now and then every
    `interval` seconds. A failed prune (the database away) is retried at the next round. Ends between two
    prunes once `stop` is set."""
    stop = stop or asyncio.Event()
    while not stop.is_set():
        try:
            pruned = await store.prune(clock() - retention)
        except Exception as exc:
            log.warning("audit trail retention paused: %s", exc)
        else:
            if pruned.total:
                log.info("audit trail retention: deleted %s", pruned.as_dict())
        with contextlib.suppress(TimeoutError):  # a timer: the next prune is due then, unless we stop
            await asyncio.wait_for(stop.wait(), interval)
