"""Client-side rate limiting: client-go's token bucket (QPS refill, burst capacity), shared per process.

Like golang.org/x/time/rate, a caller reserves a token and is told how long to wait for it; the
bucket may go negative, which queues later callers behind earlier ones in arrival order without
a lock or a wake-up list (the event loop is single-threaded).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._tokens = float(self.burst)
        self._last = clock()

    @property
    def enabled(self) -> bool:
        return self.qps > 0

    def reserve(self) -> float:
        """Takes one token; returns the seconds to wait before using it (0 when one was there)."""
        if not self.enabled:
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps
