"""The cyclic garbage collector, for a process that keeps a large cache for its whole life (the reconciler).

A reconciler holds every node, pod, owner and revision of its partitions: at 5,000 nodes millions of objects the
collector tracks, nearly all long-lived. CPython scans every one of them in each full collection (~150 ms at
5,000 nodes; 9 of them in one DaemonSet rollout took 22% of the reconciler's CPU: issue 25), while the cache's
objects are plain trees that reference counting frees by itself.

So what survives a full collection is frozen (`gc.freeze`: out of the collector's sight), and the next full
collection scans only what was allocated since: the cache's new versions, the batch's decisions. CPython starts a
full collection only once the objects that survived younger ones reach a quarter of those the last full one kept,
so they stay rare as the cache grows. Garbage cycles among frozen objects would never be found, so at most every
`THAW_INTERVAL` a full collection first thaws everything and scans the whole heap once (memory cannot grow
without bound; the cost is one long collection per interval instead of one per few thousand changes).

`gc.freeze` only moves the collector's lists (no object is touched), so it is safe from the collector's own
callback, on whatever thread ran the collection.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("kubus.gc")

THAW_INTERVAL = 600.0  # seconds: the longest a garbage cycle among long-lived objects is kept


class FreezeSurvivors:
    """The collector callback: freezes the survivors of each full collection, thaws all every `interval`."""

    def __init__(self, interval: float = THAW_INTERVAL, clock: Callable[[], float] = time.monotonic):
        self.interval = interval
        self._clock = clock
        self._thawed_at = clock()
        self.full_collections = 0
        self.thaws = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            if self._clock() - self._thawed_at >= self.interval:
                self._thawed_at = self._clock()
                self.thaws += 1
                gc.unfreeze()  # into the oldest generation: this very collection scans them
        elif phase == "stop":
            self.full_collections += 1
            gc.freeze()


_installed: FreezeSurvivors | None = None


def install(interval: float = THAW_INTERVAL) -> FreezeSurvivors:
    """Installs the policy for this process (once; a second call returns the first); the reconciler's start."""
    global _installed
    if _installed is None:
        _installed = FreezeSurvivors(interval)
        gc.callbacks.append(_installed)
        log.debug("full collections' survivors are frozen; everything is thawed every %.0f s", interval)
    return _installed


def uninstall() -> None:
    """Removes the policy and thaws everything (tests)."""
    global _installed
    if _installed is not None:
        gc.callbacks.remove(_installed)
        _installed = None
    gc.unfreeze()
