"""Name and label syntax rules, and field errors worded as the API server words them.

The messages are upstream's (apimachinery ``api/validate/content`` and
``util/validation/field``) so the simulator's 422 responses read like a real
kube-apiserver's. Lengths count UTF-8 bytes, as Go's ``len`` does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = [
    "ErrorType",
    "FieldError",
    "aggregate_message",
    "validate_dns1123_label",
    "validate_dns1123_subdomain",
    "validate_label_key",
    "validate_label_value",
]

DNS1123_LABEL_MAX_LENGTH: Final = 63
DNS1123_SUBDOMAIN_MAX_LENGTH: Final = 253
LABEL_KEY_MAX_LENGTH: Final = 63
LABEL_VALUE_MAX_LENGTH: Final = 63

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + r"(\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_FMT = "(" + _LABEL_KEY_FMT + ")?"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)

_DNS1123_LABEL = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN = re.compile(_DNS1123_SUBDOMAIN_FMT)
_LABEL_KEY = re.compile(_LABEL_KEY_FMT)
_LABEL_VALUE = re.compile(_LABEL_VALUE_FMT)


def max_len_error(length: int) -> str:
    return f"must be no more than {length} bytes"


def regex_error(message: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def validate_dns1123_label(value: str) -> list[str]:
    """IsDNS1123Label: e.g. a Pod's generateName-free name part, a namespace."""
    errors = []
    if _size(value) > DNS1123_LABEL_MAX_LENGTH:
        errors.append(max_len_error(DNS1123_LABEL_MAX_LENGTH))
    if not _DNS1123_LABEL.fullmatch(value):
        if _DNS1123_SUBDOMAIN.fullmatch(value):
            errors.append("must not contain dots")
        else:
            errors.append(regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errors


def validate_dns1123_subdomain(value: str) -> list[str]:
    """IsDNS1123Subdomain: the rule for most object names (pods, DaemonSets, ReplicaSets)."""
    errors = []
    if _size(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errors.append(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errors.append(regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


# Label keys and values found valid lately. A cluster writes the same few (a workload's labels, the daemon
# tolerations' keys, the sim's node labels) on object after object, and checking one costs a split, two UTF-8
# encodings and two regular expressions (issue 25: the sim's CPU per pod). Only valid ones are kept, so no list of
# errors is ever shared: each call returns a list of its own, as before.
_VALID_KEPT: Final = 4096
_valid_label_keys: set[str] = set()
_valid_label_values: set[str] = set()


def _remember_valid(valid: set[str], text: str) -> None:
    if len(valid) >= _VALID_KEPT:
        valid.clear()  # a bound, not a policy: the few that recur are back after their next check
    valid.add(text)


def validate_label_key(key: str) -> list[str]:
    """IsLabelKey (a.k.a. IsQualifiedName): ``[prefix/]name``."""
    if key in _valid_label_keys:
        return []
    errors = _label_key_errors(key)
    if not errors:
        _remember_valid(_valid_label_keys, key)
    return errors


def _label_key_errors(key: str) -> list[str]:
    errors: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend("prefix part " + message for message in validate_dns1123_subdomain(prefix))
    else:
        return [
            "a valid label key "
            + regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif _size(name) > LABEL_KEY_MAX_LENGTH:
        errors.append("name part " + max_len_error(LABEL_KEY_MAX_LENGTH))
    if not _LABEL_KEY.fullmatch(name):
        errors.append("name part " + regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errors


def validate_label_value(value: str) -> list[str]:
    """IsLabelValue: empty, or up to 63 bytes of ``[A-Za-z0-9-_.]`` starting and ending alphanumeric."""
    if value in _valid_label_values:
        return []
    errors = []
    if _size(value) > LABEL_VALUE_MAX_LENGTH:
        errors.append(max_len_error(LABEL_VALUE_MAX_LENGTH))
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    if not errors:
        _remember_valid(_valid_label_values, value)
    return errors


def _size(text: str) -> int:
    return len(text.encode())


class ErrorType(StrEnum):
    """field.ErrorType: the text starts the error body; ``reason`` is the StatusCause reason."""

    NOT_FOUND = "Not found"
    REQUIRED = "Required value"
    DUPLICATE = "Duplicate value"
    INVALID = "Invalid value"
    NOT_SUPPORTED = "Unsupported value"
    FORBIDDEN = "Forbidden"
    TOO_LONG = "Too long"
    TOO_MANY = "Too many"
    INTERNAL = "Internal error"

    @property
    def reason(self) -> str:
        return _REASONS[self]


_REASONS: Final = {
    ErrorType.NOT_FOUND: "FieldValueNotFound",
    ErrorType.REQUIRED: "FieldValueRequired",
    ErrorType.DUPLICATE: "FieldValueDuplicate",
    ErrorType.INVALID: "FieldValueInvalid",
    ErrorType.NOT_SUPPORTED: "FieldValueNotSupported",
    ErrorType.FORBIDDEN: "FieldValueForbidden",
    ErrorType.TOO_LONG: "FieldValueTooLong",
    ErrorType.TOO_MANY: "FieldValueTooMany",
    ErrorType.INTERNAL: "InternalError",
}
_NO_VALUE: Final = {ErrorType.REQUIRED, ErrorType.FORBIDDEN, ErrorType.TOO_LONG, ErrorType.INTERNAL}


@dataclass(frozen=True)
class FieldError:
    """field.Error: ``str()`` gives ``<field>: <Type>[: <value>][: <detail>]``."""

    type: ErrorType
    field: str
    bad_value: object = None
    detail: str = ""

    @classmethod
    def invalid(cls, field: str, value: object, detail: str) -> FieldError:
        return cls(ErrorType.INVALID, field, value, detail)

    @classmethod
    def required(cls, field: str, detail: str = "") -> FieldError:
        return cls(ErrorType.REQUIRED, field, None, detail)

    @classmethod
    def forbidden(cls, field: str, detail: str) -> FieldError:
        return cls(ErrorType.FORBIDDEN, field, None, detail)

    @classmethod
    def not_supported(cls, field: str, value: object, valid: Sequence[str]) -> FieldError:
        detail = "supported values: " + ", ".join(_quote(v) for v in valid) if valid else ""
        return cls(ErrorType.NOT_SUPPORTED, field, value, detail)

    @property
    def body(self) -> str:
        text = self.type.value
        if self.type not in _NO_VALUE:
            text += ": " + _go_value(self.bad_value)
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"


def aggregate_message(errors: Sequence[object]) -> str:
    """utilerrors.Aggregate.Error(): one message alone, several deduplicated in brackets."""
    messages = list(dict.fromkeys(str(error) for error in errors))
    if len(messages) == 1:
        return messages[0]
    return "[" + ", ".join(messages) + "]"


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _go_value(value: object) -> str:
    # fmt's %q for strings, %v for numbers and bools, %#v for string slices.
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return "[]string{" + ", ".join(_quote(item) for item in value) + "}"
    return str(value)
