"""Label selectors behave as apimachinery's labels package (cases from selector_test.go)."""

from __future__ import annotations

import pytest

from kube.labels import (
    Operator,
    Requirement,
    SelectorError,
    everything,
    new_requirement,
    nothing,
    parse_selector,
    selector_from_label_selector,
    selector_from_set,
    validate_label_selector,
)
from kube.meta import LabelSelector, LabelSelectorRequirement


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("x=a,y=b,z=c", id="equalities"),
        pytest.param("", id="empty"),
        pytest.param("x!=a,y=b", id="not-equal"),
        pytest.param("x=", id="empty-value"),
        pytest.param("x= ", id="empty-value-space"),
        pytest.param("x=,z= ", id="two-empty-values"),
        pytest.param("x= ,z= ", id="two-empty-values-spaces"),
        pytest.param("!x", id="does-not-exist"),
        pytest.param("x>1", id="greater-than"),
        pytest.param("x>1,z<5", id="greater-and-less"),
    ],
)
def test_good_selectors_parse_and_print_back(text: str) -> None:
    """TestSelectorParse: the canonical string is the input without spaces."""
    assert str(parse_selector(text)) == text.replace(" ", "")


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        pytest.param("x=a||y=b", 'unable to parse requirement: values[0][x]: Invalid value: "a||y"', 0, id="pipes"),
        pytest.param("x==a==b", "found '==', expected: ',' or 'end of string'", 4, id="double-operator"),
        pytest.param("!x=a", "found '=', expected: ',' or 'end of string'", 2, id="not-with-value"),
        pytest.param("x<a", "for 'Gt', 'Lt' operators, the value must be an integer", 0, id="lt-non-integer"),
        pytest.param(",x,y", "found ',', expected: !, identifier, or 'end of string'", 0, id="leading-comma"),
        pytest.param("x nott in (y)", "found 'nott', expected: in, notin, =, ==, !=, gt, lt", 2, id="bad-operator"),
        pytest.param("a in (xyz),", "found '', expected: identifier after ','", 11, id="trailing-comma"),
        pytest.param("a in (xyz)b notin ()", "found 'b', expected: ',' or 'end of string'", 10, id="missing-comma"),
        pytest.param("a in (xyz abc)", "found 'abc', expected: ',' or ')'", 10, id="values-without-comma"),
        pytest.param("a notin(", "found '', expected: ',', ')' or identifier", 8, id="unclosed-paren"),
        pytest.param("a (", "found '(', expected: in, notin, =, ==, !=, gt, lt", 2, id="paren-without-operator"),
        pytest.param("(", "found '(', expected: !, identifier, or 'end of string'", 0, id="lone-paren"),
        pytest.param("x in y", "found 'y' expected: '('", 5, id="in-without-paren"),
        pytest.param("-x", 'unable to parse requirement: <nil>: Invalid value: "-x"', 0, id="bad-key"),
    ],
)
def test_bad_selectors_name_the_token_and_position(text: str, message: str, position: int) -> None:
    """Upstream's messages name the offending token; the error also records where it is."""
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    assert message in str(caught.value)
    assert caught.value.position == position


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        pytest.param("", {"x": "y"}, True, id="empty-matches-all"),
        pytest.param("x=y", {"x": "y"}, True, id="equal"),
        pytest.param("x=y,z=w", {"x": "y", "z": "w"}, True, id="two-equal"),
        pytest.param("x!=y,z!=w", {"x": "z", "z": "a"}, True, id="two-not-equal"),
        pytest.param("notin=in", {"notin": "in"}, True, id="keywords-as-key-and-value"),
        pytest.param("x", {"x": "z"}, True, id="exists"),
        pytest.param("!x", {"y": "z"}, True, id="does-not-exist"),
        pytest.param("x>1", {"x": "2"}, True, id="gt"),
        pytest.param("x<1", {"x": "0"}, True, id="lt"),
        pytest.param("x==y", {"x": "y"}, True, id="double-equals"),
        pytest.param("x in (a,b)", {"x": "b"}, True, id="in"),
        pytest.param("x notin (a,b)", {}, True, id="notin-missing-key"),
        pytest.param("x=z", {}, False, id="equal-missing-key"),
        pytest.param("x=y", {"x": "z"}, False, id="equal-other-value"),
        pytest.param("x=y,z=w", {"x": "w", "z": "w"}, False, id="one-of-two-fails"),
        pytest.param("x!=y,z!=w", {"x": "z", "z": "w"}, False, id="not-equal-fails"),
        pytest.param("x", {"y": "z"}, False, id="exists-missing"),
        pytest.param("!x", {"x": "z"}, False, id="does-not-exist-present"),
        pytest.param("x>1", {"x": "0"}, False, id="gt-smaller"),
        pytest.param("x<1", {"x": "2"}, False, id="lt-larger"),
        pytest.param("x>1", {"x": "v2"}, False, id="gt-non-integer-label"),
        pytest.param("x>1", {}, False, id="gt-missing-key"),
        pytest.param("x notin (a,b)", {"x": "a"}, False, id="notin-listed"),
        pytest.param("foo=bar,foobar=bar,baz=blah", {"foo": "bar", "baz": "blah"}, False, id="extra-requirement"),
    ],
)
def test_selector_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    """TestSelectorMatches."""
    assert parse_selector(text).matches(labels) is expected


