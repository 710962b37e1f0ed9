"""A reconciler of a split deployment: decides for the partitions its lease keeper holds.

The keeper (reconciler.leases) says which partitions are ours; this runs one `Reconciler` for
exactly that set, with the leases' epochs as its fence, and the results consumers of those
partitions beside it. When the set changes (a partition acquired, revoked or lost) the running
one is stopped after its batch in flight and a new one is built for the new set: it bootstraps
its cache from KUBUS_STATE and loads the new set's expectations, backoff and positions from the
store, so it continues exactly where the previous owners committed. Revoked partitions are handed
back to the keeper only once the loop has stopped deciding for them. A commit that raised
LeaseLost (the keeper's view was late) tells the keeper and starts over without those partitions.

Rebuilding is what a rebalance costs (one bootstrap, about a second and a half for 50,000
objects); it happens when members join or leave, not per event.

The database going away (a PostgreSQL restart, a statement that hit --db-statement-timeout, a lost
connection) ends the running loop the same way: its transaction rolled back, so what it held in memory
is ahead of the store and is dropped. After a backoff (RETRY_INITIAL, doubling up to RETRY_MAX, reset
by a loop that committed) a new one starts from what the store committed. The results it had not
committed are redelivered; nothing is lost, and nothing committed twice. The process does not exit, so a
database that is down for minutes is not a crash loop of its supervisor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from kube.times import Clock, utcnow
from messages import subjects
from reconciler.consuming import Reconciler, StreamReset, away, next_retry
from reconciler.core.controllers import Settings
from reconciler.leases import LeaseKeeper
from reconciler.relaying import record_results
from runtime.bus import Bus, bus_away
from runtime.deadletter import Halts
from store.errors import database_away
from store.leases import LeaseLost
from store.port import ReconcilerPort
from store.streams import StreamChanged

log = logging.getLogger("kubus.reconciler")

STOP_TIMEOUT = 10.0  # seconds a stopped loop and its results consumers get to end
MIN_RESULTS_ACK_WAIT = 5.0  # seconds; results a dead owner held come back to the next one after this


class PartitionedReconciler:
    """The consuming loop for whatever the keeper holds; the keeper's `LeaseListener`."""

    def __init__(self, bus: Bus, store: ReconcilerPort, keeper: LeaseKeeper, instance: str,
                 clock: Clock = utcnow, settings: Settings | None = None, halts: Halts | None = None) -> None:
        self.bus = bus
        self.halts = halts or Halts()  # the service's, shared by every loop built
        self.store = store
        self.keeper = keeper
        self.instance = instance
        self.clock = clock
        self.settings = settings  # the controllers' (feature gates, resync period), for every loop built
        self.relay_wakeup = asyncio.Event()
        self.current: Reconciler | None = None
        self._changed = asyncio.Event()
        self._revoked: set[int] = set()
        self._draining: set[asyncio.Task[None]] = set()  # stopped loops' results recorders, winding down
        self._started = False
        self._stopping = False
        self._retry_delay = 0.0  # after the database went away: how long before the next loop starts
        keeper.listener = self

    # --- what the service reads ------------------------------------------------------------------
    @property
    def caught_up(self) -> bool:
        """Ready: the current partitions' history is replayed (or we hold none, and are a standby)."""
        if self.current is None:  # after a first lease round that gave us nothing
            return self._started and bool(self.keeper.last.live) and not self.keeper.owned
        return self.current.caught_up

    def action_subjects(self) -> list[str]:
        """The outbox subjects this reconciler relays: its partitions'."""
        owned = self.current.owned if self.current is not None else None
        return [subjects.action_subject(str(p), self.bus.prefix) for p in sorted(owned or ())]

    # --- LeaseListener -----------------------------------------------------------------------------
    def on_acquired(self, leases: Mapping[int, int]) -> None:
        self._rebuild()

    def on_revoked(self, partitions: frozenset[int]) -> None:
        self._revoked |= partitions
        self._rebuild()

    def on_lost(self, partitions: frozenset[int]) -> None:
        self._rebuild()

    def stop(self) -> None:
        """Ends `run()` once the loop in flight has finished its batch (a clean shutdown)."""
        self._stopping = True
        self._rebuild()

    def _rebuild(self) -> None:
        self._changed.set()
        if self.current is not None:
            self.current.stop()

    # --- the loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        try:
            await self._run()
        finally:
            # the stopped loops' results recorders end within a fetch (each wait bounded by STOP_TIMEOUT):
            # waited for, not cancelled, which would cancel the waits and leave the recorders running on
            await asyncio.gather(*self._draining, return_exceptions=True)

    async def _run(self) -> None:
        while not self._stopping:
            self._changed.clear()
            if self._revoked:  # the previous loop has stopped: nothing of ours decides for them any more
                revoked, self._revoked = self._revoked, set()
                await self.keeper.release(revoked)
            fence = {p: e for p, e in self.keeper.fence().items() if p not in self.keeper.revoking}
            self._started = True
            if not fence:
                self.current = None
                await self._changed.wait()
                continue
            if await self._run_generation(fence):
                await self._back_off()

    async def _back_off(self) -> None:
        """Waits before the next loop after the database (or NATS) went away: RETRY_INITIAL, doubling up to
        RETRY_MAX while it stays away; a stop ends the wait (a change of partitions does not: the store
        is what the next loop needs)."""
        stopping = asyncio.ensure_future(self._wait_stopping())
        try:
            await asyncio.wait([stopping], timeout=self._retry_delay)
        finally:
            stopping.cancel()

    async def _wait_stopping(self) -> None:
        while not self._stopping:
            await self._changed.wait()
            self._changed.clear()
        self._changed.set()  # for _run's loop, which checks _stopping next

    async def _run_generation(self, fence: dict[int, int]) -> bool:
        """Runs one loop for `fence` until it stops; True when the database being away ended it (the caller
        backs off before the next)."""
        log.info("deciding for partition(s) %s", ", ".join(f"{p}@{e}" for p, e in sorted(fence.items())))
        reconciler = Reconciler(self.bus, self.store, self.clock, self.instance, partitions=fence,
                                lease_ttl=self.keeper.ttl, settings=self.settings, halts=self.halts)
        reconciler.relay_wakeup = self.relay_wakeup
        self.current = reconciler
        if self._changed.is_set():  # the set moved again while we were getting here
            reconciler.stop()
        loop = asyncio.create_task(reconciler.run(), name="reconciler-partitions")
        stop_results = asyncio.Event()
        results = asyncio.create_task(
            record_results(self.bus, reconciler, fence, ack_wait=max(self.keeper.ttl, MIN_RESULTS_ACK_WAIT),
                           stop=stop_results, by=self.instance, halts=self.halts),
            name="results-recorder")
        try:
            await asyncio.wait([loop, results], return_when=asyncio.FIRST_COMPLETED)
            if results.done() and not loop.done():
                results.result()  # a crashed recorder takes the service down, to be restarted
            try:
                await loop
            except LeaseLost as exc:
                log.warning("stopped deciding for partition(s) %s: %s", _fmt(exc.partitions), exc)
                self.keeper.lost(exc.partitions)
                self.keeper.wake()
            except (StreamReset, StreamChanged) as exc:
                # the next loop, for the same leases, resets the positions (or finds a peer did) and bootstraps
                log.warning("partition(s) %s: %s; starting the loop over", _fmt(frozenset(fence)), exc)
                return False
            except Exception as exc:
                if not (database_away(exc) or bus_away(exc)):
                    raise  # a bug, not the weather: the service stops, saying what
                # a loop that committed found the database (and NATS) back: start the backoff over
                self._retry_delay = next_retry(self._retry_delay, reconciler.committed)
                log.warning("%s: the loop for partition(s) %s stopped, nothing of its batch committed; starting "
                            "again from what the store holds in %.1f s", away(exc), _fmt(frozenset(fence)),
                            self._retry_delay)
                return True
            return False
        finally:
            reconciler.stop()
            stop_results.set()  # ends within a fetch; cancelling it would strand what the server sent
            loop.cancel()
            # the next loop waits for this one (it must not decide for a partition this one still does), not
            # for its results recorders: what they fetch from now on is handed back (nak) to the next binding
            await _ended([loop], fence)
            self._draining.add(asyncio.create_task(_ended([results], fence, report=True),
                                                   name="results-recorder-stopping"))
            self._draining = {t for t in self._draining if not t.done()}


async def _ended(tasks: list[asyncio.Task[None]], fence: dict[int, int], report: bool = False) -> None:
    """Waits (STOP_TIMEOUT at the most) for the tasks of a stopped loop, cancelling and saying loudly which
    did not end rather than hanging the handover. Their exceptions are retrieved here: logged with `report`,
    otherwise they were raised before."""
    ended, stuck = await asyncio.wait(tasks, timeout=STOP_TIMEOUT)
    for task in stuck:
        task.cancel()
    for task in ended:
        error = None if task.cancelled() else task.exception()
        if error is not None and report:
            log.warning("%s of partition(s) %s ended with %r", task.get_name(), _fmt(frozenset(fence)), error)
    if stuck:
        log.error("the loop for partition(s) %s did not stop within %.0f s: %s", _fmt(frozenset(fence)),
                  STOP_TIMEOUT, ", ".join(t.get_name() for t in stuck))


def _fmt(partitions: frozenset[int]) -> str:
    return ", ".join(map(str, sorted(partitions)))
