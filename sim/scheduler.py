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
from collections.abc import Mapping
from itertools import repeat
from math import ceil
from operator import lt
from typing import Any, Final

import msgspec

from kube import codec
from kube.core import Node, Pod, PodSpec, Taint
from kube.nodeaffinity import get_target_node_name, pod_matches_node_selector_and_affinity
from kube.taints import tolerations_tolerate_taint
from sim import resources as R
from sim import status as errors
from sim.apiserver import bind_pod
from sim.defaulting import parse_quantity
from sim.registry import Registry, format_time
from sim.store import DELETED, HistoryEvent

log = logging.getLogger("kubus.sim.scheduler")
_encode = msgspec.json.encode

DEFAULT_SCHEDULER = "default-scheduler"
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")
_MIN_FEASIBLE = 100
DEFAULT_PODS: Final = 110  # the kubelet's --max-pods default, and the sim's nodes' capacity unless told otherwise


def allowed_pods(allocatable: Mapping[str, object] | None) -> int:
    """NodeInfo's Allocatable.AllowedPodNumber: `allocatable.pods` read as the quantity it is (kube-apiserver
    canonicalises 1000 to "1k", 2048 to "2Ki"), rounded up as Quantity.Value() rounds. A node that states no
    (or no readable) pod capacity is given the sim's default, DEFAULT_PODS."""
    parsed = parse_quantity((allocatable or {}).get("pods"))
    if parsed is None or parsed[0] < 0:
        return DEFAULT_PODS
    return ceil(parsed[0])


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
        self._capacity: dict[str, int] = {}
        self._feasible: dict[bytes, tuple[list[str], Counter[str]]] = {}
        self._wakeup = asyncio.Event()
        self._offset = 0
        self.store.add_listener(self._observe)

    # --- bookkeeping from store events -------------------------------------------------------
    def _observe(self, event: HistoryEvent) -> None:
        if event.resource is R.PODS:
            self._observe_pod(event)
        elif event.resource is R.NODES:
            self._feasible.clear()
            if event.type == DELETED:
                self._nodes.pop(event.name, None)
            if self._unschedulable:
                # a node changed: pods that fit nowhere may fit now
                for key in self._unschedulable:
                    self._pending[key] = None
                self._unschedulable.clear()
                self._wakeup.set()

    def _observe_pod(self, event: HistoryEvent) -> None:
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
            node = codec.decode_builtin(entry.obj, Node)
            cached = (entry.rv, node)
            self._nodes[name] = cached
            self._capacity[name] = allowed_pods(node.status.allocatable)
        return cached[1]

    def _schedule(self, namespace: str, name: str) -> None:
        entry = self.store.get(R.PODS, namespace, name)
        if entry is None or entry.obj.get("spec", {}).get("nodeName") or entry.obj["metadata"].get(
                "deletionTimestamp"):
            return
        raw_spec = entry.obj.get("spec") or {}
        spec = codec.decode_builtin(raw_spec, PodSpec)
        target = get_target_node_name(Pod(spec=spec))
        if target:
            feasible, reasons = self._filter(spec, [target])
        else:
            # pods of one controller share their constraints: filter the nodes once per shape
            shape = _encode([raw_spec.get("nodeSelector"), raw_spec.get("affinity"), raw_spec.get("tolerations")])
            cached = self._feasible.get(shape)
            if cached is None:
                cached = self._feasible[shape] = self._filter(spec, self._nodes_list())
            feasible, reasons = cached
        chosen = self._least_loaded(feasible)
        if chosen is None:
            if feasible:
                reasons = Counter({"Too many pods": len(feasible)})
            self._mark_unschedulable(namespace, name, reasons, self.store.count(R.NODES))
            return
        bind_pod(self.registry, namespace, name, chosen)

    def _filter(self, spec: PodSpec, names: list[str]) -> tuple[list[str], Counter[str]]:
        reasons: Counter[str] = Counter()
        feasible = []
        for node_name in names:
            node = self._node(node_name)
            why = "node(s) didn't match Pod's node affinity/selector" if node is None else self._unfit(spec, node)
            if why:
                reasons[why] += 1
            else:
                feasible.append(node_name)
        return feasible, reasons

    def _least_loaded(self, feasible: list[str]) -> str | None:
        """Like kube-scheduler on a big cluster, look at a rotating sample, not at every node."""
        if not feasible:
            return None
        count = len(feasible)
        sample = min(count, self._sample_size(count))
        self._offset = (self._offset + 1) % count
        # The usual case, every sampled node below its capacity, in C-level passes rather than a Python loop per
        # node (up to 100 a pod): the first node of the least load, as the loop below picks it.
        window = feasible[self._offset:self._offset + sample]
        if len(window) < sample:
            window += feasible[:sample - len(window)]
        loads = list(map(self.pods_on_node.get, window, repeat(0)))
        if all(map(lt, loads, map(self._capacity.get, window, repeat(DEFAULT_PODS)))):
            return window[loads.index(min(loads))]
        best: str | None = None
        best_load = 0
        for i in range(sample):
            node_name = feasible[(self._offset + i) % count]
            load = self.pods_on_node[node_name]
            if load >= self._capacity.get(node_name, DEFAULT_PODS):
                continue
            if best is None or load < best_load:
                best, best_load = node_name, load
        if best is None and sample < count:  # the sample was full; look everywhere before giving up
            best = next((n for n in feasible if self.pods_on_node[n] < self._capacity.get(n, DEFAULT_PODS)), None)
        return best

    def _nodes_list(self) -> list[str]:
        return [e.obj["metadata"]["name"] for e in self.store.iter(R.NODES)]

    @staticmethod
    def _sample_size(total: int) -> int:
        """kube-scheduler's adaptive percentageOfNodesToScore (50% at 100 nodes, down to 5%), capped
        at 100 nodes because each look costs far more in Python than in Go."""
        if total < _MIN_FEASIBLE:
            return total
        percent = max(5, 50 - total // 125)
        return min(_MIN_FEASIBLE, max(1, total * percent // 100))

    def _unfit(self, spec: PodSpec, node: Node) -> str | None:
        if node.spec.unschedulable and not tolerations_tolerate_taint(spec.tolerations, UNSCHEDULABLE_TAINT):
            return "node(s) were unschedulable"
        if not pod_matches_node_selector_and_affinity(spec, node):
            return "node(s) didn't match Pod's node affinity/selector"
        for taint in node.spec.taints:
            if taint.effect in ("NoSchedule", "NoExecute") and not tolerations_tolerate_taint(
                    spec.tolerations, taint):
                return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
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
