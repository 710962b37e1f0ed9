"""Upstream's ControllerExpectations as values: what a controller still waits to observe.

A controller that issued creates or deletes does not act again until the watch shows them (or
five minutes pass), so a slow cache never makes it create twice. Values here are immutable; the
shell persists them with the decision that set them.
"""

from __future__ import annotations

from collections.abc import Iterator, Set
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from kube.times import format_go_duration
from reconciler.core.slots import slot_setter

EXPECTATIONS_TIMEOUT = timedelta(minutes=5)
SHOWN_KEYS = 5  # the pods awaited a held-back sync's reason names, at most


class DeletionKeys(Set[str]):
    """The pod keys a controller still waits to see deleted, as an immutable set (equal to, and hashed as, the
    frozenset of the same keys) that takes a key out in constant time.

    A ReplicaSet that deleted 500 pods observes 500 deletions, one event each: taking each key out of a frozenset
    copies the rest (`keys - {key}`), 125,000 keys copied for one scale-down. Here the versions of one set share
    its first keys and one record of the keys taken out since, in order (`_gone`: key -> how many were out once
    it was); a version is the first keys minus its first `_out` records. Only the newest version adds a record
    (the others, should one be taken from again, copy what they hold), and once half the keys are out the
    rest is copied into a set of its own, so that reading one costs what it holds."""

    __slots__ = ("_gone", "_keys", "_out")

    def __init__(self, keys: frozenset[str], gone: dict[str, int] | None = None, out: int = 0):
        self._keys = keys
        self._gone = {} if gone is None else gone
        self._out = out

    def __contains__(self, key: object) -> bool:
        return key in self._keys and self._gone.get(key, self._out + 1) > self._out

    def __len__(self) -> int:
        return len(self._keys) - self._out

    def __iter__(self) -> Iterator[str]:
        gone, out = self._gone, self._out
        return (key for key in self._keys if gone.get(key, out + 1) > out) if out else iter(self._keys)

    __hash__ = Set._hash

    def __repr__(self) -> str:
        return f"DeletionKeys({set(self)!r})"

    def without(self, key: str) -> DeletionKeys:
        """These keys without `key`."""
        if key not in self:
            return self
        out = self._out + 1
        if out != len(self._gone) + 1 or 2 * out > len(self._keys):  # not the newest version, or half out
            return DeletionKeys(frozenset(self) - {key})
        self._gone[key] = out
        return DeletionKeys(self._keys, self._gone, out)


def _without(keys: Set[str], key: str) -> Set[str]:
    return (keys if isinstance(keys, DeletionKeys) else DeletionKeys(frozenset(keys))).without(key)


@dataclass(frozen=True, slots=True)
class Expectations:
    adds: int = 0
    dels: int = 0
    # a frozenset, or once a deletion was observed the DeletionKeys it left (equal to the frozenset of its keys)
    deletion_keys: Set[str] = frozenset()
    set_at: datetime | None = None

    def fulfilled(self) -> bool:
        return self.adds <= 0 and self.dels <= 0

    def expired(self, now: datetime) -> bool:
        return self.set_at is not None and now - self.set_at > EXPECTATIONS_TIMEOUT

    def satisfied(self, now: datetime) -> bool:
        """SatisfiedExpectations: fulfilled, expired, or never set."""
        return self.set_at is None or self.fulfilled() or self.expired(now)

    # _made rather than dataclasses.replace or the constructor: these run once per observed pod event.
    def creation_observed(self) -> Expectations:
        return _made(self.adds - 1, self.dels, self.deletion_keys, self.set_at)

    def deletion_observed(self, key: str | None = None) -> Expectations:
        """With UID tracking a deletion counts once, and only for a key that was expected."""
        if key is not None:
            if key not in self.deletion_keys:
                return self
            return _made(self.adds, self.dels - 1, _without(self.deletion_keys, key), self.set_at)
        return _made(self.adds, self.dels - 1, self.deletion_keys, self.set_at)

    def deletion_counted(self, key: str) -> Expectations:
        """Without UID tracking (the DaemonSet's ControllerExpectations): every deletion of a pod it controls
        counts, and the pod leaves the keys this controller deleted itself, so that it counts once."""
        return _made(self.adds, self.dels - 1, _without(self.deletion_keys, key), self.set_at)

    def lowered(self, adds: int = 0, dels: int = 0) -> Expectations:
        return _made(self.adds - adds, self.dels - dels, self.deletion_keys, self.set_at)


_new: Final = object.__new__
_set_adds: Final = slot_setter(Expectations, "adds")
_set_dels: Final = slot_setter(Expectations, "dels")
_set_deletion_keys: Final = slot_setter(Expectations, "deletion_keys")
_set_set_at: Final = slot_setter(Expectations, "set_at")


def _made(adds: int, dels: int, deletion_keys: Set[str], set_at: datetime | None) -> Expectations:
    """Expectations(adds, dels, deletion_keys, set_at) without the frozen dataclass's __init__ (an
    object.__setattr__ call per field): a ReplicaSet's round of 500 creates or deletes makes 500 of them."""
    made: Expectations = _new(Expectations)
    _set_adds(made, adds)
    _set_dels(made, dels)
    _set_deletion_keys(made, deletion_keys)
    _set_set_at(made, set_at)
    return made


def expect(adds: int, dels: int, now: datetime, deletion_keys: Set[str] = frozenset()) -> Expectations:
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
