"""The label selector string grammar (labels.Parse), ported token for token.

    <selector>    ::= <requirement> | <requirement> "," <selector>
    <requirement> ::= [!] KEY [ <set-based> | <exact-match> | <gt-lt> ]
    <set-based>   ::= ("in" | "notin") "(" VALUE { "," VALUE } ")"
    <exact-match> ::= ("=" | "==" | "!=") VALUE
    <gt-lt>       ::= (">" | "<") INTEGER

Whitespace separates tokens and is otherwise ignored; ``in``/``notin`` are
plain identifiers where a value is expected; values of a set are sorted and
deduplicated; an empty string selects everything. Error messages are
upstream's, and each error records the index of the token it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto

from kube.selection import BINARY_OPERATORS, Operator, Requirement, SelectorError, new_requirement
from kube.validation import FieldError, validate_label_key

__all__ = ["parse"]


class _Token(Enum):
    ERROR = auto()
    END = auto()
    CLOSE_PAREN = auto()
    COMMA = auto()
    NOT = auto()
    DOUBLE_EQUALS = auto()
    EQUALS = auto()
    GREATER = auto()
    IDENTIFIER = auto()
    IN = auto()
    LESS = auto()
    NOT_EQUALS = auto()
    NOT_IN = auto()
    OPEN_PAREN = auto()


_LITERALS = {
    ")": _Token.CLOSE_PAREN,
    ",": _Token.COMMA,
    "!": _Token.NOT,
    "==": _Token.DOUBLE_EQUALS,
    "=": _Token.EQUALS,
    ">": _Token.GREATER,
    "in": _Token.IN,
    "<": _Token.LESS,
    "!=": _Token.NOT_EQUALS,
    "notin": _Token.NOT_IN,
    "(": _Token.OPEN_PAREN,
}
_OPERATORS = {
    _Token.IN: Operator.IN,
    _Token.EQUALS: Operator.EQUALS,
    _Token.DOUBLE_EQUALS: Operator.DOUBLE_EQUALS,
    _Token.GREATER: Operator.GREATER_THAN,
    _Token.LESS: Operator.LESS_THAN,
    _Token.NOT_IN: Operator.NOT_IN,
    _Token.NOT_EQUALS: Operator.NOT_EQUALS,
}
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")


@dataclass(frozen=True)
class _Item:
    token: _Token
    literal: str
    position: int


def _lex(text: str) -> list[_Item]:
    items: list[_Item] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in _WHITESPACE:
            pos += 1
        start = pos
        if pos >= len(text):
            items.append(_Item(_Token.END, "", pos))
            return items
        if text[pos] in _SPECIAL:
            # The longest run of special characters that is still a known symbol.
            found: _Item | None = None
            buffer = ""
            while pos < len(text) and text[pos] in _SPECIAL:
                buffer += text[pos]
                if buffer in _LITERALS:
                    found = _Item(_LITERALS[buffer], buffer, start)
                elif found is not None:
                    break
                pos += 1
            items.append(found or _Item(_Token.ERROR, f"error expected: keyword found '{buffer}'", start))
        else:
            while pos < len(text) and text[pos] not in _SPECIAL and text[pos] not in _WHITESPACE:
                pos += 1
            literal = text[start:pos]
            items.append(_Item(_LITERALS.get(literal, _Token.IDENTIFIER), literal, start))


class _Parser:
    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.index = 0

    def peek(self, values: bool = True) -> _Item:
        return self._as_value(self.items[self.index]) if values else self.items[self.index]

    def take(self, values: bool = True) -> _Item:
        item = self.peek(values)
        self.index = min(self.index + 1, len(self.items) - 1)
        return item

    @staticmethod
    def _as_value(item: _Item) -> _Item:
        # Where a value is expected, "in" and "notin" are ordinary words.
        if item.token in (_Token.IN, _Token.NOT_IN):
            return _Item(_Token.IDENTIFIER, item.literal, item.position)
        return item

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            item = self.peek()
            if item.token is _Token.END:
                return requirements
            if item.token not in (_Token.IDENTIFIER, _Token.NOT):
                raise _error(f"found '{item.literal}', expected: !, identifier, or 'end of string'", item)
            try:
                requirements.append(self.requirement())
            except SelectorError as error:
                position = error.position if error.position is not None else item.position
                raise SelectorError(
                    f"unable to parse requirement: {error}", errors=error.errors, position=position
                ) from None
            after = self.take()
            if after.token is _Token.END:
                return requirements
            if after.token is not _Token.COMMA:
                raise _error(f"found '{after.literal}', expected: ',' or 'end of string'", after)
            following = self.peek()
            if following.token not in (_Token.IDENTIFIER, _Token.NOT):
                raise _error(f"found '{following.literal}', expected: identifier after ','", following)

    def requirement(self) -> Requirement:
        key_item = self.peek()
        key, operator = self.key_and_inferred_operator()
        if operator is not None:
            return _checked(key, operator, [], key_item)
        operator = self.operator()
        values = self.set_values() if operator in (Operator.IN, Operator.NOT_IN) else self.exact_value()
        return _checked(key, operator, sorted(values), key_item)

    def key_and_inferred_operator(self) -> tuple[str, Operator | None]:
        operator: Operator | None = None
        item = self.take()
        if item.token is _Token.NOT:
            operator = Operator.DOES_NOT_EXIST
            item = self.take()
        if item.token is not _Token.IDENTIFIER:
            raise _error(f"found '{item.literal}', expected: identifier", item)
        if key_errors := validate_label_key(item.literal):
            # Upstream validates against a nil field path, which prints as "<nil>".
            error = FieldError.invalid("<nil>", item.literal, "; ".join(key_errors))
            raise SelectorError(str(error), errors=[error], position=item.position)
        if operator is None and self.peek().token in (_Token.END, _Token.COMMA):
            operator = Operator.EXISTS
        return item.literal, operator

    def operator(self) -> Operator:
        item = self.take(values=False)
        if item.token in _OPERATORS:
            return _OPERATORS[item.token]
        expected = ", ".join(op.value for op in BINARY_OPERATORS)
        raise _error(f"found '{item.literal}', expected: {expected}", item)

    def set_values(self) -> set[str]:
        item = self.take()
        if item.token is not _Token.OPEN_PAREN:
            raise _error(f"found '{item.literal}' expected: '('", item)
        first = self.peek()
        if first.token is _Token.CLOSE_PAREN:
            self.take()
            return {""}
        if first.token not in (_Token.IDENTIFIER, _Token.COMMA):
            raise _error(f"found '{first.literal}', expected: ',', ')' or identifier", first)
        values = self.identifier_list()
        closing = self.take()
        if closing.token is not _Token.CLOSE_PAREN:
            # Upstream names the token after '(' here, not the one that failed.
            raise _error(f"found '{first.literal}', expected: ')'", closing)
        return values

    def identifier_list(self) -> set[str]:
        values: set[str] = set()
        while True:
            item = self.take()
            if item.token is _Token.IDENTIFIER:
                values.add(item.literal)
                following = self.peek()
                if following.token is _Token.COMMA:
                    continue
                if following.token is _Token.CLOSE_PAREN:
                    return values
                raise _error(f"found '{following.literal}', expected: ',' or ')'", following)
            if item.token is not _Token.COMMA:
                raise _error(f"found '{item.literal}', expected: ',', or identifier", item)
            # A comma with nothing before or after it stands for the empty value.
            if not values:
                values.add("")
            following = self.peek()
            if following.token is _Token.CLOSE_PAREN:
                values.add("")
                return values
            if following.token is _Token.COMMA:
                values.add("")

    def exact_value(self) -> set[str]:
        if self.peek().token in (_Token.END, _Token.COMMA):
            return {""}
        item = self.take()
        if item.token is _Token.IDENTIFIER:
            return {item.literal}
        raise _error(f"found '{item.literal}', expected: identifier", item)


def _error(message: str, item: _Item) -> SelectorError:
    return SelectorError(message, position=item.position)


def _checked(key: str, operator: Operator, values: list[str], at: _Item) -> Requirement:
    try:
        return new_requirement(key, operator, values)
    except SelectorError as error:
        raise SelectorError(str(error), errors=error.errors, position=at.position) from None


def parse(text: str) -> list[Requirement]:
    """The requirements of a selector string, in the order written; raises SelectorError."""
    return _Parser(text).parse()
