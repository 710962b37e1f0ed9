"""Turning a batch of applied changes into decisions: which controllers to sync, and their plans.

Pure apart from reading the cache: given the changes, the persisted expectations and the clock it
returns the expectations to save and the decisions (with their actions) to record. For now the
only controller is the pipeline's stand-in (reconciler.core.standin); the ReplicaSet and
DaemonSet controllers plug in here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from kube.core import Pod
from messages.actions import Action, CreatePods, PodToCreate
from reconciler.cache import Cache, Change, Namespace
from reconciler.core import standin
from reconciler.core.expectations import Expectations

_encode = msgspec.json.encode


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


@dataclass
class Outcome:
    decisions: list[Decided] = field(default_factory=list)
    expectations: dict[str, Expectations] = field(default_factory=dict)  # changed ones, to save


def affected(changes: list[tuple[Change, int, str]]) -> dict[str, tuple[int, str]]:
    """Stand-in controller keys touched by the changes -> (last seq, trigger msg id)."""
    keys: dict[str, tuple[int, str]] = {}
    for change, seq, msg_id in changes:
        if change.kind == "Namespace":
            keys[standin.controller_key(change.name)] = (seq, msg_id)
        elif change.kind == "Pod":
            keys[standin.controller_key(change.namespace)] = (seq, msg_id)
    return keys


def observe(changes: list[tuple[Change, int, str]], expectations: dict[str, Expectations]) -> set[str]:
    """CreationObserved / DeletionObserved for pods that appeared or went; returns changed keys."""
    touched = set()
    for change, _seq, _msg in changes:
        if change.kind != "Pod":
            continue
        key = standin.controller_key(change.namespace)
        current = expectations.get(key)
        if current is None:
            continue
        if change.old is None and change.new is not None and _owned(change.new, change.namespace):
            expectations[key] = current.creation_observed()
            touched.add(key)
        elif change.new is None and change.old is not None and _owned(change.old, change.namespace):
            expectations[key] = current.deletion_observed(f"{change.namespace}/{change.name}")
            touched.add(key)
    return touched


def _owned(pod: Pod, namespace: str) -> bool:
    return (pod.metadata.labels or {}).get(standin.LABEL) == namespace


def decide(cache: Cache, changes: list[tuple[Change, int, str]], expectations: dict[str, Expectations],
           now: datetime, now_iso: str) -> Outcome:
    outcome = Outcome()
    for key in observe(changes, expectations):
        outcome.expectations[key] = expectations[key]
    namespaces = {ns.name: ns for ns in cache.all("Namespace") if isinstance(ns, Namespace)}
    for key, (seq, trigger) in sorted(affected(changes).items()):
        namespace = key.split("/", 1)[1]
        ns = namespaces.get(namespace)
        if ns is None or ns.deleting or standin.ANNOTATION not in ns.annotations:
            continue
        started = time.perf_counter()
        correlation = f"{key}@{seq}"
        current = expectations.get(key, Expectations())
        try:
            plan = standin.plan(namespace, ns.annotations, cache.in_namespace("Pod", namespace), current, now,
                                str(seq))
        except ValueError as exc:
            where = f"metadata.annotations[{standin.ANNOTATION}]"
            outcome.decisions.append(Decided(key, "StandIn", namespace, correlation, seq, trigger,
                                             {"error": str(exc), "field": where},
                                             (time.perf_counter() - started) * 1000))
            continue
        summary = {"desired": plan.desired, "active": plan.active, "reason": plan.reason,
                   "creates": [k for k, _ in plan.creates]}
        decided = Decided(key, "StandIn", namespace, correlation, seq, trigger, summary,
                          (time.perf_counter() - started) * 1000)
        if plan.creates:
            decided.actions.append(CreatePods(
                key=f"{correlation}/create", decision_id=0, controller=key, issued_at=now_iso,
                namespace=namespace,
                pods=[PodToCreate(key=k, pod=msgspec.Raw(_encode(body))) for k, body in plan.creates]))
        if plan.expectations is not None:
            expectations[key] = plan.expectations
            outcome.expectations[key] = plan.expectations
        outcome.decisions.append(decided)
    return outcome
