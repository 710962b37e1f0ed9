"""IntOrString scaling and validation follow apimachinery's intstr (intstr_test.go)."""

from __future__ import annotations

import pytest

from kube.intstr import (
    IntOrStrError,
    get_scaled_value_from_int_or_percent,
    is_percent,
    parse_int64,
    validate_int_or_percent,
)


@pytest.mark.parametrize(
    ("value", "total", "round_up", "expected"),
    [
        pytest.param(123, 0, False, 123, id="int-as-is"),
        pytest.param("90%", 100, True, 90, id="percent-exact"),
        pytest.param("90%", 95, True, 86, id="percent-round-up"),
        pytest.param("90%", 95, False, 85, id="percent-round-down"),
        pytest.param("0%", 10, True, 0, id="zero-percent"),
        pytest.param("25%", 3, True, 1, id="daemonset-max-unavailable-3-nodes"),
        pytest.param("25%", 3, False, 0, id="round-down-to-zero"),
        pytest.param("100%", 7, True, 7, id="all"),
        pytest.param("150%", 4, True, 6, id="over-100-percent"),
        pytest.param("-10%", 15, True, -1, id="negative-rounds-toward-positive-infinity"),
        pytest.param("-10%", 15, False, -2, id="negative-rounds-down"),
        pytest.param("33%", 1_000_000_000_000_001, True, 330_000_000_000_001, id="exact-where-float-is-not"),
        pytest.param("+5%", 100, True, 5, id="leading-plus"),
    ],
)
def test_get_scaled_value(value: int | str, total: int, round_up: bool, expected: int) -> None:
    """TestGetIntFromIntOrPercent, plus rounding edges computed exactly."""
    assert get_scaled_value_from_int_or_percent(value, total, round_up) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(None, "nil value for IntOrString", id="nil"),
        pytest.param(
            "90", "invalid value for IntOrString: invalid type: string is not a percentage", id="string-without-percent"
        ),
        pytest.param("90#", "invalid value for IntOrString: invalid type: string is not a percentage", id="hash"),
        pytest.param(
            "%",
            'invalid value for IntOrString: invalid value "%": strconv.Atoi: parsing "": invalid syntax',
            id="percent-sign-only",
        ),
        pytest.param(
            "#%",
            'invalid value for IntOrString: invalid value "#%": strconv.Atoi: parsing "#": invalid syntax',
            id="not-a-number",
        ),
        pytest.param(
            "40%%",
            'invalid value for IntOrString: invalid value "40%%": strconv.Atoi: parsing "40%": invalid syntax',
            id="double-percent",
        ),
        pytest.param(
            "99999999999999999999%",
            'invalid value for IntOrString: invalid value "99999999999999999999%": '
            'strconv.Atoi: parsing "99999999999999999999": value out of range',
            id="out-of-range",
        ),
        pytest.param(1.5, "invalid value for IntOrString: invalid type: neither int nor percentage", id="float"),
    ],
)
def test_get_scaled_value_errors(value: object, message: str) -> None:
    """Errors carry upstream's wording."""
    with pytest.raises(IntOrStrError) as caught:
        get_scaled_value_from_int_or_percent(value, 10, True)  # type: ignore[arg-type]
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("40%", True, id="percent"),
        pytest.param("0%", True, id="zero"),
        pytest.param("40", False, id="no-sign"),
        pytest.param("-4%", False, id="negative"),
        pytest.param("4.5%", False, id="fraction"),
        pytest.param(40, False, id="int"),
        pytest.param(None, False, id="none"),
    ],
)
def test_is_percent(value: int | str | None, expected: bool) -> None:
    """IsValidPercent: digits then '%'."""
    assert is_percent(value) is expected


PERCENT_MESSAGE = (
    "a valid percent string must be a numeric string followed by an ending '%' "
    "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
)


@pytest.mark.parametrize(
    ("value", "max_100", "expected"),
    [
        pytest.param(0, True, [], id="zero"),
        pytest.param(3, True, [], id="int"),
        pytest.param("50%", True, [], id="percent"),
        pytest.param("100%", True, [], id="hundred-percent"),
        pytest.param(-1, True, ["must be greater than or equal to 0"], id="negative"),
        pytest.param("101%", True, ["must not be greater than 100%"], id="over-100"),
        pytest.param("101%", False, [], id="over-100-allowed"),
        pytest.param("abc", True, [PERCENT_MESSAGE], id="word"),
        pytest.param("-5%", True, [PERCENT_MESSAGE], id="negative-percent"),
        pytest.param(True, True, ["must be an integer or percentage (e.g '5%')"], id="bool"),
        pytest.param(None, True, ["must be an integer or percentage (e.g '5%')"], id="none"),
    ],
)
def test_validate_int_or_percent(value: object, max_100: bool, expected: list[str]) -> None:
    """ValidatePositiveIntOrPercent + IsNotMoreThan100Percent messages, for the simulator's 422s."""
    assert validate_int_or_percent(value, max_100_percent=max_100) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("42", 42, id="plain"),
        pytest.param("-7", -7, id="negative"),
        pytest.param("+7", 7, id="plus"),
        pytest.param("007", 7, id="leading-zeros"),
        pytest.param("9223372036854775807", 2**63 - 1, id="max"),
        pytest.param("9223372036854775808", None, id="overflow"),
        pytest.param("1_000", None, id="underscore"),
        pytest.param(" 1", None, id="space"),
        pytest.param("", None, id="empty"),
        pytest.param("٣", None, id="non-ascii-digit"),
    ],
)
def test_parse_int64(text: str, expected: int | None) -> None:
    """strconv.ParseInt(s, 10, 64), stricter than Python's int()."""
    assert parse_int64(text) == expected
