"""What the controllers wait to observe, so that a batch's window can end at the event that lets one act again.

A batch waits up to BATCH_WINDOW for more events once one arrived (one sync and one commit per burst). In a round
of creates that window sits on the critical path: the event that meets a DaemonSet's or ReplicaSet's expectations
(the last of its pods' ADDED, or the last awaited deletion) lands somewhere inside it, and the controller's next
round waits for the rest of the window. Here the loop keeps the expectations its commits left unmet, and a
batch's window counts the pod events it takes down against them; the window ends at the event that brings a
controller's count to nothing.

This only decides where a batch ends, never what a batch decides: the controllers still fold every event and
meet their expectations in the pure core, and the batch's bounds are recorded in its tick, which a replay follows.
So the count here may be rough in the safe direction: it may end a window early (a pod of another object by the
same kind and name, a deletion counted that the controller ignores), which costs one more, smaller batch, but it
never holds one longer than BATCH_WINDOW.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

import msgspec
from nats.aio.msg import Msg

from messages.codec import is_compressed
from messages.keys import ControllerKey
from messages.observed import ADDED, DELETED, DELETED_FINAL_STATE_UNKNOWN
from reconciler.core.expectations import Expectations

_DELETIONS = frozenset({DELETED, DELETED_FINAL_STATE_UNKNOWN})


class _Reference(msgspec.Struct, frozen=True):
    kind: str = ""
    name: str = ""
    controller: bool | None = None


class _Metadata(msgspec.Struct, frozen=True, rename="camel"):
    namespace: str = ""
    owner_references: tuple[_Reference, ...] = ()
    deletion_timestamp: str | None = None


class _Pod(msgspec.Struct, frozen=True):
    metadata: _Metadata = _Metadata()


class _Event(msgspec.Struct, frozen=True):
    """As much of an observed pod event as says whom it concerns: everything else is skipped unread."""

    type: str = ""
    object: _Pod = _Pod()


_decode_event = msgspec.json.Decoder(_Event).decode


class Unmet:
    """The expectations the loop's commits left unmet, by controller key (``Kind/namespace/name``): only those,
    so that starting a batch's count costs what is in flight, not every controller's expectations."""

    def __init__(self) -> None:
        self._unmet: dict[str, Expectations] = {}

    def __len__(self) -> int:
        return len(self._unmet)

    def seed(self, expectations: Mapping[ControllerKey, Expectations]) -> None:
        """Those loaded at the start (keys as the controllers hold them: their str() is the saved key)."""
        self._unmet = {str(key): value for key, value in expectations.items() if not value.fulfilled()}

    def saved(self, changed: Mapping[str, Expectations], deleted: list[str]) -> None:
        """A commit's expectations: those it saves (changed) and those it deletes."""
        for key, value in changed.items():
            if value.fulfilled():
                self._unmet.pop(key, None)
            else:
                self._unmet[key] = value
        for key in deleted:
            self._unmet.pop(key, None)

    def countdown(self, now: datetime, known_pod: Callable[[str], bool]) -> Countdown | None:
        """A batch's count of what is awaited (None when nothing is: the window runs as it always did).
        Expectations expired by `now` are satisfied already, and leave. `known_pod(uid)`: whether the cache
        holds that pod already (its event is no creation)."""
        for key in [key for key, value in self._unmet.items() if value.expired(now)]:
            del self._unmet[key]
        if not self._unmet:
            return None
        return Countdown({key: [max(value.adds, 0), max(value.dels, 0)] for key, value in self._unmet.items()},
                         known_pod)


class Countdown:
    """One batch's window: counts the awaited creations and deletions down as their pods' events arrive."""

    def __init__(self, remaining: dict[str, list[int]], known_pod: Callable[[str], bool]):
        self._remaining = remaining  # key -> [creations, deletions] still awaited
        self._deleting: set[str] = set()  # the pods whose deletion this window counted (by subject)
        # with only creations awaited, the event of a pod the cache holds (most are: a pod's later updates) can
        # count for nothing, and is not decoded
        self._known_pod = None if any(dels for _, dels in remaining.values()) else known_pod

    def met_by(self, msg: Msg) -> bool:
        """Whether `msg` leaves a controller with nothing more to wait for."""
        subject = msg.subject
        _, kind, uid = subject.rsplit(".", 2)
        if kind != "Pod" or (self._known_pod is not None and self._known_pod(uid)):
            return False
        if is_compressed(msg.data):
            return False
        try:
            event = _decode_event(msg.data)
        except msgspec.DecodeError:  # the loop dead-letters it; here it just counts for nobody
            return False
        metadata = event.object.metadata
        reference = next((ref for ref in metadata.owner_references if ref.controller), None)
        if reference is None:
            return False
        counts = self._remaining.get(f"{reference.kind}/{metadata.namespace}/{reference.name}")
        if counts is None:
            return False
        if event.type in _DELETIONS or metadata.deletion_timestamp is not None:
            if subject in self._deleting:
                return False  # its deletionTimestamp counted already: the DELETED that follows is the same pod
            self._deleting.add(subject)
            counts[1] -= 1
        elif event.type == ADDED:
            counts[0] -= 1
        else:
            return False
        return counts[0] <= 0 and counts[1] <= 0
