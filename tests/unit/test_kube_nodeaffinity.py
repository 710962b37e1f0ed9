"""Required node affinity and DaemonSet node pinning (nodeaffinity_test.go, daemonset_util_test.go)."""

from __future__ import annotations

import pytest

from kube.core import (
    Affinity,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodSpec,
    PreferredSchedulingTerm,
)
from kube.meta import ObjectMeta
from kube.nodeaffinity import (
    get_target_node_name,
    match_node_selector_terms,
    node_matches_node_selector_terms,
    pod_matches_node_selector_and_affinity,
    replace_daemon_node_affinity,
    required_node_affinity,
)
from kube.testing import node, pod


def expr(key: str, operator: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=list(values))


def term(
    *expressions: NodeSelectorRequirement, fields: list[NodeSelectorRequirement] | None = None
) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=list(expressions), match_fields=fields or [])


def required(*terms: NodeSelectorTerm) -> NodeSelector:
    return NodeSelector(node_selector_terms=list(terms))


def with_required(selector: NodeSelector | None, preferred: list[PreferredSchedulingTerm] | None = None) -> Affinity:
    return Affinity(
        node_affinity=NodeAffinity(
            required_during_scheduling_ignored_during_execution=selector,
            preferred_during_scheduling_ignored_during_execution=preferred or [],
        )
    )


def pinned(name: str) -> NodeSelector:
    return required(term(fields=[expr("metadata.name", "In", name)]))


NODE = Node(metadata=ObjectMeta(name="node-1", labels={"zone": "a", "gpu": "true", "cores": "8"}))


SELECTOR_CASES = [
    pytest.param(required(), False, id="no-terms-match-nothing"),
    pytest.param(required(term()), False, id="empty-term-matches-nothing"),
    pytest.param(required(term(expr("zone", "In", "a", "b"))), True, id="in"),
    pytest.param(required(term(expr("zone", "In", "b"))), False, id="in-other-value"),
    pytest.param(required(term(expr("zone", "NotIn", "b"))), True, id="notin"),
    pytest.param(required(term(expr("missing", "NotIn", "b"))), True, id="notin-missing-key"),
    pytest.param(required(term(expr("gpu", "Exists"))), True, id="exists"),
    pytest.param(required(term(expr("gpu", "DoesNotExist"))), False, id="does-not-exist"),
    pytest.param(required(term(expr("cores", "Gt", "4"))), True, id="gt"),
    pytest.param(required(term(expr("cores", "Lt", "4"))), False, id="lt"),
    pytest.param(required(term(expr("zone", "Gt", "4"))), False, id="gt-non-integer-label"),
    pytest.param(required(term(expr("cores", "Gt", "4", "5"))), False, id="gt-two-values-is-an-error"),
    pytest.param(required(term(expr("cores", "Gt", "four"))), False, id="gt-non-integer-value-is-an-error"),
    pytest.param(
        required(term(expr("zone", "In", "a"), expr("gpu", "DoesNotExist"))), False, id="expressions-anded"
    ),
    pytest.param(required(term(expr("zone", "In", "b")), term(expr("gpu", "Exists"))), True, id="terms-ored"),
    pytest.param(
        required(term(expr("zone", "Foo", "a")), term(expr("gpu", "Exists"))), True, id="bad-term-skipped"
    ),
    pytest.param(required(term(), term(expr("gpu", "Exists"))), True, id="empty-term-skipped"),
    pytest.param(pinned("node-1"), True, id="match-fields-in"),
    pytest.param(pinned("node-2"), False, id="match-fields-other-node"),
    pytest.param(required(term(fields=[expr("metadata.name", "NotIn", "node-2")])), True, id="match-fields-notin"),
    pytest.param(
        required(term(fields=[expr("metadata.name", "In", "node-1", "node-2")])), False, id="fields-two-values"
    ),
    pytest.param(required(term(fields=[expr("metadata.name", "Exists")])), False, id="fields-bad-operator"),
    pytest.param(
        required(term(expr("zone", "In", "a"), fields=[expr("metadata.name", "In", "node-2")])),
        False,
        id="expressions-and-fields-anded",
    ),
    pytest.param(
        required(term(expr("zone", "In", "a"), fields=[expr("metadata.name", "In", "node-1")])),
        True,
        id="expressions-and-fields-both-match",
    ),
]


