"""Taints and tolerations (core/v1 ``Toleration.ToleratesTaint`` and component-helpers).

A toleration tolerates a taint when its effect is empty or equal, its key is
empty or equal, and its operator agrees: ``""``/``Equal`` compare values,
``Exists`` accepts any value, ``Lt``/``Gt`` (1.35, alpha) compare the values as
int64 (taint < toleration, taint > toleration) and fail on anything else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from kube.core import Taint, Toleration
from kube.intstr import parse_int64

__all__ = ["find_matching_untolerated_taint", "tolerates_taint", "tolerations_tolerate_taint"]

NO_SCHEDULE: Final = "NoSchedule"
PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
NO_EXECUTE: Final = "NoExecute"

TAINT_NODE_NOT_READY: Final = "node.kubernetes.io/not-ready"
TAINT_NODE_UNREACHABLE: Final = "node.kubernetes.io/unreachable"
TAINT_NODE_UNSCHEDULABLE: Final = "node.kubernetes.io/unschedulable"
TAINT_NODE_MEMORY_PRESSURE: Final = "node.kubernetes.io/memory-pressure"
TAINT_NODE_DISK_PRESSURE: Final = "node.kubernetes.io/disk-pressure"
TAINT_NODE_PID_PRESSURE: Final = "node.kubernetes.io/pid-pressure"
TAINT_NODE_NETWORK_UNAVAILABLE: Final = "node.kubernetes.io/network-unavailable"


def tolerates_taint(toleration: Toleration, taint: Taint, *, comparison_operators: bool = True) -> bool:
    """Toleration.ToleratesTaint; ``comparison_operators`` is the TaintTolerationComparisonOperators gate."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    operator = toleration.operator
    if operator in ("", "Equal"):
        return toleration.value == taint.value
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt") and comparison_operators:
        tolerated, tainted = parse_int64(toleration.value), parse_int64(taint.value)
        if tolerated is None or tainted is None:
            return False
        return tainted < tolerated if operator == "Lt" else tainted > tolerated
    return False


def tolerations_tolerate_taint(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """TolerationsTolerateTaint: does any toleration tolerate ``taint``?"""
    return any(tolerates_taint(toleration, taint) for toleration in tolerations)


def find_matching_untolerated_taint(
    taints: Iterable[Taint],
    tolerations: Iterable[Toleration],
    inclusion_filter: Callable[[Taint], bool] | None = None,
) -> Taint | None:
    """FindMatchingUntoleratedTaint: the first filtered taint no toleration tolerates, or None."""
    kept = list(tolerations)
    for taint in taints:
        if inclusion_filter is not None and not inclusion_filter(taint):
            continue
        if not tolerations_tolerate_taint(kept, taint):
            return taint
    return None
