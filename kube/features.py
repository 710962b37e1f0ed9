"""Feature gates kubus's decisions depend on, as kube-controller-manager's ``--feature-gates``.

Only the gates that change a decision kubus makes are known; each has upstream's name and default
(``pkg/features/kube_features.go``). The flag's format is component-base's ``featureGate.Set``:
comma-separated ``Name=bool`` pairs, names and values trimmed, values as Go's ``strconv.ParseBool``
reads them (``1 t T TRUE true True`` and ``0 f F FALSE false False``). A name kubus does not know is
an error naming it (``unrecognized feature gate: Name``), as upstream's ``SetFromMap``.

The gates are a value handed to the controllers (and recorded with every reconciler start, so that
``kubus replay`` decides as the live reconciler did); nothing here is global.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["DEPLOYMENT_REPLICA_SET_TERMINATING_REPLICAS", "KNOWN", "TAINT_TOLERATION_COMPARISON_OPERATORS",
           "FeatureGateError", "FeatureGates", "parse_feature_gates"]

DEPLOYMENT_REPLICA_SET_TERMINATING_REPLICAS: Final = "DeploymentReplicaSetTerminatingReplicas"
"""A ReplicaSet's ``status.terminatingReplicas`` (alpha in 1.33, beta and on by default since 1.35): with it off the
ReplicaSet controller leaves the field unset. Turn it off against an API server older than 1.33, which has no such
field and drops it from every status write (the controller would then write the same status again every sync)."""

TAINT_TOLERATION_COMPARISON_OPERATORS: Final = "TaintTolerationComparisonOperators"
"""Tolerations with the operators ``Lt`` and ``Gt`` (alpha since 1.35, off by default): with it off, such a
toleration tolerates nothing (core/v1 ``Toleration.ToleratesTaint``'s ``enableComparisonOperators``)."""

KNOWN: Final[Mapping[str, bool]] = {DEPLOYMENT_REPLICA_SET_TERMINATING_REPLICAS: True,
                                     TAINT_TOLERATION_COMPARISON_OPERATORS: False}
"""Every gate kubus knows, with upstream's default."""

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class FeatureGateError(ValueError):
    """A ``--feature-gates`` value kubus cannot take; the message is component-base's."""


@dataclass(frozen=True, slots=True)
class FeatureGates:
    """The state of every known gate; the defaults are upstream's."""

    deployment_replica_set_terminating_replicas: bool = KNOWN[DEPLOYMENT_REPLICA_SET_TERMINATING_REPLICAS]
    taint_toleration_comparison_operators: bool = KNOWN[TAINT_TOLERATION_COMPARISON_OPERATORS]

    def as_dict(self) -> dict[str, bool]:
        """``{gate name: enabled}`` for every known gate, in name order (what a start tick records)."""
        return {name: getattr(self, _attribute(name)) for name in sorted(KNOWN)}

    @classmethod
    def from_mapping(cls, gates: Mapping[str, object]) -> FeatureGates:
        """From ``{gate name: bool}`` (a start tick's record, or a parsed flag); missing gates take their default."""
        values: dict[str, bool] = {}
        for name, value in gates.items():
            if name not in KNOWN:
                raise FeatureGateError(f"unrecognized feature gate: {name}")
            if not isinstance(value, bool):
                raise FeatureGateError(f"invalid value of {name}={value}: not a bool")
            values[_attribute(name)] = value
        return cls(**values)


def parse_feature_gates(text: str) -> FeatureGates:
    """``--feature-gates`` (``Name=true,Other=false``) as featureGate.Set reads it; raises FeatureGateError."""
    gates: dict[str, object] = {}
    for item in text.split(","):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            raise FeatureGateError(f"missing bool value for {name}")
        value = value.strip()
        if value in _TRUE:
            gates[name] = True
        elif value in _FALSE:
            gates[name] = False
        else:
            raise FeatureGateError(f'invalid value of {name}={value}, err: strconv.ParseBool: parsing "{value}": '
                                   f"invalid syntax")
    return FeatureGates.from_mapping(gates)


def _attribute(name: str) -> str:
    """The FeatureGates attribute of a known gate."""
    return _ATTRIBUTES[name]


_ATTRIBUTES: Final[Mapping[str, str]] = {
    DEPLOYMENT_REPLICA_SET_TERMINATING_REPLICAS: "deployment_replica_set_terminating_replicas",
    TAINT_TOLERATION_COMPARISON_OPERATORS: "taint_toleration_comparison_operators",
}
