"""The ReplicaSet controller behind the dispatcher (reconciler.core.controller.Controller).

What it remembers on its own: per ReplicaSet, the manageReplicas error the last sync that could judge its
round reported (what syncs report while a newer round is in flight).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Final

from kube.features import FeatureGates
from messages.actions import ActionKind, ActionResult
from messages.keys import ControllerKey, ControllerKind
from reconciler.core.cache import Change
from reconciler.core.controller import Handler, ManageError, Requeue, Synced, Syncing, summarize_warnings, summarized
from reconciler.core.expectations import Expectations
from reconciler.core.replicaset import handlers
from reconciler.core.replicaset.actions import plan_actions
from reconciler.core.replicaset.sync import sync_replicaset
from reconciler.core.view import CacheView, Wakeups


class ReplicaSetController:
    kind: Final = ControllerKind.REPLICA_SET
    pods: Final = handlers.HANDLERS

    def __init__(self, gates: FeatureGates | None = None) -> None:
        self.gates = gates or FeatureGates()
        self.reported: dict[ControllerKey, ManageError | None] = {}  # the error the last judging sync reported

    def watches(self) -> Mapping[str, Handler]:
        return {"ReplicaSet": self._on_replicaset}

    @staticmethod
    def _on_replicaset(change: Change, view: CacheView, wakeups: Wakeups) -> None:
        handlers.on_replicaset(change, wakeups, view)

    def keys(self, view: CacheView) -> list[ControllerKey]:
        return [handlers.controller_key(rs.metadata.namespace, rs.metadata.name)
                for rs in handlers.all_replicasets(view)]

    def deletion_observed(self, expectations: Expectations, pod_key: str) -> Expectations:
        """The ReplicaSet's expectations track deletions by pod key (UIDTrackingControllerExpectations)."""
        return expectations.deletion_observed(pod_key)

    def holds(self, key: ControllerKey, view: CacheView, now: datetime) -> datetime | None:
        return None

    def sync(self, syncing: Syncing) -> Synced:
        key, now, expectations = syncing.key, syncing.now, syncing.expectations
        # A round is the creates or deletes of one sync. Its first API error is upstream's manageReplicasErr,
        # known once the round's results are in; while a newer round is in flight, syncs report what the last
        # one they could judge reported (upstream never syncs in between). What a sync reports is decided
        # afresh in every sync (reconciler.core.replicaset.sync.reported_error).
        in_flight = syncing.round_in_flight
        if in_flight:  # upstream made this round's calls in the sync that issued it: repeat what it reported
            carried = self.reported.get(key)
        elif expectations is None or expectations.satisfied(now):  # manageReplicas runs: the last round's error
            carried = syncing.round_error
        else:  # skipped while a created or deleted pod is still to be observed: nil, as upstream's
            carried = None
        plan = sync_replicaset(key, syncing.view, expectations, carried, now, syncing.correlation,
                               terminating_replicas=self.gates.deployment_replica_set_terminating_replicas)
        summary = dict(plan.explain)
        if plan.rs is None:
            return Synced(summary, gone=True)
        if not in_flight:
            self.reported[key] = plan.failure
        round_ = len(plan.creates) + len(plan.deletes)
        write_status = plan.status is not None and not syncing.status_in_flight
        actions, known = plan_actions(plan, syncing.correlation, syncing.issued_at, write_status)
        summary.update({
            "creates": len(plan.creates), "deletes": [p.metadata.name for p in plan.deletes],
            "adopt": [p.metadata.name for p in plan.adopt], "release": [p.metadata.name for p in plan.release],
        })
        summarized(summary, plan.status, write_status)
        summary["manage_error"] = plan.manage_error
        summarize_warnings(summary, plan.warnings)
        return Synced(
            summary, expectations=plan.expectations, round=round_,
            # a new round: its own results will say how it went; nothing to do: the last round's error
            # stands for nothing any more
            clear_error=bool(round_) or (plan.managed and plan.diff == 0),
            # processNextWorkItem: a sync without error forgets the key (a failed round was retried with the
            # rate limiter when its results came in)
            forget=plan.failure is None and not in_flight,
            requeue_after=plan.requeue_after, actions=actions, known=known,
            status_written=plan.status if write_status else None, warnings=plan.warnings,
            error=plan.manage_error)  # syncReplicaSet returns manageReplicasErr

    def result(self, key: ControllerKey, action: ActionKind, result: ActionResult, now: datetime) -> Requeue | None:
        return None  # it issues nothing but pod actions, events and status writes, which the dispatcher reads

    def forget(self, key: ControllerKey) -> None:
        self.reported.pop(key, None)