@pytest.mark.parametrize(("selector", "expected"), SELECTOR_CASES)
def test_node_selector_terms(selector: NodeSelector, expected: bool) -> None:
    """Terms are ORed, empty terms match nothing, a term's expressions and fields are ANDed."""
    assert node_matches_node_selector_terms(NODE, selector) is expected


@pytest.mark.parametrize(("selector", "expected"), SELECTOR_CASES)
def test_the_affinity_parsed_once_matches_as_each_node_is_asked(selector: NodeSelector, expected: bool) -> None:
    """A DaemonSet's sync parses the template's affinity once for all nodes: the same answers, node by node."""
    spec = PodSpec(affinity=with_required(selector))
    others = [NODE, Node(metadata=ObjectMeta(name="node-2", labels={"zone": "b", "cores": "2"})),
              Node(metadata=ObjectMeta(labels={"zone": "a"}))]
    parsed = required_node_affinity(spec)
    assert parsed.matches(NODE) is expected
    assert [parsed.matches(n) for n in others] == [node_matches_node_selector_terms(n, selector) for n in others]
    with_selector = PodSpec(node_selector={"zone": "a"}, affinity=with_required(selector))
    assert [required_node_affinity(with_selector).matches(n) for n in others] == [
        n.metadata.labels.get("zone") == "a" and node_matches_node_selector_terms(n, selector) for n in others]


def test_match_fields_are_ignored_for_a_node_without_name() -> None:
    """extractNodeFields gives no fields for an unnamed node, so matchFields cannot reject it."""
    unnamed = Node(metadata=ObjectMeta(labels={"zone": "a"}))
    assert node_matches_node_selector_terms(unnamed, pinned("node-2"))
    assert not node_matches_node_selector_terms(None, pinned("node-2"))


@pytest.mark.parametrize(
    ("selector", "errors"),
    [
        pytest.param(
            required(term(expr("zone", "Foo", "a"))),
            [
                'nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: "Foo": '
                'supported values: "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"'
            ],
            id="bad-operator",
        ),
        pytest.param(
            required(term(), term(fields=[expr("metadata.name", "In", "a", "b")])),
            ['nodeSelectorTerms[1].matchFields[0].values: Invalid value: []string{"a", "b"}: must have one element'],
            id="field-values",
        ),
        pytest.param(
            required(term(expr("cores", "Gt", "x"))),
            [
                'nodeSelectorTerms[0].matchExpressions[0].values[0]: Invalid value: "x": '
                "for 'Gt', 'Lt' operators, the value must be an integer"
            ],
            id="gt-value",
        ),
        pytest.param(required(term(expr("zone", "Foo", "a")), term(expr("gpu", "Exists"))), [], id="hidden-by-a-match"),
    ],
)
def test_parse_errors_surface_only_when_nothing_matches(selector: NodeSelector, errors: list[str]) -> None:
    """LazyErrorNodeSelector: errors are returned only if no term matched."""
    matched, found = match_node_selector_terms(NODE, selector)
    assert found == errors
    assert matched is (not errors)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(PodSpec(), True, id="no-constraints"),
        pytest.param(PodSpec(node_selector={"zone": "a"}), True, id="node-selector-matches"),
        pytest.param(PodSpec(node_selector={"zone": "a", "gpu": "false"}), False, id="node-selector-one-pair-off"),
        pytest.param(PodSpec(affinity=Affinity()), True, id="affinity-without-node-affinity"),
        pytest.param(PodSpec(affinity=with_required(None)), True, id="no-required-terms"),
        pytest.param(PodSpec(affinity=with_required(required())), False, id="required-without-terms"),
        pytest.param(PodSpec(affinity=with_required(pinned("node-1"))), True, id="pinned-here"),
        pytest.param(PodSpec(affinity=with_required(pinned("node-2"))), False, id="pinned-elsewhere"),
        pytest.param(
            PodSpec(node_selector={"zone": "b"}, affinity=with_required(pinned("node-1"))),
            False,
            id="selector-and-affinity-both-needed",
        ),
    ],
)
def test_pod_matches_node_selector_and_affinity(spec: PodSpec, expected: bool) -> None:
    """GetRequiredNodeAffinity(pod).Match(node): nodeSelector AND required affinity."""
    assert pod_matches_node_selector_and_affinity(spec, NODE) is expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(PodSpec(node_name="node-1"), "node-1", id="node-name"),
        pytest.param(PodSpec(affinity=with_required(pinned("node-1"))), "node-1", id="match-field"),
        pytest.param(
            PodSpec(affinity=with_required(required(term(fields=[expr("metadata.name", "In", "node-1", "node-2")])))),
            None,
            id="match-field-not-unique",
        ),
        pytest.param(PodSpec(), None, id="neither"),
        pytest.param(PodSpec(affinity=with_required(required())), None, id="no-terms"),
        pytest.param(
            PodSpec(affinity=with_required(required(term(expr("kubernetes.io/hostname", "In", "node-1"))))),
            None,
            id="label-expression-is-not-a-target",
        ),
        pytest.param(
            PodSpec(node_name="node-9", affinity=with_required(pinned("node-1"))), "node-9", id="node-name-wins"
        ),
    ],
)
def test_get_target_node_name(spec: PodSpec, expected: str | None) -> None:
    """TestGetTargetNodeName (an error upstream is None here)."""
    assert get_target_node_name(Pod(spec=spec)) == expected


