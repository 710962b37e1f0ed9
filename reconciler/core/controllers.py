"""The controllers inside the reconciler: event handlers -> work queue -> syncs -> decisions.

`Controllers` is synchronous and does no I/O: the reconciler's shell feeds it the cache changes
of each batch and the executors' results, asks it for the syncs that are due, and commits what
it returns (decisions with their actions, expectations) in one transaction. It keeps what
upstream keeps in memory (the work queue with its backoff, the last API error per controller,
the status write in flight); expectations are also persisted, so a restart never acts twice.

It dispatches over the two controllers by their keys' kind (reconciler.core.controller.Controller:
reconciler.core.daemonset.controller, reconciler.core.replicaset.controller) and keeps what they share: the
work queue and its rate limiter, the expectations, the periodic resync, each key's last round of creates and
deletes, the status write in flight, and the one sync path (correlation id, timing, status-only spacing,
booking what a sync hands back, logging bad input, forgetting a key whose object is gone). A key comes in as
a string only from a result or a stored expectation, and is parsed there (messages.keys); it goes out as a
string in the decisions, the actions and the expectations to save.
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
from messages.actions import FAILED, NOT_ADOPTED, SKIPPED, SUCCEEDED, Action, ActionKind, ActionResult
from messages.keys import (
    ADOPT,
    ControllerKey,
    ControllerKind,
    action_step,
    correlation_id,
    correlation_of,
    parse_controller_key,
    status_key,
)
from reconciler.core.audit_targets import Known
from reconciler.core.cache import Cache, Change
from reconciler.core.controller import Controller, Handler, ManageError, Requeue, Syncing, claim_failed, rv_number
from reconciler.core.daemonset.backoff import FailedPodBackoff
from reconciler.core.daemonset.controller import DaemonSetController
from reconciler.core.expectations import Expectations
from reconciler.core.handling import pod_handler
from reconciler.core.replicaset.controller import ReplicaSetController
from reconciler.core.shadow_order import NODE_CAUSE, REVISION_KIND, early_cause
from reconciler.core.sizing import fit_actions
from reconciler.core.view import Wakeups
from reconciler.core.workqueue import QueueProbe, WorkQueue

log = logging.getLogger("kubus.reconciler")

NAMESPACE_TERMINATING = "NamespaceTerminating"
# ReleasePod: the pod is gone (404), or no longer has our reference (422): nothing to do
IGNORED_RELEASE_CODES = (404, 422)
STATUS_ONLY_INTERVAL = timedelta(milliseconds=250)
DEFAULT_MIN_RESYNC_PERIOD: Final = timedelta(hours=12)  # kube-controller-manager's --min-resync-period
RESYNC_TRIGGER: Final = "resync"  # a decision's trigger when the informers' periodic resync enqueued it
SHADOW_REBASE_TRIGGER: Final = "shadow-rebase"  # a shadow's expectations given up after a window
DEFAULT_SHADOW_WINDOW: Final = timedelta(seconds=30)  # --shadow-window: see docs/shadow.md, "The window"


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
    # the largest action, in bytes, a sync may issue (NATS's max_payload less headroom): a CreatePods over it
    # is cut into several (core/sizing.py); None: no limit
    max_action_bytes: int | None = None
    # shadow mode (docs/shadow.md): the actions are recorded as would-do and never executed; the acting
    # controller's pods satisfy the expectations, and what they still wait for after `shadow_window` is given up
    shadow: bool = False
    shadow_window: timedelta = DEFAULT_SHADOW_WINDOW
    # the controllers that run (--controllers, as kube-controller-manager's): the others' objects are not synced
    controllers: frozenset[str] = field(default_factory=lambda: frozenset(ControllerKind))

    def start_state(self) -> dict[str, Any]:
        """The entries a start tick's state records."""
        period = None if self.resync_period is None else self.resync_period // timedelta(microseconds=1)
        state: dict[str, Any] = {"feature_gates": self.feature_gates.as_dict(), "resync_period_us": period,
                                 "max_action_bytes": self.max_action_bytes, "controllers": sorted(self.controllers)}
        if self.shadow:  # recorded only when on: the histories recorded before shadow mode replay unchanged
            state["shadow_window_us"] = self.shadow_window // timedelta(microseconds=1)
        return state

    @classmethod
    def from_start_state(cls, state: Mapping[str, Any] | None) -> Settings:
        """What a start tick recorded; a history recorded before these were recorded had the defaults of its
        time: no gate on, no periodic resync, no limit on an action's size and every controller running."""
        state = state or {}
        period = state.get("resync_period_us")
        limit = state.get("max_action_bytes")
        window = state.get("shadow_window_us")
        running = state.get("controllers")
        return cls(FeatureGates.from_mapping(state.get("feature_gates") or {}),
                   None if period is None else timedelta(microseconds=int(period)),
                   None if limit is None else int(limit), shadow=window is not None,
                   shadow_window=DEFAULT_SHADOW_WINDOW if window is None else timedelta(microseconds=int(window)),
                   controllers=frozenset(ControllerKind) if running is None else frozenset(map(str, running)))


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
    error: str | None = None  # the error the sync returned (upstream's syncHandler's), None: it succeeded
    requeue_after: timedelta | None = None  # the sync asked to be synced again after this long (0: at once)

    @property
    def result(self) -> str:
        """controller-runtime's reconcile result: error, requeue_after, requeue (re-added at once) or success."""
        if self.error is not None:
            return "error"
        if self.requeue_after is not None:
            return "requeue_after" if self.requeue_after > timedelta(0) else "requeue"
        return "success"


