"""A DaemonSet's rolling update arithmetic: upstream's rollingUpdate and updatedDesiredNodeCounts as pure functions.

Upstream (pkg/controller/daemon/update.go and daemon/util/daemonset_util.go) resolves
``maxSurge``/``maxUnavailable`` against the number of nodes that should run the daemon, then walks
every node's daemon pods once and decides which old pods to delete and, when surging, on which nodes
to start a new pod beside the old one. The manage loop does the rest (creating pods on empty nodes,
pruning extra pods, replacing failed ones), so this module only ever answers for one rolling-update
step.

Upstream walks ``nodeToDaemonPods``, a Go map, in Go's randomised map order; where the budget runs
out mid-walk, which pods go first depends on that order. kubus walks the nodes in sorted name order,
so the same state always gives the same decision.

Pure: no I/O, no clock (``now`` is passed in), inputs never mutated.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from kube.apps import ROLLING_UPDATE, DaemonSet
from kube.core import CONDITION_TRUE, POD_READY, Pod
from kube.intstr import IntOrStrError, get_scaled_value_from_int_or_percent, parse_int64
from kube.meta import IntOrString
from kube.pods import PodFacts, pod_facts
from kube.times import parse_time
from reconciler.core.daemonset.history import UNIQUE_LABEL_KEY
from reconciler.core.slots import slot_setter

__all__ = [
    "MAX_SURGE_FIELD",
    "MAX_UNAVAILABLE_FIELD",
    "TEMPLATE_GENERATION_ANNOTATION",
    "TEMPLATE_GENERATION_LABEL",
    "DaemonPod",
    "DaemonPodsByNode",
    "NodeCounts",
    "NodeNotFoundError",
    "RolloutDecision",
    "RolloutValueError",
    "allows_surge",
    "daemon_facts_by_node",
    "daemon_pod",
    "daemon_pods_by_node",
    "find_updated_pods_on_node",
    "is_pod_updated",
    "labels_updated",
    "rolling_update",
    "rollout_budgets",
    "surge_count",
    "template_generation",
    "unavailable_count",
    "updated_desired_node_counts",
]

MAX_UNAVAILABLE_FIELD: Final = "spec.updateStrategy.rollingUpdate.maxUnavailable"
MAX_SURGE_FIELD: Final = "spec.updateStrategy.rollingUpdate.maxSurge"
TEMPLATE_GENERATION_ANNOTATION: Final = "deprecated.daemonset.template.generation"  # apps.DeprecatedTemplateGeneration
TEMPLATE_GENERATION_LABEL: Final = "pod-template-generation"  # extensions.DaemonSetTemplateGenerationKey

_WHAT: Final = {MAX_UNAVAILABLE_FIELD: "MaxUnavailable", MAX_SURGE_FIELD: "MaxSurge"}


class RolloutValueError(ValueError):
    """``maxUnavailable`` or ``maxSurge`` cannot be scaled.

    ``field`` is the field's path; ``message`` is upstream's error text as updatedDesiredNodeCounts
    words it (``invalid value for MaxUnavailable: invalid value for IntOrString: ...``), which
    rollingUpdate returns wrapped in ``couldn't get unavailable numbers: ``. The exception's text is
    ``<field>: <message>``.
    """

    def __init__(self, field: str, detail: str) -> None:
        self.field = field
        self.message = f"invalid value for {_WHAT[field]}: {detail}"
        super().__init__(f"{field}: {self.message}")


class NodeNotFoundError(LookupError):
    """The surge walk met a node the node lister does not know; upstream's rollingUpdate fails with this."""

    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self.message = f'couldn\'t get node for nodeName "{node_name}": node "{node_name}" not found'
        super().__init__(self.message)


# --- counts -------------------------------------------------------------------------------------------------


def _scaled(value: IntOrString | None, total: int, field_path: str) -> int:
    try:
        return get_scaled_value_from_int_or_percent(value, total, True)
    except IntOrStrError as error:
        raise RolloutValueError(field_path, str(error)) from None


