"""Name and label syntax checks give upstream's verdicts and messages (content/kube_test.go, validation_test.go)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from kube import validation as kube_validation
from kube.validation import (
    ErrorType,
    FieldError,
    aggregate_message,
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_label_key,
    validate_label_value,
)

LABEL_KEY_REGEX_ERROR = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


@pytest.mark.parametrize(
    "key",
    [
        "simple",
        "now-with-dashes",
        "1-starts-with-num",
        "1234",
        "simple/simple",
        "now-with-dashes/simple",
        "now-with-dashes/now-with-dashes",
        "now.with.dots/simple",
        "now-with.dashes-and.dots/simple",
        "1-num.2-num/3-num",
        "1234/5678",
        "1.2.3.4/5678",
        "Uppercase_Is_OK_123",
        "example.com/Uppercase_Is_OK_123",
        "requests.storage-foo",
        "a" * 63,
        "a" * 253 + "/" + "b" * 63,
    ],
)
def test_valid_label_keys(key: str) -> None:
    """TestIsLabelKey success cases."""
    assert validate_label_key(key) == []


@pytest.mark.parametrize(
    "key",
    [
        "nospecialchars%^=@",
        "cantendwithadash-",
        "-cantstartwithadash-",
        "only/one/slash",
        "Example.com/abc",
        "example_com/abc",
        "example.com/",
        "/simple",
        "a" * 64,
        "a" * 254 + "/abc",
    ],
)
def test_invalid_label_keys(key: str) -> None:
    """TestIsLabelKey error cases."""
    assert validate_label_key(key) != []


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        pytest.param("-x", [LABEL_KEY_REGEX_ERROR], id="bad-name"),
        pytest.param("a" * 64, ["name part must be no more than 63 bytes"], id="name-too-long"),
        pytest.param("example.com/", ["name part must be non-empty", LABEL_KEY_REGEX_ERROR], id="empty-name"),
        pytest.param("/x", ["prefix part must be non-empty"], id="empty-prefix"),
        pytest.param(
            "é" * 32, ["name part must be no more than 63 bytes", LABEL_KEY_REGEX_ERROR], id="bytes-not-chars"
        ),
    ],
)
def test_label_key_messages(key: str, expected: list[str]) -> None:
    """Messages are upstream's, and lengths count UTF-8 bytes as Go's len does."""
    assert validate_label_key(key) == expected


def test_label_key_with_two_slashes_message() -> None:
    """Too many slashes get the whole-key message."""
    (message,) = validate_label_key("a/b/c")
    assert message.startswith("a valid label key must consist of alphanumeric characters")
    assert message.endswith("with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")


@pytest.mark.parametrize(
    "value", ["simple", "now-with-dashes", "1-starts-with-num", "end-with-num-1", "1234", "a" * 63, ""]
)
def test_valid_label_values(value: str) -> None:
    """TestIsLabelValue success cases."""
    assert validate_label_value(value) == []


@pytest.mark.parametrize(
    "value",
    [
        "nospecialchars%^=@",
        "Tama-nui-te-rā.is.Māori.sun",
        "\\backslashes\\are\\bad",
        "-starts-with-dash",
        "ends-with-dash-",
        ".starts.with.dot",
        "ends.with.dot.",
        "a" * 64,
        "trailing-newline\n",
    ],
)
def test_invalid_label_values(value: str) -> None:
    """TestIsLabelValue error cases (plus a trailing newline, which Go's $ does not accept)."""
    assert validate_label_value(value) != []


@pytest.mark.parametrize(
    "name",
    ["a", "ab", "abc", "a1", "a-1", "a--1--2--b", "0", "01", "012", "1a", "1-a", "1--a--b--2", "a" * 63],
)
def test_valid_dns1123_labels(name: str) -> None:
    """TestIsDNS1123Label success cases."""
    assert validate_dns1123_label(name) == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("a.b", ["must not contain dots"], id="dots"),
        pytest.param(
            "A",
            [
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ],
            id="uppercase",
        ),
        pytest.param("a" * 64, ["must be no more than 63 bytes"], id="too-long"),
    ],
)
def test_dns1123_label_messages(name: str, expected: list[str]) -> None:
    """IsDNS1123Label messages."""
    assert validate_dns1123_label(name) == expected


@pytest.mark.parametrize("name", ["", "-", "a-", "-a", "_", "a_b", " ", "a b", "1 2", "ABC", "aBc"])
def test_invalid_dns1123_labels(name: str) -> None:
    """TestIsDNS1123Label error cases."""
    assert validate_dns1123_label(name) != []


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "a.a",
        "ab.cd",
        "a1.b2",
        "a-1.b-2",
        "a--1.b--2",
        "0.0",
        "01.a",
        "1a.a1",
        "a" * 63 + "." + "b" * 63,
        "a" * 253,
    ],
)
def test_valid_dns1123_subdomains(name: str) -> None:
    """TestIsDNS1123Subdomain success cases."""
    assert validate_dns1123_subdomain(name) == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("a..a", 1, id="empty-label"),
        pytest.param(".a", 1, id="leading-dot"),
        pytest.param("a.", 1, id="trailing-dot"),
        pytest.param("A.a", 1, id="uppercase"),
        pytest.param("a_b.c", 1, id="underscore"),
        pytest.param("a" * 254, 1, id="too-long"),
        pytest.param("-" * 254, 2, id="too-long-and-bad"),
    ],
)
def test_invalid_dns1123_subdomains(name: str, expected: int) -> None:
    """TestIsDNS1123Subdomain error cases: one message per broken rule."""
    assert len(validate_dns1123_subdomain(name)) == expected


