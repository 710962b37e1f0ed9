"""`kubus replay --explain`: for one sync, the inputs that mattered and why the decision is what it is.

Pure functions of the cache as the sync saw it (a replay calls them right after the tick's syncs: the
syncs never change the cache), the clock and the decision. They re-derive what the decision rests on with
the controllers' own functions and never change a decision:

- a DaemonSet: per node, NodeShouldRunDaemonPod's (shouldRun, shouldContinueRunning) and the reason
  (the template's nodeName, the node selector or required node affinity, the first untolerated taint and
  its effect), the DaemonSet's pods there (phase, Ready, revision hash), what the sync does on the node,
  and the rolling update's budget;
- a ReplicaSet: replicas wanted and active pods claimed (the diff), whether expectations allowed a
  manageReplicas, and on a scale-down the ranking of every candidate pod by upstream's
  ActivePodsWithRanks keys, the ones chosen for deletion marked.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kube.apps import DaemonSet, ReplicaSet
from kube.core import Node, Pod, Taint
from kube.labels import SelectorError, selector_from_label_selector
from kube.nodeaffinity import get_target_node_name, pod_matches_node_selector_and_affinity
from kube.pods import is_pod_ready
from kube.taints import NO_EXECUTE, NO_SCHEDULE, find_matching_untolerated_taint
from messages.keys import ControllerKey, ControllerKind, parse_controller_key
from reconciler.core.cache import Cache
from reconciler.core.claiming import claim_active_pods
from reconciler.core.controllers import Decided
from reconciler.core.daemonset.placement import daemon_pod_tolerations, node_should_run_daemon_pod
from reconciler.core.ranking import deletion_cost, pods_to_delete_order, ranks_by_related_pods_on_same_node
from reconciler.core.replicaset.status import replicas_of
from reconciler.core.replicaset.sync import indirectly_related_pods

HASH_LABEL = "controller-revision-hash"


def explain(cache: Cache, decided: Decided, now: datetime) -> dict[str, Any]:
    key = parse_controller_key(decided.controller_key)
    if key is not None and key.kind is ControllerKind.DAEMON_SET:
        return explain_daemonset(cache, decided, key, now)
    if key is not None and key.kind is ControllerKind.REPLICA_SET:
        return explain_replicaset(cache, decided, key, now)
    return {"key": decided.controller_key, "reason": decided.summary.get("reason", "")}


# --- DaemonSets -------------------------------------------------------------------------------------------
def placement_reason(node: Node, ds: DaemonSet) -> str:
    """Why NodeShouldRunDaemonPod answers what it does for `ds` on `node`."""
    spec = ds.spec.template.spec
    if spec.node_name and spec.node_name != node.metadata.name:
        return f"the template is pinned to node {spec.node_name} (spec.nodeName)"
    if (spec.node_selector or spec.affinity is not None) and not pod_matches_node_selector_and_affinity(spec, node):
        if spec.node_selector and any(node.metadata.labels.get(k) != v for k, v in spec.node_selector.items()):
            wanted = ", ".join(f"{k}={v}" for k, v in sorted(spec.node_selector.items()))
            return f"the node's labels do not match the nodeSelector ({wanted})"
        return "the node does not match the template's required node affinity"
    tolerations = daemon_pod_tolerations(spec)
    taints = node.spec.taints
    blocking = find_matching_untolerated_taint(taints, tolerations, lambda t: t.effect in (NO_SCHEDULE, NO_EXECUTE))
    if blocking is None:
        return "fits: selector, affinity and taints allow a daemon pod" if taints or spec.node_selector \
            else "fits: no selector, affinity or taint in the way"
    evicting = find_matching_untolerated_taint(taints, tolerations, lambda t: t.effect == NO_EXECUTE)
    if evicting is not None:
        return f"untolerated taint {_taint(evicting)}: no new pod, and a running one goes"
    return f"untolerated taint {_taint(blocking)}: no new pod, but a running one stays"


def _taint(taint: Taint) -> str:
    return f"{taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect}"


def _pod_facts(pod: Pod) -> dict[str, Any]:
    return {"name": pod.metadata.name, "phase": pod.status.phase or "Pending", "ready": is_pod_ready(pod),
            "hash": pod.metadata.labels.get(HASH_LABEL, ""),
            **({"deleting": True} if pod.metadata.deletion_timestamp is not None else {})}


def explain_daemonset(cache: Cache, decided: Decided, controller: ControllerKey, now: datetime) -> dict[str, Any]:
    summary = decided.summary
    namespace, name = controller.namespace, controller.name
    out: dict[str, Any] = {"key": decided.controller_key, "reason": summary.get("reason", "")}
    ds = cache.named("DaemonSet", namespace, name)
    if not isinstance(ds, DaemonSet):
        return out
    strategy = ds.spec.update_strategy
    rolling = strategy.rolling_update
    out.update({"hash": summary.get("hash"), "generation": ds.metadata.generation, "strategy": strategy.type,
                "max_unavailable": None if rolling is None else str(rolling.max_unavailable),
                "max_surge": None if rolling is None else str(rolling.max_surge)})
    pods: dict[str, list[Pod]] = {}
    for pod in sorted(cache.controlled_by("Pod", namespace, ds.metadata.uid), key=lambda p: p.metadata.name):
        node_name = pod.spec.node_name or get_target_node_name(pod)
        if node_name is not None:
            pods.setdefault(node_name, []).append(pod)
    creates = set(summary.get("creates") or ())
    deletes = set(summary.get("deletes") or ())
    recorded = summary.get("nodes")  # the sync's own per-node answers (a count when it only wrote status)
    if not isinstance(recorded, dict):
        recorded = {}
    nodes = []
    for node in sorted(cache.all("Node"), key=lambda n: n.metadata.name):
        node_name = node.metadata.name
        should_run, should_continue_running = node_should_run_daemon_pod(node, ds)
        here = pods.get(node_name, [])
        doing = [f"create a pod (revision {summary.get('hash')})"] if node_name in creates else []
        doing += [f"delete {p.metadata.name}" + _why_delete(p, summary, should_continue_running)
                  for p in here if p.metadata.name in deletes]
        entry: dict[str, Any] = {"node": node_name, "should_run": should_run,
                                 "should_continue_running": should_continue_running,
                                 "why": placement_reason(node, ds), "pods": [_pod_facts(p) for p in here],
                                 "action": "; ".join(doing)}
        sync_saw = recorded.get(node_name)
        if isinstance(sync_saw, dict) and (sync_saw.get("should_run"), sync_saw.get("should_continue_running")) \
                != (should_run, should_continue_running):
            entry["sync_saw"] = sync_saw  # the sync's own answer, should the two ever disagree
        nodes.append(entry)
    out["nodes"] = nodes
    for key in ("nodes_needing_pods", "deferred_nodes", "deferred_deletes", "rollout", "create_error",
                "revisions_created", "revisions_deleted", "waiting_for_history", "warnings"):
        if summary.get(key):
            out[key] = summary[key]
    return out


def _why_delete(pod: Pod, summary: dict[str, Any], should_continue_running: bool) -> str:
    if not should_continue_running:
        return " (the node should not run it)"
    if pod.status.phase == "Failed":
        return " (failed)"
    if pod.status.phase == "Succeeded":
        return " (succeeded)"
    rollout = summary.get("rollout")
    if isinstance(rollout, dict) and pod.metadata.name in (rollout.get("deleting") or ()):
        return " (rolling update: an old revision's pod, within maxUnavailable)"
    return " (a second pod on the node)"


# --- ReplicaSets ------------------------------------------------------------------------------------------
def explain_replicaset(cache: Cache, decided: Decided, controller: ControllerKey, now: datetime) -> dict[str, Any]:
    summary = decided.summary
    namespace, name = controller.namespace, controller.name
    out: dict[str, Any] = {"key": decided.controller_key, "reason": summary.get("reason", "")}
    for key in ("replicas", "active", "diff", "needs_sync"):
        if key in summary:
            out[key] = summary[key]
    rs = cache.named("ReplicaSet", namespace, name)
    if not isinstance(rs, ReplicaSet):
        return out
    try:
        selector = selector_from_label_selector(rs.spec.selector)
    except SelectorError:
        return out
    claim, _ = claim_active_pods(rs.metadata, selector, cache.owned_or_orphans("Pod", namespace, rs.metadata.uid))
    active = claim.claimed
    out.setdefault("replicas", replicas_of(rs))
    out.setdefault("active", len(active))
    out.setdefault("diff", len(active) - replicas_of(rs))
    out["creates"] = summary.get("creates", 0)
    deleting = list(summary.get("deletes") or ())
    out["deletes"] = deleting
    if summary.get("manage_error"):
        out["manage_error"] = summary["manage_error"]
    if deleting:
        out["ranking"] = ranking(cache, rs, active, set(deleting), now)
    return out


def ranking(cache: Cache, rs: ReplicaSet, active: Sequence[Pod], chosen: set[str], now: datetime
            ) -> list[dict[str, Any]]:
    """Every active pod in upstream's deletion order (first = deleted first), with the keys it sorts by."""
    pods = list(active)
    related = indirectly_related_pods(rs, cache)
    ranks = ranks_by_related_pods_on_same_node(pods, related)
    rank_of = {p.metadata.uid: r for p, r in zip(pods, ranks, strict=True)}
    if len(chosen) == len(pods):
        ordered = sorted(pods, key=lambda p: p.metadata.name)  # all go: no ranking is needed
    else:
        ordered = pods_to_delete_order(pods, ranks, now)
    rows = []
    for position, pod in enumerate(ordered, 1):
        ready_since = next((c.last_transition_time for c in pod.status.conditions
                            if c.type == "Ready" and c.status == "True"), None)
        rows.append({
            "position": position, "pod": pod.metadata.name, "deleted": pod.metadata.name in chosen,
            "node": pod.spec.node_name or "", "phase": pod.status.phase or "Pending", "ready": is_pod_ready(pod),
            "deletion_cost": deletion_cost(pod.metadata.annotations or {}),
            "rank": rank_of[pod.metadata.uid], "ready_since": ready_since,
            "restarts": max((c.restart_count for c in pod.status.container_statuses), default=0),
            "created": pod.metadata.creation_timestamp, "uid": pod.metadata.uid,
        })
    return rows
