"""Builders for actions and the objects they carry, so tests say what differs and nothing else."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import msgspec

from messages.actions import IDEMPOTENCY_ANNOTATION, CreatePods, PodToCreate

_decisions = itertools.count(1)


def envelope(key: str, controller: str = "ReplicaSet/test/web") -> dict[str, Any]:
    """The fields every action carries."""
    return {"key": key, "decision_id": next(_decisions), "controller": controller,
            "issued_at": datetime.now(UTC).isoformat()}


def pod(name: str, key: str | None = None, *, annotations: dict[str, str] | None = None,
        finalizers: list[str] | None = None, container_name: str = "app") -> dict[str, Any]:
    """A pod body as the reconciler sends it: named, with its idempotency key (when given)."""
    meta: dict[str, Any] = {"name": name, "labels": {"app": "web"}, "annotations": dict(annotations or {})}
    if key is not None:
        meta["annotations"][IDEMPOTENCY_ANNOTATION] = key
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": container_name, "image": "registry.k8s.io/pause:3.9"}]}}


def create_pods(namespace: str, count: int, *, stem: str = "web", action_key: str | None = None,
                broken: frozenset[int] = frozenset()) -> CreatePods:
    """`count` pods `<stem>-<i>` keyed `<namespace>/<stem>/<i>`; the indexes in `broken` carry a
    container name the API rejects with 422."""
    pods = []
    for i in range(count):
        key = f"{namespace}/{stem}/{i}"
        body = pod(f"{stem}-{i}", key, container_name="Bad_Name" if i in broken else "app")
        pods.append(PodToCreate(key=key, pod=msgspec.Raw(msgspec.json.encode(body))))
    return CreatePods(**envelope(action_key or f"{namespace}/{stem}"), namespace=namespace, pods=pods)


def raw(value: Any) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode(value))
