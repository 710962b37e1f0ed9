"""--feature-gates as kube-controller-manager reads it (component-base featureGate.Set), for the gates kubus knows."""

from __future__ import annotations

import pytest

from kube.features import (
    DEPLOYMENT_REPLICA_SET_TERMINATING_REPLICAS,
    KNOWN,
    TAINT_TOLERATION_COMPARISON_OPERATORS,
    FeatureGateError,
    FeatureGates,
    parse_feature_gates,
)

ON = FeatureGates(taint_toleration_comparison_operators=True)


def test_upstream_defaults() -> None:
    """TaintTolerationComparisonOperators: alpha since 1.35, off by default; DeploymentReplicaSetTerminatingReplicas:
    alpha in 1.33, beta and on by default since 1.35 (pkg/features/kube_features.go)."""
    assert KNOWN == {"DeploymentReplicaSetTerminatingReplicas": True, "TaintTolerationComparisonOperators": False}
    assert FeatureGates().as_dict() == {DEPLOYMENT_REPLICA_SET_TERMINATING_REPLICAS: True,
                                        TAINT_TOLERATION_COMPARISON_OPERATORS: False}
    assert ON.as_dict() == {DEPLOYMENT_REPLICA_SET_TERMINATING_REPLICAS: True,
                            TAINT_TOLERATION_COMPARISON_OPERATORS: True}
    assert parse_feature_gates("DeploymentReplicaSetTerminatingReplicas=false") == FeatureGates(
        deployment_replica_set_terminating_replicas=False)


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("", FeatureGates(), id="empty-all-defaults"),
    pytest.param("TaintTolerationComparisonOperators=true", ON, id="on"),
    pytest.param("TaintTolerationComparisonOperators=false", FeatureGates(), id="off"),
    pytest.param(" TaintTolerationComparisonOperators = true ", ON, id="spaces-trimmed"),
    pytest.param("TaintTolerationComparisonOperators=1", ON, id="parsebool-1"),
    pytest.param("TaintTolerationComparisonOperators=T", ON, id="parsebool-T"),
    pytest.param("TaintTolerationComparisonOperators=TRUE", ON, id="parsebool-TRUE"),
    pytest.param("TaintTolerationComparisonOperators=f", FeatureGates(), id="parsebool-f"),
    pytest.param("TaintTolerationComparisonOperators=true,", ON, id="trailing-comma"),
    pytest.param("TaintTolerationComparisonOperators=true,TaintTolerationComparisonOperators=false", FeatureGates(),
                 id="last-wins"),
])
def test_parse_feature_gates(text: str, expected: FeatureGates) -> None:
    assert parse_feature_gates(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("Foo=true", "unrecognized feature gate: Foo", id="unknown-gate"),
    pytest.param("TaintTolerationComparisonOperators=true,Foo=false", "unrecognized feature gate: Foo",
                 id="unknown-gate-after-a-known-one"),
    pytest.param("taintTolerationComparisonOperators=true",
                 "unrecognized feature gate: taintTolerationComparisonOperators", id="names-are-case-sensitive"),
    pytest.param("TaintTolerationComparisonOperators", "missing bool value for TaintTolerationComparisonOperators",
                 id="no-value"),
    pytest.param("TaintTolerationComparisonOperators=yes",
                 'invalid value of TaintTolerationComparisonOperators=yes, err: strconv.ParseBool: parsing "yes": '
                 "invalid syntax", id="not-a-go-bool"),
    pytest.param("TaintTolerationComparisonOperators=", "invalid value of TaintTolerationComparisonOperators=",
                 id="empty-value"),
])
def test_bad_feature_gates(text: str, message: str) -> None:
    """featureGate.Set's and SetFromMap's errors."""
    with pytest.raises(FeatureGateError) as raised:
        parse_feature_gates(text)
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(("mapping", "expected"), [
    pytest.param({}, FeatureGates(), id="missing-is-default"),
    pytest.param({TAINT_TOLERATION_COMPARISON_OPERATORS: True}, ON, id="on"),
])
def test_from_mapping_round_trips(mapping: dict[str, bool], expected: FeatureGates) -> None:
    gates = FeatureGates.from_mapping(mapping)
    assert gates == expected
    assert FeatureGates.from_mapping(gates.as_dict()) == gates


@pytest.mark.parametrize("mapping", [{"Other": True}, {TAINT_TOLERATION_COMPARISON_OPERATORS: "true"}])
def test_from_mapping_refuses_what_it_does_not_know(mapping: dict[str, object]) -> None:
    with pytest.raises(FeatureGateError):
        FeatureGates.from_mapping(mapping)