def surge_count(ds: DaemonSet, number_to_schedule: int) -> int:
    """util.SurgeCount: 0 unless RollingUpdate with ``maxSurge`` set, else ``maxSurge`` of the nodes, rounded up.

    Percentages simply scale: the API rejects more than 100%, but ``"150%"`` of 4 here is 6, as upstream.
    """
    strategy = ds.spec.update_strategy
    if strategy.type != ROLLING_UPDATE or strategy.rolling_update is None:
        return 0
    if strategy.rolling_update.max_surge is None:
        return 0
    return _scaled(strategy.rolling_update.max_surge, number_to_schedule, MAX_SURGE_FIELD)


def unavailable_count(ds: DaemonSet, number_to_schedule: int) -> int:
    """util.UnavailableCount: 0 unless RollingUpdate, else ``maxUnavailable`` of the nodes, rounded up.

    Unlike ``maxSurge``, an unset ``maxUnavailable`` under a ``rollingUpdate`` is an error (upstream's
    ``nil value for IntOrString``); the API server defaults it to 1, so only a bare object meets it.
    The both-zero fallback to 1 lives in :func:`updated_desired_node_counts`, as upstream's does.
    """
    strategy = ds.spec.update_strategy
    if strategy.type != ROLLING_UPDATE or strategy.rolling_update is None:
        return 0
    return _scaled(strategy.rolling_update.max_unavailable, number_to_schedule, MAX_UNAVAILABLE_FIELD)


def allows_surge(ds: DaemonSet) -> bool:
    """util.AllowsSurge: a surge of at least one pod out of one node, and no error scaling it."""
    try:
        return surge_count(ds, 1) > 0
    except RolloutValueError:
        return False


@dataclass(frozen=True)
class NodeCounts:
    """updatedDesiredNodeCounts' results.

    ``node_to_pods`` is the input mapping plus an empty entry for every node that should run the
    daemon and has no pods yet (upstream adds them to its map in place; here it is a new dict, or a
    new :class:`DaemonPodsByNode` when the input is one).
    """

    max_surge: int
    max_unavailable: int
    desired_number_scheduled: int
    node_to_pods: Mapping[str, Sequence[DaemonPod]]


def updated_desired_node_counts(ds: DaemonSet, should_run: Mapping[str, bool] | Iterable[tuple[str, bool]],
                                node_to_pods: Mapping[str, Sequence[DaemonPod]]) -> NodeCounts:
    """updatedDesiredNodeCounts (the old getUnavailableNumbers): the budgets for one rolling-update step.

    ``should_run`` gives, for every node of the node list, NodeShouldRunDaemonPod's first answer
    (shouldRun). ``desiredNumberScheduled`` counts the nodes that should run the daemon; both budgets
    are scaled against it, rounding up; when both come out 0 for a non-empty DaemonSet,
    ``maxUnavailable`` becomes 1 (the API server never allows both zero, this guards older objects).
    Raises :class:`RolloutValueError` for a value that cannot be scaled, unavailability first.
    """
    pairs = should_run.items() if isinstance(should_run, Mapping) else should_run
    augmented: Mapping[str, Sequence[DaemonPod]]
    if isinstance(node_to_pods, DaemonPodsByNode):  # a view stays a view: its lists are built when looked at
        wanted_nodes = [node_name for node_name, wanted in pairs if wanted]
        desired = len(wanted_nodes)
        augmented = node_to_pods.with_empty(wanted_nodes)
    else:
        # a new dict; the lists are shared when they are lists already (nothing here or in rolling_update
        # changes them)
        extended = {name: pods if isinstance(pods, list) else list(pods) for name, pods in node_to_pods.items()}
        desired = 0
        for node_name, wanted in pairs:
            if not wanted:
                continue
            desired += 1
            extended.setdefault(node_name, [])
        augmented = extended
    max_surge, max_unavailable = rollout_budgets(ds, desired)
    return NodeCounts(max_surge, max_unavailable, desired, augmented)


