"""The DaemonSet controller's manage step: podsShouldBeOnNode for every node, as pure functions.

Upstream (pkg/controller/daemon/daemon_controller.go manage, podsShouldBeOnNode, getNodesToDaemonPods,
getUnscheduledPodsWithoutNode) groups the DaemonSet's claimed pods by target node and, for each node
of the node lister, decides from NodeShouldRunDaemonPod's answer which daemon pods go and whether the
node needs a new one:

* shouldRun and no pod on the node: create one;
* shouldContinueRunning: pods being deleted are left alone; a Failed pod is deleted (Warning
  ``FailedDaemonPod``) unless the node's failed-pod backoff holds it back, in which case the DaemonSet is
  requeued after the backoff's current delay; a Succeeded pod is deleted (Normal ``SucceededDaemonPod``);
  of the others, without surge only the oldest is kept; with surge the oldest pod of the current revision
  and the oldest of any other are kept, and the old one goes too once it is not Ready or the new one is
  available; with surge and no pod left running, a new one is created (even beside a terminating one);
* not shouldContinueRunning: every pod not already being deleted goes.

Then unscheduled pods pinned to nodes that no longer exist are deleted (no one else would: the pod GC
only collects pods bound to missing nodes).

Upstream walks Go maps and the lister's node list in random order. Here nodes are walked in name order,
the pods of a node oldest first (podByCreationTimestampAndPhase: scheduled first, then creationTimestamp,
then name), and the pods of vanished nodes by node name then pod name; the results are in that order,
so the same inputs always give the same decision and the same burst-capped prefix in syncNodes.

Pure: no I/O, no clock (``now`` is passed in), inputs never mutated; the failed-pod backoff goes in and
comes out as values (:mod:`reconciler.core.daemonset.backoff`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Final

from kube.apps import DaemonSet
from kube.core import EVENT_NORMAL, EVENT_WARNING, POD_FAILED, POD_SUCCEEDED, Node, Pod
from kube.pods import PodFacts, is_pod_available, is_pod_ready, pod_facts
from kube.times import parse_time
from reconciler.core.daemonset import backoff
from reconciler.core.daemonset.backoff import FailedPodBackoff, failed_pods_backoff_key
from reconciler.core.daemonset.placement import Placement, node_placer
from reconciler.core.daemonset.pods import UNIQUE_LABEL_KEY

__all__ = [
    "FAILED_DAEMON_POD",
    "SUCCEEDED_DAEMON_POD",
    "DaemonEvent",
    "ManageResult",
    "NodePlan",
    "facts_by_node",
    "facts_order_key",
    "is_settled",
    "manage",
    "manage_facts",
    "manage_placed",
    "nodes_to_daemon_facts",
    "nodes_to_daemon_pods",
    "pod_order_key",
    "pods_should_be_on_node",
    "unscheduled_pods_without_node",
]

FAILED_DAEMON_POD: Final = "FailedDaemonPod"
SUCCEEDED_DAEMON_POD: Final = "SucceededDaemonPod"

_ZERO_TIME: Final = datetime(1, 1, 1, tzinfo=UTC)  # Go's zero time.Time: before every real timestamp
_TERMINAL: Final = (POD_SUCCEEDED, POD_FAILED)  # is_pod_terminal, for the loops over every pod
_NODE_NAME: Final = attrgetter("metadata.name")


@dataclass(frozen=True)
class DaemonEvent:
    """An Event to record on the DaemonSet (source component ``daemonset-controller``)."""

    type: str
    reason: str
    message: str


def _created(pod: Pod) -> datetime:
    text = pod.metadata.creation_timestamp
    if not text:
        return _ZERO_TIME
    try:
        return parse_time(text)
    except ValueError:
        return _ZERO_TIME


def pod_order_key(pod: Pod) -> tuple[bool, datetime, str]:
    """podByCreationTimestampAndPhase as a sort key: scheduled pods first, then oldest, then by name.

    A missing creationTimestamp is Go's zero time, older than any other.
    """
    return (not pod.spec.node_name, _created(pod), pod.metadata.name)


def nodes_to_daemon_pods(pods: Iterable[Pod], include_deleted_terminal: bool = False) -> dict[str, list[Pod]]:
    """getNodesToDaemonPods after claiming: the pods grouped by GetTargetNodeName, keys in name order.

    Pods with neither ``spec.nodeName`` nor a single ``metadata.name In [x]`` matchField are skipped; so are
    terminal pods being deleted, unless ``include_deleted_terminal`` (cleanupHistory wants them). A node's
    pods are listed oldest first (:func:`pod_order_key`). Only nodes with at least one pod are keys.
    """
    grouped = nodes_to_daemon_facts([pod_facts(p) for p in pods], include_deleted_terminal)
    return {name: [facts.pod for facts in grouped[name]] for name in sorted(grouped)}


def nodes_to_daemon_facts(pods: Iterable[PodFacts], include_deleted_terminal: bool = False
                          ) -> dict[str, list[PodFacts]]:
    """:func:`nodes_to_daemon_pods` over the pods' facts (kube.pods.PodFacts), which the sync reads instead of
    the pods: the target node, deletion and phase are fields of one tuple, read once per pod version.

    The keys are in no particular order (whoever walks them in name order sorts them: the rolling-update
    walk; the others look nodes up); a node's pods are oldest first, as :func:`nodes_to_daemon_pods` lists them.
    """
    grouped: dict[str, list[PodFacts]] = {}
    crowded: list[list[PodFacts]] = []  # the nodes with more than one pod: a DaemonSet has one, mostly
    for facts in pods:
        if not include_deleted_terminal and facts.deleting and facts.terminal:
            continue  # kubelet or pod GC is removing it; nothing left for the controller to do
        node_name = facts.node  # GetTargetNodeName
        if node_name is None:
            continue
        same_node = grouped.get(node_name)
        if same_node is None:
            grouped[node_name] = [facts]
        else:
            if len(same_node) == 1:
                crowded.append(same_node)
            same_node.append(facts)
    for same_node in crowded:
        same_node.sort(key=facts_order_key)
    return grouped


def facts_by_node(pods_by_node: Mapping[str, Sequence[Pod]]) -> dict[str, list[PodFacts]]:
    """The same mapping with each pod's facts in its place (for callers that hold pods)."""
    return {name: [pod_facts(p) for p in pods] for name, pods in pods_by_node.items()}


