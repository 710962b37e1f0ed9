"""Taint toleration follows core/v1 ToleratesTaint (toleration_test.go) and component-helpers."""

from __future__ import annotations

import pytest

from kube.core import Taint, Toleration
from kube.taints import (
    NO_EXECUTE,
    NO_SCHEDULE,
    find_matching_untolerated_taint,
    tolerates_taint,
    tolerations_tolerate_taint,
)

SLA = "node.kubernetes.io/sla"


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        pytest.param(
            Toleration(key="foo", operator="Exists", effect=NO_SCHEDULE),
            Taint(key="foo", effect=NO_SCHEDULE),
            True,
            id="exists-taint-without-value",
        ),
        pytest.param(
            Toleration(key="foo", operator="Exists", effect=NO_SCHEDULE),
            Taint(key="foo", value="bar", effect=NO_SCHEDULE),
            True,
            id="exists-taint-with-value",
        ),
        pytest.param(
            Toleration(operator="Exists", effect=NO_SCHEDULE),
            Taint(key="foo", value="bar", effect=NO_SCHEDULE),
            True,
            id="empty-key-exists-matches-all-keys",
        ),
        pytest.param(
            Toleration(key="foo", operator="Equal", value="bar", effect=NO_SCHEDULE),
            Taint(key="foo", value="bar", effect=NO_SCHEDULE),
            True,
            id="equal-same-value",
        ),
        pytest.param(
            Toleration(key="foo", operator="Equal", value="value1", effect=NO_SCHEDULE),
            Taint(key="foo", value="value2", effect=NO_SCHEDULE),
            False,
            id="equal-different-value",
        ),
        pytest.param(
            Toleration(key="foo", operator="Equal", value="bar", effect=NO_SCHEDULE),
            Taint(key="foo", value="bar", effect=NO_EXECUTE),
            False,
            id="different-effect",
        ),
        pytest.param(
            Toleration(key="foo", value="bar"),
            Taint(key="foo", value="bar", effect=NO_EXECUTE),
            True,
            id="empty-operator-is-equal-empty-effect-matches-all",
        ),
        pytest.param(
            Toleration(key="other", operator="Exists"), Taint(key="foo", effect=NO_SCHEDULE), False, id="other-key"
        ),
        pytest.param(
            Toleration(value="bar"), Taint(key="foo", value="bar", effect=NO_SCHEDULE), True, id="empty-key-equal"
        ),
        pytest.param(
            Toleration(key=SLA, operator="Gt", value="950", effect=NO_SCHEDULE),
            Taint(key=SLA, value="800", effect=NO_SCHEDULE),
            False,
            id="gt-taint-below",
        ),
        pytest.param(
            Toleration(key=SLA, operator="Gt", value="750", effect=NO_SCHEDULE),
            Taint(key=SLA, value="950", effect=NO_SCHEDULE),
            True,
            id="gt-taint-above",
        ),
        pytest.param(
            Toleration(key=SLA, operator="Lt", value="800", effect=NO_SCHEDULE),
            Taint(key=SLA, value="950", effect=NO_SCHEDULE),
            False,
            id="lt-taint-above",
        ),
        pytest.param(
            Toleration(key=SLA, operator="Lt", value="950", effect=NO_SCHEDULE),
            Taint(key=SLA, value="800", effect=NO_SCHEDULE),
            True,
            id="lt-taint-below",
        ),
        pytest.param(
            Toleration(key=SLA, operator="Gt", value="950", effect=NO_SCHEDULE),
            Taint(key=SLA, value="950", effect=NO_SCHEDULE),
            False,
            id="gt-equal",
        ),
        pytest.param(
            Toleration(key=SLA, operator="Gt", value="950", effect=NO_SCHEDULE),
            Taint(key=SLA, value="high", effect=NO_SCHEDULE),
            False,
            id="gt-non-numeric-taint",
        ),
        pytest.param(
            Toleration(key="k", operator="Gt", value="-100", effect=NO_SCHEDULE),
            Taint(key="k", value="-200", effect=NO_SCHEDULE),
            False,
            id="gt-negative",
        ),
        pytest.param(
            Toleration(key="k", operator="Gt", value="9223372036854775806", effect=NO_SCHEDULE),
            Taint(key="k", value="100", effect=NO_SCHEDULE),
            False,
            id="gt-large-int64",
        ),
        pytest.param(
            Toleration(key="k", operator="Lt", value="9223372036854775808"),
            Taint(key="k", value="1"),
            False,
            id="lt-value-beyond-int64",
        ),
        pytest.param(
            Toleration(key="k", operator="Lt", value=" 5"), Taint(key="k", value="1"), False, id="lt-value-with-space"
        ),
        pytest.param(
            Toleration(key="k", operator="Lt", value="5"), Taint(key="k", value="+1"), True, id="lt-plus-sign"
        ),
        pytest.param(Toleration(key="k", operator="Foo"), Taint(key="k"), False, id="unknown-operator"),
    ],
)
def test_tolerates_taint(toleration: Toleration, taint: Taint, expected: bool) -> None:
    """TestTolerationToleratesTaint."""
    assert tolerates_taint(toleration, taint) is expected


def test_comparison_operators_can_be_gated_off() -> None:
    """With TaintTolerationComparisonOperators off, Lt and Gt tolerate nothing."""
    toleration, taint = Toleration(key="k", operator="Lt", value="5"), Taint(key="k", value="1")
    assert not tolerates_taint(toleration, taint, comparison_operators=False)


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        pytest.param([], False, id="none"),
        pytest.param([Toleration(key="a", operator="Exists")], False, id="other-key"),
        pytest.param([Toleration(key="a", operator="Exists"), Toleration(operator="Exists")], True, id="any-one"),
    ],
)
def test_tolerations_tolerate_taint(tolerations: list[Toleration], expected: bool) -> None:
    """Any one toleration is enough."""
    assert tolerations_tolerate_taint(tolerations, Taint(key="b", effect=NO_SCHEDULE)) is expected


NOT_READY = Taint(key="node.kubernetes.io/not-ready", effect=NO_SCHEDULE)
NO_EXEC = Taint(key="dedicated", value="db", effect=NO_EXECUTE)
PREFER = Taint(key="soft", effect="PreferNoSchedule")


def schedule_or_execute(taint: Taint) -> bool:
    return taint.effect in (NO_SCHEDULE, NO_EXECUTE)


@pytest.mark.parametrize(
    ("taints", "tolerations", "inclusion", "expected"),
    [
        pytest.param([], [], None, None, id="no-taints"),
        pytest.param([NOT_READY, NO_EXEC], [], None, NOT_READY, id="first-untolerated"),
        pytest.param(
            [NOT_READY, NO_EXEC],
            [Toleration(key="node.kubernetes.io/not-ready", operator="Exists")],
            None,
            NO_EXEC,
            id="second-untolerated",
        ),
        pytest.param([PREFER], [], schedule_or_execute, None, id="filtered-out"),
        pytest.param([PREFER, NO_EXEC], [], schedule_or_execute, NO_EXEC, id="filter-keeps-no-execute"),
        pytest.param([NOT_READY, NO_EXEC], [Toleration(operator="Exists")], None, None, id="all-tolerated"),
    ],
)
def test_find_matching_untolerated_taint(
    taints: list[Taint], tolerations: list[Toleration], inclusion: object, expected: Taint | None
) -> None:
    """FindMatchingUntoleratedTaint: the first filtered taint nothing tolerates."""
    assert find_matching_untolerated_taint(taints, tolerations, inclusion) == expected  # type: ignore[arg-type]