@dataclass
class Outcome:
    decisions: list[Decided] = field(default_factory=list)
    expectations: dict[str, Expectations] = field(default_factory=dict)  # changed ones, to save, by key
    expectations_deleted: set[str] = field(default_factory=set)
    backoff: list[FailedPodBackoff] = field(default_factory=list)  # changed DaemonSet backoff entries, to save


class _StatusOverlay:
    """The cache, with a ReplicaSet's or DaemonSet's status replaced by the one last written when
    the watch has not shown that write yet (so a sync does not write the same status twice)."""

    def __init__(self, cache: Cache, written: dict[ControllerKey, tuple[int, Any]]):
        self._cache = cache
        self._written = written

    def named(self, kind: str, namespace: str, name: str) -> Any:
        obj = self._cache.named(kind, namespace, name)
        if isinstance(obj, ReplicaSet | DaemonSet):
            controller = ControllerKind.REPLICA_SET if isinstance(obj, ReplicaSet) else ControllerKind.DAEMON_SET
            written = self._written.get(ControllerKey(controller, namespace, name))
            if written is not None and rv_number(obj.metadata.resource_version) < written[0]:
                return msgspec.structs.replace(obj, status=written[1])
        return obj

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)


def _stopped() -> float:
    return 0.0


def _log_fields(key: ControllerKey, correlation: str) -> dict[str, dict[str, str]]:
    """A log line's fields about a sync (runtime.logs.fields, which the core does not import: same attribute)."""
    return {"kubus": {"controller": key.kind.value.lower(), "namespace": key.namespace, "name": key.name,
                      "decision": correlation}}


