"""The DaemonSet controller behind the dispatcher (reconciler.core.controller.Controller).

What it remembers on its own: the failed-pod backoff (persisted with the decisions that change it, and
garbage-collected as upstream's every BACKOFF_GC_INTERVAL), per DaemonSet the revision writes the
executor reported done that the cache has not shown yet, and per DaemonSet the claim and status counts
its last sync left (a memo the next sync brings up to date: reconciler.core.daemonset.tally).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Final

from kube.apps import ControllerRevision
from kube.codec import decode
from kube.features import FeatureGates
from messages.actions import (
    FAILED,
    NOT_ADOPTED,
    SUCCEEDED,
    Action,
    ActionKind,
    ActionResult,
    CreateControllerRevision,
    DeleteControllerRevision,
    PatchControllerRevision,
)
from messages.keys import ControllerKey, ControllerKind
from reconciler.core.cache import Change
from reconciler.core.controller import (
    Handler,
    Requeue,
    Synced,
    Syncing,
    claim_failed,
    rv_number,
    summarize_warnings,
    summarized,
)
from reconciler.core.daemonset import handlers
from reconciler.core.daemonset.actions import plan_actions
from reconciler.core.daemonset.backoff import BACKOFF_GC_INTERVAL, FailedPodBackoff, gc
from reconciler.core.daemonset.history import revision_data_of
from reconciler.core.daemonset.sync import sync_daemonset
from reconciler.core.daemonset.tally import StatusTally
from reconciler.core.expectations import Expectations
from reconciler.core.view import CacheView, Wakeups

REVISION_WRITE_WAIT: Final = timedelta(seconds=5)  # how long a DaemonSet waits to see its revision writes in the cache

_REVISION_WRITES: Final = frozenset({ActionKind.CREATE_CONTROLLER_REVISION, ActionKind.PATCH_CONTROLLER_REVISION,
                                     ActionKind.DELETE_CONTROLLER_REVISION})


class DaemonSetController:
    kind: Final = ControllerKind.DAEMON_SET
    pods: Final = handlers.HANDLERS

    def __init__(self, gates: FeatureGates, backoff: Mapping[str, FailedPodBackoff] | None = None) -> None:
        self.gates = gates
        self.backoff: dict[str, FailedPodBackoff] = dict(backoff or {})  # by the entries' own keys
        self.backoff_changed: set[str] = set()  # entries to save with the next commit
        self.backoff_collected: datetime | None = None  # when the backoff's GC last ran
        # DaemonSet -> {revision name: (the resourceVersion its write left, "" when deleted; when)}: revision
        # writes the executor reported done that the cache has not shown yet (see `holds`)
        self.revision_writes: dict[ControllerKey, dict[str, tuple[str, datetime]]] = {}
        # shadow mode: DaemonSet -> {revision name: its data} of the revision creates a shadow would have made;
        # any revision of the same data ends the wait (see `would_write`)
        self.would_create: dict[ControllerKey, dict[str, bytes]] = {}
        # DaemonSet -> its claim and status counts as its last sync left them (a memo: see StatusTally)
        self.tallies: dict[ControllerKey, StatusTally] = {}

    # --- events ---------------------------------------------------------------------------------------------
    def watches(self) -> Mapping[str, Handler]:
        return {"DaemonSet": self._on_daemonset, "Node": self._on_node,
                "ControllerRevision": self._on_revision}

    @staticmethod
    def _on_daemonset(change: Change, view: CacheView, wakeups: Wakeups) -> None:
        handlers.on_daemonset(change, wakeups, view)

    def _on_node(self, change: Change, view: CacheView, wakeups: Wakeups) -> None:
        handlers.on_node(change, view, wakeups, comparison_operators=self.gates.taint_toleration_comparison_operators)

    def _on_revision(self, change: Change, view: CacheView, wakeups: Wakeups) -> None:
        handlers.on_controller_revision(change, view, wakeups)
        # a revision write a DaemonSet waits to see (upstream's addHistory does not enqueue an owned one)
        wakeups.enqueue.extend(key for key, writes in self.revision_writes.items()
                               if change.name in writes and key.namespace == change.namespace)
        # in shadow mode, the acting controller's revision of the data the shadow would have written
        if self.would_create and isinstance(change.new, ControllerRevision) and change.old is None:
            data = revision_data_of(change.new)
            wakeups.enqueue.extend(key for key, creates in self.would_create.items()
                                   if key.namespace == change.namespace and data in creates.values())

    def keys(self, view: CacheView) -> list[ControllerKey]:
        return [handlers.daemonset_key(ds) for ds in handlers.all_daemonsets(view)]

    def deletion_observed(self, expectations: Expectations, pod_key: str) -> Expectations:
        """The DaemonSet's expectations count deletions (ControllerExpectations, no UID tracking)."""
        return expectations.deletion_counted(pod_key)

    # --- syncs ----------------------------------------------------------------------------------------------
    def holds(self, key: ControllerKey, view: CacheView, now: datetime) -> datetime | None:
        """Whether the DaemonSet waits for the cache to show revision writes the executor reported done: a
        sync before then would see the old revisions and write them again (a second POST answered
        AlreadyExists, a patch or delete re-sent). The revision's own watch event wakes the DaemonSet; a
        write not seen within REVISION_WRITE_WAIT is no longer waited for. Upstream's dsc.snapshot uses the
        created object in the same sync; a later sync on a lagging informer posts again and meets
        AlreadyExists, which kubus avoids."""
        writes = self.revision_writes.get(key)
        if not writes:
            return None
        creates = self.would_create.get(key, {})
        for name, (left, at) in list(writes.items()):
            revision = view.named(handlers.REVISION_KIND, key.namespace, name)
            seen = revision is None if not left else (
                revision is not None and rv_number(revision.metadata.resource_version) >= rv_number(left))
            if name in creates and not seen:
                seen = any(isinstance(other, ControllerRevision) and revision_data_of(other) == creates[name]
                           for other in view.in_namespace(handlers.REVISION_KIND, key.namespace))
            if seen or now - at >= REVISION_WRITE_WAIT:
                del writes[name]
                creates.pop(name, None)
        if writes:
            return now + REVISION_WRITE_WAIT
        del self.revision_writes[key]
        self.would_create.pop(key, None)
        return None

    def sync(self, syncing: Syncing) -> Synced:
        tally = self.tallies.get(syncing.key)
        if tally is None:
            tally = self.tallies[syncing.key] = StatusTally()
        plan = sync_daemonset(syncing.key, syncing.view, syncing.expectations, self.backoff, syncing.now,
                              syncing.correlation, self.gates, tally)
        summary = dict(plan.explain)
        if plan.ds is None:
            return Synced(summary, gone=True)
        for entry in plan.backoff_updates:
            self.backoff[entry.key] = entry
            self.backoff_changed.add(entry.key)
        round_ = len(plan.creates) + len(plan.deletes)
        write_status = plan.status is not None and not syncing.status_in_flight
        actions, known = plan_actions(plan, syncing.correlation, syncing.issued_at, write_status)
        summary.update({
            "hash": plan.hash, "waiting_for_history": plan.waiting_for_history,
            "creates": [node for node, _, _ in plan.creates], "deletes": [p.metadata.name for p in plan.deletes],
            "revisions_created": [r.metadata.name for r in plan.revision_creates],
            "revisions_deleted": [r.metadata.name for r in plan.revision_deletes],
        })
        summarized(summary, plan.status, write_status)
        summarize_warnings(summary, plan.warnings)
        return Synced(
            summary, expectations=plan.expectations, round=round_, clear_error=bool(round_),
            # processNextWorkItem: an error is retried with the rate limiter, a clean sync forgets the key's
            # failures. A create or delete error arrives with the round's results, so a sync that follows
            # one, or that waits on a round, is not clean.
            retry=plan.failed is not None,
            forget=not round_ and syncing.round_error is None and not syncing.round_in_flight,
            requeue_after=plan.requeue_after, actions=actions, known=known,
            status_written=plan.status if write_status else None, warnings=plan.warnings,
            error=plan.failed)

    # --- results --------------------------------------------------------------------------------------------
    def result(self, key: ControllerKey, action: ActionKind, result: ActionResult, now: datetime) -> Requeue | None:
        """A revision write or a collisionCount bump. One that failed (AlreadyExists: another revision holds the
        name) is looked at again by the next sync, which sees the cache's revisions."""
        if action not in _REVISION_WRITES and action is not ActionKind.BUMP_COLLISION_COUNT:
            return None
        if result.outcome == FAILED:
            return Requeue.RATE_LIMITED
        if result.reason == NOT_ADOPTED:
            return claim_failed(result)
        if result.outcome == SUCCEEDED and action in _REVISION_WRITES:
            name = result.subject.rpartition("/")[2]
            left = "" if action is ActionKind.DELETE_CONTROLLER_REVISION else result.resource_version
            self.revision_writes.setdefault(key, {})[name] = (left, now)
        return Requeue.NOW

    def would_write(self, key: ControllerKey, actions: list[Action], view: CacheView, now: datetime) -> None:
        """Shadow mode: the revision writes a sync would have made are waited for as if the executor had
        reported them done, so that the next event's sync does not decide them again before the acting
        controller's own writes show (docs/shadow.md). Given up after REVISION_WRITE_WAIT, as any other.

        A revision create is seen once any revision of the same data shows, whatever its name: the acting
        controller's revision is the one the shadow would have written when their data match (upstream's Match),
        and kube-controller-manager names a DaemonSet's revision with a hash kubus does not reproduce
        (reconciler/core/daemonset/history.py). Waiting for kubus's own name would hold the DaemonSet, deaf to
        its events, for all of REVISION_WRITE_WAIT."""
        for action in actions:
            if isinstance(action, CreateControllerRevision):
                created = decode(action.revision, ControllerRevision)
                name = created.metadata.name
                left = "0"  # any version of it
                if name:
                    self.would_create.setdefault(key, {})[name] = revision_data_of(created)
            elif isinstance(action, PatchControllerRevision | DeleteControllerRevision):
                name = action.name
                cached = view.named(handlers.REVISION_KIND, key.namespace, name)
                left = "" if isinstance(action, DeleteControllerRevision) or cached is None else str(
                    rv_number(cached.metadata.resource_version) + 1)
            else:
                continue
            if name:
                self.revision_writes.setdefault(key, {})[name] = (left, now)

    def forget(self, key: ControllerKey) -> None:
        self.revision_writes.pop(key, None)
        self.tallies.pop(key, None)
        self.would_create.pop(key, None)

    # --- the failed-pod backoff -----------------------------------------------------------------------------
    def collect_backoff(self, now: datetime) -> bool:
        """The failed-pods backoff's GC (every BACKOFF_GC_INTERVAL upstream): entries idle for more
        than twice the maximum delay go. Returns whether the store should drop them too."""
        if self.backoff_collected is not None and now - self.backoff_collected < BACKOFF_GC_INTERVAL:
            return False
        self.backoff_collected = now
        kept = gc(self.backoff, now)
        dropped = len(kept) != len(self.backoff)
        self.backoff = kept
        return dropped

    def take_backoff_changes(self) -> list[FailedPodBackoff]:
        """The backoff entries changed since the last call, in key order, to save."""
        changed = [self.backoff[k] for k in sorted(self.backoff_changed)]
        self.backoff_changed.clear()
        return changed
