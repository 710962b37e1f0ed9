"""The controllers inside the reconciler: event handlers -> work queue -> syncs -> decisions.

`Controllers` is synchronous and does no I/O: the reconciler's shell feeds it the cache changes
of each batch and the executors' results, asks it for the syncs that are due, and commits what
it returns (decisions with their actions, expectations) in one transaction. It keeps what
upstream keeps in memory (the work queue with its backoff, the last API error per controller,
the status write in flight); expectations are also persisted, so a restart never acts twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

import msgspec

from kube.apps import DaemonSet, ReplicaSet
from kube.features import FeatureGates
from messages.actions import (
    FAILED,
    NOT_ADOPTED,
    SKIPPED,
    SUCCEEDED,
    Action,
    ActionResult,
)
from reconciler.core.audit_targets import Known
from reconciler.core.cache import Cache, Change
from reconciler.core.daemonset import handlers as ds_handlers
from reconciler.core.daemonset.actions import plan_actions as ds_plan_actions
from reconciler.core.daemonset.backoff import BACKOFF_GC_INTERVAL, FailedPodBackoff
from reconciler.core.daemonset.backoff import gc as backoff_gc
from reconciler.core.daemonset.sync import sync_daemonset
from reconciler.core.expectations import Expectations
from reconciler.core.replicaset import handlers as rs_handlers
from reconciler.core.replicaset.actions import plan_actions
from reconciler.core.replicaset.sync import ManageError, sync_replicaset
from reconciler.core.view import Wakeups
from reconciler.core.workqueue import WorkQueue

log = logging.getLogger("kubus.reconciler")

NAMESPACE_TERMINATING = "NamespaceTerminating"
# ReleasePod: the pod is gone (404), or no longer has our reference (422): nothing to do
IGNORED_RELEASE_CODES = (404, 422)
STATUS_ONLY_INTERVAL = timedelta(milliseconds=250)
REVISION_WRITE_WAIT = timedelta(seconds=5)  # how long a DaemonSet waits to see its revision writes in the cache
DEFAULT_MIN_RESYNC_PERIOD: Final = timedelta(hours=12)  # kube-controller-manager's --min-resync-period
RESYNC_TRIGGER: Final = "resync"  # a decision's trigger when the informers' periodic resync enqueued it


def resync_period(min_period: timedelta, seed: str) -> timedelta | None:
    """ResyncPeriod (cmd/kube-controller-manager/app/controllermanager.go): ``min_period`` times a factor in
    [1, 2), so that the controllers of several processes do not resync in lock-step; None when ``min_period``
    is 0 (no resync, as an informer with resync period 0).

    Upstream draws the factor with rand.Float64 once per process (its informer factory's default resync).
    kubus derives it from ``seed`` (the reconciler's instance name, which is unique per process), so it is
    as spread out across processes but the same for a given instance, and replays need no random state:
    the period chosen is recorded with every reconciler start (:meth:`Settings.start_state`)."""
    if min_period <= timedelta(0):
        return None
    fraction = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big") / 2**64  # [0, 1), as Float64
    return timedelta(microseconds=int(min_period / timedelta(microseconds=1) * (1 + fraction)))


@dataclass(frozen=True, slots=True)
class Settings:
    """What the controllers are configured with, as kube-controller-manager's flags configure its own: the
    feature gates (``--feature-gates``) and the informers' resync period (from ``--min-resync-period``).
    Decisions depend on both, so every reconciler start records them (:meth:`start_state`) and
    ``kubus replay`` takes them from there (:meth:`from_start_state`)."""

    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    resync_period: timedelta | None = None  # None: no periodic resync

    def start_state(self) -> dict[str, Any]:
        """The entries a start tick's state records."""
        period = None if self.resync_period is None else self.resync_period // timedelta(microseconds=1)
        return {"feature_gates": self.feature_gates.as_dict(), "resync_period_us": period}

    @classmethod
    def from_start_state(cls, state: Mapping[str, Any] | None) -> Settings:
        """What a start tick recorded; a history recorded before these were recorded had the defaults of its
        time: no gate on and no periodic resync."""
        state = state or {}
        period = state.get("resync_period_us")
        return cls(FeatureGates.from_mapping(state.get("feature_gates") or {}),
                   None if period is None else timedelta(microseconds=int(period)))


@dataclass
class Decided:
    controller_key: str
    controller_kind: str
    namespace: str
    correlation_id: str
    stream_seq: int
    trigger: str | None
    summary: dict[str, Any]
    duration_ms: float
    actions: list[Action] = field(default_factory=list)
    known: Known = field(default_factory=Known)  # of the objects the actions carry encoded (owner_actions.Planned)


@dataclass
class Outcome:
    decisions: list[Decided] = field(default_factory=list)
    expectations: dict[str, Expectations] = field(default_factory=dict)  # changed ones, to save
    expectations_deleted: set[str] = field(default_factory=set)
    backoff: list[FailedPodBackoff] = field(default_factory=list)  # changed DaemonSet backoff entries, to save


class _StatusOverlay:
    """The cache, with a ReplicaSet's or DaemonSet's status replaced by the one last written when
    the watch has not shown that write yet (so a sync does not write the same status twice)."""

    def __init__(self, cache: Cache, written: dict[str, tuple[int, Any]]):
        self._cache = cache
        self._written = written

    def named(self, kind: str, namespace: str, name: str) -> Any:
        obj = self._cache.named(kind, namespace, name)
        if isinstance(obj, ReplicaSet | DaemonSet):
            written = self._written.get(f"{kind}/{namespace}/{name}")
            if written is not None and _rv(obj.metadata.resource_version) < written[0]:
                return msgspec.structs.replace(obj, status=written[1])
        return obj

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)


def _stopped() -> float:
    return 0.0


def _rv(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0


class Controllers:
    def __init__(self, cache: Cache, expectations: dict[str, Expectations] | None = None,
                 status_only_interval: timedelta = timedelta(0), settings: Settings | None = None) -> None:
        self.cache = cache
        self.status_only_interval = status_only_interval
        # how long a sync took, for metrics and the audit trail only (no decision depends on it): the shell
        # gives a stopwatch (time.perf_counter); a replay's or a test's syncs take 0 ms
        self.stopwatch: Callable[[], float] = _stopped
        self.settings = settings or Settings()
        # the informers' next periodic resync: set by the first sync after catching up (see `_resync`)
        self.next_resync: datetime | None = None
        self.expectations: dict[str, Expectations] = dict(expectations or {})
        # the keys of the expectations that wait for pods by key (see _gone), for the dict they were taken of
        self._awaiting: set[str] = set()
        self._awaiting_of: dict[str, Expectations] | None = None
        self.queue = WorkQueue()
        # A round is the creates or deletes of one sync. Its first API error is upstream's
        # manageReplicasErr, known once the round's results are in; while a newer round is in flight,
        # syncs report what the last one they could judge reported (upstream never syncs in between).
        # What a sync reports is decided afresh in every sync (reconciler.core.replicaset.sync.reported_error).
        self.errors: dict[str, ManageError] = {}  # key -> first error of its last completed round
        self.manage_pending: dict[str, int] = {}  # key -> results of its current round still to come
        self.reported: dict[str, ManageError | None] = {}  # key -> the error the last judging sync reported
        self.last_synced: dict[str, datetime] = {}
        self.status_in_flight: dict[str, tuple[str, Any]] = {}  # key -> (action key, status)
        self.held: dict[str, datetime] = {}  # keys held back while they wait on a round, and until when
        # DaemonSet key -> {revision name: (the resourceVersion its write left, "" when deleted; when)}: revision
        # writes the executor reported done that the cache has not shown yet (see _revisions_in_flight)
        self.revision_writes: dict[str, dict[str, tuple[str, datetime]]] = {}
        self.written: dict[str, tuple[int, Any]] = {}  # key -> (resourceVersion, status)
        self.backoff: dict[str, FailedPodBackoff] = {}  # DaemonSets' failed-pod backoff, by its key
        self.triggers: dict[str, str] = {}  # key -> the event that last enqueued it
        self.last_seq = 0
        self._changed: set[str] = set()
        self.backoff_changed: set[str] = set()
        self.backoff_collected: datetime | None = None
        self._deleted: set[str] = set()
        # a split deployment's reconciler syncs only the keys of its partitions (None: every key)
        self.owns: Callable[[str], bool] | None = None

    # --- handlers -----------------------------------------------------------------------------------
    def observe(self, changes: list[tuple[Change, int, str]], now: datetime) -> None:
        cache = self.cache
        gates = self.settings.feature_gates.taint_toleration_comparison_operators
        for change, seq, msg_id in changes:
            if seq > self.last_seq:
                self.last_seq = seq
            wakeups = Wakeups()
            kind = change.kind
            if kind == "Pod":  # most events are pods'
                rs_handlers.on_pod(change, cache, wakeups)
                ds_handlers.on_pod(change, cache, wakeups)
            elif kind == "ReplicaSet":
                rs_handlers.on_replicaset(change, wakeups, cache)
            elif kind == "DaemonSet":
                ds_handlers.on_daemonset(change, wakeups, cache)
            elif kind == "Node":
                ds_handlers.on_node(change, cache, wakeups, comparison_operators=gates)
            elif kind == "ControllerRevision":
                ds_handlers.on_controller_revision(change, cache, wakeups)
                # a revision write a DaemonSet waits to see (upstream's addHistory does not enqueue an owned one)
                wakeups.enqueue.extend(k for k, writes in self.revision_writes.items()
                                       if change.name in writes and ds_handlers.split_key(k)[0] == change.namespace)
            self._wake(wakeups, msg_id, now)
            if kind == "Pod" and change.new is None:
                self._gone(f"{change.namespace}/{change.name}")

    def _gone(self, pod: str) -> None:
        """A pod that is gone satisfies every controller that deleted it and still waits for it, whatever
        ownerReferences its last state carried (the handlers above only follow its controller reference:
        a pod another controller took, or that lost ours, before it went would otherwise hold the deleting
        controller's expectations until they expire)."""
        if self._awaiting_of is not self.expectations:  # replaced wholesale (a start loads them)
            self._awaiting = {k for k, v in self.expectations.items() if v.deletion_keys}
            self._awaiting_of = self.expectations
        for key in [k for k in self._awaiting if pod in self.expectations[k].deletion_keys]:
            self._set(key, self.expectations[key].deletion_observed(pod))

    def _wake(self, wakeups: Wakeups, trigger: str, now: datetime) -> None:
        for key in wakeups.creations_observed:
            if (current := self.expectations.get(key)) is not None:
                self._set(key, current.creation_observed())
        for key, pod_key in wakeups.deletions_observed:
            if (current := self.expectations.get(key)) is not None:
                # the ReplicaSet's expectations track deletions by pod key, the DaemonSet's count them
                self._set(key, current.deletion_counted(pod_key) if key.startswith(ds_handlers.PREFIX)
                          else current.deletion_observed(pod_key))
        for key in wakeups.expectations_deleted:
            self._drop(key)
        for key in wakeups.enqueue:
            self.queue.add(key)
            self.triggers[key] = trigger
        for key, delay in wakeups.enqueue_after:
            self.queue.add_after(key, delay, now)
            self.triggers[key] = trigger

    def _resync(self, now: datetime) -> None:
        """The informers' periodic resync, on the loop's clock: every `resync_period` each informer delivers
        an update (old == new) for every object it holds. updateRS and updateDaemonset enqueue on every
        update, so every ReplicaSet and DaemonSet is synced; updatePod, updateHistory (same resourceVersion)
        and updateNode (labels and taints unchanged) ignore theirs, so nothing else is.

        Upstream's informers resync one period after they start; kubus counts from the first sync after
        catching up with the history (the `now` of a recorded batch, so a replay resyncs at the same times)."""
        period = self.settings.resync_period
        if period is None:
            return
        if self.next_resync is None:
            self.next_resync = now + period
            return
        if now < self.next_resync:
            return
        self.next_resync = now + period
        for key in self._workload_keys():
            self.queue.add(key)
            self.triggers[key] = RESYNC_TRIGGER

    def _workload_keys(self) -> list[str]:
        """Every ReplicaSet's and DaemonSet's key, in (namespace, name) order per kind."""
        keys = [rs_handlers.controller_key(rs.metadata.namespace, rs.metadata.name)
                for rs in sorted(self.cache.all("ReplicaSet"), key=lambda r: (r.metadata.namespace, r.metadata.name))]
        keys += [ds_handlers.controller_key(ds.metadata.namespace, ds.metadata.name)
                 for ds in sorted(self.cache.all("DaemonSet"), key=lambda d: (d.metadata.namespace, d.metadata.name))]
        return keys

    def resync_all(self) -> None:
        """What an informer's initial list does: every controller is synced once."""
        for key in self._workload_keys():
            self.queue.add(key)

    def _set(self, key: str, value: Expectations) -> None:
        self.expectations[key] = value
        if self._awaiting_of is self.expectations:
            if value.deletion_keys:
                self._awaiting.add(key)
            else:
                self._awaiting.discard(key)
        self._changed.add(key)
        self._deleted.discard(key)

    def _drop(self, key: str) -> None:
        self._awaiting.discard(key)
        if self.expectations.pop(key, None) is not None:
            self._deleted.add(key)
        self._changed.discard(key)

    def collect_backoff(self, now: datetime) -> bool:
        """The failed-pods backoff's GC (every BACKOFF_GC_INTERVAL upstream): entries idle for more
        than twice the maximum delay go. Returns whether the store should drop them too."""
        if self.backoff_collected is not None and now - self.backoff_collected < BACKOFF_GC_INTERVAL:
            return False
        self.backoff_collected = now
        kept = backoff_gc(self.backoff, now)
        dropped = len(kept) != len(self.backoff)
        self.backoff = kept
        return dropped

    def take_changes(self, outcome: Outcome) -> Outcome:
        outcome.expectations = {k: self.expectations[k] for k in sorted(self._changed)}
        outcome.expectations_deleted = set(self._deleted)
        outcome.backoff = [self.backoff[k] for k in sorted(self.backoff_changed)]
        self.backoff_changed.clear()
        self._changed.clear()
        self._deleted.clear()
        return outcome

    # --- syncs --------------------------------------------------------------------------------------
    def sync_ready(self, now: datetime, now_iso: str) -> Outcome:
        outcome = Outcome()
        self._resync(now)
        self._release_held(now)
        for key in self.queue.pop_ready(now):
            if self.owns is not None and not self.owns(key):
                continue
            replicaset = key.startswith(rs_handlers.PREFIX)
            if not replicaset and not key.startswith(ds_handlers.PREFIX):
                # no controller's key: one an older kubus's controller left in a result still on the bus
                continue
            if self._waiting_for_a_round(key, now) or self._revisions_in_flight(key, now):
                continue
            self.last_synced[key] = now
            started = self.stopwatch()
            correlation = f"{key}@{self.last_seq}~{int(now.timestamp() * 1_000_000)}"
            if replicaset:
                decided = self._sync_replicaset(key, correlation, now, now_iso)
            else:
                decided = self._sync_daemonset(key, correlation, now, now_iso)
            decided.duration_ms = (self.stopwatch() - started) * 1000
            outcome.decisions.append(decided)
        return self.take_changes(outcome)

    def _revisions_in_flight(self, key: str, now: datetime) -> bool:
        """Whether the DaemonSet waits for the cache to show revision writes the executor reported done: a
        sync before then would see the old revisions and write them again (a second POST answered
        AlreadyExists, a patch or delete re-sent). The revision's own watch event wakes the DaemonSet; a
        write not seen within REVISION_WRITE_WAIT is no longer waited for. Upstream's dsc.snapshot uses the
        created object in the same sync; a later sync on a lagging informer posts again and meets
        AlreadyExists, which kubus avoids."""
        writes = self.revision_writes.get(key)
        if not writes:
            return False
        namespace, _ = ds_handlers.split_key(key)
        for name, (left, at) in list(writes.items()):
            revision = self.cache.named("ControllerRevision", namespace, name)
            seen = revision is None if not left else (
                revision is not None and _rv(revision.metadata.resource_version) >= _rv(left))
            if seen or now - at >= REVISION_WRITE_WAIT:
                del writes[name]
        if writes:
            due = now + REVISION_WRITE_WAIT  # held, not the queue's delayed slot (see _waiting_for_a_round)
            self.held[key] = min(due, self.held.get(key, due))
            return True
        del self.revision_writes[key]
        return False

    def _sync_daemonset(self, key: str, correlation: str, now: datetime, now_iso: str) -> Decided:
        plan = sync_daemonset(key, _StatusOverlay(self.cache, self.written), self.expectations.get(key),
                              self.backoff, now, correlation, self.settings.feature_gates)
        namespace, _ = ds_handlers.split_key(key)
        decided = Decided(key, ds_handlers.KIND, namespace, correlation, self.last_seq, self.triggers.pop(key, None),
                          dict(plan.explain), 0.0)
        if plan.ds is None:
            self._drop(key)
            for table in (self.errors, self.manage_pending, self.status_in_flight, self.written, self.last_synced,
                          self.held, self.revision_writes):
                table.pop(key, None)
            self.queue.forget(key)
            return decided
        if plan.expectations is not None:
            self._set(key, plan.expectations)
        for entry in plan.backoff_updates:
            self.backoff[entry.key] = entry
            self.backoff_changed.add(entry.key)
        if plan.creates or plan.deletes:
            self.manage_pending[key] = len(plan.creates) + len(plan.deletes)
        # processNextWorkItem: an error is retried with the rate limiter, a clean sync forgets the key's
        # failures. A create or delete error arrives with the round's results (see `results`), so a sync
        # that follows one, or that waits on a round, is not clean.
        error = self.errors.pop(key, None) if plan.creates or plan.deletes else self.errors.get(key)
        if plan.failed is not None:
            self.queue.add_rate_limited(key, now)
        elif error is None and key not in self.manage_pending:
            self.queue.forget(key)
        if plan.requeue_after is not None:
            self.queue.add_after(key, plan.requeue_after, now)
        write_status = plan.status is not None and key not in self.status_in_flight
        decided.actions, decided.known = ds_plan_actions(plan, correlation, now_iso, write_status)
        if write_status and plan.status is not None:
            self.status_in_flight[key] = (f"{correlation}/status", plan.status)
        for bad in plan.warnings:
            log.error("DaemonSet %s: %s (field %s)", key[len(ds_handlers.PREFIX):], bad.message, bad.field)
        decided.summary.update({
            "hash": plan.hash, "waiting_for_history": plan.waiting_for_history,
            "creates": [node for node, _, _ in plan.creates], "deletes": [p.metadata.name for p in plan.deletes],
            "revisions_created": [r.metadata.name for r in plan.revision_creates],
            "revisions_deleted": [r.metadata.name for r in plan.revision_deletes],
            "status": None if plan.status is None else msgspec.to_builtins(plan.status),
            "status_written": write_status,
            "warnings": [{"reason": b.reason, "message": b.message, "field": b.field} for b in plan.warnings],
        })
        if plan.warnings:
            decided.summary["error"] = plan.warnings[0].message
            decided.summary["field"] = plan.warnings[0].field
        return decided

    def _waiting_for_a_round(self, key: str, now: datetime) -> bool:
        """While a ReplicaSet waits for its creates or deletes to be observed, a sync can only
        refresh its status (and claim pods); such syncs run at most every `status_only_interval`
        (the reconciler uses STATUS_ONLY_INTERVAL).
        Upstream syncs on every event, in Go; a Python sync over 10,000 pods costs tens of
        milliseconds of the CPU the round itself needs. Syncs that may act are never held back."""
        expectations = self.expectations.get(key)
        last = self.last_synced.get(key)
        if not self.status_only_interval or expectations is None or expectations.satisfied(now) or last is None:
            return False
        due = last + self.status_only_interval
        if now >= due:
            return False
        # Not the queue's delayed slot: it keeps only the earliest re-add of a key (as client-go's), and a
        # later one asked for meanwhile (a pod's minReadySeconds + 1 s) would be lost with it.
        self.held[key] = min(due, self.held.get(key, due))
        return True

    def next_ready_at(self) -> datetime | None:
        """When the next sync is due: a delayed re-add in the queue, a held-back key or the periodic resync."""
        times = [t for t in (self.queue.next_ready_at(), min(self.held.values(), default=None), self.next_resync)
                 if t is not None]
        return min(times, default=None)

    def _release_held(self, now: datetime) -> None:
        for key in [k for k, due in self.held.items() if due <= now]:
            del self.held[key]
            self.queue.add(key)

    def _sync_replicaset(self, key: str, correlation: str, now: datetime, now_iso: str) -> Decided:
        in_flight = self.manage_pending.get(key, 0) > 0
        expectations = self.expectations.get(key)
        if in_flight:  # upstream made this round's calls in the sync that issued it: repeat what it reported
            carried = self.reported.get(key)
        elif expectations is None or expectations.satisfied(now):  # manageReplicas runs: the last round's error
            carried = self.errors.get(key)
        else:  # skipped while a created or deleted pod is still to be observed: nil, as upstream's
            carried = None
        plan = sync_replicaset(key, _StatusOverlay(self.cache, self.written), expectations, carried, now,
                               correlation)
        namespace, _ = rs_handlers.split_key(key)
        decided = Decided(key, rs_handlers.KIND, namespace, correlation, self.last_seq, self.triggers.pop(key, None),
                          dict(plan.explain), 0.0)
        if plan.rs is None:
            self._drop(key)
            for table in (self.errors, self.manage_pending, self.reported, self.status_in_flight, self.written,
                          self.last_synced, self.held):
                table.pop(key, None)
            self.queue.forget(key)
            return decided
        if plan.expectations is not None:
            self._set(key, plan.expectations)
        if not in_flight:
            self.reported[key] = plan.failure
        if plan.creates or plan.deletes:  # a new round: its own results will say how it went
            self.errors.pop(key, None)
            self.manage_pending[key] = len(plan.creates) + len(plan.deletes)
        elif plan.managed and plan.diff == 0:  # nothing to do: the last round's error stands for nothing any more
            self.errors.pop(key, None)
        if plan.failure is None and not in_flight:  # processNextWorkItem: a sync without error forgets the key
            self.queue.forget(key)
        if plan.requeue_after is not None:
            self.queue.add_after(key, plan.requeue_after, now)
        write_status = plan.status is not None and key not in self.status_in_flight
        decided.actions, decided.known = plan_actions(plan, correlation, now_iso, write_status)
        if write_status and plan.status is not None:
            self.status_in_flight[key] = (f"{correlation}/status", plan.status)
        for bad in plan.warnings:
            log.error("ReplicaSet %s: %s (field %s)", key[len(rs_handlers.PREFIX):], bad.message, bad.field)
        decided.summary.update({
            "creates": len(plan.creates), "deletes": [p.metadata.name for p in plan.deletes],
            "adopt": [p.metadata.name for p in plan.adopt], "release": [p.metadata.name for p in plan.release],
            "status": None if plan.status is None else msgspec.to_builtins(plan.status),
            "status_written": write_status, "manage_error": plan.manage_error,
            "warnings": [{"reason": b.reason, "message": b.message, "field": b.field} for b in plan.warnings],
        })
        if plan.warnings:
            decided.summary["error"] = plan.warnings[0].message
            decided.summary["field"] = plan.warnings[0].field
        return decided

    # --- results ------------------------------------------------------------------------------------
    def results(self, results: list[ActionResult], now: datetime) -> None:
        """What the executors report: expectations that will never be met, errors, requeues. The
        expectations changed are returned by the next `sync_ready` or `take_changes`."""
        for result in results:
            key = result.controller
            if result.action in ("create_pods", "delete_pod"):
                self._manage_result(key)
            if result.action == "create_pods" and result.outcome in (FAILED, SKIPPED):
                if result.reason == NAMESPACE_TERMINATING:
                    continue  # upstream counts it a success: the namespace is going away
                if (current := self.expectations.get(key)) is not None:
                    self._set(key, current.lowered(adds=1))
                if result.outcome == FAILED:
                    self._failed(key, ManageError(result.message, creating=True), now)
            elif result.action == "delete_pod" and (result.outcome == FAILED or result.code == 404
                                                    or result.reason == NOT_ADOPTED):
                # manageReplicas: any DeletePod error lowers the expectation (DeletionObserved); NotFound
                # (which the executor reports as a success) is no error for the status or the backoff;
                # nor is a pod left alone because its adoption failed (upstream's sync stops at the claim)
                if (current := self.expectations.get(key)) is not None:
                    self._set(key, current.deletion_observed(result.subject) if key.startswith(rs_handlers.PREFIX)
                              else current.deletion_counted(result.subject))
                if result.outcome == FAILED:
                    self._failed(key, ManageError(f"unable to delete pods: {result.message}", creating=False), now)
                elif result.reason == NOT_ADOPTED:
                    self._claim_failed(key, result, now)
            elif result.action == "patch_pod" and result.reason == NOT_ADOPTED:
                self._claim_failed(key, result, now)
            elif result.action == "patch_pod" and result.outcome == FAILED:
                # ClaimObject: an adoption that failed (someone else claimed it first: 422, or a transient
                # error) is retried with the rate limiter unless the pod is gone; a release ignores 404 and 422
                ignored = (404,) if "/adopt/" in result.action_key else IGNORED_RELEASE_CODES
                if result.code not in ignored:
                    self.queue.add_rate_limited(key, now)
            elif result.action == "update_status":
                self._status_result(key, result, now)
            elif result.action.endswith("controller_revision") or result.action == "bump_collision_count":
                # a revision write that failed (AlreadyExists: another revision holds the name) is
                # looked at again by the next sync, which sees the cache's revisions
                if result.outcome == FAILED:
                    self.queue.add_rate_limited(key, now)
                elif result.reason == NOT_ADOPTED:
                    self._claim_failed(key, result, now)
                else:
                    if result.outcome == SUCCEEDED and result.action.endswith("controller_revision"):
                        name = result.subject.rpartition("/")[2]
                        left = "" if result.action == "delete_controller_revision" else result.resource_version
                        self.revision_writes.setdefault(key, {})[name] = (left, now)
                    self.queue.add(key)

    def _claim_failed(self, key: str, result: ActionResult, now: datetime) -> None:
        """An action that waited on an adoption that failed was not applied: upstream's claim returned the
        error and the sync is retried with the rate limiter; an object found gone is no error (AdoptPod's
        NotFound is ignored), and its deletion wakes the controller anyway."""
        if result.code == 404:
            self.queue.add(key)
        else:
            self.queue.add_rate_limited(key, now)

    def _manage_result(self, key: str) -> None:
        """Counts down the results of the last creates/deletes; when the last one is in, the
        controller syncs (its expectations may be met by results alone), unless a backoff holds it."""
        left = self.manage_pending.get(key)
        if left is None:
            return
        if left > 1:
            self.manage_pending[key] = left - 1
            return
        del self.manage_pending[key]
        if not self.queue.waiting(key):
            self.queue.add(key)

    def _failed(self, key: str, error: ManageError, now: datetime) -> None:
        self.errors.setdefault(key, error)  # the first error, as manageReplicas returns
        self.queue.add_rate_limited(key, now)

    def _status_result(self, key: str, result: ActionResult, now: datetime) -> None:
        in_flight = self.status_in_flight.get(key)
        if in_flight is None or in_flight[0] != result.action_key:
            return
        del self.status_in_flight[key]
        if result.outcome == SUCCEEDED:
            self.written[key] = (_rv(result.resource_version), in_flight[1])
            self.queue.add(key)  # anything that changed while the write was in flight
        else:
            self.queue.add_rate_limited(key, now)

