"""client-go's two ways of spacing out work, as pure values: the doubling backoff and the token bucket.

- :func:`doubled` is every exponential backoff in kubus: the work queue's per-item failures
  (workqueue's ItemExponentialFailureRateLimiter), the DaemonSet's failed-pod backoff
  (util/flowcontrol.Backoff), the executor's retries and redeliveries, ingest's reconnects.
- :class:`TokenBucket` is golang.org/x/time/rate's Limiter as client-go uses it: the work queue's
  overall bucket (10 qps, burst 100) and the executor's client-side QPS limit.

Time is passed in, never read, so one bucket serves a clock of datetimes (the reconciler's injected
``now``) and one of float seconds (the executor's ``time.monotonic()``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Generic, TypeVar

__all__ = ["TokenBucket", "doubled"]

Delay = TypeVar("Delay", float, timedelta)
Instant = TypeVar("Instant", float, datetime)


def doubled(delay: Delay, times: int, cap: Delay) -> Delay:
    """``delay`` doubled ``times`` times, never above ``cap`` (``min(cap, delay * 2**times)``).

    Doubling step by step stops at the cap, so a thousand failures neither overflow a timedelta nor
    lose a float's exactness: multiplying by two is exact in both.
    """
    for _ in range(times):
        if delay >= cap:
            return cap
        delay = delay * 2
    return min(delay, cap)


class TokenBucket(Generic[Instant]):
    """rate.Limiter's ``Reserve().Delay()``: refills at ``qps`` up to ``burst``; each reservation takes a
    token and is told how long to wait for it. Tokens may go negative: the debt queues later callers
    behind earlier ones in arrival order, without a lock or a wake-up list. ``qps <= 0`` never waits."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.tokens = float(self.burst)
        self.last: Instant | None = None

    def reserve(self, now: Instant) -> float:
        """Takes one token at ``now``; the seconds to wait before using it (0 when one was there)."""
        if self.qps <= 0:
            return 0.0
        if self.last is not None:
            elapsed = now - self.last
            seconds = elapsed.total_seconds() if isinstance(elapsed, timedelta) else elapsed
            self.tokens = min(float(self.burst), self.tokens + max(0.0, seconds) * self.qps)
        self.last = now
        self.tokens -= 1.0
        return -self.tokens / self.qps if self.tokens < 0 else 0.0