def facts_order_key(facts: PodFacts) -> tuple[bool, datetime, str]:
    return pod_order_key(facts.pod)


@dataclass(frozen=True)
class NodePlan:
    """podsShouldBeOnNode's answer for one node.

    ``backoff`` is the whole failed-pod backoff table afterwards; ``backoff_updates`` the entries this
    call moved on (Next), for the shell to save. ``requeue_after`` is set when a failed pod was held back
    by the backoff: upstream's ``enqueueDaemonSetAfter(ds, failedPodsBackoff.Get(key))``, the entry's
    whole current delay (not what is left of it).
    """

    nodes_needing_pods: list[str] = field(default_factory=list)
    pods_to_delete: list[Pod] = field(default_factory=list)
    events: list[DaemonEvent] = field(default_factory=list)
    backoff: Mapping[str, FailedPodBackoff] = field(default_factory=dict)
    backoff_updates: list[FailedPodBackoff] = field(default_factory=list)
    requeue_after: timedelta | None = None


def pods_should_be_on_node(node_name: str, daemon_pods: Sequence[Pod], placement: Placement, ds: DaemonSet,
                           hash_: str, *, max_surge: int, backoff_entries: Mapping[str, FailedPodBackoff],
                           now: datetime) -> NodePlan:
    """podsShouldBeOnNode for the node ``node_name``, given its daemon pods and NodeShouldRunDaemonPod's answer.

    ``daemon_pods`` are the DaemonSet's pods targeting the node (as :func:`nodes_to_daemon_pods` lists
    them; any order, they are sorted here). ``max_surge`` stands for util.AllowsSurge: only whether it is
    greater than 0 matters, so pass SurgeCount(ds, 1). ``hash_`` is the current revision's hash; with
    surge a pod is "new" when its ``controller-revision-hash`` label equals it (a missing label is ``""``).
    Availability of the new pod uses ``ds.spec.minReadySeconds`` at ``now``.
    """
    should_run, should_continue_running = placement
    pods = sorted(daemon_pods, key=pod_order_key) if len(daemon_pods) > 1 else list(daemon_pods)
    needing: list[str] = []
    deletes: list[Pod] = []
    events: list[DaemonEvent] = []
    table: Mapping[str, FailedPodBackoff] = backoff_entries
    updates: dict[str, FailedPodBackoff] = {}
    requeue: timedelta | None = None

    if should_run and not pods:
        needing.append(node_name)  # supposed to run here, and nothing is: create
    elif should_continue_running:
        running: list[Pod] = []
        for pod in pods:
            if pod.metadata.deletion_timestamp is not None:
                continue
            phase = pod.status.phase
            if phase == POD_FAILED:
                # the controller often fights a kubelet that rejects the pod: back off, per node
                key = failed_pods_backoff_key(ds, node_name)
                if backoff.is_in_backoff_since(table, key, now):
                    delay = backoff.get(table, key)
                    requeue = delay if requeue is None else min(requeue, delay)
                    continue
                table = backoff.next(table, key, now)
                updates[key] = table[key]
                events.append(DaemonEvent(EVENT_WARNING, FAILED_DAEMON_POD,
                                          f"Found failed daemon pod {pod.metadata.namespace}/{pod.metadata.name} "
                                          f"on node {node_name}, will try to kill it"))
                deletes.append(pod)
            elif phase == POD_SUCCEEDED:
                events.append(DaemonEvent(EVENT_NORMAL, SUCCEEDED_DAEMON_POD,
                                          f"Found succeeded daemon pod {pod.metadata.namespace}/{pod.metadata.name} "
                                          f"on node {node_name}, will try to delete it"))
                deletes.append(pod)
            else:
                running.append(pod)
        if max_surge <= 0:
            # without surge, keep only the oldest; with only terminating pods left, create nothing yet
            deletes.extend(running[1:])
        elif len(running) <= 1:
            if not running and should_run:
                needing.append(node_name)  # surging: at least one non-deleted pod on the node
        else:
            # keep the oldest new pod and the oldest old pod, delete the rest; then the old one goes too
            # if it is not Ready, or once the new one is available
            oldest_new: Pod | None = None
            oldest_old: Pod | None = None
            for pod in running:
                if pod.metadata.labels.get(UNIQUE_LABEL_KEY, "") == hash_:
                    if oldest_new is None:
                        oldest_new = pod
                        continue
                elif oldest_old is None:
                    oldest_old = pod
                    continue
                deletes.append(pod)
            if oldest_new is not None and oldest_old is not None and (
                    not is_pod_ready(oldest_old) or is_pod_available(oldest_new, ds.spec.min_ready_seconds, now)):
                deletes.append(oldest_old)
    elif pods:
        # not supposed to run here (not even to continue): delete every pod not already going
        deletes.extend(pod for pod in pods if pod.metadata.deletion_timestamp is None)

    return NodePlan(needing, deletes, events, table, list(updates.values()), requeue)


