"""Splitting the namespace partitions among reconcilers: who should own what, and the keeper that
holds this reconciler's leases (store/leases.py; the protocol is in docs/split.md).

`desired_partitions` is pure: every member computes the same answer from the same membership and
lease table. `LeaseKeeper` runs beside the consuming loop: it heartbeats, renews, gives up what
the assignment moved elsewhere (through the loop, so it can finish its batch first) and acquires
what moved here, and tells the loop through a `LeaseListener`. The loop passes `keeper.fence()` to
`store.leases.check_fence` in each committing transaction, so a reconciler that lost a partition
cannot commit a decision for it, whatever the keeper knew at the time.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from kube.times import Clock, utcnow
from store import leases as lease_rows
from store.engine import Store

log = logging.getLogger("kubus.leases")


DEFAULT_TTL = 10.0  # seconds a lease and a membership heartbeat last
HANDOVER_POLL = 0.5  # seconds between ticks while a partition is waited for from a live member


# --- the assignment ------------------------------------------------------------------------------

def score(member: str, partition: int | str) -> int:
    """Rendezvous (highest-random-weight) score of a member for a partition: stable across
    processes and Python versions (not `hash()`, which is salted per process)."""
    digest = hashlib.blake2b(f"{member}\0{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def desired_partitions(members: Iterable[str], partitions: int,
                       current: Mapping[int, str] | None = None) -> dict[str, set[int]]:
    """Which of partitions 0..partitions-1 each member should own.

    Balanced: every member gets floor(P/M) or ceil(P/M). Deterministic: a function of the member
    set (order and duplicates do not matter), `partitions` and `current`. Sticky: with `current`
    (partition -> owner now, as the lease table says), a member keeps what it holds up to its
    quota, so a join moves only the partitions the newcomer gets and a leave only those of the
    member that left; owners in `current` that are not members count as gone. Without `current`
    (or for partitions nobody holds) the partitions go by rendezvous score, so the answer still
    changes little with the membership.
    """
    names = sorted(set(members))
    if not names:
        return {}
    q, r = divmod(partitions, len(names))
    held: dict[str, list[int]] = {n: [] for n in names}
    for p, owner in sorted((current or {}).items()):
        if owner in held and 0 <= p < partitions:
            held[owner].append(p)
    # The r members that get one more: those already holding that many (fewer moves), then by a
    # score of their own. Holdings count only up to q+1, so the choice stays put while members
    # above it release partitions one after the other, instead of flipping to whoever released last.
    ranked = sorted(names, key=lambda n: (-min(len(held[n]), q + 1), -score(n, "quota"), n))
    quota = {n: q + (1 if i < r else 0) for i, n in enumerate(ranked)}
    owner_of: dict[int, str] = {}
    for n in names:  # each keeps its best-scoring partitions up to its quota
        best = sorted((-score(n, p), p) for p in held[n])
        for _, p in best[:quota[n]]:
            owner_of[p] = n
    load = {n: sum(1 for o in owner_of.values() if o == n) for n in names}
    # the rest by rendezvous score, highest pair first, among members with room
    pairs = sorted(((score(n, p), n, p) for n in names for p in range(partitions) if p not in owner_of),
                   key=lambda x: (-x[0], x[1], x[2]))
    for _, n, p in pairs:
        if p not in owner_of and load[n] < quota[n]:
            owner_of[p] = n
            load[n] += 1
    result: dict[str, set[int]] = {n: set() for n in names}
    for p, n in owner_of.items():
        result[n].add(p)
    return result


# --- the keeper ----------------------------------------------------------------------------------

class LeaseListener(Protocol):
    """What the consuming loop hears from the keeper. Called from the keeper's task, synchronously:
    record and wake the loop (no I/O, no awaiting)."""

    def on_acquired(self, leases: Mapping[int, int]) -> None:
        """These partitions ({partition: epoch}) are now ours and in `fence()`: load their
        expectations, backoff and position from the store, bootstrap and replay them, decide."""

    def on_revoked(self, partitions: frozenset[int]) -> None:
        """The assignment moved these elsewhere: finish the batch in flight (they stay in `fence()`
        and keep being renewed), stop taking new work for them, drop their state, then
        `await keeper.release(partitions)`."""

    def on_lost(self, partitions: frozenset[int]) -> None:
        """These are no longer ours (expired, taken over, or a revocation not released in time),
        already gone from `fence()`: stop deciding for them now; whatever is uncommitted for them
        is void (a commit would raise LeaseLost)."""


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one keeper round did."""

    live: tuple[str, ...] = ()
    acquired: Mapping[int, int] = field(default_factory=dict)
    revoked: frozenset[int] = frozenset()
    lost: frozenset[int] = frozenset()
    released: frozenset[int] = frozenset()
    waiting: frozenset[int] = frozenset()  # ours by the assignment, still held by someone else
    error: str | None = None  # the store failed this round


