"""Field selectors (apimachinery ``pkg/fields``): ``metadata.name=x,spec.nodeName!=``.

Terms are ``field=value``, ``field==value`` or ``field!=value`` joined by
commas. In values, ``\\``, ``,`` and ``=`` must be escaped with a backslash; a
field missing from the object reads as the empty string.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["FieldRequirement", "FieldSelector", "FieldSelectorError", "escape_value", "parse_field_selector"]

_OPERATORS = ("!=", "==", "=")  # "==" before "=" so the value keeps no leading "="


class FieldSelectorError(ValueError):
    """A field selector string that does not parse; the message is upstream's."""


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    operator: Literal["=", "!="]
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        equal = fields.get(self.field, "") == self.value
        return equal if self.operator == "=" else not equal

    def __str__(self) -> str:
        return f"{self.field}{self.operator}{escape_value(self.value)}"


@dataclass(frozen=True)
class FieldSelector:
    """An AND of field terms; the empty selector matches everything."""

    terms: tuple[FieldRequirement, ...] = ()

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(term.matches(fields) for term in self.terms)

    def empty(self) -> bool:
        return not self.terms

    def requirements(self) -> tuple[FieldRequirement, ...]:
        return self.terms

    def requires_exact_match(self, field: str) -> str | None:
        """The value the selector demands for ``field`` with ``=``, if any (e.g. ``spec.nodeName``)."""
        for term in self.terms:
            if term.field == field and term.operator == "=":
                return term.value
        return None

    def __str__(self) -> str:
        return ",".join(str(term) for term in self.terms)


def escape_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def parse_field_selector(text: str) -> FieldSelector:
    """fields.ParseSelector; raises FieldSelectorError."""
    terms = []
    for part in sorted(_split_terms(text)):
        if not part:
            continue
        split = _split_term(part)
        if split is None:
            raise FieldSelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        field, operator, raw = split
        terms.append(FieldRequirement(field, "!=" if operator == "!=" else "=", _unescape(raw)))
    return FieldSelector(tuple(terms))


def _split_terms(text: str) -> list[str]:
    if not text:
        return []
    terms, start, escaped = [], 0, False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    # The field name cannot be escaped, so the first operator found splits the term.
    for i in range(len(term)):
        for operator in _OPERATORS:
            if term.startswith(operator, i):
                return term[:i], operator, term[i + len(operator) :]
    return None


def _unescape(value: str) -> str:
    out: list[str] = []
    escaped = False
    for char in value:
        if escaped:
            if char not in "\\,=":
                raise FieldSelectorError(f"invalid field selector: invalid escape sequence: \\{char}")
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            # Go prints the rune with %v, i.e. as its code point.
            raise FieldSelectorError(f"invalid field selector: unescaped character in value: {ord(char)}")
        else:
            out.append(char)
    if escaped:
        raise FieldSelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)