def unscheduled_pods_without_node(node_names: Iterable[str], node_to_pods: Mapping[str, Sequence[Pod]]) -> list[Pod]:
    """getUnscheduledPodsWithoutNode: pods with no ``spec.nodeName`` whose target node is not in ``node_names``.

    Pods being deleted are not excluded (upstream does not look). In node name order, then pod name order.
    """
    existing = node_names if isinstance(node_names, Mapping | set | frozenset) else set(node_names)
    result: list[Pod] = []
    for name in sorted(name for name in node_to_pods if name not in existing):
        pods = sorted(node_to_pods[name], key=lambda p: p.metadata.name)
        result.extend(pod for pod in pods if not pod.spec.node_name)
    return result


@dataclass(frozen=True)
class ManageResult:
    """manage()'s decision, before syncNodes caps it (:func:`reconciler.core.daemonset.pods.sync_nodes`).

    ``nodes_needing_pods`` and ``pods_to_delete`` are in the order syncNodes takes its burst from;
    ``events`` are to be recorded on the DaemonSet; ``requeue_after`` is the earliest backoff requeue
    (the work queue keeps the earliest of several AddAfter); ``backoff`` / ``backoff_updates`` as in
    :class:`NodePlan`, over all nodes; ``placements`` is NodeShouldRunDaemonPod's answer per node, in
    node name order, for the steps that follow (rolling update, status); ``unusual_nodes`` the nodes, in that
    order, other than those where the daemon should run and keep running and has exactly one pod (for the
    decision's summary, which lists those and only counts the rest).
    """

    nodes_needing_pods: list[str] = field(default_factory=list)
    pods_to_delete: list[Pod] = field(default_factory=list)
    events: list[DaemonEvent] = field(default_factory=list)
    requeue_after: timedelta | None = None
    backoff: Mapping[str, FailedPodBackoff] = field(default_factory=dict)
    backoff_updates: list[FailedPodBackoff] = field(default_factory=list)
    placements: dict[str, Placement] = field(default_factory=dict)
    unusual_nodes: list[str] = field(default_factory=list)