def rollout_budgets(ds: DaemonSet, desired: int) -> tuple[int, int]:
    """updatedDesiredNodeCounts' budgets for ``desired`` nodes: ``(maxSurge, maxUnavailable)``, both scaled and
    rounded up, ``maxUnavailable`` 1 when both come out 0 for a non-empty DaemonSet. Raises
    :class:`RolloutValueError` for a value that cannot be scaled, unavailability first."""
    max_unavailable = unavailable_count(ds, desired)
    max_surge = surge_count(ds, desired)
    if desired > 0 and max_unavailable == 0 and max_surge == 0:
        max_unavailable = 1
    return max_surge, max_unavailable


# --- pods ---------------------------------------------------------------------------------------------------


def template_generation(ds: DaemonSet) -> int | None:
    """util.GetTemplateGeneration, with findUpdatedPodsOnNode's error handling: an unparsable annotation is None."""
    text = ds.metadata.annotations.get(TEMPLATE_GENERATION_ANNOTATION)
    return parse_int64(text) if text is not None else None


def is_pod_updated(pod: Pod, hash_: str, generation: int | None) -> bool:
    """util.IsPodUpdated: the pod carries the current revision's hash, or the legacy template generation."""
    labels = pod.metadata.labels
    template_matches = generation is not None and labels.get(TEMPLATE_GENERATION_LABEL, "") == str(generation)
    hash_matches = len(hash_) > 0 and labels.get(UNIQUE_LABEL_KEY, "") == hash_
    return hash_matches or template_matches


@dataclass(frozen=True, slots=True)
class DaemonPod:
    """What rollingUpdate looks at in one daemon pod.

    ``updated``: of the current revision (:func:`is_pod_updated`). ``ready``: the Ready condition is
    True. ``ready_since``: that condition's lastTransitionTime (None if absent or unparsable).
    ``deleting``: it has a deletionTimestamp.
    """

    name: str
    updated: bool
    ready: bool = False
    ready_since: datetime | None = None
    deleting: bool = False

    def available(self, min_ready_seconds: int, now: datetime) -> bool:
        """podutil.IsPodAvailable: Ready, and for at least ``min_ready_seconds`` by ``now`` (boundary included)."""
        if not self.ready:
            return False
        if min_ready_seconds == 0:
            return True
        if self.ready_since is None:
            return False
        return self.ready_since + timedelta(seconds=min_ready_seconds) <= now


def daemon_pod(pod: Pod, hash_: str, generation: int | None) -> DaemonPod:
    """The :class:`DaemonPod` for a pod of the DaemonSet whose current revision hash is ``hash_``."""
    return _daemon_pod(pod, hash_, generation, True)


def daemon_pods_by_node(pods_by_node: Mapping[str, Sequence[Pod]], hash_: str, generation: int | None,
                        min_ready_seconds: int = 0) -> DaemonPodsByNode:
    """:func:`daemon_pod` for every pod of ``pods_by_node``, node by node, as :func:`rolling_update` takes them.

    The lists are built as they are looked up (see :class:`DaemonPodsByNode`). ``min_ready_seconds`` is no
    longer needed (the view reads the Ready time from the pods' facts); it is accepted as before.
    """
    return DaemonPodsByNode({name: [pod_facts(p) for p in pods] for name, pods in pods_by_node.items()},
                            hash_, generation)


def daemon_facts_by_node(pods_by_node: Mapping[str, Sequence[PodFacts]], hash_: str, generation: int | None
                         ) -> DaemonPodsByNode:
    """:func:`daemon_pods_by_node` over the pods' facts (``nodes_to_daemon_facts``), as the sync holds them."""
    return DaemonPodsByNode(pods_by_node, hash_, generation)


def labels_updated(labels: Mapping[str, str], hash_: str, generation_label: str | None) -> bool:
    """is_pod_updated from a pod's labels, the revision's ``hash_`` and its template generation as a label value
    (None: the DaemonSet has none)."""
    return (len(hash_) > 0 and labels.get(UNIQUE_LABEL_KEY, "") == hash_) or (
        generation_label is not None and labels.get(TEMPLATE_GENERATION_LABEL, "") == generation_label)