class Controllers:
    def __init__(self, cache: Cache, expectations: Mapping[str, Expectations] | None = None,
                 status_only_interval: timedelta = timedelta(0), settings: Settings | None = None, *,
                 backoff: Mapping[str, FailedPodBackoff] | None = None,
                 owns: Callable[[ControllerKey], bool] | None = None) -> None:
        """`expectations` and `backoff` as the store holds them; `owns`: the keys a split deployment's
        reconciler syncs (those of its partitions; None: every key)."""
        self.cache = cache
        self.status_only_interval = status_only_interval
        # how long a sync took, for metrics and the audit trail only (no decision depends on it): the shell
        # gives a stopwatch (time.perf_counter); a replay's or a test's syncs take 0 ms
        self._stopwatch: Callable[[], float] = _stopped
        self.settings = settings or Settings()
        self.owns = owns
        self.replicasets = ReplicaSetController(self.settings.feature_gates)
        self.daemonsets = DaemonSetController(self.settings.feature_gates, backoff)
        # in a fixed order, the ReplicaSet's first: an event's wake-ups, and so the syncs, come in that order
        self._controllers: dict[ControllerKind, Controller] = {
            controller.kind: controller for controller in (self.replicasets, self.daemonsets)}
        self._handlers: dict[str, tuple[Handler, ...]] = {}
        enabled = [c for c in self._controllers.values() if c.kind in self.settings.controllers]
        for controller in enabled:  # --controllers: a disabled one's objects wake nothing, so are never synced
            for kind, handler in controller.watches().items():
                self._handlers[kind] = (*self._handlers.get(kind, ()), handler)
        if enabled:  # every controller's pod handlers as one, in the same order
            self._handlers["Pod"] = (pod_handler([c.pods for c in enabled]),)
        # the informers' next periodic resync: set by the first sync after catching up (see `_resync`)
        self.next_resync: datetime | None = None
        self.expectations: dict[ControllerKey, Expectations] = {}
        for name, value in (expectations or {}).items():
            # a key no controller of this kubus writes (an older one's) waits for nothing it could observe
            if (key := parse_controller_key(name)) is not None:
                self.expectations[key] = value
        # the keys of the expectations that wait for pods by key (see _gone), for the dict they were taken of
        self._awaiting: set[ControllerKey] = set()
        # shadow mode: the pods whose deletion was counted already ("ns/name"), until they are gone
        self._shadow_counted: set[str] = set()
        self._awaiting_of: dict[ControllerKey, Expectations] | None = None
        # shadow mode: owners held back for an act seen before its cause, and until when (see `_order`)
        self._early: dict[ControllerKey, datetime] = {}
        self._early_for_node: set[ControllerKey] = set()  # of those, held for a node's change only
        self.queue: WorkQueue[ControllerKey] = WorkQueue()
        # A round is the creates or deletes of one sync; its first API error is known once its results are in.
        self.errors: dict[ControllerKey, ManageError] = {}  # key -> first error of its last completed round
        self.manage_pending: dict[ControllerKey, int] = {}  # key -> results of its current round still to come
        self.last_synced: dict[ControllerKey, datetime] = {}
        self.status_in_flight: dict[ControllerKey, tuple[str, Any]] = {}  # key -> (action key, status)
        # key -> the decision whose error last re-added it with the rate limiter: once per decision (see _retry)
        self.retried: dict[ControllerKey, str] = {}
        self.held: dict[ControllerKey, datetime] = {}  # keys held back while they wait on a round, and until when
        self.written: dict[ControllerKey, tuple[int, Any]] = {}  # key -> (resourceVersion, status)
        self.triggers: dict[ControllerKey, str] = {}  # key -> the event that last enqueued it
        self.last_seq = 0
        self._changed: set[ControllerKey] = set()
        self._deleted: set[ControllerKey] = set()

    def use_stopwatch(self, stopwatch: Callable[[], float]) -> None:
        """Times the syncs with `stopwatch` (seconds), which the shell gives: the core reads no clock."""
        self._stopwatch = stopwatch

    def use_probe(self, probe: QueueProbe) -> None:
        """Tells `probe` (the shell's workqueue metrics) what happens to the key queue's keys from now on."""
        self.queue.probe = probe

    @property
    def backoff(self) -> Mapping[str, FailedPodBackoff]:
        """The DaemonSets' failed-pod backoff, by its entries' keys."""
        return self.daemonsets.backoff

    @property
    def backoff_collected(self) -> datetime | None:
        """When the failed-pod backoff's GC last ran."""
        return self.daemonsets.backoff_collected

    # --- handlers -----------------------------------------------------------------------------------
    def observe(self, changes: list[tuple[Change, int, str]], now: datetime) -> None:
        cache = self.cache
        handlers = self._handlers
        shadow = self.settings.shadow
        # one Wakeups for the whole batch: _wake empties each list it acts on (a change's wake-ups are acted on
        # before the next change's handlers run, as with one Wakeups per change)
        wakeups = Wakeups()
        for change, seq, msg_id in changes:
            if seq > self.last_seq:
                self.last_seq = seq
            kind = change.kind
            for handle in handlers.get(kind, ()):
                handle(change, cache, wakeups)
            self._wake(wakeups, msg_id, now)
            if shadow:
                self._order(change, msg_id, now)
            if kind == "Pod" and change.new is None:
                self._gone(f"{change.namespace}/{change.name}")
                if shadow:  # (only shadow mode adds to it)
                    self._shadow_counted.discard(f"{change.namespace}/{change.name}")

    def _order(self, change: Change, trigger: str, now: datetime) -> None:
        """Shadow mode: an owner whose pod shows an act of the acting controller before its cause (the owner's
        new spec, its revision: reconciler.core.shadow_order) is held back until an event of the owner, of a
        revision or of a node shows, for at most a window. Deciding on a cluster where the act shows and its cause
        does not, the shadow would decide what no controller decides (delete a ReplicaSet's fourth pod of three)."""
        released: list[ControllerKey] = []
        if (found := early_cause(change, self.cache)) is not None:
            key, cause = found
            if key in self.last_synced:  # an owner not synced yet (catching up) has decided nothing to protect
                self._early.setdefault(key, now + self.settings.shadow_window)
                if cause == NODE_CAUSE:
                    self._early_for_node.add(key)
        elif change.kind in ("ReplicaSet", "DaemonSet"):
            owner = ControllerKey(ControllerKind(change.kind), change.namespace, change.name)
            released = [] if owner in self._early_for_node else [owner]
        elif change.kind == REVISION_KIND:
            released = [k for k in self._early if k.kind is ControllerKind.DAEMON_SET
                        and k.namespace == change.namespace and k not in self._early_for_node]
        elif change.kind == "Node":
            released = [k for k in self._early if k.kind is ControllerKind.DAEMON_SET]
        for key in released:
            self._early_for_node.discard(key)
            if self._early.pop(key, None) is not None:
                self.queue.add(key)
                self.triggers[key] = trigger

    @property
    def held_early(self) -> frozenset[str]:
        """The keys (as strings) a shadow holds back for an act seen before its cause: upstream's acts for them
        are recorded as early (reconciler.core.shadow.upstream_acts)."""
        return frozenset(str(k) for k in self._early)

    @property
    def awaiting(self) -> frozenset[str]:
        """The keys (as strings) whose expectations are not met: a shadow awaiting upstream's acts for its own
        round (reconciler.core.shadow.upstream_acts records a surge deletion upstream made meanwhile as awaited)."""
        return frozenset(str(k) for k, v in self.expectations.items() if not v.fulfilled())

    def _held_early(self, key: ControllerKey, now: datetime) -> bool:
        """Whether a shadow holds `key` back for an act seen before its cause (see `_order`)."""
        until = self._early.get(key)
        if until is None:
            return False
        if now >= until:
            del self._early[key]
            self._early_for_node.discard(key)
            return False
        self.held[key] = min(until, self.held.get(key, until))
        return True

    def _gone(self, pod: str) -> None:
        """A pod that is gone satisfies every controller that deleted it and still waits for it, whatever
        ownerReferences its last state carried (the handlers above only follow its controller reference:
        a pod another controller took, or that lost ours, before it went would otherwise hold the deleting
        controller's expectations until they expire)."""
        if self._awaiting_of is not self.expectations:  # replaced wholesale
            self._awaiting = {k for k, v in self.expectations.items() if v.deletion_keys}
            self._awaiting_of = self.expectations
        for key in [k for k in self._awaiting if pod in self.expectations[k].deletion_keys]:
            self._set(key, self.expectations[key].deletion_observed(pod))

    def _wake(self, wakeups: Wakeups, trigger: str, now: datetime) -> None:
        """Acts on the wake-ups, in the order of their kinds, and empties them (observe reuses one Wakeups)."""
        if wakeups.creations_observed:
            self._creations(wakeups.creations_observed)
        if wakeups.deletions_observed:
            self._deletions(wakeups.deletions_observed)
        if wakeups.expectations_deleted:
            for key in wakeups.expectations_deleted:
                self._drop(key)
            wakeups.expectations_deleted.clear()
        enqueue = wakeups.enqueue
        if enqueue:
            add, triggers = self.queue.add, self.triggers
            for key in enqueue:
                add(key)
                triggers[key] = trigger
            enqueue.clear()
        if wakeups.enqueue_after:
            for key, delay in wakeups.enqueue_after:
                self.queue.add_after(key, delay, now)
                self.triggers[key] = trigger
            wakeups.enqueue_after.clear()

    def _creations(self, observed: list[ControllerKey]) -> None:
        for key in observed:
            if (current := self.expectations.get(key)) is not None:
                self._set(key, current.creation_observed())
        observed.clear()

    def _deletions(self, observed: list[tuple[ControllerKey, str]]) -> None:
        for key, pod_key in observed:
            if (current := self.expectations.get(key)) is not None:
                if self.settings.shadow:
                    # the acting controller deleted one of the owner's pods: which one it picked (of equal pods)
                    # is its own; the shadow counts the deletion, one act of upstream's however many events it
                    # shows as (deletionTimestamp set, DELETED). Counted at each, as upstream's DaemonSet
                    # expectations count its own, the second event of a pod whose deletion met one expectation
                    # met the next early, and the shadow decided a deletion again before upstream's showed
                    if pod_key in self._shadow_counted:
                        continue
                    self._shadow_counted.add(pod_key)
                    self._set(key, current.deletion_counted(pod_key))
                else:
                    self._set(key, self._controllers[key.kind].deletion_observed(current, pod_key))
        observed.clear()

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

    def _workload_keys(self) -> list[ControllerKey]:
        """Every controller's keys, in (namespace, name) order per controller."""
        return [key for controller in self._controllers.values() if controller.kind in self.settings.controllers
                for key in controller.keys(self.cache)]

    def enqueue(self, key: ControllerKey) -> None:
        """Syncs `key` with the next syncs that are due (as an event handler's wake-up would)."""
        self.queue.add(key)

    def resync_all(self) -> None:
        """What an informer's initial list does: every controller is synced once."""
        for key in self._workload_keys():
            self.queue.add(key)

    def _set(self, key: ControllerKey, value: Expectations) -> None:
        self.expectations[key] = value
        if self._awaiting_of is self.expectations:
            if value.deletion_keys:
                self._awaiting.add(key)
            else:
                self._awaiting.discard(key)
        self._changed.add(key)
        self._deleted.discard(key)

    def _drop(self, key: ControllerKey) -> None:
        self._awaiting.discard(key)
        if self.expectations.pop(key, None) is not None:
            self._deleted.add(key)
        self._changed.discard(key)

    def collect_backoff(self, now: datetime) -> bool:
        """The DaemonSets' failed-pods backoff's GC: whether the store should drop entries too."""
        return self.daemonsets.collect_backoff(now)

    def take_changes(self, outcome: Outcome) -> Outcome:
        """What changed since the last call, into `outcome`, keyed as the store keeps it."""
        changed = sorted((str(key), key) for key in self._changed)  # in the order of the keys as stored
        outcome.expectations = {name: self.expectations[key] for name, key in changed}
        outcome.expectations_deleted = {str(key) for key in self._deleted}
        outcome.backoff = self.daemonsets.take_backoff_changes()
        self._changed.clear()
        self._deleted.clear()
        return outcome

    # --- syncs --------------------------------------------------------------------------------------
    def sync_ready(self, now: datetime, now_iso: str, *, events_until: datetime | None = None) -> Outcome:
        """Sync every ready key at `now`. `events_until`: when the newest of the batch's events was observed
        (None: a batch without events, nothing left to read), the shadow's clock for giving up (`_rebase`)."""
        outcome = Outcome()
        self._resync(now)
        if self.settings.shadow:
            self._rebase(now if events_until is None else min(now, events_until))
        self._release_held(now)
        probe = self.queue.probe
        for key in self.queue.pop_ready(now):
            probe.started(key)  # each key is processed in turn, as one worker takes them from its queue
            try:
                if self.owns is not None and not self.owns(key):
                    continue
                if key.kind not in self.settings.controllers:  # a result's requeue, an enqueue: not run (--controllers)
                    continue
                controller = self._controllers[key.kind]
                if (self._waiting_for_a_round(key, now) or self._held_by(controller, key, now)
                        or self._held_early(key, now)):
                    continue
                self.last_synced[key] = now
                started = self._stopwatch()
                decided = self._sync(controller, key, now, now_iso)
                decided.duration_ms = (self._stopwatch() - started) * 1000
                outcome.decisions.append(decided)
            finally:
                probe.finished(key)
        return self.take_changes(outcome)

    def _sync(self, controller: Controller, key: ControllerKey, now: datetime, now_iso: str) -> Decided:
        """One sync of `key` by its controller, and the booking of what it hands back."""
        name = str(key)
        correlation = correlation_id(name, self.last_seq, now)
        synced = controller.sync(Syncing(
            key, _StatusOverlay(self.cache, self.written), self.expectations.get(key), now, correlation, now_iso,
            round_error=self.errors.get(key), round_in_flight=key in self.manage_pending,
            status_in_flight=key in self.status_in_flight))
        decided = Decided(name, key.kind.value, key.namespace, correlation, self.last_seq,
                          self.triggers.pop(key, None), synced.summary, 0.0,
                          fit_actions(synced.actions, self.settings.max_action_bytes), synced.known,
                          error=synced.error, requeue_after=synced.requeue_after)
        if synced.gone:
            self._forget(controller, key)
            return decided
        if synced.expectations is not None:
            self._set(key, synced.expectations)
            if self.settings.shadow and not synced.expectations.fulfilled():
                self.queue.add_after(key, self.settings.shadow_window, now)  # see _rebase
        if synced.round and not self.settings.shadow:  # a shadow's round has no results to wait for
            self.manage_pending[key] = synced.round
        if synced.clear_error:
            self.errors.pop(key, None)
        if synced.retry:
            self._retry(key, correlation, now)
        elif synced.forget:
            self.queue.forget(key)
        if synced.requeue_after is not None:
            self.queue.add_after(key, synced.requeue_after, now)
        if self.settings.shadow and key.kind is ControllerKind.DAEMON_SET:
            self.daemonsets.would_write(key, decided.actions, self.cache, now)
        if synced.status_written is not None and not self.settings.shadow:  # no answer will come
            self.status_in_flight[key] = (status_key(correlation), synced.status_written)
        for bad in synced.warnings:
            log.error("%s %s/%s: %s (field %s)", key.kind.value, key.namespace, key.name, bad.message, bad.field,
                      extra=_log_fields(key, correlation))
        return decided

    def _rebase(self, now: datetime) -> None:
        """Shadow mode: expectations still waiting one window after they were set are given up, and the key
        syncs again, from what the acting controller actually did (the shadow's actions never execute, so
        what upstream did not do in the window will never be observed). Upstream waits five minutes for its
        own lost creates; a shadow that waited so would sit out every later change of the owner, and one
        that went on from its imagined history would decide twice.

        `now` is the events' time where the batch has events (sync_ready's `events_until`): a shadow behind
        the stream (a backlog under load) has not seen what upstream did in the window yet, and giving up on
        its own clock would decide again what upstream's unread act already did."""
        window = self.settings.shadow_window
        for key, value in list(self.expectations.items()):
            if value.set_at is not None and not value.fulfilled() and now - value.set_at >= window:
                self._set(key, Expectations(0, 0, frozenset(), value.set_at))
                self.queue.add(key)
                self.triggers.setdefault(key, SHADOW_REBASE_TRIGGER)

    def _forget(self, controller: Controller, key: ControllerKey) -> None:
        """The key's object is gone: its expectations and everything kept for it go."""
        self._drop(key)
        for table in (self.errors, self.manage_pending, self.status_in_flight, self.written, self.last_synced,
                      self.held, self.retried, self._early):
            table.pop(key, None)
        self._early_for_node.discard(key)
        controller.forget(key)
        self.queue.forget(key)

    def _held_by(self, controller: Controller, key: ControllerKey, now: datetime) -> bool:
        """Whether the controller holds the key back (a DaemonSet waiting to see its revision writes)."""
        until = controller.holds(key, self.cache, now)
        if until is None:
            return False
        self.held[key] = min(until, self.held.get(key, until))  # held, not the queue's delayed slot (see below)
        return True

    def _waiting_for_a_round(self, key: ControllerKey, now: datetime) -> bool:
        """While a controller waits for its creates or deletes to be observed, a sync can only
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

    # --- results ------------------------------------------------------------------------------------
    def results(self, results: list[ActionResult], now: datetime) -> None:
        """What the executors report: expectations that will never be met, errors, requeues. The
        expectations changed are returned by the next `sync_ready` or `take_changes`."""
        keys: dict[str, ControllerKey | None] = {}  # a round's results name one controller: parsed once
        for result in results:
            controller = result.controller
            if controller in keys:
                key = keys[controller]
            else:
                key = keys[controller] = parse_controller_key(controller)
            action = ActionKind.of(result.action)
            if key is None or action is None:
                continue  # a result an older kubus's controller left on the bus: no controller of ours waits on it
            if action is ActionKind.CREATE_PODS:
                self._round_result(key)
                if result.outcome in (FAILED, SKIPPED):
                    self._create_failed(key, result, now)
            elif action is ActionKind.DELETE_POD:
                self._round_result(key)
                if result.outcome == FAILED or result.code == 404 or result.reason == NOT_ADOPTED:
                    self._delete_failed(key, result, now)
            elif action is ActionKind.PATCH_POD:
                if result.reason == NOT_ADOPTED:
                    self._requeue(key, claim_failed(result), now, result)
                elif result.outcome == FAILED:
                    # ClaimObject: an adoption that failed (someone else claimed it first: 422, or a transient
                    # error) is retried with the rate limiter unless the pod is gone; a release ignores 404 and 422
                    ignored = (404,) if action_step(result.action_key) == ADOPT else IGNORED_RELEASE_CODES
                    if result.code not in ignored:
                        self._retry(key, correlation_of(result.action_key), now)
            elif action is ActionKind.UPDATE_STATUS:
                self._status_result(key, result, now)
            else:
                self._requeue(key, self._controllers[key.kind].result(key, action, result, now), now, result)

    def _create_failed(self, key: ControllerKey, result: ActionResult, now: datetime) -> None:
        if result.reason == NAMESPACE_TERMINATING:
            return  # upstream counts it a success: the namespace is going away
        if (current := self.expectations.get(key)) is not None:
            self._set(key, current.lowered(adds=1))
        if result.outcome == FAILED:
            self._failed(key, ManageError(result.message, creating=True), now, result)

    def _delete_failed(self, key: ControllerKey, result: ActionResult, now: datetime) -> None:
        """manageReplicas: any DeletePod error lowers the expectation (DeletionObserved); NotFound (which the
        executor reports as a success) is no error for the status or the backoff; nor is a pod left alone
        because its adoption failed (upstream's sync stops at the claim)."""
        if (current := self.expectations.get(key)) is not None:
            self._set(key, self._controllers[key.kind].deletion_observed(current, result.subject))
        if result.outcome == FAILED:
            self._failed(key, ManageError(f"unable to delete pods: {result.message}", creating=False), now, result)
        elif result.reason == NOT_ADOPTED:
            self._requeue(key, claim_failed(result), now, result)

    def _requeue(self, key: ControllerKey, requeue: Requeue | None, now: datetime, result: ActionResult) -> None:
        if requeue is Requeue.NOW:
            self.queue.add(key)
        elif requeue is Requeue.RATE_LIMITED:
            self._retry(key, correlation_of(result.action_key), now)

    def _retry(self, key: ControllerKey, correlation: str, now: datetime) -> None:
        """processNextWorkItem's AddRateLimited for the error a sync returns: once per decision, however many of
        its actions failed (a batch of creates, a create and the status write, the sync's own error), so that a
        decision counts one failure in the rate limiter's backoff, as one syncHandler returns one error."""
        if correlation and self.retried.get(key) == correlation:
            return
        self.retried[key] = correlation
        self.queue.add_rate_limited(key, now)

    def _round_result(self, key: ControllerKey) -> None:
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

    def _failed(self, key: ControllerKey, error: ManageError, now: datetime, result: ActionResult) -> None:
        self.errors.setdefault(key, error)  # the first error, as manageReplicas returns
        self._retry(key, correlation_of(result.action_key), now)

    def _status_result(self, key: ControllerKey, result: ActionResult, now: datetime) -> None:
        in_flight = self.status_in_flight.get(key)
        if in_flight is None or in_flight[0] != result.action_key:
            return
        del self.status_in_flight[key]
        if result.outcome == SUCCEEDED:
            self.written[key] = (rv_number(result.resource_version), in_flight[1])
            self.queue.add(key)  # anything that changed while the write was in flight
        else:
            self._retry(key, correlation_of(result.action_key), now)
