"""Taints and tolerations (core/v1 ``Toleration.ToleratesTaint`` and component-helpers).

A toleration tolerates a taint when its effect is empty or equal, its key is
empty or equal, and its operator agrees: ``""``/``Equal`` compare values,
``Exists`` accepts any value, ``Lt``/``Gt`` compare the values as int64 (taint <
toleration, taint > toleration) and fail on anything else. ``Lt``/``Gt`` are
behind the TaintTolerationComparisonOperators gate (alpha since 1.35, off by
default): with it off, or with any other operator, the toleration tolerates
nothing (ToleratesTaint's ``enableComparisonOperators`` and its default branch).
Both values must be decimal integers in canonical form (apimachinery's
``content.IsDecimalInteger``: no sign but ``-``, no leading zero) within int64.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Final

from kube.core import Taint, Toleration

__all__ = [
    "find_matching_untolerated_taint",
    "is_decimal_integer",
    "tolerates_taint",
    "tolerations_tolerate_taint",
]

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


_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_CANONICAL_DECIMAL: Final = re.compile(r"0|-?[1-9][0-9]*")


def is_decimal_integer(value: str) -> bool:
    """content.IsDecimalInteger (apimachinery): ``0``, or an optional ``-`` then a digit 1-9 and digits 0-9.

    Stricter than strconv.ParseInt: no ``+``, no leading zeros (``0700`` is not 700), no ``-0``."""
    return _CANONICAL_DECIMAL.fullmatch(value) is not None


def _int64(value: str) -> int | None:
    """compareNumericValues' reading of a value: IsDecimalInteger, then strconv.ParseInt(v, 10, 64)."""
    if not is_decimal_integer(value):
        return None
    number = int(value)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def tolerates_taint(toleration: Toleration, taint: Taint, *, comparison_operators: bool = False) -> bool:
    """Toleration.ToleratesTaint; ``comparison_operators`` is the TaintTolerationComparisonOperators gate
    (upstream's ``enableComparisonOperators``), off by default as upstream's."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    operator = toleration.operator
    if operator in ("", "Equal"):
        return toleration.value == taint.value
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt"):
        if not comparison_operators:  # "If comparison operators are disabled, this toleration doesn't match"
            return False
        tolerated, tainted = _int64(toleration.value), _int64(taint.value)
        if tolerated is None or tainted is None:
            return False
        return tainted < tolerated if operator == "Lt" else tainted > tolerated
    return False


def tolerations_tolerate_taint(tolerations: Iterable[Toleration], taint: Taint, *,
                               comparison_operators: bool = False) -> bool:
    """TolerationsTolerateTaint: does any toleration tolerate ``taint``?"""
    return any(tolerates_taint(toleration, taint, comparison_operators=comparison_operators)
               for toleration in tolerations)


def find_matching_untolerated_taint(
    taints: Iterable[Taint],
    tolerations: Iterable[Toleration],
    inclusion_filter: Callable[[Taint], bool] | None = None,
    *,
    comparison_operators: bool = False,
) -> Taint | None:
    """FindMatchingUntoleratedTaint: the first filtered taint no toleration tolerates, or None.

    (Newer upstream returns a taint whose comparison failed to parse only when no taint is untolerated
    outright; which taint is returned differs then, whether there is one does not.)"""
    kept = list(tolerations)
    for taint in taints:
        if inclusion_filter is not None and not inclusion_filter(taint):
            continue
        if not tolerations_tolerate_taint(kept, taint, comparison_operators=comparison_operators):
            return taint
    return None