def manage(ds: DaemonSet, nodes: Iterable[Node], pods_by_node: Mapping[str, Sequence[Pod]], hash_: str, *,
           max_surge: int, backoff_entries: Mapping[str, FailedPodBackoff], now: datetime,
           comparison_operators: bool = False) -> ManageResult:
    """manage() without syncNodes: podsShouldBeOnNode over every node, then the pods of vanished nodes.

    ``nodes`` is the node lister's list; ``pods_by_node`` the DaemonSet's claimed pods by target node,
    deleted terminal pods left out (:func:`nodes_to_daemon_pods`). ``max_surge``, ``backoff_entries`` and
    ``now`` as in :func:`pods_should_be_on_node`; ``comparison_operators`` is the TaintTolerationComparisonOperators
    gate NodeShouldRunDaemonPod reads.
    """
    return manage_facts(ds, sorted(nodes, key=_NODE_NAME), facts_by_node(pods_by_node), hash_, max_surge=max_surge,
                        backoff_entries=backoff_entries, now=now, comparison_operators=comparison_operators)


def manage_facts(ds: DaemonSet, nodes: Sequence[Node], pods_by_node: Mapping[str, Sequence[PodFacts]], hash_: str,
                 *, max_surge: int, backoff_entries: Mapping[str, FailedPodBackoff], now: datetime,
                 comparison_operators: bool = False) -> ManageResult:
    """:func:`manage` over the pods' facts (:func:`nodes_to_daemon_facts`), ``nodes`` already in name order."""
    place = node_placer(ds, comparison_operators=comparison_operators)
    placements: dict[str, Placement] = {}
    visits: list[tuple[str, Placement]] = []  # every node, a name repeated as often as nodes bear it
    for node in nodes:
        name = node.metadata.name
        placement = placements[name] = place(node)
        visits.append((name, placement))
    return manage_placed(ds, placements, visits, pods_by_node, hash_, max_surge=max_surge,
                         backoff_entries=backoff_entries, now=now)


def is_settled(placement: Placement, pods: Sequence[PodFacts] | None) -> bool:
    """Whether :func:`manage_placed` may skip a node: the daemon should run and keep running there and its one pod
    is neither being deleted nor terminal. Such a node adds nothing to the result but its placement."""
    if not (placement.should_run and placement.should_continue_running) or pods is None or len(pods) != 1:
        return False
    facts = pods[0]
    return not facts.deleting and not facts.terminal


def manage_placed(ds: DaemonSet, placements: dict[str, Placement], visits: Iterable[tuple[str, Placement]],
                  pods_by_node: Mapping[str, Sequence[PodFacts]], hash_: str, *, max_surge: int,
                  backoff_entries: Mapping[str, FailedPodBackoff], now: datetime) -> ManageResult:
    """:func:`manage_facts` once every node's placement is known: ``placements`` by node name, in name order (kept
    as the result's), and ``visits`` the (name, placement) of the nodes to judge, in name order: every node, or
    (StatusTally.manage_inputs) all but the nodes :func:`is_settled` says may be skipped.

    A node whose one pod may stay is judged from its facts; the pods of any other node are handed to
    :func:`pods_should_be_on_node`.
    """
    needing: list[str] = []
    deletes: list[Pod] = []
    events: list[DaemonEvent] = []
    table: Mapping[str, FailedPodBackoff] = backoff_entries
    updates: dict[str, FailedPodBackoff] = {}
    requeue: timedelta | None = None
    unusual: list[str] = []
    for name, placement in visits:
        pods = pods_by_node.get(name)
        if not pods:
            unusual.append(name)
            # podsShouldBeOnNode without pods: create exactly when the daemon should run here
            if placement.should_run:
                needing.append(name)
            continue
        if len(pods) == 1 and placement.should_continue_running:
            if not placement.should_run:
                unusual.append(name)
            facts = pods[0]
            if not facts.deleting and not facts.terminal:
                continue  # the steady state: one running pod where it may stay, surge or not; nothing to do
        else:
            unusual.append(name)
        plan = pods_should_be_on_node(name, [facts.pod for facts in pods], placement, ds, hash_,
                                      max_surge=max_surge, backoff_entries=table, now=now)
        needing.extend(plan.nodes_needing_pods)
        deletes.extend(plan.pods_to_delete)
        events.extend(plan.events)
        table = plan.backoff
        updates.update((entry.key, entry) for entry in plan.backoff_updates)
        if plan.requeue_after is not None:
            requeue = plan.requeue_after if requeue is None else min(requeue, plan.requeue_after)
    # the pods' target nodes the lister does not know (none, mostly), by a set difference of the keys: a loop
    # looking each node up would cost as much as a tenth of this whole function
    vanished = {name: [facts.pod for facts in pods_by_node[name]] for name in pods_by_node.keys() - placements.keys()}
    deletes.extend(unscheduled_pods_without_node(placements, vanished))
    return ManageResult(needing, deletes, events, requeue, table, list(updates.values()), placements, unusual)