class LeaseKeeper:
    """Holds this reconciler's partition leases.

    `run()` ticks every `interval` (ttl/3 by default): heartbeat the membership, renew what is
    held, compute `desired_partitions` from the live members and the lease table, revoke what is
    no longer desired (through the listener, or at once without one), acquire what is desired
    and free or expired. A lease that could not be renewed before its expiry is lost.

    Two clocks, each for what it can be trusted with. What is written to and compared with the lease
    table (heartbeats, expiries, who is live, what is free) is the store's lease clock
    (`tx.lease_now`: PostgreSQL's, so hosts whose clocks disagree by more than the ttl still agree on
    who is alive). How long our own leases are good for is measured on `clock`, from the start of
    the round that renewed them: the database renewed them later than that, so `clock` runs out
    first, and only its rate matters, not its offset.

    With one member (and no configuration) it acquires every partition on its first tick.
    """

    def __init__(self, store: Store, instance: str, partitions: int, *, ttl: float = DEFAULT_TTL,
                 interval: float | None = None, clock: Clock = utcnow, listener: LeaseListener | None = None,
                 info: Mapping[str, Any] | None = None, revoke_timeout: float | None = None) -> None:
        if partitions < 1:
            raise ValueError("partitions must be at least 1")
        self.store = store
        self.instance = instance
        self.partitions = partitions
        self.ttl = ttl
        self.interval = interval if interval is not None else ttl / 3
        self.clock = clock
        self.listener = listener
        self.info = dict(info or {})
        self.revoke_timeout = revoke_timeout if revoke_timeout is not None else ttl
        self._owned: dict[int, int] = {}  # partition -> epoch
        self._valid_until: dict[int, datetime] = {}  # what our last successful renewal guarantees
        self._revoking: dict[int, datetime] = {}  # partition -> when the loop was asked to release it
        self._joined = False
        self._last = TickReport()
        self._wakeup = asyncio.Event()

    # --- what the loop reads ---------------------------------------------------------------------
    @property
    def owned(self) -> Mapping[int, int]:
        """{partition: epoch} held, revoked ones included until released (a copy)."""
        return dict(self._owned)

    @property
    def revoking(self) -> frozenset[int]:
        return frozenset(self._revoking)

    @property
    def last(self) -> TickReport:
        return self._last

    def fence(self) -> dict[int, int]:
        """{partition: epoch} to hand to `store.leases.check_fence` in the committing transaction:
        what the loop may commit decisions for right now."""
        return dict(self._owned)

    def owns(self, partition: int) -> bool:
        return partition in self._owned

    # --- what the loop calls -----------------------------------------------------------------------
    async def release(self, partitions: Iterable[int]) -> frozenset[int]:
        """The loop has stopped using these partitions (after `on_revoked`, or on its own): give
        the leases up now, so their next owner need not wait for them to expire. The ones released."""
        held = {p: self._owned[p] for p in partitions if p in self._owned}
        if not held:
            return frozenset()
        self._forget(held)
        try:
            async with self.store.transaction() as tx:
                released = await lease_rows.release(tx.conn, self.instance, held)
        except Exception as exc:  # they expire in ttl anyway
            log.warning("could not release partition(s) %s (they expire in %.0f s): %s",
                        _fmt(held), self.ttl, exc)
            return frozenset()
        log.info("released partition(s) %s", _fmt(released))
        return frozenset(released)

    def lost(self, partitions: Iterable[int]) -> None:
        """The loop's commit raised LeaseLost for these: forget them (no callback, no store write)."""
        self._forget(partitions)

    def wake(self) -> None:
        """Tick now rather than at the next interval."""
        self._wakeup.set()

    # --- the rounds --------------------------------------------------------------------------------
    async def run(self) -> None:
        """Tick until cancelled; then leave (release everything, drop the membership row)."""
        try:
            while True:
                report = await self.tick()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), self.next_delay(report))
                self._wakeup.clear()
        finally:
            try:
                await asyncio.shield(self.leave())
            except Exception as exc:  # said, not hidden: the others then wait out the ttl to take over
                log.warning("could not leave the reconciler group (its partitions go when their leases expire, "
                            "in %.0f s): %s", self.ttl, exc)

    def next_delay(self, report: TickReport) -> float:
        """Seconds until the next round: the interval; shorter while a partition is being handed
        over to us; and never past the moment our last renewal runs out, so a lease that could not
        be renewed is reported lost when it expires, not up to an interval later."""
        delay = HANDOVER_POLL if report.waiting and not report.error else self.interval
        if self._valid_until:
            left = (min(self._valid_until.values()) - self.clock()).total_seconds()
            delay = min(delay, max(left, 0.0))
        return min(delay, self.interval)

    async def tick(self) -> TickReport:
        """One round. Store failures (and a store that does not answer within the interval) are
        logged and reported, never raised: leases then run out on their own, and are reported lost
        when they do."""
        local = self.clock()
        lost = self._expire(local)
        try:
            report = await asyncio.wait_for(self._round(local), self.interval)
        except TimeoutError:
            log.warning("lease round: the store did not answer within %.1f s (holding %s)",
                        self.interval, _fmt(self._owned))
            report = TickReport(error=f"the store did not answer within {self.interval:g} s")
        except Exception as exc:
            log.warning("lease round failed (holding %s): %s", _fmt(self._owned), exc)
            report = TickReport(error=str(exc) or type(exc).__name__)
        report = _merge_lost(report, lost)
        self._last = report
        if report.lost and self.listener is not None:
            self.listener.on_lost(report.lost)
        if report.acquired and self.listener is not None:
            self.listener.on_acquired(report.acquired)
        if report.revoked and self.listener is not None:
            self.listener.on_revoked(report.revoked)
        return report

    async def leave(self) -> None:
        """Release every lease and leave the membership (a clean shutdown: the others take over at
        their next tick instead of after the ttl)."""
        held = dict(self._owned)
        self._forget(held)
        if held and self.listener is not None:
            self.listener.on_lost(frozenset(held))
        async with self.store.transaction() as tx:
            if held:
                await lease_rows.release(tx.conn, self.instance, held)
            await lease_rows.leave(tx.conn, self.instance)
        self._joined = False
        log.info("left the reconciler group, releasing partition(s) %s", _fmt(held))

    async def _round(self, local: datetime) -> TickReport:
        """One round at `local` (our clock); `now` is the lease clock's, read in the round's transaction."""
        lost: set[int] = set()
        async with self.store.transaction() as tx:
            now = await tx.lease_now(local)
            if self._joined:
                await lease_rows.heartbeat(tx.conn, self.instance, now=now, info=self.info)
            else:
                await lease_rows.join(tx.conn, self.instance, now=now, info=self.info)
            held = dict(self._owned)
            renewed = await lease_rows.renew(tx.conn, self.instance, held, now=now, ttl=self.ttl)
            live = await lease_rows.live_members(tx.conn, now=now, ttl=self.ttl)
            table = await lease_rows.leases(tx.conn)
        self._joined = True
        for p in held:
            if p not in renewed:
                lost.add(p)
            elif p in self._owned:  # not released by the loop meanwhile
                self._valid_until[p] = local + timedelta(seconds=self.ttl)
        self._forget(lost)
        if self.instance not in live:  # our heartbeat not visible to ourselves (a local lease clock far off)
            live = sorted({*live, self.instance})
        current = {lease.partition: lease.owner for lease in table
                   if lease.owner is not None and lease.held_at(now) and lease.partition not in lost}
        desired = desired_partitions(live, self.partitions, current).get(self.instance, set())

        # give up what moved elsewhere: ask the loop, or (no listener) release at once
        revoke = frozenset(p for p in self._owned if p not in desired and p not in self._revoking)
        released: frozenset[int] = frozenset()
        if revoke and self.listener is None:
            released = await self.release(revoke)
            revoke = frozenset()
        for p in revoke:
            self._revoking[p] = local
        overdue = {p for p, since in self._revoking.items()
                   if local - since >= timedelta(seconds=self.revoke_timeout)}
        if overdue:
            log.warning("partition(s) %s not released by the loop within %.0f s; releasing them",
                        _fmt(overdue), self.revoke_timeout)
            released |= await self.release(overdue)
            lost |= overdue

        # take what moved here and is free or expired (or ours from an earlier run under this name)
        by_partition = {lease.partition: lease for lease in table}
        wanted = sorted(p for p in desired if p not in self._owned)
        free = [p for p in wanted if (lease := by_partition.get(p)) is None or not lease.held_at(now)
                or lease.owner == self.instance]
        acquired: dict[int, int] = {}
        if free:
            async with self.store.transaction() as tx:
                acquired = await lease_rows.acquire(tx.conn, self.instance, free, now=await tx.lease_now(local),
                                                    ttl=self.ttl)
            for p, epoch in acquired.items():
                self._owned[p] = epoch
                self._valid_until[p] = local + timedelta(seconds=self.ttl)
            if acquired:
                log.info("acquired partition(s) %s", ", ".join(f"{p}@{e}" for p, e in sorted(acquired.items())))
        if lost:
            log.warning("lost partition(s) %s", _fmt(lost))
        return TickReport(live=tuple(live), acquired=acquired, revoked=revoke, lost=frozenset(lost),
                          released=released, waiting=frozenset(p for p in wanted if p not in acquired))

    def _expire(self, local: datetime) -> set[int]:
        """Leases our last renewal no longer covers (on our clock): lost, whatever the store would say."""
        gone = {p for p, until in self._valid_until.items() if until <= local}
        self._forget(gone)
        return gone

    def _forget(self, partitions: Iterable[int]) -> None:
        for p in partitions:
            self._owned.pop(p, None)
            self._valid_until.pop(p, None)
            self._revoking.pop(p, None)