@pytest.mark.parametrize(
    ("text", "requirements"),
    [
        pytest.param("\rx", [("x", Operator.EXISTS, ())], id="carriage-return"),
        pytest.param(
            "this-is-a-dns.domain.com/key-with-dash",
            [("this-is-a-dns.domain.com/key-with-dash", Operator.EXISTS, ())],
            id="prefixed-key",
        ),
        pytest.param(
            "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
            [("0.1.2.domain/99", Operator.NOT_IN, ("10.10.100.1", "tick.tack.clock"))],
            id="dotted-values",
        ),
        pytest.param("foo  in\t (abc)", [("foo", Operator.IN, ("abc",))], id="tabs"),
        pytest.param("x notin\n (abc)", [("x", Operator.NOT_IN, ("abc",))], id="newline"),
        pytest.param("x in (abc,)", [("x", Operator.IN, ("", "abc"))], id="trailing-empty-value"),
        pytest.param("x in ()", [("x", Operator.IN, ("",))], id="empty-set"),
        pytest.param("x notin ( )", [("x", Operator.NOT_IN, ("",))], id="empty-set-space"),
        pytest.param("x notin (, a)", [("x", Operator.NOT_IN, ("", "a"))], id="leading-empty-value"),
        pytest.param(
            "x notin (abc,def),bar,z in (),w",
            [
                ("bar", Operator.EXISTS, ()),
                ("w", Operator.EXISTS, ()),
                ("x", Operator.NOT_IN, ("abc", "def")),
                ("z", Operator.IN, ("",)),
            ],
            id="sorted-by-key",
        ),
        pytest.param(
            "a in (x,y,notin, z,in)",
            [("a", Operator.IN, ("in", "notin", "x", "y", "z"))],
            id="keywords-as-values",
        ),
        pytest.param("x,y", [("x", Operator.EXISTS, ()), ("y", Operator.EXISTS, ())], id="two-exists"),
        pytest.param("x in (b,a,b)", [("x", Operator.IN, ("a", "b"))], id="values-sorted-and-deduplicated"),
    ],
)
def test_parse_produces_requirements(text: str, requirements: list[tuple[str, Operator, tuple[str, ...]]]) -> None:
    """TestSetSelectorParser: requirements sorted by key, set values sorted and unique."""
    assert parse_selector(text).requirements == tuple(Requirement(*r) for r in requirements)


def test_parse_is_deterministic() -> None:
    """TestDeterministicParse: the order of terms does not matter."""
    assert parse_selector("x=a,a=x") == parse_selector("a=x,x=a")
    assert str(parse_selector("x=a,a=x")) == "a=x,x=a"