class DaemonPodsByNode(Mapping[str, list[DaemonPod]]):
    """A DaemonSet's pods by target node as :class:`DaemonPod` lists, each built when its node is looked up.

    Nothing is kept: :func:`rolling_update` looks at each node once, so its DaemonPods die as soon as
    it moves on. Built all at once, thousands of them would outlive several collections of the young
    generations and so bring on full collections of the reconciler's whole heap (its cache), which at
    thousands of nodes cost more than the rolling-update walk itself. The walk without surge judges a
    node with one pod (nearly all of them) from the pod's facts (``facts``), without a DaemonPod. ``empty``
    nodes map to ``[]`` (updatedDesiredNodeCounts' additions); they come after the others, in their order.
    """

    def __init__(self, pods_by_node: Mapping[str, Sequence[PodFacts]], hash_: str, generation: int | None,
                 empty: Iterable[str] = ()) -> None:
        self.facts = pods_by_node
        self.hash = hash_
        self.generation = generation
        self.generation_label = None if generation is None else str(generation)
        self._empty = {name: None for name in empty if name not in pods_by_node}

    def with_empty(self, names: Iterable[str]) -> DaemonPodsByNode:
        """The same view plus an empty list for each of ``names`` it does not have yet."""
        empty = (*self._empty, *names) if self._empty else names
        return DaemonPodsByNode(self.facts, self.hash, self.generation, empty)

    def __getitem__(self, name: str) -> list[DaemonPod]:
        pods = self.facts.get(name)
        if pods is None:
            if name in self._empty:
                return []
            raise KeyError(name)
        return [self.daemon_pod(facts) for facts in pods]

    def updated(self, facts: PodFacts) -> bool:
        """is_pod_updated, from the pod's facts."""
        return labels_updated(facts.labels, self.hash, self.generation_label)

    def daemon_pod(self, facts: PodFacts) -> DaemonPod:
        """The pod's DaemonPod, from its facts (``ready_since`` only when the pod is Ready: only
        :meth:`DaemonPod.available` reads it, after ``ready``)."""
        # DaemonPod(...) without the frozen dataclass's __init__ (an object.__setattr__ call per field)
        result = _new(DaemonPod)
        _set_name(result, facts.name)
        _set_updated(result, self.updated(facts))
        _set_ready(result, facts.ready)
        _set_ready_since(result, facts.ready_since)
        _set_deleting(result, facts.deleting)
        return result

    def __contains__(self, name: object) -> bool:
        return name in self.facts or name in self._empty

    def __iter__(self) -> Iterator[str]:
        return itertools.chain(self.facts, self._empty)

    def __len__(self) -> int:
        return len(self.facts) + len(self._empty)


def _daemon_pod(pod: Pod, hash_: str, generation: int | None, with_since: bool) -> DaemonPod:
    ready = False
    since: datetime | None = None
    for condition in pod.status.conditions:  # is_pod_ready and get_pod_ready_condition in one loop
        if condition.type == POD_READY:
            ready = condition.status == CONDITION_TRUE
            if with_since and condition.last_transition_time:
                try:
                    since = parse_time(condition.last_transition_time)
                except ValueError:
                    since = None
            break
    meta = pod.metadata
    # DaemonPod(...) without the frozen dataclass's __init__ (an object.__setattr__ call per field):
    # this runs for every pod of every rolling-update sync
    result = _new(DaemonPod)
    _set_name(result, meta.name)
    labels = meta.labels  # is_pod_updated, inlined
    _set_updated(result, (len(hash_) > 0 and labels.get(UNIQUE_LABEL_KEY, "") == hash_) or (
        generation is not None and labels.get(TEMPLATE_GENERATION_LABEL, "") == str(generation)))
    _set_ready(result, ready)
    _set_ready_since(result, since)
    _set_deleting(result, meta.deletion_timestamp is not None)
    return result


_new: Final = object.__new__