def _merge_lost(report: TickReport, lost: set[int]) -> TickReport:
    if not lost:
        return report
    return TickReport(live=report.live, acquired=report.acquired, revoked=report.revoked,
                      lost=report.lost | lost, released=report.released, waiting=report.waiting,
                      error=report.error)


def _fmt(partitions: Iterable[int]) -> str:
    return ", ".join(map(str, sorted(partitions))) or "none"


class PartitionLeases(Protocol):
    """What the consuming loop needs from its leases: `LeaseKeeper`, or `StaticLeases` when alone."""

    @property
    def owned(self) -> Mapping[int, int]: ...

    @property
    def revoking(self) -> frozenset[int]: ...

    def fence(self) -> dict[int, int]: ...

    def owns(self, partition: int) -> bool: ...

    async def release(self, partitions: Iterable[int]) -> frozenset[int]: ...

    def lost(self, partitions: Iterable[int]) -> None: ...

    def wake(self) -> None: ...

    async def run(self) -> None: ...


class StaticLeases:
    """Every partition, no leases, no fencing: the keeper's interface for a reconciler that is alone
    by construction (`kubus up`, tests). `fence()` is empty, so `check_fence` checks nothing."""

    def __init__(self, partitions: int) -> None:
        self._owned = dict.fromkeys(range(partitions), 0)

    @property
    def owned(self) -> Mapping[int, int]:
        return dict(self._owned)

    @property
    def revoking(self) -> frozenset[int]:
        return frozenset()

    def fence(self) -> dict[int, int]:
        return {}

    def owns(self, partition: int) -> bool:
        return partition in self._owned

    async def release(self, partitions: Iterable[int]) -> frozenset[int]:
        return frozenset()

    def lost(self, partitions: Iterable[int]) -> None:
        pass

    def wake(self) -> None:
        pass

    async def run(self) -> None:
        await asyncio.Event().wait()
