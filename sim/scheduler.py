"""The simulated kube-scheduler: binds pending pods to nodes.

Filters as the default plugins do for what the controllers rely on: NodeName, NodeUnschedulable
(tolerable through the `node.kubernetes.io/unschedulable` taint), NodeAffinity (nodeSelector and
required terms, matchFields on metadata.name included), TaintToleration (NoSchedule and NoExecute)
and the node's pod capacity. Like kube-scheduler on large clusters it stops searching once it has
found enough feasible nodes (percentageOfNodesToScore), then picks the one with the fewest pods.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from kube import codec
from kube.core import Node, Pod, PodSpec, Taint
from kube.nodeaffinity import get_target_node_name, pod_matches_node_selector_and_affinity
from kube.taints import tolerations_tolerate_taint
from sim import resources as R
from sim import status as errors
from sim.apiserver import bind_pod
from sim.registry import Registry, format_time
from sim.store import DELETED, Event

log = logging.getLogger("kubus.sim.scheduler")

DEFAULT_SCHEDULER = "default-scheduler"
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")
_MIN_FEASIBLE = 100


def _is_terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class Scheduler:
    def __init__(self, registry: Registry):
        self.registry = registry
        self.store = registry.store
        self._pending: dict[tuple[str, str], None] = {}
        self._unschedulable: set[tuple[str, str]] = set()
        self.pods_on_node: Counter[str] = Counter()
        self._nodes: dict[str, tuple[int, Node]] = {}
        self._wakeup = asyncio.Event()
        self._offset = 0
        self.store.add_listener(self._observe)

    # --- bookkeeping from store events -------------------------------------------------------
    def _observe(self, event: Event) -> None:
        if event.resource is R.PODS:
            self._observe_pod(event)
        elif event.resource is R.NODES:
            if event.type == DELETED:
                self._nodes.pop(event.name, None)
            if self._unschedulable:
                # a node changed: pods that fit nowhere may fit now
                for key in self._unschedulable:
                    self._pending[key] = None
                self._unschedulable.clear()
                self._wakeup.set()

    def _observe_pod(self, event: Event) -> None:
        new = event.entry.obj
        old = event.old if event.type != "ADDED" else None
        old_node = old.get("spec", {}).get("nodeName") if old and not _is_terminal(old) else None
        new_node = None if event.type == DELETED or _is_terminal(new) else new.get("spec", {}).get("nodeName")
        if old_node:
            self.pods_on_node[old_node] -= 1
        if new_node:
            self.pods_on_node[new_node] += 1
        key = (event.namespace, event.name)
        if event.type == DELETED or new_node or new["metadata"].get("deletionTimestamp"):
            self._pending.pop(key, None)
            self._unschedulable.discard(key)
            return
        if new.get("spec", {}).get("schedulerName", DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER:
            return
        if event.type == "ADDED" and key not in self._unschedulable:
            self._pending[key] = None
            self._wakeup.set()

    # --- the scheduling loop ------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch = list(self._pending)[:200]
                for key in batch:
                    self._pending.pop(key, None)
                    try:
                        self._schedule(*key)
                    except errors.ApiError as exc:
                        log.debug("binding %s/%s failed: %s", key[0], key[1], exc.message)
                    except Exception:
                        log.exception("scheduling %s/%s failed", *key)
                await asyncio.sleep(0)  # let the API server answer requests between batches

    def _node(self, name: str) -> Node | None:
        entry = self.store.get(R.NODES, "", name)
        if entry is None:
            return None
        cached = self._nodes.get(name)
        if cached is None or cached[0] != entry.rv:
            cached = (entry.rv, codec.decode_builtin(entry.obj, Node))
            self._nodes[name] = cached
        return cached[1]

    def _schedule(self, namespace: str, name: str) -> None:
        entry = self.store.get(R.PODS, namespace, name)
        if entry is None or entry.obj.get("spec", {}).get("nodeName") or entry.obj["metadata"].get(
                "deletionTimestamp"):
            return
        spec = codec.decode_builtin(entry.obj.get("spec") or {}, PodSpec)
        target = get_target_node_name_from_spec(spec)
        candidates = [target] if target else self._candidate_order()
        reasons: Counter[str] = Counter()
        feasible: list[str] = []
        wanted = self._feasible_to_find(len(candidates))
        for node_name in candidates:
            node = self._node(node_name)
            if node is None:
                reasons["node(s) didn't match Pod's node affinity/selector"] += 1
                continue
            why = self._unfit(spec, node)
            if why:
                reasons[why] += 1
                continue
            feasible.append(node_name)
            if len(feasible) >= wanted:
                break
        if not feasible:
            self._mark_unschedulable(namespace, name, reasons, len(self._nodes_list()))
            return
        chosen = min(feasible, key=lambda n: (self.pods_on_node[n], n))
        bind_pod(self.registry, namespace, name, chosen)

    def _nodes_list(self) -> list[str]:
        return [e.obj["metadata"]["name"] for e in self.store.iter(R.NODES)]

    def _candidate_order(self) -> list[str]:
        names = self._nodes_list()
        if not names:
            return names
        self._offset = (self._offset + 1) % len(names)
        return names[self._offset:] + names[: self._offset]

    @staticmethod
    def _feasible_to_find(total: int) -> int:
        """kube-scheduler's adaptive percentageOfNodesToScore: 50% at 100 nodes, down to 5%."""
        if total < _MIN_FEASIBLE:
            return total
        percent = max(5, 50 - total // 125)
        return max(_MIN_FEASIBLE, total * percent // 100)

    def _unfit(self, spec: PodSpec, node: Node) -> str | None:
        if node.spec.unschedulable and not tolerations_tolerate_taint(spec.tolerations, UNSCHEDULABLE_TAINT):
            return "node(s) were unschedulable"
        if not pod_matches_node_selector_and_affinity(spec, node):
            return "node(s) didn't match Pod's node affinity/selector"
        for taint in node.spec.taints:
            if taint.effect in ("NoSchedule", "NoExecute") and not tolerations_tolerate_taint(
                    spec.tolerations, taint):
                return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
        capacity = int((node.status.allocatable or {}).get("pods", "110"))
        if self.pods_on_node[node.metadata.name] >= capacity:
            return "Too many pods"
        return None

    def _mark_unschedulable(self, namespace: str, name: str, reasons: Counter[str], total: int) -> None:
        self._unschedulable.add((namespace, name))
        detail = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
        message = f"0/{total} nodes are available: {detail}." if detail else f"0/{total} nodes are available."
        current = self.store.get(R.PODS, namespace, name)
        if current is None:
            return
        conditions = (current.obj.get("status") or {}).get("conditions") or []
        existing = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if existing and existing.get("status") == "False" and existing.get("message") == message:
            return
        pod = current.clone()
        kept = [c for c in conditions if c.get("type") != "PodScheduled"]
        kept.append({"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                     "lastTransitionTime": format_time(self.registry.clock()), "reason": "Unschedulable",
                     "message": message})
        pod.setdefault("status", {})["conditions"] = kept
        self.store.put(R.PODS, pod, "MODIFIED", current.obj)


def get_target_node_name_from_spec(spec: PodSpec) -> str | None:
    """The node a pod is pinned to by nodeName or a single matchFields metadata.name term."""
    return get_target_node_name(Pod(spec=spec))