_set_name: Final = slot_setter(DaemonPod, "name")
_set_updated: Final = slot_setter(DaemonPod, "updated")
_set_ready: Final = slot_setter(DaemonPod, "ready")
_set_ready_since: Final = slot_setter(DaemonPod, "ready_since")
_set_deleting: Final = slot_setter(DaemonPod, "deleting")


def find_updated_pods_on_node(pods: Iterable[DaemonPod]) -> tuple[DaemonPod | None, DaemonPod | None, bool]:
    """findUpdatedPodsOnNode: the node's one new and one old pod, ignoring pods being deleted.

    ``ok`` is False when there are two or more of either kind; upstream then leaves the node to the
    manage loop, which prunes the extras.
    """
    new: DaemonPod | None = None
    old: DaemonPod | None = None
    for pod in pods:
        if pod.deleting:
            continue
        if pod.updated:
            if new is not None:
                return None, None, False
            new = pod
        else:
            if old is not None:
                return None, None, False
            old = pod
    return new, old, True


# --- rollingUpdate ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutDecision:
    """What one rollingUpdate step asks of syncNodes: pods to delete (by name) and nodes to create a pod on.

    ``nodes_to_create`` is only ever non-empty when surging. The counters are upstream's at the end
    of the walk, for logs and tests: ``num_unavailable`` (no surge), ``num_surge`` and
    ``num_available`` (surge).
    """

    pods_to_delete: list[str] = field(default_factory=list)
    nodes_to_create: list[str] = field(default_factory=list)
    num_unavailable: int = 0
    num_surge: int = 0
    num_available: int = 0


def rolling_update(node_to_pods: Mapping[str, Sequence[DaemonPod]], *, max_surge: int, max_unavailable: int,
                   desired_number_scheduled: int, min_ready_seconds: int, now: datetime,
                   should_run: Mapping[str, bool] | None = None) -> RolloutDecision:
    """rollingUpdate's decision for one step, from :func:`updated_desired_node_counts`' results.

    ``node_to_pods`` is NodeCounts.node_to_pods: the DaemonSet's pods by target node (deleted terminal
    pods left out, as getNodesToDaemonPods(ds, false) does) with an empty entry for each node that
    should run the daemon but has no pod. ``should_run`` (surge only) maps every known node to
    NodeShouldRunDaemonPod's shouldRun; a node missing from it is unknown to the node lister, which
    makes upstream fail the whole step: :class:`NodeNotFoundError`.

    Without surge, old pods are deleted so that no more than ``max_unavailable`` nodes are without an
    available pod; unavailable old pods are always replaced, available ones only within the budget.
    With surge, a new pod is started beside each unavailable old pod, and beside up to ``max_surge``
    available ones, and an old pod is deleted once the new pod beside it is available; old pods on
    nodes that should no longer run the daemon go only while more nodes are available than desired.
    """
    if max_surge == 0:
        return _without_surge(node_to_pods, max_unavailable, min_ready_seconds, now)
    return _with_surge(node_to_pods, max_surge, desired_number_scheduled, min_ready_seconds, now, should_run or {})


