"""Required node affinity (component-helpers ``nodeaffinity`` and the DaemonSet's node-name pinning).

A pod fits a node when every ``nodeSelector`` pair is on the node AND, if the
pod has ``requiredDuringSchedulingIgnoredDuringExecution``, one of its terms
matches. Terms are ORed; an empty term matches nothing; inside a term
``matchExpressions`` (labels) AND ``matchFields`` (only ``metadata.name``).
A term that does not parse (bad operator, ``Gt`` on a non-integer, ...) never
matches, and its errors are reported only when no other term matched.
"""

from __future__ import annotations

import copy
from collections.abc import ItemsView, Sequence
from dataclasses import dataclass

from kube.core import (
    OBJECT_NAME_FIELD,
    Affinity,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodSpec,
)
from kube.fields import FieldRequirement, FieldSelector
from kube.labels import Selector, everything
from kube.selection import Operator, SelectorError, new_requirement
from kube.validation import FieldError

__all__ = [
    "RequiredNodeAffinity",
    "get_target_node_name",
    "match_node_selector_terms",
    "node_matches_node_selector_terms",
    "node_selector_errors",
    "pod_matches_node_selector_and_affinity",
    "replace_daemon_node_affinity",
    "required_node_affinity",
]

_LABEL_OPERATORS = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
    "Gt": Operator.GREATER_THAN,
    "Lt": Operator.LESS_THAN,
}


@dataclass(frozen=True)
class _Term:
    labels: Selector | None
    fields: FieldSelector | None
    errors: tuple[str, ...]

    def matches(self, labels: dict[str, str], fields: dict[str, str]) -> bool:
        if self.labels is not None and not self.labels.matches(labels):
            return False
        # Without a node name there is nothing to select on, so matchFields is skipped.
        return self.fields is None or not fields or self.fields.matches(fields)


def _parse_term(term: NodeSelectorTerm, path: str) -> _Term:
    errors: list[str] = []
    labels = _label_selector(term.match_expressions, f"{path}.matchExpressions", errors)
    fields = _field_selector(term.match_fields, f"{path}.matchFields", errors)
    return _Term(labels, fields, tuple(errors))


def _label_selector(requirements: Sequence[NodeSelectorRequirement], path: str, errors: list[str]) -> Selector | None:
    if not requirements:
        return None
    selector = everything()
    for i, expression in enumerate(requirements):
        operator = _LABEL_OPERATORS.get(expression.operator)
        if operator is None:
            valid = list(_LABEL_OPERATORS)
            errors.append(str(FieldError.not_supported(f"{path}[{i}].operator", expression.operator, valid)))
            continue
        try:
            selector = selector.add(new_requirement(expression.key, operator, expression.values, path=f"{path}[{i}]"))
        except SelectorError as error:
            errors.append(str(error))
    return selector


def _field_selector(
    requirements: Sequence[NodeSelectorRequirement], path: str, errors: list[str]
) -> FieldSelector | None:
    if not requirements:
        return None
    terms: list[FieldRequirement] = []
    for i, expression in enumerate(requirements):
        if expression.operator not in ("In", "NotIn"):
            errors.append(str(FieldError.not_supported(f"{path}[{i}].operator", expression.operator, ["In", "NotIn"])))
        elif len(expression.values) != 1:
            errors.append(str(FieldError.invalid(f"{path}[{i}].values", expression.values, "must have one element")))
        else:
            terms.append(
                FieldRequirement(expression.key, "=" if expression.operator == "In" else "!=", expression.values[0])
            )
    return FieldSelector(tuple(terms))


def match_node_selector_terms(node: Node | None, selector: NodeSelector) -> tuple[bool, list[str]]:
    """LazyErrorNodeSelector.Match: (matched, parse errors of the terms tried when none matched)."""
    if node is None:
        return False, []
    labels = node.metadata.labels
    fields = {OBJECT_NAME_FIELD: node.metadata.name} if node.metadata.name else {}
    errors: list[str] = []
    for i, term in enumerate(selector.node_selector_terms):
        if not term.match_expressions and not term.match_fields:
            continue
        parsed = _parse_term(term, f"nodeSelectorTerms[{i}]")
        if parsed.errors:
            errors.extend(parsed.errors)
        elif parsed.matches(labels, fields):
            return True, []
    return False, errors


