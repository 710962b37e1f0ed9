"""IntOrString arithmetic (apimachinery ``util/intstr``) and Go's integer parsing.

``maxUnavailable``/``maxSurge`` are ``1`` or ``"25%"``; percentages scale
against a total and round up or down. Upstream goes through float64; here the
arithmetic is exact integer arithmetic, which agrees wherever float64 is exact.
"""

from __future__ import annotations

import re

from kube.meta import IntOrString
from kube.validation import regex_error

__all__ = [
    "IntOrStrError",
    "get_scaled_value_from_int_or_percent",
    "is_percent",
    "parse_int64",
    "validate_int_or_percent",
]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_DECIMAL = re.compile(r"[+-]?[0-9]+")
_PERCENT_FMT = "[0-9]+%"
_PERCENT = re.compile(_PERCENT_FMT)


class IntOrStrError(ValueError):
    """An IntOrString that cannot be scaled; the message is upstream's."""


def parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None where Go returns an error (no spaces, no ``_``)."""
    if not _DECIMAL.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def _atoi(text: str) -> int:
    if not _DECIMAL.fullmatch(text):
        raise ValueError(f'strconv.Atoi: parsing "{text}": invalid syntax')
    value = int(text)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f'strconv.Atoi: parsing "{text}": value out of range')
    return value


def is_percent(value: IntOrString | None) -> bool:
    """A string of digits followed by ``%`` (validation.IsValidPercent)."""
    return isinstance(value, str) and _PERCENT.fullmatch(value) is not None


def get_scaled_value_from_int_or_percent(value: IntOrString | None, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: ints as is, ``"N%"`` of ``total`` rounded up or down."""
    if value is None:
        raise IntOrStrError("nil value for IntOrString")
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise IntOrStrError("invalid value for IntOrString: invalid type: neither int nor percentage")
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise IntOrStrError("invalid value for IntOrString: invalid type: string is not a percentage")
    try:
        percent = _atoi(value.removesuffix("%"))
    except ValueError as error:
        raise IntOrStrError(f'invalid value for IntOrString: invalid value "{value}": {error}') from None
    scaled = percent * total
    return -(-scaled // 100) if round_up else scaled // 100


def validate_int_or_percent(value: object, *, max_100_percent: bool = True) -> list[str]:
    """ValidatePositiveIntOrPercent (+ IsNotMoreThan100Percent): messages for a 422, empty when valid."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return ["must be an integer or percentage (e.g '5%')"]
    if isinstance(value, int):
        return ["must be greater than or equal to 0"] if value < 0 else []
    if not is_percent(value):
        message = "a valid percent string must be a numeric string followed by an ending '%'"
        return [regex_error(message, _PERCENT_FMT, "1%", "93%")]
    if max_100_percent and int(value[:-1]) > 100:
        return ["must not be greater than 100%"]
    return []
