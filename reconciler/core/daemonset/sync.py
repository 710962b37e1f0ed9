"""syncDaemonSet as a pure function: (cache view, expectations, failed-pod backoff, clock) -> a plan.

The composition follows upstream's syncDaemonSet / updateDaemonSet / updateDaemonSetStatus
(pkg/controller/daemon/daemon_controller.go):

1. the DaemonSet is gone: drop its expectations; an empty selector: a SelectingAll Warning and nothing
   else; being deleted: nothing;
2. constructHistory (claiming the controller revisions first) and the pods' claim;
3. expectations not satisfied: only the status, ``observedGeneration`` left alone;
4. otherwise manage + syncNodes, then (RollingUpdate, and manage left nothing to wait for) one
   rolling-update step through its own syncNodes, cleanupHistory, and the status with
   ``observedGeneration`` raised.

One deliberate difference: when constructHistory has to create the current revision (or, on a name
collision, write a new ``collisionCount``), the plan holds only those history actions and stops
(``waiting_for_history``); see :func:`sync_daemonset`.

Pure: no I/O, no clock (``now`` is passed in), inputs never mutated.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, Final

from kube.apps import ROLLING_UPDATE, ControllerRevision, DaemonSet, DaemonSetStatus
from kube.core import Pod
from kube.features import FeatureGates
from kube.intstr import is_percent
from kube.labels import Selector, SelectorError, selector_from_label_selector
from kube.nodeaffinity import get_target_node_name, node_selector_errors
from kube.ownership import get_controller_of
from kube.pods import PodFacts
from messages.keys import ControllerKey
from reconciler.core.daemonset.backoff import FailedPodBackoff
from reconciler.core.daemonset.handlers import KIND, REVISION_KIND
from reconciler.core.daemonset.history import (
    UNIQUE_LABEL_KEY,
    HistoryPlan,
    cleanup_history,
    construct_history,
    relabel_pod_patch,
    revision_body,
    revision_number_patch,
    unique_label_patch,
)
from reconciler.core.daemonset.manage import DaemonEvent, ManageResult, manage_facts, manage_placed
from reconciler.core.daemonset.placement import validate_tolerations
from reconciler.core.daemonset.pods import SyncNodesPlan, sync_nodes
from reconciler.core.daemonset.rollout import (
    MAX_SURGE_FIELD,
    MAX_UNAVAILABLE_FIELD,
    NodeNotFoundError,
    RolloutDecision,
    RolloutValueError,
    daemon_facts_by_node,
    rolling_update,
    rollout_budgets,
    surge_count,
    template_generation,
    unavailable_count,
    updated_desired_node_counts,
)
from reconciler.core.daemonset.status import (
    needs_write,
    resync_after_facts,
    selecting_all_event,
)
from reconciler.core.daemonset.tally import StatusTally
from reconciler.core.expectations import Expectations, held_back
from reconciler.core.view import BadInput, CacheView

__all__ = ["COMPONENT", "BadInput", "DaemonSetPlan", "sync_daemonset"]

COMPONENT: Final = "daemonset-controller"
DEFAULT_GATES: Final = FeatureGates()



@dataclass
class DaemonSetPlan:
    """What one sync of a DaemonSet asks the shell to do, in upstream's order.

    History first: ``revision_adopt`` / ``revision_release`` (ClaimControllerRevisions), the
    ``revision_patches`` (unique-label fixes, then the current revision's renumbering), then either
    ``revision_creates`` (with their exact bodies in ``revision_bodies``) or the dedup: ``pod_relabels``
    and the dedup part of ``revision_deletes``. ``collision_count`` set: the executor writes it into
    ``status.collisionCount`` from a fresh read (only if the live count is still one lower, so a
    repeated bump changes nothing) and nothing is created. Then the pods: ``adopt`` / ``release``,
    ``creates`` ``(node, idempotency key, body)`` in slow-start batches and
    ``deletes``; save ``expectations`` (when not None) and ``backoff_updates`` with the decision;
    record ``events``; delete the old revisions that close ``revision_deletes`` (cleanupHistory);
    write ``status`` (None: no write); requeue after ``requeue_after``.
    """

    key: ControllerKey
    ds: DaemonSet | None = None  # None: the DaemonSet is gone and its expectations go too
    hash: str | None = None  # the current revision's controller-revision-hash
    waiting_for_history: bool = False
    history: HistoryPlan | None = None
    revision_adopt: list[ControllerRevision] = field(default_factory=list)
    revision_release: list[ControllerRevision] = field(default_factory=list)
    revision_creates: list[ControllerRevision] = field(default_factory=list)
    revision_bodies: list[bytes] = field(default_factory=list)  # revision_body() of each create, same order
    revision_patches: list[tuple[ControllerRevision, bytes]] = field(default_factory=list)  # merge patches
    revision_deletes: list[ControllerRevision] = field(default_factory=list)
    collision_count: int | None = None
    pod_relabels: list[tuple[Pod, bytes]] = field(default_factory=list)  # merge patches
    adopt: list[Pod] = field(default_factory=list)
    release: list[Pod] = field(default_factory=list)
    creates: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    deletes: list[Pod] = field(default_factory=list)
    expectations: Expectations | None = None  # new expectations to save (syncNodes always sets them)
    backoff_updates: list[FailedPodBackoff] = field(default_factory=list)
    events: list[DaemonEvent] = field(default_factory=list)
    status: DaemonSetStatus | None = None  # to write; None when unchanged (needs_write)
    managed: bool = False  # manage/syncNodes ran
    rolled: bool = False  # a rolling-update step ran
    warnings: list[BadInput] = field(default_factory=list)
    failed: str | None = None  # the error upstream's syncDaemonSet returns: the key is retried with backoff
    requeue_after: timedelta | None = None
    explain: dict[str, Any] = field(default_factory=dict)


def sync_daemonset(key: ControllerKey, view: CacheView, expectations: Expectations | None,
                   backoff_entries: Mapping[str, FailedPodBackoff], now: datetime, key_base: str,
                   gates: FeatureGates = DEFAULT_GATES, tally: StatusTally | None = None) -> DaemonSetPlan:
    """One sync of ``key`` ("DaemonSet/namespace/name"); ``key_base`` makes its idempotency keys unique;
    ``gates`` the feature gates (upstream's ``utilfeature.DefaultFeatureGate``, here a value); ``tally`` the
    DaemonSet's claim and status counts as the last sync left them, brought up to date here (None: worked out
    from scratch; the decision is the same)."""
    comparison_operators = gates.taint_toleration_comparison_operators
    namespace, name = key.namespace, key.name
    plan = DaemonSetPlan(key)
    ds = view.named(KIND, namespace, name)
    if not isinstance(ds, DaemonSet):
        plan.explain = {"reason": "deleted: expectations dropped"}
        return plan
    plan.ds = ds
    selecting_all = selecting_all_event(ds)
    if selecting_all is not None:
        plan.events.append(DaemonEvent(*selecting_all))
        plan.explain = {"reason": "selecting all pods: not synced"}
        return plan
    if ds.metadata.deletion_timestamp is not None:
        plan.explain = {"reason": "being deleted: nothing to do"}
        return plan
    try:
        selector = selector_from_label_selector(ds.spec.selector)
    except SelectorError as exc:
        # upstream fails constructHistory with this error on every sync; kubus says so in an Event instead
        plan.warnings.append(BadInput("InvalidSelector", f"invalid selector: {exc}", "spec.selector"))
        plan.explain = {"reason": "invalid selector", "error": str(exc)}
        plan.failed = str(exc)
        return plan
    template_labels = ds.spec.template.metadata.labels or {}
    if not selector.matches(template_labels):
        # The API refuses this; were it let through, every pod created would go unclaimed and be made
        # again on the next sync, without end. kubus stops here and says so.
        path = "spec.template.metadata.labels"
        shown = ", ".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in sorted(template_labels.items()))
        message = f"{path}: Invalid value: map[string]string{{{shown}}}: `selector` does not match template `labels`"
        plan.warnings.append(BadInput("InvalidSelector", message, path))
        plan.explain = {"reason": "selector does not match the template's labels: not synced"}
        return plan
    plan.warnings.extend(BadInput("InvalidToleration", message, path)
                         for path, message in validate_tolerations(ds, comparison_operators=comparison_operators))
    plan.warnings.extend(BadInput("InvalidNodeAffinity", message, path) for path, message in _affinity_problems(ds))
    rollout_problem = _rollout_problem(ds)
    if rollout_problem is not None:
        plan.warnings.append(BadInput("InvalidRollingUpdate", str(rollout_problem), rollout_problem.field))
    plan.warnings.extend(BadInput("InvalidRollingUpdate", message, path) for path, message in _rollout_values(ds))

    # constructHistory: controlledHistories claims the revisions, then snapshot or dedup
    revisions, plan.revision_adopt, plan.revision_release = _claim_revisions(
        ds, selector, view.owned_or_orphans(REVISION_KIND, namespace, ds.metadata.uid))
    # the pods as their facts (kube.pods.PodFacts, kept by the cache once per pod version): the sync reads the
    # facts alone, and a pod itself only where it acts on it (adopt, release, delete, relabel) or on a node
    # with more than one pod. They come in the cache's order: what follows looks pods up by node or sorts
    # them (a name is a pod's own in its namespace, and ties keep the cache's order as a stable sort does)
    if tally is None:
        tally = StatusTally()
    tally.claim(ds, selector, view)
    claimed = tally.claimed()
    taken = {r.metadata.name: r for r in view.in_namespace(REVISION_KIND, namespace)}
    history = construct_history(ds, revisions, _by_name(claimed), taken)
    plan.history = history
    plan.hash = history.hash
    plan.revision_patches = [(r, unique_label_patch(r)) for r in history.label_fixes]
    if history.create is not None or history.collision_count is not None:
        # Upstream creates the revision inside the sync and goes on with its hash. kubus stops here and
        # creates pods only once the current revision exists (its add event requeues the DaemonSet):
        # the create runs after this decision and may still meet a name collision, which bumps
        # collisionCount and so changes the hash. Pods made now would then carry the hash of a revision
        # that never came to be: the rolling update would count them as old and replace them, and
        # cleanupHistory would not know their hash. Waiting costs one sync.
        plan.waiting_for_history = True
        if history.create is not None:
            plan.revision_creates = [history.create]
            plan.revision_bodies = [revision_body(history.create, history.data)]
            plan.explain = {"reason": f"waiting for history: creating revision {history.create.metadata.name}"}
        else:
            plan.collision_count = history.collision_count
            plan.explain = {"reason": f"waiting for history: revision name taken, "
                                      f"collisionCount -> {history.collision_count}"}
        return plan
    hash_ = history.hash or ""
    if history.revision_bump is not None:
        revision, number = history.revision_bump
        plan.revision_patches.append((revision, revision_number_patch(number)))
    plan.pod_relabels = [(p, relabel_pod_patch(hash_)) for p in history.pod_relabels]
    plan.revision_deletes = list(history.deletes)
    plan.adopt, plan.release = sorted(tally.adopt(), key=_NAME), sorted(tally.release(), key=_NAME)

    # getNodesToDaemonPods and the status's counts over every node, as the tally keeps them
    tally.count(ds, hash_, view, now, comparison_operators=comparison_operators)
    pods_by_node = tally.by_node  # read only: the tally's own
    if expectations is not None and not expectations.satisfied(now):
        status = tally.status(ds, update_observed_generation=False)
        plan.status = _to_write(ds, status, plan.adopt)
        plan.requeue_after = resync_after_facts(ds, status, pods_by_node, now)
        plan.explain.update({"reason": f"{held_back(expectations, now)}: status only", "hash": hash_,
                             "pods": len(claimed), "nodes": tally.node_count})
        return plan

    # updateDaemonSet: manage (podsShouldBeOnNode over every node, then syncNodes), skipping the nodes the tally
    # knows it would leave alone
    plan.managed = True
    inputs = tally.manage_inputs()
    if inputs is None:
        result = manage_facts(ds, sorted(view.all("Node"), key=_NAME), pods_by_node, hash_,
                              max_surge=_manage_surge(ds), backoff_entries=backoff_entries, now=now,
                              comparison_operators=comparison_operators)
    else:
        result = manage_placed(ds, *inputs, pods_by_node, hash_, max_surge=_manage_surge(ds),
                               backoff_entries=backoff_entries, now=now)
    synced = sync_nodes(ds, result.nodes_needing_pods, result.pods_to_delete, hash_, now=now, key_base=key_base)
    plan.creates, plan.deletes = list(synced.creates), list(synced.deletes)
    plan.expectations = synced.expectations
    plan.events.extend(result.events)
    plan.backoff_updates = list(result.backoff_updates)
    rolled_ok = _roll(plan, ds, synced, result, pods_by_node, tally.all_updated(), claimed, hash_, rollout_problem,
                      now, key_base)

    if rolled_ok:
        # updateDaemonSet returns before cleanupHistory when rollingUpdate fails, so a bad maxUnavailable
        # or maxSurge also keeps every old revision until it is fixed, as upstream does
        # getNodesToDaemonPods(ds, true): the claimed pods that have a target node. A generator, so that
        # cleanup_history only walks the pods when it has old revisions to delete
        live = (value for facts in claimed
                if (value := facts.labels.get(UNIQUE_LABEL_KEY, "")) and facts.node is not None)
        plan.revision_deletes.extend(cleanup_history(ds, history.old, live))

    status = tally.status(ds, update_observed_generation=True)
    plan.status = _to_write(ds, status, plan.adopt)
    plan.requeue_after = _earliest(result.requeue_after, resync_after_facts(ds, status, pods_by_node, now))
    plan.explain.update(_explain(result, synced, plan, hash_, claimed, tally.node_count, pods_by_node))
    return plan


def _by_name(claimed: Sequence[PodFacts]) -> Iterator[Pod]:
    """The claimed pods in name order (getDaemonPods for dedup's relabels), sorted only if they are read."""
    for facts in sorted(claimed, key=_FACTS_NAME):
        yield facts.pod


def _to_write(ds: DaemonSet, status: DaemonSetStatus, adopting: Sequence[Pod]) -> DaemonSetStatus | None:
    """The status storeDaemonSetStatus would write, or None: unchanged, or counting pods still being adopted.

    Upstream's updateDaemonSetStatus claims the pods first (getNodesToDaemonPods) and writes nothing when an
    adoption fails, so no status of upstream's counts a pod that is not yet the DaemonSet's. The adoption's own
    event (the pod updated with this controller reference) brings the sync that writes the status counting it;
    a refused one, the retry that writes it without.
    """
    return None if adopting or not needs_write(ds, status) else status


def _roll(plan: DaemonSetPlan, ds: DaemonSet, synced: SyncNodesPlan, result: ManageResult,
          pods_by_node: Mapping[str, Sequence[PodFacts]], all_updated: bool, claimed: Sequence[PodFacts], hash_: str,
          rollout_problem: RolloutValueError | None, now: datetime, key_base: str) -> bool:
    """The rolling-update part of updateDaemonSet; False when upstream's rollingUpdate would fail. ``all_updated``:
    whether every pod of ``pods_by_node`` is of the current revision (StatusTally.all_updated)."""
    strategy = ds.spec.update_strategy.type
    if not synced.expectations.satisfied(now):
        # manage issued creates or deletes: upstream's second SatisfiedExpectations check fails until
        # the watch shows them, so no rolling-update step in this sync
        plan.explain["rollout"] = "waiting for manage's creates and deletes"
        return True
    if strategy != ROLLING_UPDATE:  # OnDelete: pods are replaced only as users delete them
        plan.explain["rollout"] = f"strategy {strategy or 'unset'}: no rolling update"
        return True
    if rollout_problem is not None:
        plan.explain["rollout"] = plan.failed = f"couldn't get unavailable numbers: {rollout_problem}"
        return False
    generation = template_generation(ds)
    placements = result.placements
    by_node = daemon_facts_by_node(pods_by_node, hash_, generation)
    try:
        # rollingUpdate deletes old pods and surges beside old pods, nothing else (with no old pod it does not
        # even look a node up): when every pod is of the current revision, as in the steady state, its walk
        # over all the nodes can only decide nothing, and is skipped, and so is the map of every node's pods
        # that updatedDesiredNodeCounts hands it; its budgets are still worked out (a value that cannot be
        # scaled fails this step as upstream's does)
        if all_updated:
            desired = sum(map(_SHOULD_RUN, placements.values()))
            max_surge, max_unavailable = rollout_budgets(ds, desired)
            decision = RolloutDecision()
        else:
            counts = updated_desired_node_counts(
                ds, ((name, p.should_run) for name, p in placements.items()), by_node)
            desired, max_surge, max_unavailable = (counts.desired_number_scheduled, counts.max_surge,
                                                   counts.max_unavailable)
            decision = rolling_update(
                counts.node_to_pods, max_surge=max_surge, max_unavailable=max_unavailable,
                desired_number_scheduled=desired, min_ready_seconds=ds.spec.min_ready_seconds, now=now,
                # read by the walk with surge alone
                should_run={name: p.should_run for name, p in placements.items()} if max_surge else None)
    except RolloutValueError as exc:
        plan.explain["rollout"] = plan.failed = f"couldn't get unavailable numbers: {exc}"
        return False
    except NodeNotFoundError as exc:
        plan.explain["rollout"] = plan.failed = exc.message  # a pod's node vanished from the cache
        return False
    doomed: list[Pod] = []
    if decision.pods_to_delete:
        by_name = {facts.name: facts.pod for facts in claimed}
        doomed = [by_name[n] for n in decision.pods_to_delete if n in by_name]
    step = sync_nodes(ds, decision.nodes_to_create, doomed, hash_, now=now, key_base=key_base)
    # rollingUpdate's own syncNodes: manage issued nothing (or this step would not run), so its lists are
    # simply appended, and its SetExpectations replaces manage's (0, 0)
    plan.rolled = True
    plan.creates.extend(step.creates)
    plan.deletes.extend(step.deletes)
    plan.expectations = step.expectations
    plan.explain["rollout"] = {"max_surge": max_surge, "max_unavailable": max_unavailable, "desired": desired,
                               "deleting": [p.metadata.name for p in step.deletes],
                               "surging_on": [c[0] for c in step.creates]}
    return True


_REQUIRED_AFFINITY_PATH: Final = ("spec.template.spec.affinity.nodeAffinity."
                                  "requiredDuringSchedulingIgnoredDuringExecution")


def _affinity_problems(ds: DaemonSet) -> list[tuple[str, str]]:
    """(field path, message) for each required node affinity term that cannot parse: the API accepts
    some (``Gt`` on a non-integer), and such a term matches no node, as upstream's Match decides."""
    affinity = ds.spec.template.spec.affinity
    required = affinity.node_affinity.required_during_scheduling_ignored_during_execution if (
        affinity is not None and affinity.node_affinity is not None) else None
    if required is None:
        return []
    problems = []
    for error in node_selector_errors(required):
        field_path, _, _ = error.partition(": ")
        problems.append((f"{_REQUIRED_AFFINITY_PATH}.{field_path}", f"{_REQUIRED_AFFINITY_PATH}.{error}"))
    return problems


def _rollout_problem(ds: DaemonSet) -> RolloutValueError | None:
    """The error updatedDesiredNodeCounts would meet, checked on every sync so the warning is steady.

    A value that cannot be scaled fails whatever the node count, so one node stands for all.
    """
    if ds.spec.update_strategy.type != ROLLING_UPDATE:
        return None
    try:
        unavailable_count(ds, 1)
        surge_count(ds, 1)
    except RolloutValueError as exc:
        return exc
    return None


def _rollout_values(ds: DaemonSet) -> list[tuple[str, str]]:
    """Values the API refuses but upstream acts on all the same, and so does kubus, saying so: percentages
    over 100% (150% of 4 nodes is 6) and both values 0 (maxUnavailable 1 is used)."""
    rolling = ds.spec.update_strategy.rolling_update
    if ds.spec.update_strategy.type != ROLLING_UPDATE or rolling is None:
        return []
    problems = []
    for path, value in ((MAX_UNAVAILABLE_FIELD, rolling.max_unavailable), (MAX_SURGE_FIELD, rolling.max_surge)):
        if is_percent(value) and int(str(value)[:-1]) > 100:
            problems.append((path, f'{path}: Invalid value: "{value}": must not be greater than 100%'))
    explicit = rolling.max_unavailable is not None or rolling.max_surge is not None
    if explicit and _is_zero(rolling.max_unavailable) and _is_zero(rolling.max_surge):
        problems.append((MAX_UNAVAILABLE_FIELD, f"{MAX_UNAVAILABLE_FIELD}: Required value: cannot be 0 when "
                                                f"maxSurge is 0 (1 is used, as upstream)"))
    return problems


def _is_zero(value: object) -> bool:
    return value in (0, "0%") or value is None


def _manage_surge(ds: DaemonSet) -> int:
    """util.AllowsSurge for manage: SurgeCount(ds, 1), 0 when it cannot be scaled."""
    try:
        return surge_count(ds, 1)
    except RolloutValueError:
        return 0


def _claim_revisions(ds: DaemonSet, selector: Selector, revisions: Sequence[ControllerRevision]
                     ) -> tuple[list[ControllerRevision], list[ControllerRevision], list[ControllerRevision]]:
    """ClaimControllerRevisions: (claimed, to adopt, to release), in name order.

    The DaemonSet is not being deleted here (the sync stopped before), so owned revisions that stopped
    matching are released and matching orphans not being deleted are adopted.
    """
    claimed: list[ControllerRevision] = []
    adopt: list[ControllerRevision] = []
    release: list[ControllerRevision] = []
    for revision in sorted(revisions, key=lambda r: r.metadata.name):
        meta = revision.metadata
        matches = selector.matches(meta.labels)
        ref = get_controller_of(meta)
        if ref is not None:
            if ref.uid != ds.metadata.uid:
                continue
            (claimed if matches else release).append(revision)
        elif matches and meta.deletion_timestamp is None and meta.namespace == ds.metadata.namespace:
            adopt.append(revision)
            claimed.append(revision)
    return claimed, adopt, release


def _earliest(*delays: timedelta | None) -> timedelta | None:
    present = [d for d in delays if d is not None]
    return min(present) if present else None


_NAME: Final = attrgetter("metadata.name")
_SHOULD_RUN: Final = attrgetter("should_run")
EXPLAINED_NODES: Final = 500  # the most nodes a sync's summary names (see _explain)
_FACTS_NAME: Final = attrgetter("name")


def _explain(result: ManageResult, synced: SyncNodesPlan, plan: DaemonSetPlan, hash_: str,
             claimed: Sequence[PodFacts], node_count: int, by_node: Mapping[str, Sequence[PodFacts]]
             ) -> dict[str, Any]:
    """``by_node``: nodes_to_daemon_facts(claimed).

    The summary is recorded for every sync, so its size must not grow with the node count, or an apply (a
    sync per round of burstReplicas creates) records nodes x rounds: quadratic. The usual nodes (should run,
    one pod) and the nodes needing a pod are counted, not named (the nodes this sync creates on are in its
    actions); the per-node answers name the unusual nodes (manage's unusual_nodes) whose pods this sync
    deletes (a rolling update's deletes are on usual nodes, and named in its rollout entry), then other
    unusual nodes up to EXPLAINED_NODES in all, and count the rest (nodes_not_listed). `kubus replay --explain`
    recomputes every node's answer from the cache.
    """
    per_node: dict[str, Any] = {}
    placements = result.placements
    needing = set(result.nodes_needing_pods)
    deleting_on = {name for p in plan.deletes if (name := p.spec.node_name or get_target_node_name(p))}
    unusual: list[str] = []
    for name in result.unusual_nodes:
        if not by_node.get(name) and name in needing:
            continue  # counted in nodes_needing_pods
        if name in deleting_on:
            per_node[name] = None  # listed first, whatever the cap
        else:
            unusual.append(name)
    room = max(EXPLAINED_NODES - len(per_node), 0)
    for name in unusual[:room]:
        per_node[name] = None
    for name in per_node:
        should_run, should_continue_running = placements[name]
        pods = by_node.get(name)
        per_node[name] = {"should_run": should_run, "should_continue_running": should_continue_running,
                          "pods": [facts.name for facts in pods] if pods else []}
    usual = len(placements) - len(result.unusual_nodes)
    return {
        "reason": "synced",
        "hash": hash_,
        "nodes": dict(sorted(per_node.items())),
        "nodes_not_listed": len(unusual) - min(len(unusual), room),
        "nodes_running_one_pod": usual,
        "node_count": node_count,
        "pods": len(claimed),
        "nodes_needing_pods": len(result.nodes_needing_pods),
        "deferred_nodes": len(synced.deferred_nodes),
        "deferred_deletes": len(synced.deferred_deletes),
        "creates": len(plan.creates),
        "deletes": len(plan.deletes),
        "create_error": synced.create_error,
        "revision_deletes": [r.metadata.name for r in plan.revision_deletes],
    }