def node_selector_errors(selector: NodeSelector) -> list[str]:
    """The parse errors of every term, whatever node they meet: a term listed here matches no node."""
    errors: list[str] = []
    for i, term in enumerate(selector.node_selector_terms):
        errors.extend(_parse_term(term, f"nodeSelectorTerms[{i}]").errors)
    return errors


def node_matches_node_selector_terms(node: Node | None, selector: NodeSelector) -> bool:
    """MatchNodeSelectorTerms: does any term of ``selector`` match ``node``?"""
    return match_node_selector_terms(node, selector)[0]


def pod_matches_node_selector_and_affinity(pod_spec: PodSpec, node: Node) -> bool:
    """GetRequiredNodeAffinity(pod).Match(node): nodeSelector AND required node affinity."""
    return required_node_affinity(pod_spec).matches(node)


@dataclass(frozen=True)
class RequiredNodeAffinity:
    """GetRequiredNodeAffinity(pod): a pod spec's nodeSelector and required node affinity terms, parsed once, to
    be matched against many nodes (a DaemonSet's sync asks about every node of the cluster)."""

    node_selector: ItemsView[str, str] | None  # the nodeSelector's pairs, every one of them on the node; None: none
    terms: tuple[_Term, ...] | None  # the required terms that are not empty; None: no required affinity

    def matches(self, node: Node) -> bool:
        """Match(node): the nodeSelector AND (without required affinity, or) one term that parsed matches."""
        meta = node.metadata
        # labels.SelectorFromSet(nodeSelector).Matches: equality on every pair, a subset test in C
        if self.node_selector is not None and not self.node_selector <= meta.labels.items():
            return False
        if self.terms is None:
            return True
        fields = {OBJECT_NAME_FIELD: meta.name} if meta.name else {}
        return any(not term.errors and term.matches(meta.labels, fields) for term in self.terms)


def required_node_affinity(pod_spec: PodSpec) -> RequiredNodeAffinity:
    """The spec's :class:`RequiredNodeAffinity`: the terms parsed as :func:`match_node_selector_terms` parses
    them, skipping the empty ones (an empty term matches nothing)."""
    selector = dict(pod_spec.node_selector).items() if pod_spec.node_selector else None
    node_affinity = pod_spec.affinity.node_affinity if pod_spec.affinity else None
    required = node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    terms = None if required is None else tuple(
        _parse_term(term, f"nodeSelectorTerms[{i}]") for i, term in enumerate(required.node_selector_terms)
        if term.match_expressions or term.match_fields)
    return RequiredNodeAffinity(selector, terms)


def get_target_node_name(pod: Pod) -> str | None:
    """GetTargetNodeName: ``spec.nodeName``, else the one ``metadata.name In [x]`` matchField, else None."""
    if pod.spec.node_name:
        return pod.spec.node_name
    node_affinity = pod.spec.affinity.node_affinity if pod.spec.affinity else None
    required = node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    if required is None:
        return None
    for term in required.node_selector_terms:
        for expression in term.match_fields:
            if expression.key == OBJECT_NAME_FIELD and expression.operator == "In":
                # Upstream stops at the first such expression, unique value or not.
                return expression.values[0] if len(expression.values) == 1 else None
    return None


def replace_daemon_node_affinity(affinity: Affinity | None, node_name: str) -> Affinity:
    """ReplaceDaemonSetPodNodeNameNodeAffinity, returning a new value.

    All required terms become one ``metadata.name In [node_name]`` matchField;
    preferred terms are kept.
    """
    pinned = NodeSelectorTerm(
        match_fields=[NodeSelectorRequirement(key=OBJECT_NAME_FIELD, operator="In", values=[node_name])]
    )
    result = copy.deepcopy(affinity) if affinity is not None else Affinity()
    if result.node_affinity is None:
        result.node_affinity = NodeAffinity()
    result.node_affinity.required_during_scheduling_ignored_during_execution = NodeSelector(
        node_selector_terms=[pinned]
    )
    return result
