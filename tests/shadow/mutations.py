"""One rule of kubus's controllers changed, in the shadow's process only: what the shadow report must catch.

`apply(name)` monkeypatches the rule before the shadow starts (tests/shadow/harness.py runs it first)."""

from __future__ import annotations

from collections.abc import Callable


def _unavailable_rounded_down() -> None:
    """A DaemonSet's maxUnavailable percentage rounded down instead of up (upstream's UnavailableCount calls
    GetScaledValueFromIntOrPercent with roundUp=true): 30% of 4 nodes is then 1 node, not 2."""
    from kube.intstr import IntOrStrError, get_scaled_value_from_int_or_percent
    from kube.meta import IntOrString
    from reconciler.core.daemonset import rollout

    def scaled(value: IntOrString | None, total: int, field_path: str) -> int:
        try:
            return get_scaled_value_from_int_or_percent(value, total, field_path != rollout.MAX_UNAVAILABLE_FIELD)
        except IntOrStrError as error:
            raise rollout.RolloutValueError(field_path, str(error)) from None

    rollout._scaled = scaled


MUTATIONS: dict[str, Callable[[], None]] = {"max-unavailable-rounded-down": _unavailable_rounded_down}


def apply(name: str) -> None:
    MUTATIONS[name]()
