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
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from kube.flowcontrol import TokenBucket, doubled

BASE_DELAY: Final = timedelta(milliseconds=5)
MAX_DELAY: Final = timedelta(seconds=1000)
BUCKET_QPS: Final = 10.0
BUCKET_BURST: Final = 100


@dataclass
class WorkQueue:
    _ready: OrderedDict[str, None] = field(default_factory=OrderedDict)
    _delayed: list[tuple[datetime, int, str]] = field(default_factory=list)
    _waiting_until: dict[str, datetime] = field(default_factory=dict)
    _failures: dict[str, int] = field(default_factory=dict)
    _bucket: TokenBucket[datetime] = field(default_factory=lambda: TokenBucket(BUCKET_QPS, BUCKET_BURST))
    _counter: int = 0

    def __len__(self) -> int:
        return len(self._ready)

    def add(self, key: str) -> None:
        self._ready[key] = None

    def add_after(self, key: str, delay: timedelta, now: datetime) -> None:
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

    def when(self, key: str, now: datetime) -> timedelta:
        """The rate limiter's delay for one more failure of `key` (and the failure is counted)."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        return max(doubled(BASE_DELAY, failures, MAX_DELAY), timedelta(seconds=self._bucket.reserve(now)))

    def add_rate_limited(self, key: str, now: datetime) -> None:
        self.add_after(key, self.when(key, now), now)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def waiting(self, key: str) -> bool:
        """The key waits for a delay (a backoff or a delayed re-add) to pass."""
        return key in self._waiting_until

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    def promote(self, now: datetime) -> None:
        """Moves every delayed key whose time has come to the ready queue."""
        while self._delayed and self._delayed[0][0] <= now:
            ready_at, _, key = heapq.heappop(self._delayed)
            if self._waiting_until.get(key) == ready_at:
                del self._waiting_until[key]
                self.add(key)

    def pop_ready(self, now: datetime) -> list[str]:
        """Every key ready at `now`, oldest first; they leave the queue."""
        self.promote(now)
        keys = list(self._ready)
        self._ready.clear()
        return keys

    def next_ready_at(self) -> datetime | None:
        while self._delayed and self._waiting_until.get(self._delayed[0][2]) != self._delayed[0][0]:
            heapq.heappop(self._delayed)  # superseded by a shorter delay
        return self._delayed[0][0] if self._delayed else None