@pytest.mark.parametrize(
    ("requirements", "expected"),
    [
        pytest.param(
            [("x", "in", ["abc", "def"]), ("y", "notin", ["jkl"]), ("z", "exists", [])],
            "x in (abc,def),y notin (jkl),z",
            id="set-based",
        ),
        pytest.param(
            [("x", "notin", ["def", "abc"]), ("y", "!=", ["jkl"]), ("z", "!", [])],
            "x notin (abc,def),y!=jkl,!z",
            id="negations-values-sorted",
        ),
        pytest.param(
            [("x", "notin", ["abc"]), ("y", "in", ["jkl", "mno"]), ("z", "notin", [""])],
            "x notin (abc),y in (jkl,mno),z notin ()",
            id="empty-value-in-set",
        ),
        pytest.param(
            [("x", "=", ["abc"]), ("y", "==", ["jkl"]), ("z", "!=", ["a"]), ("z", "exists", [])],
            "x=abc,y==jkl,z!=a,z",
            id="equality-forms",
        ),
        pytest.param([("x", "gt", ["2"]), ("y", "lt", ["8"]), ("z", "exists", [])], "x>2,y<8,z", id="gt-lt"),
    ],
)
def test_string_form(requirements: list[tuple[str, str, list[str]]], expected: str) -> None:
    """TestToString."""
    selector = everything().add(*(new_requirement(k, op, v) for k, op, v in requirements))
    assert str(selector) == expected


@pytest.mark.parametrize(
    ("key", "operator", "values", "ok"),
    [
        pytest.param("x", "in", [], False, id="in-without-values"),
        pytest.param("x", "notin", [], False, id="notin-without-values"),
        pytest.param("x", "in", ["foo"], True, id="in"),
        pytest.param("x", "notin", ["foo"], True, id="notin"),
        pytest.param("x", "exists", [], True, id="exists"),
        pytest.param("x", "!", [], True, id="does-not-exist"),
        pytest.param("x", "exists", ["foo"], False, id="exists-with-values"),
        pytest.param("1foo", "in", ["bar"], True, id="key-starting-with-digit"),
        pytest.param("1234", "in", ["bar"], True, id="numeric-key"),
        pytest.param("y", "gt", ["1"], True, id="gt"),
        pytest.param("z", "lt", ["6"], True, id="lt"),
        pytest.param("foo", "gt", ["bar"], False, id="gt-non-integer"),
        pytest.param("barz", "lt", ["blah"], False, id="lt-non-integer"),
        pytest.param("x", "gt", ["1", "2"], False, id="gt-two-values"),
        pytest.param("x", "=", ["a", "b"], False, id="equals-two-values"),
        pytest.param("x", "in", ["not a label value"], False, id="invalid-value"),
        pytest.param("a" * 254, "exists", [], False, id="key-too-long"),
        pytest.param("x", "contains", ["a"], False, id="unknown-operator"),
    ],
)
def test_requirement_constructor(key: str, operator: str, values: list[str], ok: bool) -> None:
    """TestRequirementConstructor."""
    if ok:
        assert new_requirement(key, operator, values).key == key
    else:
        with pytest.raises(SelectorError):
            new_requirement(key, operator, values)


def test_requirement_errors_are_field_errors() -> None:
    """NewRequirement aggregates every problem, each with its field path."""
    with pytest.raises(SelectorError) as caught:
        new_requirement("-bad", "contains", ["ok"], path="spec")
    assert [e.field for e in caught.value.errors] == ["spec.key", "spec.operator"]
    assert str(caught.value).startswith('[spec.key: Invalid value: "-bad": name part must consist')
    assert 'spec.operator: Unsupported value: "contains": supported values: "in", "notin"' in str(caught.value)


def test_everything_and_nothing() -> None:
    """Everything is empty and matches all; Nothing is not empty and matches none."""
    assert everything().empty()
    assert everything().matches({"x": "y"})
    assert everything().matches(None)
    assert not nothing().empty()
    assert not nothing().matches({})
    assert str(nothing()) == ""
    assert nothing().add(Requirement("a", Operator.EXISTS)) is nothing()


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({}, "", id="empty-is-everything"),
        pytest.param(None, "", id="none-is-everything"),
        pytest.param({"b": "2", "a": "1"}, "a=1,b=2", id="sorted"),
    ],
)
def test_selector_from_set(labels: dict[str, str] | None, expected: str) -> None:
    """SelectorFromSet: equality per pair; empty matches everything."""
    selector = selector_from_set(labels)
    assert str(selector) == expected
    assert selector.matches({"a": "1", "b": "2"})


