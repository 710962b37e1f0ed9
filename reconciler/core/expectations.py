"""Upstream's ControllerExpectations as values: what a controller still waits to observe.

A controller that issued creates or deletes does not act again until the watch shows them (or
five minutes pass), so a slow cache never makes it create twice. Values here are immutable; the
shell persists them with the decision that set them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

EXPECTATIONS_TIMEOUT = timedelta(minutes=5)


@dataclass(frozen=True)
class Expectations:
    adds: int = 0
    dels: int = 0
    deletion_keys: frozenset[str] = frozenset()
    set_at: datetime | None = None

    def fulfilled(self) -> bool:
        return self.adds <= 0 and self.dels <= 0

    def expired(self, now: datetime) -> bool:
        return self.set_at is not None and now - self.set_at > EXPECTATIONS_TIMEOUT

    def satisfied(self, now: datetime) -> bool:
        """SatisfiedExpectations: fulfilled, expired, or never set."""
        return self.set_at is None or self.fulfilled() or self.expired(now)

    # The constructor rather than dataclasses.replace: these run once per observed pod event.
    def creation_observed(self) -> Expectations:
        return Expectations(self.adds - 1, self.dels, self.deletion_keys, self.set_at)

    def deletion_observed(self, key: str | None = None) -> Expectations:
        """With UID tracking a deletion counts once, and only for a key that was expected."""
        if key is not None:
            if key not in self.deletion_keys:
                return self
            return Expectations(self.adds, self.dels - 1, self.deletion_keys - {key}, self.set_at)
        return Expectations(self.adds, self.dels - 1, self.deletion_keys, self.set_at)

    def deletion_counted(self, key: str) -> Expectations:
        """Without UID tracking (the DaemonSet's ControllerExpectations): every deletion of a pod it controls
        counts, and the pod leaves the keys this controller deleted itself, so that it counts once."""
        return Expectations(self.adds, self.dels - 1, self.deletion_keys - {key}, self.set_at)

    def lowered(self, adds: int = 0, dels: int = 0) -> Expectations:
        return Expectations(self.adds - adds, self.dels - dels, self.deletion_keys, self.set_at)


def expect(adds: int, dels: int, now: datetime, deletion_keys: frozenset[str] = frozenset()) -> Expectations:
    return Expectations(adds, dels, deletion_keys, now)
