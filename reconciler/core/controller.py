"""One controller, as the dispatcher (reconciler.core.controllers.Controllers) sees it.

Each controller is one module: reconciler.core.daemonset.controller and reconciler.core.replicaset.controller.
It registers the handlers of the object kinds it watches, lists its keys for a resync, syncs one key and reads
the results of the actions only it issues; it keeps what only it remembers (the DaemonSet's failed-pod
backoff and revision writes in flight, the ReplicaSet's last reported error) and forgets a key whose object
is gone. The dispatcher keeps everything both share: the work queue and its rate limiter, the expectations,
the periodic resync, each key's last round of creates and deletes, and the status write in flight.

A sync is given what the dispatcher holds for the key (:class:`Syncing`) and hands back what the dispatcher
books for it (:class:`Synced`): the controllers never write the dispatcher's state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Protocol

import msgspec

from messages.actions import Action, ActionKind, ActionResult
from messages.keys import ControllerKey, ControllerKind
from reconciler.core.audit_targets import Known
from reconciler.core.cache import Change
from reconciler.core.expectations import Expectations
from reconciler.core.handling import OwnerHandlers
from reconciler.core.view import BadInput, CacheView, Wakeups

# one event handler: the change, the cache with it applied, the wake-ups it adds to
Handler = Callable[[Change, CacheView, Wakeups], None]


@dataclass(frozen=True, slots=True)
class ManageError:
    """An error of manageReplicas (or the DaemonSet's manage): its message, and whether it came from creating
    pods (the ReplicaSet's condition reason FailedCreate) or from deleting them (FailedDelete)."""

    message: str
    creating: bool

    def stands_for(self, diff: int) -> bool:
        """Whether a sync with this diff would make calls of the kind that failed (creates below the
        replica count, deletes above it): only then can the error stand for what that sync's calls return."""
        return diff < 0 if self.creating else diff > 0


class Requeue(Enum):
    """What a result asks for its controller's key."""

    NOW = "now"  # sync again (the queue's add)
    RATE_LIMITED = "rate-limited"  # sync again after the key's backoff (the queue's add_rate_limited)


def claim_failed(result: ActionResult) -> Requeue:
    """An action that waited on an adoption that failed was not applied: upstream's claim returned the
    error and the sync is retried with the rate limiter; an object found gone is no error (AdoptPod's
    NotFound is ignored), and its deletion wakes the controller anyway."""
    return Requeue.NOW if result.code == 404 else Requeue.RATE_LIMITED


@dataclass(frozen=True, slots=True)
class Syncing:
    """What the dispatcher gives one sync of `key`."""

    key: ControllerKey
    view: CacheView  # the cache, with the statuses written and not yet watched
    expectations: Expectations | None
    now: datetime
    correlation: str  # the decision's correlation id: every action key starts with it
    issued_at: str  # `now` as the actions carry it
    round_error: ManageError | None  # the first error of the key's last completed round of creates and deletes
    round_in_flight: bool  # results of the key's current round are still to come
    status_in_flight: bool  # a status write of an earlier sync is still to be answered: write none


@dataclass(slots=True)
class Synced:
    """What one sync hands the dispatcher to book. `summary` is the decision's summary (the plan's
    explanation, then the controller's own fields), recorded and compared by replays: its keys' order is
    part of it."""

    summary: dict[str, Any]
    gone: bool = False  # the object is gone: the key is forgotten (expectations included)
    expectations: Expectations | None = None  # new expectations, when they change
    round: int = 0  # creates and deletes issued: a new round, whose results will say how it went
    clear_error: bool = False  # the last round's error stands for nothing any more
    retry: bool = False  # the sync failed: retried with the rate limiter (processNextWorkItem)
    forget: bool = False  # a clean sync: the key's failures are forgotten (processNextWorkItem)
    requeue_after: timedelta | None = None
    # the error upstream's sync handler returns (what controller_runtime_reconcile_total{result="error"} counts);
    # None: the sync succeeded. Bad input a controller only reports (an invalid selector) is not one
    error: str | None = None
    actions: list[Action] = field(default_factory=list)
    known: Known = field(default_factory=Known)  # of the objects the actions carry encoded
    status_written: Any = None  # the status the actions write (None: none)
    warnings: list[BadInput] = field(default_factory=list)  # bad input, logged by the dispatcher


class Controller(Protocol):
    """One controller behind the dispatcher (see the module's docstring)."""

    @property
    def kind(self) -> ControllerKind:
        """The kind of object it controls: its keys' kind."""
        ...

    def watches(self) -> Mapping[str, Handler]:
        """The handlers of the object kinds it watches, by kind; its pods' events aside (:attr:`pods`)."""
        ...

    @property
    def pods(self) -> OwnerHandlers[Any]:
        """The handlers of its pods' events: the dispatcher runs every controller's through one
        :func:`reconciler.core.handling.pod_handler`, which reads a pod's controller reference once."""
        ...

    def keys(self, view: CacheView) -> list[ControllerKey]:
        """Every object it controls, in (namespace, name) order: what a resync enqueues."""
        ...

    def deletion_observed(self, expectations: Expectations, pod_key: str) -> Expectations:
        """Its expectations, having observed the deletion of the pod `pod_key` ("namespace/name")."""
        ...

    def holds(self, key: ControllerKey, view: CacheView, now: datetime) -> datetime | None:
        """Until when the key's sync must wait (None: it need not)."""
        ...

    def sync(self, syncing: Syncing) -> Synced:
        ...

    def result(self, key: ControllerKey, action: ActionKind, result: ActionResult, now: datetime) -> Requeue | None:
        """A result of an action only this controller issues (the dispatcher reads the pods' and the status's)."""
        ...

    def forget(self, key: ControllerKey) -> None:
        """The key's object is gone: what this controller remembers of it goes too."""
        ...


def summarized(summary: dict[str, Any], status: Any, written: bool) -> None:
    """The status a sync computed (None: unchanged) and whether its actions write it, into its summary."""
    summary["status"] = None if status is None else msgspec.to_builtins(status)
    summary["status_written"] = written


def summarize_warnings(summary: dict[str, Any], warnings: list[BadInput]) -> None:
    """A sync's bad input, into its summary: every warning, and the first as the decision's error."""
    summary["warnings"] = [{"reason": b.reason, "message": b.message, "field": b.field} for b in warnings]
    if warnings:
        summary["error"] = warnings[0].message
        summary["field"] = warnings[0].field


def rv_number(value: str) -> int:
    """A resourceVersion as a number, to tell which of two versions of an object is newer (0 for one that is not
    a number: older than any)."""
    try:
        return int(value)
    except ValueError:
        return 0