def test_requires_exact_match() -> None:
    """RequiresExactMatch: only =, == and single-value in pin a key."""
    selector = parse_selector("a=1,b in (2),c in (3,4),d!=5")
    assert [selector.requires_exact_match(k) for k in "abcde"] == ["1", "2", None, None, None]


@pytest.mark.parametrize(
    ("selector", "expected", "matches"),
    [
        pytest.param(None, "", {"app": "x"}, id="nil-matches-nothing"),
        pytest.param(LabelSelector(), "", {"app": "x"}, id="empty-matches-everything"),
        pytest.param(
            LabelSelector(match_labels={"app": "x", "tier": "web"}),
            "app=x,tier=web",
            {"app": "x", "tier": "web", "other": "y"},
            id="match-labels",
        ),
        pytest.param(
            LabelSelector(
                match_labels={"app": "x"},
                match_expressions=[
                    LabelSelectorRequirement(key="tier", operator="In", values=["web", "api"]),
                    LabelSelectorRequirement(key="env", operator="NotIn", values=["dev"]),
                    LabelSelectorRequirement(key="team", operator="Exists"),
                    LabelSelectorRequirement(key="legacy", operator="DoesNotExist"),
                ],
            ),
            "app=x,env notin (dev),!legacy,team,tier in (api,web)",
            {"app": "x", "tier": "api", "team": "a"},
            id="all-operators",
        ),
    ],
)
def test_selector_from_label_selector(selector: LabelSelector | None, expected: str, matches: dict[str, str]) -> None:
    """LabelSelectorAsSelector: nil -> Nothing, {} -> Everything, requirements sorted by key."""
    result = selector_from_label_selector(selector)
    assert str(result) == expected
    assert result.matches(matches) is (selector is not None)


@pytest.mark.parametrize(
    ("expressions", "message"),
    [
        pytest.param(
            [LabelSelectorRequirement(key="a", operator="Foo", values=["x"])],
            'spec.selector.matchExpressions[0].operator: Invalid value: "Foo": not a valid selector operator',
            id="unknown-operator",
        ),
        pytest.param(
            [LabelSelectorRequirement(key="a", operator="In")],
            "spec.selector.matchExpressions[0].values: Required value: "
            "must be specified when `operator` is 'In' or 'NotIn'",
            id="in-without-values",
        ),
        pytest.param(
            [
                LabelSelectorRequirement(key="a", operator="Exists"),
                LabelSelectorRequirement(key="b", operator="Exists", values=["x"]),
            ],
            "spec.selector.matchExpressions[1].values: Forbidden: "
            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            id="exists-with-values",
        ),
        pytest.param(
            [LabelSelectorRequirement(key="a/b/c", operator="Exists")],
            'spec.selector.matchExpressions[0].key: Invalid value: "a/b/c": a valid label key must consist',
            id="bad-key",
        ),
        pytest.param(
            [LabelSelectorRequirement(key="a", operator="In", values=["ok", "-bad"])],
            'spec.selector.matchExpressions[0].values[1]: Invalid value: "-bad": a valid label must be',
            id="bad-value",
        ),
    ],
)
def test_invalid_label_selector_names_the_field(expressions: list[LabelSelectorRequirement], message: str) -> None:
    """Errors carry the API server's field paths, for both the controller and the simulator."""
    selector = LabelSelector(match_expressions=expressions)
    with pytest.raises(SelectorError) as caught:
        selector_from_label_selector(selector)
    assert message in str(caught.value)
    assert [str(e) for e in validate_label_selector(selector)] == [str(e) for e in caught.value.errors]


def test_invalid_match_labels_are_reported() -> None:
    """A bad matchLabels key or value is an error under spec.selector.matchLabels."""
    errors = validate_label_selector(LabelSelector(match_labels={"bad key": "ok", "k": "bad value"}), "selector")
    assert [e.field for e in errors] == ["selector.matchLabels", "selector.matchLabels"]
    assert [e.bad_value for e in errors] == ["bad key", "bad value"]
    assert errors[0].type.reason == "FieldValueInvalid"