def test_subdomain_message() -> None:
    """The regex message lists the example and the regex."""
    assert validate_dns1123_subdomain("Bad") == [
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
        "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    ]


@pytest.mark.parametrize(
    ("error", "text", "reason"),
    [
        pytest.param(
            FieldError.invalid("metadata.name", "Bad", "must be lowercase"),
            'metadata.name: Invalid value: "Bad": must be lowercase',
            "FieldValueInvalid",
            id="invalid-string",
        ),
        pytest.param(
            FieldError.invalid("spec.replicas", -1, "must be greater than or equal to 0"),
            "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
            "FieldValueInvalid",
            id="invalid-int",
        ),
        pytest.param(
            FieldError.invalid("values", [], "can't be empty"),
            "values: Invalid value: []string{}: can't be empty",
            "FieldValueInvalid",
            id="invalid-empty-list",
        ),
        pytest.param(
            FieldError.required("spec.selector", ""),
            "spec.selector: Required value",
            "FieldValueRequired",
            id="required",
        ),
        pytest.param(
            FieldError.forbidden("spec.x", "may not be set"),
            "spec.x: Forbidden: may not be set",
            "FieldValueForbidden",
            id="forbidden",
        ),
        pytest.param(
            FieldError.not_supported("spec.updateStrategy.type", "Foo", ["OnDelete", "RollingUpdate"]),
            'spec.updateStrategy.type: Unsupported value: "Foo": supported values: "OnDelete", "RollingUpdate"',
            "FieldValueNotSupported",
            id="not-supported",
        ),
        pytest.param(
            FieldError(ErrorType.INVALID, "spec.paused", True, "x"),
            "spec.paused: Invalid value: true: x",
            "FieldValueInvalid",
            id="invalid-bool",
        ),
    ],
)
def test_field_error_text(error: FieldError, text: str, reason: str) -> None:
    """field.Error.Error() wording and the StatusCause reason."""
    assert str(error) == text
    assert error.type.reason == reason


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param(["a"], "a", id="one"),
        pytest.param(["a", "b"], "[a, b]", id="two"),
        pytest.param(["a", "a"], "a", id="duplicates-collapse"),
    ],
)
def test_aggregate_message(messages: list[str], expected: str) -> None:
    """utilerrors.Aggregate.Error()."""
    assert aggregate_message(messages) == expected


def _random_texts(count: int) -> list[str]:
    """Label-like texts, valid and not: slashes, dots, dashes, upper case, a space, a non-ASCII letter, lengths
    around the limits (63 bytes for a name, 253 for a prefix)."""
    rng = random.Random(25)
    alphabet = "abcAB9" * 6 + "-._/ \u00e9"
    texts = ["", "/", "a/", "/a", "a" * 63, "a" * 64, "\u00e9" * 32, "a" * 253 + "/b", "a" * 254 + "/b"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.choice((1, 2, 5, 12, 62, 63, 64)))) for _ in range(count)]
    return texts


@pytest.mark.parametrize("check", [validate_label_key, validate_label_value], ids=["key", "value"])
def test_label_checks_remembered_answer_as_the_first_time(check: Callable[[str], list[str]],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys and values found valid are remembered (issue 25): asked again, in any order and after the memory
    filled up and was emptied, each text gets the same verdict and messages as the first time."""
    monkeypatch.setattr(kube_validation, "_VALID_KEPT", 50)  # so that the runs below fill it many times
    monkeypatch.setattr(kube_validation, "_valid_label_keys", set())
    monkeypatch.setattr(kube_validation, "_valid_label_values", set())
    texts = _random_texts(400)
    first = [check(text) for text in texts]
    assert 50 < sum(not errors for errors in first) < len(texts) - 50  # both verdicts, many times each
    again = [check(text) for text in reversed(texts)]
    assert again[::-1] == first
    assert len(kube_validation._valid_label_keys) <= 50 and len(kube_validation._valid_label_values) <= 50


def test_a_remembered_valid_label_is_answered_without_checking_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second check of a valid key costs a set lookup, not the regular expressions; the list answered is
    a new one each time, so that a caller extending it changes no later answer."""
    checked: list[str] = []
    real = kube_validation._label_key_errors

    def counting(key: str) -> list[str]:
        checked.append(key)
        return real(key)

    monkeypatch.setattr(kube_validation, "_label_key_errors", counting)
    monkeypatch.setattr(kube_validation, "_valid_label_keys", set())
    answer = validate_label_key("example.com/remembered")
    answer.append("a caller's own error")
    assert validate_label_key("example.com/remembered") == []
    assert validate_label_key("-bad-") == validate_label_key("-bad-") == [LABEL_KEY_REGEX_ERROR]
    assert checked == ["example.com/remembered", "-bad-", "-bad-"]  # an invalid key is checked every time


def test_a_text_valid_as_a_value_is_still_checked_as_a_key() -> None:
    """Keys and values are remembered apart: the empty string is a valid label value, not a valid key."""
    assert validate_label_value("") == []
    assert validate_label_key("") == ["name part must be non-empty", LABEL_KEY_REGEX_ERROR]
    assert validate_label_value("1.5-a_b") == [] and validate_label_key("1.5-a_b") == []
