"""client-go's rate-limited delaying work queue, as a value driven by an injected clock.

Semantics carried over from ``k8s.io/client-go/util/workqueue``:

- ``add`` is idempotent while a key waits (one key is synced at a time: the reconciler's loop
  pops a key, syncs it and only then looks at the queue again);
- ``add_after`` re-adds a key once a delay has passed (a shorter delay for a waiting key wins);
- ``add_rate_limited`` delays by ``DefaultControllerRateLimiter``: the maximum of a per-item
  exponential backoff (5 ms doubling up to 1,000 s) and an overall token bucket (10 per second,
  burst 100, with reservations, as golang.org/x/time/rate);
- ``forget`` resets a key's failure count after a successful sync.

The queue lives in memory: a restarted reconciler rebuilds it by enqueueing every controller
once its cache is current, as an informer's initial list does upstream.

Like client-go's, the queue tells a ``QueueProbe`` (its MetricsProvider) what happens to its keys: a key
added (not already waiting), a rate-limited retry, and, from the dispatcher that pops the keys, a key's
processing started and finished. The probe is the shell's (reconciler/metrics.py): it reads the shell's
clock and sets the ``workqueue_*`` metrics. The default one does nothing (replays, tests).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Generic, Protocol, TypeVar

from kube.flowcontrol import TokenBucket, doubled

BASE_DELAY: Final = timedelta(milliseconds=5)
MAX_DELAY: Final = timedelta(seconds=1000)
BUCKET_QPS: Final = 10.0
BUCKET_BURST: Final = 100

K = TypeVar("K", bound=Hashable)  # a key: the reconciler's are messages.keys.ControllerKey


class QueueProbe(Protocol):
    """What a WorkQueue tells its metrics, as client-go's queueMetrics is told."""

    def added(self, key: Hashable) -> None:
        """`key` entered the ready queue (an add of a key already waiting there is not one)."""

    def retried(self, key: Hashable) -> None:
        """`key` was re-added with the rate limiter (a failed sync)."""

    def started(self, key: Hashable) -> None:
        """`key` left the queue to be processed."""

    def finished(self, key: Hashable) -> None:
        """`key`'s processing ended."""


class Unprobed:
    """The probe of a queue nobody measures."""

    def added(self, key: Hashable) -> None:
        pass

    def retried(self, key: Hashable) -> None:
        pass

    def started(self, key: Hashable) -> None:
        pass

    def finished(self, key: Hashable) -> None:
        pass


@dataclass
class WorkQueue(Generic[K]):
    _ready: OrderedDict[K, None] = field(default_factory=OrderedDict)
    _delayed: list[tuple[datetime, int, K]] = field(default_factory=list)  # the counter orders equal times
    _waiting_until: dict[K, datetime] = field(default_factory=dict)
    _failures: dict[K, int] = field(default_factory=dict)
    _bucket: TokenBucket[datetime] = field(default_factory=lambda: TokenBucket(BUCKET_QPS, BUCKET_BURST))
    _counter: int = 0
    probe: QueueProbe = field(default_factory=Unprobed)

    def __len__(self) -> int:
        return len(self._ready)

    def add(self, key: K) -> None:
        if key not in self._ready:
            self._ready[key] = None
            self.probe.added(key)

    def add_after(self, key: K, delay: timedelta, now: datetime) -> None:
        if delay <= timedelta(0):
            self.add(key)
            return
        ready_at = now + delay
        current = self._waiting_until.get(key)
        if current is not None and current <= ready_at:
            return
        self._waiting_until[key] = ready_at
        self._counter += 1
        heapq.heappush(self._delayed, (ready_at, self._counter, key))

    def when(self, key: K, now: datetime) -> timedelta:
        """The rate limiter's delay for one more failure of `key` (and the failure is counted)."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        return max(doubled(BASE_DELAY, failures, MAX_DELAY), timedelta(seconds=self._bucket.reserve(now)))

    def add_rate_limited(self, key: K, now: datetime) -> None:
        self.probe.retried(key)
        self.add_after(key, self.when(key, now), now)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def waiting(self, key: K) -> bool:
        """The key waits for a delay (a backoff or a delayed re-add) to pass."""
        return key in self._waiting_until

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    def promote(self, now: datetime) -> None:
        """Moves every delayed key whose time has come to the ready queue."""
        while self._delayed and self._delayed[0][0] <= now:
            ready_at, _, key = heapq.heappop(self._delayed)
            if self._waiting_until.get(key) == ready_at:
                del self._waiting_until[key]
                self.add(key)

    def pop_ready(self, now: datetime) -> list[K]:
        """Every key ready at `now`, oldest first; they leave the queue."""
        self.promote(now)
        keys = list(self._ready)
        self._ready.clear()
        return keys

    def next_ready_at(self) -> datetime | None:
        while self._delayed and self._waiting_until.get(self._delayed[0][2]) != self._delayed[0][0]:
            heapq.heappop(self._delayed)  # superseded by a shorter delay
        return self._delayed[0][0] if self._delayed else None
