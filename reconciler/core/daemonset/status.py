"""updateDaemonSetStatus and storeDaemonSetStatus's skip test as pure functions, and the SelectingAll event.

Upstream (pkg/controller/daemon/daemon_controller.go) counts, for every node the node lister knows:

* ``desiredNumberScheduled``: nodes where the daemon should run (NodeShouldRunDaemonPod's shouldRun);
* ``currentNumberScheduled``: those of them that have at least one daemon pod;
* ``numberReady`` / ``numberAvailable`` / ``updatedNumberScheduled``: those whose *oldest* daemon pod
  (podByCreationTimestampAndPhase: scheduled first, then creationTimestamp, then name) is Ready /
  Available after ``minReadySeconds`` at ``now`` / of the current revision (util.IsPodUpdated);
* ``numberMisscheduled``: nodes where it should not run (shouldRun false, even if it may keep running)
  but which have daemon pods;
* ``numberUnavailable`` = desired - available, never negative since only desired nodes count as
  available.

Pods on nodes the lister does not know count nowhere. Conditions are never set, and collisionCount is
kept as it is. The write is skipped when the seven counts are unchanged and ``observedGeneration`` is
already at least ``metadata.generation``; otherwise the counts are written, and ``observedGeneration`` is
raised to the generation only when the sync got past the expectations check (``updateObservedGen``).

Pure: no I/O, no clock (``now`` is passed in), inputs never mutated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final, NamedTuple

import msgspec

from kube.apps import DaemonSet, DaemonSetStatus
from kube.core import EVENT_WARNING, Node, Pod
from kube.pods import PodFacts
from kube.times import parse_time
from reconciler.core.daemonset.history import UNIQUE_LABEL_KEY
from reconciler.core.daemonset.manage import facts_by_node
from reconciler.core.daemonset.placement import Placement, node_placer
from reconciler.core.daemonset.rollout import TEMPLATE_GENERATION_LABEL, template_generation

__all__ = [
    "NO_COUNTS",
    "SELECTING_ALL_MESSAGE",
    "SELECTING_ALL_REASON",
    "DaemonSetEvent",
    "NodeCounts",
    "calculate_status",
    "calculate_status_facts",
    "needs_write",
    "node_counts",
    "oldest_pod",
    "resync_after",
    "resync_after_facts",
    "selecting_all_event",
    "summed",
    "uncounted_availability",
    "uncounted_availability_facts",
]

SELECTING_ALL_REASON: Final = "SelectingAll"
SELECTING_ALL_MESSAGE: Final = "This daemon set is selecting all pods. A non-empty selector is required."

_ZERO_TIME: Final = datetime.min.replace(tzinfo=UTC)  # Go's zero time.Time: before every real timestamp


class DaemonSetEvent(NamedTuple):
    """An Event to record on the DaemonSet (source component ``daemonset-controller``)."""

    type: str
    reason: str
    message: str


def selecting_all_event(ds: DaemonSet) -> DaemonSetEvent | None:
    """syncDaemonSet's guard against an empty selector: the Warning to record, or None to go on syncing.

    Upstream checks this right after listing the nodes (before the deletion check and constructHistory):
    when ``spec.selector`` equals ``&metav1.LabelSelector{}`` it records this event and returns nil, so
    the DaemonSet is neither managed nor has its status written, and is not requeued. A missing (nil)
    selector is not "selecting all" (it selects nothing). Upstream's ``reflect.DeepEqual`` also tells
    ``{}`` from ``{"matchLabels": {}}`` (an empty but non-nil map); the model decodes both the same way,
    so both count as empty here. The API server rejects either for apps/v1 DaemonSets anyway.
    """
    selector = ds.spec.selector
    if selector is None or selector.match_labels or selector.match_expressions:
        return None
    return DaemonSetEvent(EVENT_WARNING, SELECTING_ALL_REASON, SELECTING_ALL_MESSAGE)


def calculate_status(ds: DaemonSet, nodes: Sequence[Node], pods_by_node: Mapping[str, Sequence[Pod]], hash_: str,
                     now: datetime, *, update_observed_generation: bool,
                     placements: Mapping[str, Placement] | None = None,
                     comparison_operators: bool = False) -> DaemonSetStatus:
    """The status updateDaemonSetStatus would store (the new ``ds.status``; ``ds`` is untouched).

    ``pods_by_node`` is getNodesToDaemonPods: the DaemonSet's claimed pods keyed by their target node
    (``spec.nodeName``, or the DaemonSet's ``metadata.name`` matchField). Pods that are both terminal and
    being deleted are skipped, as the status pass's ``includeDeletedTerminal=false`` listing does, so the
    map may include them. ``hash_`` is the current revision's ``controller-revision-hash``.
    ``placements`` (node name -> NodeShouldRunDaemonPod's answer, for every node of ``nodes``) avoids
    computing placement twice when the caller has it; without it, placement is computed here (with the
    TaintTolerationComparisonOperators gate ``comparison_operators``).
    ``update_observed_generation`` is upstream's ``updateObservedGen``: False when the sync stopped at
    unsatisfied expectations.
    """
    if placements is not None:  # as calculate_status_facts wants them: the nodes', in their order
        placements = {node.metadata.name: placements[node.metadata.name] for node in nodes}
    return calculate_status_facts(ds, nodes, facts_by_node(pods_by_node), hash_, now,
                                  update_observed_generation=update_observed_generation, placements=placements,
                                  comparison_operators=comparison_operators)


def calculate_status_facts(ds: DaemonSet, nodes: Sequence[Node], pods_by_node: Mapping[str, Sequence[PodFacts]],
                           hash_: str, now: datetime, *, update_observed_generation: bool,
                           placements: Mapping[str, Placement] | None = None,
                           comparison_operators: bool = False) -> DaemonSetStatus:
    """:func:`calculate_status` over the pods' facts (kube.pods.PodFacts: Ready and since when, deleting,
    terminal, the labels), which the sync reads instead of the pods. ``placements``, when given, holds
    every node of ``nodes`` (and no other) in their order, and is walked instead of them."""
    generation = template_generation(ds)
    generation_label = None if generation is None else str(generation)
    min_ready = ds.spec.min_ready_seconds
    if placements is None:
        place = node_placer(ds, comparison_operators=comparison_operators)  # as manage_facts asks it
        pairs: Iterable[tuple[str, Placement]] = ((node.metadata.name, place(node)) for node in nodes)
    else:
        pairs = placements.items()
    desired, current, misscheduled, ready, available, updated = summed(
        node_counts(placement, pods_by_node.get(name), hash_, generation_label, min_ready, now)
        for name, placement in pairs)
    return msgspec.structs.replace(
        ds.status, desired_number_scheduled=desired, current_number_scheduled=current,
        number_misscheduled=misscheduled, number_ready=ready, updated_number_scheduled=updated,
        number_available=available, number_unavailable=desired - available,
        observed_generation=ds.metadata.generation if update_observed_generation else ds.status.observed_generation)


class NodeCounts(NamedTuple):
    """What one node adds to the status counts (each 0 or 1), and when its counted pod turns available."""

    desired: int
    current: int
    misscheduled: int
    ready: int
    available: int
    updated: int
    available_at: datetime | None = None  # Ready but not yet for minReadySeconds: when it will have been


NO_COUNTS: Final = NodeCounts(0, 0, 0, 0, 0, 0)
_MISSCHEDULED: Final = NodeCounts(0, 0, 1, 0, 0, 0)
_DESIRED: Final = NodeCounts(1, 0, 0, 0, 0, 0)
# a node the daemon runs on, by (ready, available, updated) when nothing is left to wait for: one shared value
# each, as thousands of nodes have one of them
_SCHEDULED: Final = {(ready, available, updated): NodeCounts(1, 1, 0, ready, available, updated)
                     for ready in (0, 1) for available in (0, 1) for updated in (0, 1)}


def summed(counts: Iterable[NodeCounts]) -> tuple[int, int, int, int, int, int]:
    """The six counts of ``counts``, each summed."""
    columns = list(zip(*counts, strict=True))
    if not columns:
        return 0, 0, 0, 0, 0, 0
    desired, current, misscheduled, ready, available, updated, _ = columns
    return sum(desired), sum(current), sum(misscheduled), sum(ready), sum(available), sum(updated)


def node_counts(placement: Placement, pods: Sequence[PodFacts] | None, hash_: str, generation_label: str | None,
                min_ready: int, now: datetime) -> NodeCounts:
    """One node's part of updateDaemonSetStatus: ``pods`` are its claimed pods oldest first
    (nodes_to_daemon_facts), ``generation_label`` the template generation as a label value (None: none)."""
    if pods:
        if len(pods) == 1:
            facts = pods[0]
            if facts.deleting and facts.terminal:
                pods = None  # deleted and terminal: not counted
        else:
            pods = [f for f in pods if not (f.deleting and f.terminal)]
            if pods:
                facts = _oldest(pods)
    if not placement.should_run:
        return _MISSCHEDULED if pods else NO_COUNTS
    if not pods:
        return _DESIRED
    ready = available = 0
    available_at = None
    if facts.ready:
        ready = 1
        # is_pod_available: Ready, and Ready for minReadySeconds by now when that is above 0
        since = facts.ready_since
        if min_ready == 0:
            available = 1
        elif since is not None:
            available_at = since + timedelta(seconds=min_ready)
            if available_at <= now:
                available, available_at = 1, None
    # is_pod_updated, inlined
    labels = facts.labels
    updated = 1 if (hash_ and labels.get(UNIQUE_LABEL_KEY, "") == hash_) or (
        generation_label is not None and labels.get(TEMPLATE_GENERATION_LABEL, "") == generation_label) else 0
    if available_at is None:
        return _SCHEDULED[(ready, available, updated)]
    return NodeCounts(1, 1, 0, ready, available, updated, available_at)


def needs_write(ds: DaemonSet, new: DaemonSetStatus) -> bool:
    """storeDaemonSetStatus's early return, inverted: a count changed, or observedGeneration lags.

    Only the seven counts of ``new`` are compared, and the lag is judged on the stored status
    (``ds.status.observedGeneration >= ds.metadata.generation``), not on ``new``: a sync held back by
    expectations, whose status keeps the old observedGeneration, still writes (the same counts) while
    the generation is ahead, as upstream does.
    """
    old = ds.status
    return not (old.desired_number_scheduled == new.desired_number_scheduled
                and old.current_number_scheduled == new.current_number_scheduled
                and old.number_misscheduled == new.number_misscheduled
                and old.number_ready == new.number_ready
                and old.updated_number_scheduled == new.updated_number_scheduled
                and old.number_available == new.number_available
                and old.number_unavailable == new.number_unavailable
                and old.observed_generation >= ds.metadata.generation)


def resync_after(ds: DaemonSet, status: DaemonSetStatus, pods_by_node: Mapping[str, Sequence[Pod]] | None = None,
                 now: datetime | None = None) -> timedelta | None:
    """The requeue after a successful status store (written or skipped as unchanged).

    ``minReadySeconds > 0`` and some counted pods are Ready but not yet Available: look again after
    ``minReadySeconds`` (no extra second here, unlike updatePod's), "as a last line of defense to guard
    against clock-skew". Upstream does not requeue when the status write failed: the sync's error
    requeues it, rate-limited.

    Otherwise, given the pods and the clock, kubus also requeues for a pod the status does not count (the
    younger of two pods on a node, a surge): see :func:`uncounted_availability`.
    """
    return resync_after_facts(ds, status, None if pods_by_node is None else facts_by_node(pods_by_node), now)


def resync_after_facts(ds: DaemonSet, status: DaemonSetStatus,
                       pods_by_node: Mapping[str, Sequence[PodFacts]] | None = None,
                       now: datetime | None = None) -> timedelta | None:
    """:func:`resync_after` over the pods' facts."""
    if ds.spec.min_ready_seconds > 0 and status.number_ready != status.number_available:
        return timedelta(seconds=ds.spec.min_ready_seconds)
    if pods_by_node is None or now is None:
        return None
    return uncounted_availability_facts(ds, pods_by_node, now)


def uncounted_availability(ds: DaemonSet, pods_by_node: Mapping[str, Sequence[Pod]], now: datetime
                           ) -> timedelta | None:
    """When to look again at a Ready, not yet Available pod that is not its node's oldest (a surge pod beside
    the old one): its Ready time + ``minReadySeconds`` + 1 s, the delay updatePod asks for when it turns
    Ready. None when there is none, or ``minReadySeconds`` is 0.

    A deliberate deviation (docs/daemonset.md): upstream relies on updatePod's requeue alone here, and the
    delaying queue keeps a key's earliest time, so a status requeue armed shortly before the pod turned Ready
    swallows it and fires before the pod is available; that sync's status counts the node's old pod, Ready
    equals Available, nothing requeues, and the old pod stays until an unrelated event. In every other case
    this requeue is at most as late as updatePod's and finds the pod available, as updatePod's would.
    """
    return uncounted_availability_facts(ds, facts_by_node(pods_by_node), now)


def uncounted_availability_facts(ds: DaemonSet, pods_by_node: Mapping[str, Sequence[PodFacts]], now: datetime
                                 ) -> timedelta | None:
    """:func:`uncounted_availability` over the pods' facts."""
    min_ready = ds.spec.min_ready_seconds
    if min_ready == 0:
        return None
    min_ready_delta = timedelta(seconds=min_ready)
    earliest: datetime | None = None
    for pods in pods_by_node.values():
        if len(pods) < 2:
            continue
        live = [f for f in pods if not (f.deleting and f.terminal)]
        if len(live) < 2:
            continue
        counted = _oldest(live).pod
        for facts in live:
            since = facts.ready_since
            # is_pod_available, and when it is not, ready_since: None without a readable Ready time (then
            # the pod is never available, and there is nothing to wait for)
            if facts.pod is counted or not facts.ready or since is None or since + min_ready_delta <= now:
                continue
            due = since + timedelta(seconds=min_ready + 1)
            earliest = due if earliest is None else min(earliest, due)
    return None if earliest is None else max(earliest - now, timedelta(0))


def oldest_pod(pods: Sequence[Pod]) -> Pod:
    """The first pod of podByCreationTimestampAndPhase: scheduled (``spec.nodeName`` set) before
    unscheduled, then the older ``creationTimestamp`` (a missing or unparsable one is Go's zero time, the
    oldest), then the smaller name. ``pods`` must not be empty."""
    return min(pods, key=_age_key)


def _age_key(pod: Pod) -> tuple[bool, datetime, str]:
    created = pod.metadata.creation_timestamp
    try:
        moment = parse_time(created) if created else _ZERO_TIME
    except ValueError:
        moment = _ZERO_TIME
    return not pod.spec.node_name, moment, pod.metadata.name


def _oldest(pods: Sequence[PodFacts]) -> PodFacts:
    """oldest_pod over the pods' facts."""
    return pods[0] if len(pods) == 1 else min(pods, key=_facts_age_key)


def _facts_age_key(facts: PodFacts) -> tuple[bool, datetime, str]:
    return _age_key(facts.pod)