def _without_surge(node_to_pods: Mapping[str, Sequence[DaemonPod]], max_unavailable: int, min_ready_seconds: int,
                   now: datetime) -> RolloutDecision:
    num_unavailable = 0
    allowed_replacements: list[str] = []
    candidates: list[str] = []
    # a node with one pod (nearly all of them), judged from its facts when the mapping is a view over the
    # pods' facts: what find_updated_pods_on_node and DaemonPod.available decide for it, without the DaemonPod
    view = node_to_pods if isinstance(node_to_pods, DaemonPodsByNode) else None
    facts_by_node: Mapping[str, Sequence[PodFacts]] = {} if view is None else view.facts
    hash_ = "" if view is None else view.hash
    generation_label = None if view is None else view.generation_label
    min_ready = timedelta(seconds=min_ready_seconds)
    for node_name in sorted(node_to_pods):
        if view is not None:
            pods = facts_by_node.get(node_name)
            if pods is not None and len(pods) == 1:
                facts = pods[0]
                if facts.deleting:
                    num_unavailable += 1  # no pod left that counts
                    continue
                since = facts.ready_since
                available = facts.ready and (min_ready_seconds == 0 or (since is not None and since + min_ready <= now))
                labels = facts.labels  # view.updated(facts), inlined
                if (hash_ and labels.get(UNIQUE_LABEL_KEY, "") == hash_) or (
                        generation_label is not None and labels.get(TEMPLATE_GENERATION_LABEL, "") == generation_label):
                    if not available:
                        num_unavailable += 1  # the new pod is not yet available
                elif not available:
                    allowed_replacements.append(facts.name)
                    num_unavailable += 1
                elif num_unavailable < max_unavailable:
                    candidates.append(facts.name)
                continue
        new, old, ok = find_updated_pods_on_node(node_to_pods[node_name])
        if not ok:
            num_unavailable += 1  # the manage loop prunes the node first; count it unavailable
            continue
        if (old is None) == (new is None):
            num_unavailable += 1  # nothing there, or both: the manage loop creates or deletes
        elif new is not None:
            if not new.available(min_ready_seconds, now):
                num_unavailable += 1
        elif old is not None:
            if not old.available(min_ready_seconds, now):
                allowed_replacements.append(old.name)
                num_unavailable += 1
            elif num_unavailable < max_unavailable:
                candidates.append(old.name)
    remaining = min(max(max_unavailable - num_unavailable, 0), len(candidates))
    return RolloutDecision(pods_to_delete=allowed_replacements + candidates[:remaining],
                           num_unavailable=num_unavailable)


def _with_surge(node_to_pods: Mapping[str, Sequence[DaemonPod]], max_surge: int, desired_number_scheduled: int,
                min_ready_seconds: int, now: datetime, should_run: Mapping[str, bool]) -> RolloutDecision:
    old_pods_to_delete: list[str] = []
    should_not_run_pods_to_delete: list[str] = []
    candidate_new_nodes: list[str] = []
    allowed_new_nodes: list[str] = []
    num_surge = 0
    num_available = 0

    def node_should_run(node_name: str) -> bool:
        if node_name not in should_run:
            raise NodeNotFoundError(node_name)
        return should_run[node_name]

    for node_name in sorted(node_to_pods):
        new, old, ok = find_updated_pods_on_node(node_to_pods[node_name])
        if not ok:
            num_surge += 1  # the manage loop prunes the node first; count it as surging
            continue
        # availability counts every node, even those being sunset for scheduling constraints
        shown = old if old is not None else new
        if shown is not None and shown.available(min_ready_seconds, now):
            num_available += 1
        if old is None:
            continue  # the manage loop creates a pod here if one is needed
        if new is None:
            if not old.available(min_ready_seconds, now):
                if not node_should_run(node_name):
                    old_pods_to_delete.append(old.name)
                    continue
                allowed_new_nodes.append(node_name)
            else:
                if not node_should_run(node_name):
                    should_not_run_pods_to_delete.append(old.name)
                    continue
                if num_surge >= max_surge:
                    continue
                candidate_new_nodes.append(node_name)
        elif not new.available(min_ready_seconds, now):
            num_surge += 1  # surged here already; waiting for the new pod
        else:
            old_pods_to_delete.append(old.name)  # the new pod is available: the old one goes

    remaining_surge = max_surge - num_surge
    # With surge the owner expects full availability: a pod on a node that should no longer run the
    # daemon goes only once more nodes are available than desired.
    deletable = num_available - desired_number_scheduled
    if deletable > 0:
        old_pods_to_delete.extend(should_not_run_pods_to_delete[:deletable])
    remaining_surge = min(max(remaining_surge, 0), len(candidate_new_nodes))
    return RolloutDecision(pods_to_delete=old_pods_to_delete,
                           nodes_to_create=allowed_new_nodes + candidate_new_nodes[:remaining_surge],
                           num_surge=num_surge, num_available=num_available)
