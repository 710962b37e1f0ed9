"""Field selectors parse, match and print as apimachinery's fields package."""

from __future__ import annotations

import pytest

from kube.fields import FieldRequirement, FieldSelectorError, escape_value, parse_field_selector


@pytest.mark.parametrize(
    ("text", "terms", "canonical"),
    [
        pytest.param("", [], "", id="empty"),
        pytest.param("metadata.name=x", [("metadata.name", "=", "x")], "metadata.name=x", id="equals"),
        pytest.param("metadata.name==x", [("metadata.name", "=", "x")], "metadata.name=x", id="double-equals"),
        pytest.param("spec.nodeName!=", [("spec.nodeName", "!=", "")], "spec.nodeName!=", id="not-equal-empty"),
        pytest.param(
            "spec.nodeName=n1,metadata.namespace=default",
            [("metadata.namespace", "=", "default"), ("spec.nodeName", "=", "n1")],
            "metadata.namespace=default,spec.nodeName=n1",
            id="terms-sorted",
        ),
        pytest.param(r"a=b\,c", [("a", "=", "b,c")], r"a=b\,c", id="escaped-comma"),
        pytest.param(r"a=b\=c\\d", [("a", "=", "b=c\\d")], r"a=b\=c\\d", id="escaped-equals-and-backslash"),
        pytest.param("a=b,,c=d", [("a", "=", "b"), ("c", "=", "d")], "a=b,c=d", id="empty-term-skipped"),
    ],
)
def test_parse(text: str, terms: list[tuple[str, str, str]], canonical: str) -> None:
    """ParseSelector: = and == are the same, terms sorted, values unescaped."""
    selector = parse_field_selector(text)
    assert selector.requirements() == tuple(FieldRequirement(*t) for t in terms)  # type: ignore[arg-type]
    assert str(selector) == canonical
    assert parse_field_selector(str(selector)) == selector


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "metadata.name", "invalid selector: 'metadata.name'; can't understand 'metadata.name'", id="no-op"
        ),
        pytest.param("a=b=c", "invalid field selector: unescaped character in value: 61", id="unescaped-equals"),
        pytest.param(r"a=b\x", "invalid field selector: invalid escape sequence: \\x", id="bad-escape"),
        pytest.param("a=b\\", "invalid field selector: invalid escape sequence: \\", id="trailing-backslash"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    """Upstream's messages for terms without operator and bad escapes."""
    with pytest.raises(FieldSelectorError) as caught:
        parse_field_selector(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("text", "fields", "expected"),
    [
        pytest.param("", {"a": "b"}, True, id="empty-matches-all"),
        pytest.param("spec.nodeName=n1", {"spec.nodeName": "n1"}, True, id="equal"),
        pytest.param("spec.nodeName=n1", {"spec.nodeName": "n2"}, False, id="different"),
        pytest.param("spec.nodeName=", {}, True, id="missing-reads-as-empty"),
        pytest.param("spec.nodeName!=", {"spec.nodeName": "n1"}, True, id="scheduled"),
        pytest.param("spec.nodeName!=", {}, False, id="unscheduled"),
        pytest.param("a=1,b!=2", {"a": "1", "b": "3"}, True, id="and"),
        pytest.param("a=1,b!=2", {"a": "1", "b": "2"}, False, id="and-fails"),
    ],
)
def test_matches(text: str, fields: dict[str, str], expected: bool) -> None:
    """Every term must hold; absent fields compare as ''."""
    assert parse_field_selector(text).matches(fields) is expected


def test_requires_exact_match_and_empty() -> None:
    """The sim uses RequiresExactMatch to index pods by spec.nodeName."""
    selector = parse_field_selector("spec.nodeName=n1,metadata.name!=x")
    assert selector.requires_exact_match("spec.nodeName") == "n1"
    assert selector.requires_exact_match("metadata.name") is None
    assert not selector.empty()
    assert parse_field_selector("").empty()
    assert escape_value("a,b=c\\") == "a\\,b\\=c\\\\"
