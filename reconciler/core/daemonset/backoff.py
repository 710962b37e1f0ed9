"""The DaemonSet controller's failed-pod backoff (upstream's ``failedPodsBackoff``) as immutable values.

Upstream (pkg/controller/daemon/daemon_controller.go, cmd/kube-controller-manager/app/apps.go) gives the
controller ``flowcontrol.NewBackOff(1s, 15m)``: a map from key to ``{backoff, lastUpdate}``. podsShouldBeOnNode
consults it before deleting a Failed daemon pod, so the controller does not fight in a hot loop with a kubelet
that keeps rejecting the pod; a goroutine runs ``GC`` every ``BackoffGCInterval`` (1 min).

The key is failedPodsBackoffKey: ``"<ds uid>/<ds status.observedGeneration>/<node name>"``, so a new
generation of the DaemonSet starts over on every node.

Here the map is a ``Mapping[str, FailedPodBackoff]``; an entry has the shape of a row of the store's
``pod_backoff`` table (``store.backoff.BackoffRow``: key, delay_seconds, last_update), so the shell loads
and saves entries field for field. Every function returns a new mapping and leaves its input alone.
Time is passed in (``now``), never read: the DaemonSet controller calls ``Clock.Now()`` once and hands
that same instant to IsInBackOffSinceUpdate and Next, so ``Next``'s ``lastUpdate = Clock.Now()`` is
``now`` here. The DaemonSet's backoff has no jitter (NewBackOff, not NewBackOffWithJitter).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from kube.apps import DaemonSet
from kube.flowcontrol import doubled

__all__ = [
    "BACKOFF_GC_INTERVAL",
    "INITIAL_DELAY",
    "MAX_DELAY",
    "FailedPodBackoff",
    "failed_pods_backoff_key",
    "gc",
    "gc_cutoff",
    "get",
    "has_expired",
    "is_in_backoff_since",
    "next",
]

INITIAL_DELAY: Final = timedelta(seconds=1)
"""NewBackOff's initial duration for the DaemonSet controller."""
MAX_DELAY: Final = timedelta(minutes=15)
"""NewBackOff's maximum duration: the delay doubles up to this and stays there."""
BACKOFF_GC_INTERVAL: Final = timedelta(minutes=1)
"""How often upstream runs ``failedPodsBackoff.GC`` (daemon_controller.go BackoffGCInterval)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedPodBackoff:
    """One backoffEntry: the current delay of ``key`` and when it was last raised (Next)."""

    key: str
    delay_seconds: float
    last_update: datetime

    @property
    def delay(self) -> timedelta:
        return timedelta(seconds=self.delay_seconds)


def failed_pods_backoff_key(ds: DaemonSet, node_name: str) -> str:
    """failedPodsBackoffKey: ``"<uid>/<status.observedGeneration>/<node>"``."""
    return f"{ds.metadata.uid}/{ds.status.observed_generation}/{node_name}"


def has_expired(event_time: datetime, last_update: datetime, max_delay: timedelta = MAX_DELAY) -> bool:
    """hasExpired: more than 2 x max since the last update, after which the backoff starts over."""
    return event_time - last_update > 2 * max_delay


def get(entries: Mapping[str, FailedPodBackoff], key: str) -> timedelta:
    """Backoff.Get: the current delay of ``key`` (the whole delay, not what is left of it); 0 if none."""
    entry = entries.get(key)
    return entry.delay if entry is not None else timedelta(0)


def is_in_backoff_since(entries: Mapping[str, FailedPodBackoff], key: str, now: datetime,
                        max_delay: timedelta = MAX_DELAY) -> bool:
    """Backoff.IsInBackOffSinceUpdate(key, now), the check the DaemonSet controller makes.

    False without an entry or with an expired one; else True while less than the delay has passed since
    the last update (so exactly at ``last_update + delay`` the key is out of backoff).
    """
    entry = entries.get(key)
    if entry is None or has_expired(now, entry.last_update, max_delay):
        return False
    return now - entry.last_update < entry.delay


def next(entries: Mapping[str, FailedPodBackoff], key: str, now: datetime,
         initial: timedelta = INITIAL_DELAY, max_delay: timedelta = MAX_DELAY) -> dict[str, FailedPodBackoff]:
    """Backoff.Next(key, now): a new mapping where ``key``'s delay has moved to the next mark.

    A new or expired entry starts at ``initial``; otherwise the delay doubles, capped at ``max_delay``.
    Either way ``last_update`` becomes ``now``. Meant to be called as ``backoff.next(...)``: the name
    shadows the builtin inside this module, which therefore never uses the builtin.
    """
    entry = entries.get(key)
    if entry is None or has_expired(now, entry.last_update, max_delay):
        delay = initial
    else:
        delay = doubled(entry.delay, 1, max_delay)
    result = dict(entries)
    result[key] = FailedPodBackoff(key=key, delay_seconds=delay.total_seconds(), last_update=now)
    return result


def gc(entries: Mapping[str, FailedPodBackoff], now: datetime,
       max_delay: timedelta = MAX_DELAY) -> dict[str, FailedPodBackoff]:
    """Backoff.GC: the entries not idle for more than 2 x ``max_delay`` (``now - last_update > 2*max`` go)."""
    return {key: entry for key, entry in entries.items() if not now - entry.last_update > 2 * max_delay}


def gc_cutoff(now: datetime, max_delay: timedelta = MAX_DELAY) -> datetime:
    """The ``updated_before`` for ``store.backoff.gc``: it drops ``last_update < cutoff``, which is :func:`gc`."""
    return now - 2 * max_delay
