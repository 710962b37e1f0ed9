"""The ingest process: one KindWatcher per kind on one NATS connection, plus the checkpoint writer.

    ingest = Ingest(IngestConfig(nats_url=..., kubeconfig=...))
    await ingest.run()          # until cancelled; `run_ingest(config)` does just this
    await ingest.run(bus, health)  # the same on the runtime's connection (what `kubus ingest` does)
    ingest.counters()           # published events by kind and type, duplicates, relists, ...
    Ingest(config, registry=runtime.metrics.REGISTRY)  # counting on the process's registry, which /metrics serves

Start-up fails fast, with one line saying what to fix, when the kubeconfig cannot be loaded or
NATS does not answer; once running, losing either is waited out with backoff. Before it publishes
anything, ingest identifies the cluster and checks the streams are that cluster's (ingest/identity.py):
if they are another's it stops with identity.ClusterMismatch, a start-up failure.

Stream loss: checkpoints are good for the KUBUS_EVENTS they were recorded on. At start and every
`stream_check_interval` ingest compares the stream's identity (its creation time) with the one recorded next to
its checkpoints; a stream created anew (or one that ends before what ingest had stored in it) is said loudly (an
error line, kubus_stream_resets_total) and every kind is listed again into it, KUBUS_STATE rebuilt first. Once
every kind is, the new identity is recorded: what a reconciler that found the stream reset waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from kubernetes.client import ApiClient
from nats.aio.client import Client
from prometheus_client import CollectorRegistry

from ingest import identity, tombstones, transport
from ingest.backoff import Backoff
from ingest.checkpoints import Checkpoints, KvCheckpoints, MemoryCheckpoints
from ingest.config import IngestConfig
from ingest.counting import Counters
from ingest.kinds import spec_of
from ingest.publishing import OrderedPublisher
from ingest.watching import KindWatcher, now
from messages import subjects
from runtime import failpoints, serving
from runtime.bus import Bus, connected, events_info, jetstream, renew_state
from runtime.bus import identity as stream_identity
from runtime.deadletter import Halts
from runtime.metrics import instrument
from runtime.serving import Health

__all__ = ["Ingest", "IngestConfig", "run_ingest"]

log = logging.getLogger("kubus.ingest")


async def run_ingest(config: IngestConfig) -> None:
    await Ingest(config).run()


class Ingest:
    def __init__(self, config: IngestConfig, registry: CollectorRegistry | None = None):
        """`registry`: where its metrics are counted (None: a registry of its own, that no /metrics serves)."""
        self.config = config
        self._specs = [spec_of(kind) for kind in config.kinds]  # an unknown kind fails here, not later
        self._counters = Counters(registry)
        self._watchers: list[KindWatcher] = []
        self._nc: Client | None = None
        self.halts = Halts()  # kinds whose relist met an event of a newer kubus on the bus
        self.cluster = ""  # the kube-system namespace's uid, once read

    def counters(self) -> dict[str, Any]:
        nats_reconnects = self._nc.stats["reconnects"] if self._nc is not None else 0
        snapshot = self._counters.snapshot(nats_reconnects=nats_reconnects)
        snapshot["instance"] = self.config.instance
        snapshot["unacked"] = {w.kind: w.publisher.unacked for w in self._watchers}
        return snapshot

    def synced(self) -> bool:
        """Every kind has listed (or resumed) and has a watch open."""
        watching = self._counters.watching
        return all(watching.get(spec.kind, False) for spec in self._specs)

    async def run(self, bus: Bus | None = None, health: Health | None = None) -> None:
        """Until cancelled, on `bus`, with this ingest's readiness in `health`: how runtime.running.run_service
        starts it. Without a bus (tests, benchmarks) it connects to
        config.nats_url itself."""
        config = self.config
        if health is not None:
            health.ready_when("ingest-synced", self.synced)
            health.ready_when("ingest-no-newer-messages", self.halts.ready)
        api = transport.api_client(config.kubeconfig, config.context, pool_size=2 * len(self._specs) + 4)
        instrument(api, self._counters.rest)
        try:
            if bus is None:
                async with connected(config.nats_url, config.instance, prefix=config.prefix,
                                     partitions=config.partitions) as own:
                    await self._run(api, own)
            else:
                await self._run(api, bus)
        finally:
            api.close()  # type: ignore[no-untyped-call]

    async def _run(self, api: ApiClient, bus: Bus) -> None:
        config = self.config
        self._nc = bus.nc
        checkpoints: Checkpoints | None = None
        self.cluster = await self._identify(api, bus)  # before anything is published
        try:
            checkpoints = await self._open_checkpoints(bus)
            # one context for all kinds; each publisher bounds its own window below nats-py's limit
            js = jetstream(bus.nc, publish_async_max_pending=config.window * len(self._specs) + 1)
            for spec in self._specs:
                publisher = OrderedPublisher(
                    js, spec.kind, self._counters, stream=bus.stream(subjects.EVENTS_STREAM),
                    subjects_filter=f"{bus.prefix}.events.*.{spec.kind}.*", window=config.window,
                    ack_timeout=config.ack_timeout, backoff=self._backoff())
                self._watchers.append(KindWatcher(
                    spec, bus=bus, publisher=publisher, call=transport.list_call(api, spec),
                    checkpoints=checkpoints, counters=self._counters, instance=config.instance,
                    backoff=self._backoff(), watch_timeout=config.watch_timeout,
                    list_page_size=config.list_page_size, halts=self.halts))
            log.info("ingest %s: watching %s, publishing to %s.events (%d partitions)", config.instance,
                     ", ".join(config.kinds), bus.prefix, bus.partitions)
            recorded = await self._settle_stream(bus, checkpoints)
            async with asyncio.TaskGroup() as tasks:
                for watcher in self._watchers:
                    tasks.create_task(watcher.run(), name=f"ingest-{watcher.kind}")
                tasks.create_task(self._checkpoint_forever(checkpoints), name="ingest-checkpoints")
                tasks.create_task(self._follow_stream(bus, checkpoints, recorded), name="ingest-stream")
                if config.tombstone_ttl is not None:
                    tasks.create_task(tombstones.expire_forever(bus, config.tombstone_ttl), name="ingest-tombstones")
        finally:
            await self._shut_down(checkpoints)

    async def _identify(self, api: ApiClient, bus: Bus) -> str:
        """The cluster's uid, recorded in the streams or compared with their record (ingest/identity.py): raises
        ClusterMismatch (a start-up failure: `kubus ingest` exits 2) when the streams are another cluster's."""
        uid = await identity.cluster_uid(api, self._backoff())
        backoff = self._backoff()
        while True:
            try:
                await identity.claim(bus, uid, self.config.instance, now(), self._own_state)
                return uid
            except identity.ClusterMismatch:
                raise
            except Exception as exc:  # NATS away or electing: try again
                delay = backoff.next()
                log.warning("recording the cluster's identity failed (%s: %s); retrying in %.1fs",
                            type(exc).__name__, exc, delay)
                await asyncio.sleep(delay)

    # --- stream loss ----------------------------------------------------------------------------------
    async def _settle_stream(self, bus: Bus, checkpoints: Checkpoints) -> str | None:
        """Which stream each kind must be listed into, before the watchers start: KUBUS_EVENTS as it is. When the
        checkpoints were recorded on another one, every kind relists (the checkpoints say nothing of this one).
        Returns the identity recorded next to the checkpoints."""
        info = await events_info(bus)
        current = stream_identity(info)
        recorded = await checkpoints.stream_identity()
        if recorded is not None and recorded != current:
            self._reset(bus, f"created anew: ingest's checkpoints refer to the stream created {recorded}, it is now "
                             f"the one created {current}")
            await renew_state(bus)
        for watcher in self._watchers:
            watcher.wanted = current
            watcher.listed = current if recorded in (None, current) else None
        return recorded

    def _reset(self, bus: Bus, why: str) -> None:
        name = bus.stream(subjects.EVENTS_STREAM)
        log.error("stream %s was reset (%s): relisting every kind into it", name, why)
        serving.STREAM_RESETS.labels(stream=name, service="ingest").inc()

    async def _follow_stream(self, bus: Bus, checkpoints: Checkpoints, recorded: str | None) -> None:
        """Every stream_check_interval: relists every kind when KUBUS_EVENTS was created anew (or ends before what
        this process stored in it), and records the stream's identity next to the checkpoints once every kind has
        listed (or resumed) into it."""
        while True:
            # the check's period; shorter while a relist is to be recorded (a reconciler may be waiting for it)
            await asyncio.sleep(self.config.stream_check_interval if recorded is not None and all(
                w.wanted == recorded for w in self._watchers) else min(self.config.stream_check_interval, 0.5))
            try:
                # what this ingest had stored when it asked, not when the answer is read: an ack of a later
                # message handled while the request was in flight would look like events the stream lost
                stored = max((w.publisher.max_seq for w in self._watchers), default=0)
                info = await events_info(bus)
                current, last = stream_identity(info), info.state.last_seq
                wanted = {w.wanted for w in self._watchers}
                if wanted != {current} or last < stored:
                    why = (f"created anew: it was the one created {', '.join(sorted(map(str, wanted)))}, it is now "
                           f"the one created {current}" if wanted != {current} else
                           f"lost events: it ends at {last}, this ingest stored up to {stored}")
                    self._reset(bus, why)
                    await renew_state(bus)
                    for watcher in self._watchers:
                        watcher.publisher.max_seq = 0  # (its publisher forgets the rest of the old stream before
                        watcher.relist_into(current)   # it relists: ingest/watching.py)
                    continue
                # the cluster's record, in every round: a KUBUS_STATE rebuilt for a new KUBUS_EVENTS (here, or by a
                # reconciler that saw the reset, even just after this ingest recorded it) lost it
                await identity.claim(bus, self.cluster, self.config.instance, now(), self._own_state)
                if recorded != current and all(w.listed == current for w in self._watchers):
                    await checkpoints.save_stream_identity(bus.stream(subjects.EVENTS_STREAM), current)
                    if recorded is not None:
                        log.info("relisted every kind into stream %s created %s",
                                 bus.stream(subjects.EVENTS_STREAM), current)
                    recorded = current
            except (asyncio.CancelledError, identity.ClusterMismatch):
                raise  # (another cluster's ingest recorded itself in a rebuilt KUBUS_STATE first: stop, loudly)
            except Exception as exc:  # NATS or the store away, the stream being re-created: the next round
                log.debug("stream check skipped: %s: %s", type(exc).__name__, exc)

    def _backoff(self) -> Backoff:
        return Backoff(self.config.backoff_initial, self.config.backoff_max)

    @property
    def _own_state(self) -> str:
        return self.config.own_state or identity.OWN_STATE

    async def _open_checkpoints(self, bus: Bus) -> Checkpoints:
        chosen = self.config.checkpoints
        if chosen == "kv":
            return await KvCheckpoints.open(bus.js, bus.prefix, bus.settings.replicas)
        if chosen == "memory":
            return MemoryCheckpoints()
        assert not isinstance(chosen, str), f"unknown checkpoint store {chosen!r}"
        return chosen

    async def _checkpoint_forever(self, checkpoints: Checkpoints) -> None:
        saved: dict[str, str] = {}
        while True:
            await asyncio.sleep(self.config.checkpoint_interval)
            await self._save_positions(checkpoints, saved)

    async def _save_positions(self, checkpoints: Checkpoints, saved: dict[str, str]) -> None:
        for watcher in self._watchers:
            position = watcher.publisher.acked_position
            if position is None or saved.get(watcher.kind) == position:
                continue
            if watcher.kind == "Pod" and self._counters.published[("Pod", "ADDED")]:
                failpoints.hit("ingest.after-publish")  # pods published and acked, checkpoint not saved
            try:
                await checkpoints.save(watcher.kind, position)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS (or the store) away: the next round saves a later position
                log.warning("saving the %s checkpoint failed: %s: %s", watcher.kind, type(exc).__name__, exc)
                continue
            saved[watcher.kind] = position

    async def _shut_down(self, checkpoints: Checkpoints | None) -> None:
        """Stops the watches, waits a little for outstanding acks, and records how far they got."""
        for watcher in self._watchers:
            watcher.close()
        if checkpoints is None:
            return
        try:
            await asyncio.wait_for(self._drain_all(), self.config.stop_timeout)
        except TimeoutError:
            log.warning("ingest stopped with unacked events; the next start resends them from the checkpoint")
        try:
            await asyncio.wait_for(self._save_positions(checkpoints, {}), self.config.stop_timeout)
        except TimeoutError:
            log.warning("ingest stopped without saving its checkpoints; the next start resends from older ones")

    async def _drain_all(self) -> None:
        for watcher in self._watchers:
            with contextlib.suppress(Exception):
                await watcher.publisher.drain()
