"""Exponential backoff between attempts: 0.2 s doubling to 30 s by default, reset after a success."""

from __future__ import annotations

from kube.flowcontrol import doubled


class Backoff:
    def __init__(self, initial: float = 0.2, maximum: float = 30.0):
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def next(self) -> float:
        """The delay before the next attempt; each call doubles the one after it, up to the maximum."""
        delay = self._next
        self._next = doubled(self._next, 1, self.maximum)
        return delay

    def reset(self) -> None:
        self._next = self.initial
