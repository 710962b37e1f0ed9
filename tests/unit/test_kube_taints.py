"""Taint toleration follows core/v1 ToleratesTaint (toleration_test.go) and component-helpers."""

from __future__ import annotations

import pytest

from kube.core import Taint, Toleration
from kube.taints import (
    NO_EXECUTE,
    NO_SCHEDULE,
    find_matching_untolerated_taint,
    is_decimal_integer,
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
            Toleration(key="k", operator="Lt", value="5"), Taint(key="k", value="+1"), False,
            id="lt-plus-sign-is-not-a-canonical-integer"
        ),
        pytest.param(
            Toleration(key="k", operator="Lt", value="5"), Taint(key="k", value="-1"), True, id="lt-negative-taint"
        ),
        pytest.param(
            Toleration(key="k", operator="Gt", value="0950"), Taint(key="k", value="1000"), False,
            id="gt-leading-zero-toleration-is-not-canonical"
        ),
        pytest.param(
            Toleration(key="k", operator="Lt", value="5"), Taint(key="k", value="01"), False,
            id="lt-leading-zero-taint-is-not-canonical"
        ),
        pytest.param(
            Toleration(key="k", operator="Gt", value="-0"), Taint(key="k", value="1"), False,
            id="gt-minus-zero-is-not-canonical"
        ),
        pytest.param(
            Toleration(key="k", operator="Gt", value="0"), Taint(key="k", value="1"), True, id="gt-zero"
        ),
        pytest.param(
            Toleration(key="k", operator="Gt", value=""), Taint(key="k", value="1"), False, id="gt-empty-value"
        ),
        pytest.param(
            Toleration(key="k", operator="Gt", value="-9223372036854775808"), Taint(key="k", value="0"), True,
            id="gt-int64-min"
        ),
        pytest.param(Toleration(key="k", operator="Foo"), Taint(key="k"), False, id="unknown-operator"),
    ],
)
def test_tolerates_taint(toleration: Toleration, taint: Taint, expected: bool) -> None:
    """TestTolerationToleratesTaint, with the TaintTolerationComparisonOperators gate on; values are read as
    compareNumericValues does: content.IsDecimalInteger, then strconv.ParseInt(v, 10, 64)."""
    assert tolerates_taint(toleration, taint, comparison_operators=True) is expected


@pytest.mark.parametrize(
    ("toleration", "taint"),
    [
        pytest.param(Toleration(key="k", operator="Lt", value="5"), Taint(key="k", value="1"), id="lt"),
        pytest.param(Toleration(key="k", operator="Gt", value="1"), Taint(key="k", value="5"), id="gt"),
        pytest.param(Toleration(operator="Gt", value="1"), Taint(key="k", value="5", effect=NO_EXECUTE),
                     id="gt-any-key-any-effect"),
    ],
)
def test_comparison_operators_are_gated_off_by_default(toleration: Toleration, taint: Taint) -> None:
    """TaintTolerationComparisonOperators is alpha and off by default: then Lt and Gt tolerate nothing,
    also through TolerationsTolerateTaint and FindMatchingUntoleratedTaint."""
    assert tolerates_taint(toleration, taint, comparison_operators=True)
    assert not tolerates_taint(toleration, taint)
    assert not tolerates_taint(toleration, taint, comparison_operators=False)
    assert not tolerations_tolerate_taint([toleration], taint)
    assert tolerations_tolerate_taint([toleration], taint, comparison_operators=True)
    assert find_matching_untolerated_taint([taint], [toleration]) == taint
    assert find_matching_untolerated_taint([taint], [toleration], comparison_operators=True) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("0", True, id="zero"),
        pytest.param("123", True, id="positive"),
        pytest.param("-456", True, id="negative"),
        pytest.param("", False, id="empty"),
        pytest.param("-", False, id="lone-minus"),
        pytest.param("-0", False, id="minus-zero"),
        pytest.param("00", False, id="double-zero"),
        pytest.param("0700", False, id="leading-zero"),
        pytest.param("+5", False, id="plus-sign"),
        pytest.param(" 5", False, id="space"),
        pytest.param("1_000", False, id="underscore"),
        pytest.param("0x10", False, id="hex"),
        pytest.param("\u0661", False, id="non-ascii-digit"),
        pytest.param("99999999999999999999", True, id="too-big-for-int64-is-still-canonical"),
    ],
)
def test_is_decimal_integer(value: str, expected: bool) -> None:
    """apimachinery's content.IsDecimalInteger: the canonical form a human writes an integer in."""
    assert is_decimal_integer(value) is expected


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
