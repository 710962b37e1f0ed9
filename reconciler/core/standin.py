"""The pipeline's stand-in controller: a namespace annotation asks for N pods.

It exists to carry decisions through the whole pipeline before the real controllers land, and
it already behaves as they will: a pure function of (cache state, expectations, clock, key)
returning a plan, expectations that keep it from creating twice while its creates are in
flight, and pod names derived from idempotency keys so a retried create makes no second pod.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kube.core import Pod
from kube.pods import is_pod_active
from reconciler.core.expectations import Expectations, expect

ANNOTATION = "kubus.io/stand-in-pods"
LABEL = "kubus.io/stand-in"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # generateName's alphabet


def controller_key(namespace: str) -> str:
    return f"StandIn/{namespace}"


def pod_name(key: str, prefix: str = "standin-") -> str:
    """A name in generateName's format, derived from the idempotency key instead of at random."""
    digest = hashlib.sha256(key.encode()).digest()
    return prefix + "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:5])


@dataclass(frozen=True)
class Plan:
    controller_key: str
    desired: int
    active: int
    reason: str
    creates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (key, pod body)
    expectations: Expectations | None = None  # set when the plan changes them


def desired_pods(annotations: dict[str, str]) -> int | None:
    value = annotations.get(ANNOTATION)
    if value is None:
        return None
    try:
        desired = int(value)
    except ValueError:
        raise ValueError(f"annotation {ANNOTATION}: {value!r} is not an integer") from None
    if desired < 0:
        raise ValueError(f"annotation {ANNOTATION}: {desired} is negative")
    return desired


def plan(namespace: str, annotations: dict[str, str], pods: list[Pod], expectations: Expectations,
         now: datetime, key_base: str) -> Plan:
    """What to do for one namespace. `key_base` is unique per decision (e.g. the stream sequence)."""
    key = controller_key(namespace)
    desired = desired_pods(annotations) or 0
    active = [p for p in pods if (p.metadata.labels or {}).get(LABEL) == namespace and is_pod_active(p)]
    if not expectations.satisfied(now):
        return Plan(key, desired, len(active), f"waiting for {expectations.adds} creations to be observed")
    missing = desired - len(active)
    if missing <= 0:
        return Plan(key, desired, len(active), "enough pods" if missing == 0 else "more pods than asked; "
                    "the stand-in never deletes")
    creates = []
    for i in range(missing):
        pod_key = f"{key}/{key_base}/{i}"
        name = pod_name(pod_key)
        creates.append((pod_key, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {LABEL: namespace},
                         "annotations": {"kubus.io/idempotency-key": pod_key}},
            "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9"}]},
        }))
    return Plan(key, desired, len(active), f"{missing} pods missing", creates, expect(missing, 0, now))
