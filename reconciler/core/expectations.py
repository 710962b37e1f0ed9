"""Upstream's ControllerExpectations as values: what a controller still waits to observe.

A controller that issued creates or deletes does not act again until the watch shows them (or
five minutes pass), so a slow cache never makes it create twice. Values here are immutable; the
shell persists them with the decision that set them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kube.times import format_go_duration

EXPECTATIONS_TIMEOUT = timedelta(minutes=5)
SHOWN_KEYS = 5  # the pods awaited a held-back sync's reason names, at most


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


def _counted(count: int, what: str) -> str:
    return f"{count} {what}" + ("" if count == 1 else "s")


def held_back(expectations: Expectations, now: datetime) -> str:
    """Why a sync with these (unsatisfied) expectations makes no creates or deletes: what it still waits to
    observe (the creates, and the deletes by pod key as far as they are kept) and since when, e.g.
    ``expectations not satisfied: waiting to observe 2 creates and 1 delete (default/web-x7k2p), expected
    since 2025-06-01T10:01:01.000Z (1.5s ago; they expire after 5m0s)``. A pure function of the
    expectations and the sync's clock, so that a replay words it the same."""
    waiting = [_counted(expectations.adds, "create")] if expectations.adds > 0 else []
    if expectations.dels > 0:
        deleting = _counted(expectations.dels, "delete")
        keys = sorted(expectations.deletion_keys)
        if keys:
            more = f", and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
            deleting += f" ({', '.join(keys[:SHOWN_KEYS])}{more})"
        waiting.append(deleting)
    what = " and ".join(waiting) if waiting else "nothing"
    if expectations.set_at is None:
        return f"expectations not satisfied: waiting to observe {what}"
    ago = max(now - expectations.set_at, timedelta(0))
    ago = timedelta(milliseconds=round(ago / timedelta(milliseconds=1)))
    return (f"expectations not satisfied: waiting to observe {what}, expected since {_when(expectations.set_at)} "
            f"({format_go_duration(ago)} ago; they expire after {format_go_duration(EXPECTATIONS_TIMEOUT)})")


def _when(moment: datetime) -> str:
    """As `kubus audit` shows a decision's time (milliseconds), so that the decision that set them is found."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