HOSTNAME_TERM = term(expr("kubernetes.io/hostname", "In", "host_1"))
PREFERRED = [PreferredSchedulingTerm(weight=1, preference=HOSTNAME_TERM)]


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        pytest.param(None, with_required(pinned("host_1")), id="nil-affinity"),
        pytest.param(Affinity(), with_required(pinned("host_1")), id="no-node-affinity"),
        pytest.param(with_required(required(HOSTNAME_TERM)), with_required(pinned("host_1")), id="label-term-replaced"),
        pytest.param(
            with_required(None, PREFERRED), with_required(pinned("host_1"), PREFERRED), id="preferred-terms-kept"
        ),
        pytest.param(
            with_required(required(term(fields=[expr("metadata.name", "In", "host_1", "host_2")]))),
            with_required(pinned("host_1")),
            id="two-node-names",
        ),
        pytest.param(
            with_required(
                required(term(expr("hostname", "In", "host_1")), term(fields=[expr("metadata.name", "In", "host_2")]))
            ),
            with_required(pinned("host_1")),
            id="all-terms-replaced",
        ),
        pytest.param(
            with_required(required(term(fields=[expr("metadata.name", "NotIn", "host_2")]))),
            with_required(pinned("host_1")),
            id="notin-replaced",
        ),
        pytest.param(
            with_required(required(term(fields=[expr("metadata.foo", "In", "bar")]))),
            with_required(pinned("host_1")),
            id="unknown-field-key-replaced",
        ),
    ],
)
def test_replace_daemon_node_affinity(affinity: Affinity | None, expected: Affinity) -> None:
    """TestReplaceDaemonSetPodNodeNameNodeAffinity; the input is left untouched."""
    before = repr(affinity)
    assert replace_daemon_node_affinity(affinity, "host_1") == expected
    assert repr(affinity) == before


def test_pinned_pod_fits_only_its_node() -> None:
    """A DaemonSet pod pinned to node-1 fits node-1 and no other node."""
    pinned_pod = pod("p").target_node("node-1").build()
    assert pod_matches_node_selector_and_affinity(pinned_pod.spec, node("node-1").build())
    assert not pod_matches_node_selector_and_affinity(pinned_pod.spec, node("node-2").build())
