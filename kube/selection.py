"""Selector requirements: operators, matching, and upstream's labels.NewRequirement checks.

Shared by label selectors (``kube.labels``), their string parser
(``kube.selectorparser``) and node affinity (``kube.nodeaffinity``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from kube.intstr import parse_int64
from kube.validation import FieldError, aggregate_message, validate_label_key, validate_label_value

__all__ = ["Operator", "Requirement", "SelectorError", "child_path", "new_requirement"]


class Operator(StrEnum):
    """selection.Operator."""

    DOES_NOT_EXIST = "!"
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    IN = "in"
    NOT_EQUALS = "!="
    NOT_IN = "notin"
    EXISTS = "exists"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


BINARY_OPERATORS = (
    Operator.IN,
    Operator.NOT_IN,
    Operator.EQUALS,
    Operator.DOUBLE_EQUALS,
    Operator.NOT_EQUALS,
    Operator.GREATER_THAN,
    Operator.LESS_THAN,
)
_VALID = (*BINARY_OPERATORS, Operator.EXISTS, Operator.DOES_NOT_EXIST)
_SYMBOLS = {
    Operator.EQUALS: "=",
    Operator.DOUBLE_EQUALS: "==",
    Operator.NOT_EQUALS: "!=",
    Operator.IN: " in ",
    Operator.NOT_IN: " notin ",
    Operator.GREATER_THAN: ">",
    Operator.LESS_THAN: "<",
}


class SelectorError(ValueError):
    """An invalid selector: ``errors`` holds field errors, ``position`` the offending index in a string."""

    def __init__(self, message: str, *, errors: Sequence[FieldError] = (), position: int | None = None) -> None:
        super().__init__(message)
        self.errors = tuple(errors)
        self.position = position


@dataclass(frozen=True)
class Requirement:
    """One ``key op values`` term. Build it with ``new_requirement`` to get upstream's validation."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op in (Operator.IN, Operator.EQUALS, Operator.DOUBLE_EQUALS):
            return self.key in labels and labels[self.key] in self.values
        if op in (Operator.NOT_IN, Operator.NOT_EQUALS):
            return self.key not in labels or labels[self.key] not in self.values
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        # Gt / Lt: both sides must be int64s, or the requirement does not match.
        if self.key not in labels or len(self.values) != 1:
            return False
        have, want = parse_int64(labels[self.key]), parse_int64(self.values[0])
        if have is None or want is None:
            return False
        return have > want if op is Operator.GREATER_THAN else have < want

    def __str__(self) -> str:
        if self.operator is Operator.DOES_NOT_EXIST:
            return "!" + self.key
        if self.operator is Operator.EXISTS:
            return self.key
        values = self.values[0] if len(self.values) == 1 else ",".join(sorted(self.values))
        if self.operator in (Operator.IN, Operator.NOT_IN):
            values = f"({values})"
        return f"{self.key}{_SYMBOLS[self.operator]}{values}"


def new_requirement(key: str, operator: str, values: Iterable[str] = (), *, path: str = "") -> Requirement:
    """labels.NewRequirement: checks key, operator, value count and syntax; raises SelectorError."""
    vals = list(values)
    errors: list[FieldError] = []
    if key_errors := validate_label_key(key):
        errors.append(FieldError.invalid(child_path(path, "key"), key, "; ".join(key_errors)))
    at = child_path(path, "values")
    op = Operator(operator) if operator in _VALID else None
    if op in (Operator.IN, Operator.NOT_IN) and not vals:
        errors.append(FieldError.invalid(at, vals, "for 'in', 'notin' operators, values set can't be empty"))
    elif op in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.NOT_EQUALS) and len(vals) != 1:
        errors.append(FieldError.invalid(at, vals, "exact-match compatibility requires one single value"))
    elif op in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and vals:
        errors.append(FieldError.invalid(at, vals, "values set must be empty for exists and does not exist"))
    elif op in (Operator.GREATER_THAN, Operator.LESS_THAN):
        if len(vals) != 1:
            errors.append(FieldError.invalid(at, vals, "for 'Gt', 'Lt' operators, exactly one value is required"))
        for i, value in enumerate(vals):
            if parse_int64(value) is None:
                detail = "for 'Gt', 'Lt' operators, the value must be an integer"
                errors.append(FieldError.invalid(f"{at}[{i}]", value, detail))
    elif op is None:
        errors.append(FieldError.not_supported(child_path(path, "operator"), operator, [o.value for o in _VALID]))
    for i, value in enumerate(vals):
        if value_errors := validate_label_value(value):
            errors.append(FieldError.invalid(f"{at}[{i}][{key}]", value, "; ".join(value_errors)))
    if errors or op is None:
        raise SelectorError(aggregate_message(errors), errors=errors)
    return Requirement(key, op, tuple(vals))


def child_path(path: str, name: str) -> str:
    """field.Path.Child: ``a.b``, or just ``b`` under the nil (empty) path."""
    return f"{path}.{name}" if path else name
