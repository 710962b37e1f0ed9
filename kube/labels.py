"""Label selectors (apimachinery ``pkg/labels`` and ``metav1.LabelSelectorAsSelector``).

A ``Selector`` is an immutable AND of requirements, or the special selector
that matches nothing (what a nil ``spec.selector`` means). The string form and
the parser (``kube.selectorparser``) follow upstream, including its error
messages, since kubectl users see them in API responses. Requirements live in
``kube.selection``, label-syntax validators in ``kube.validation`` and field
selectors in ``kube.fields``; all are re-exported here.
"""

from __future__ import annotations

import functools
from collections.abc import ItemsView, Mapping
from dataclasses import dataclass

from kube.fields import FieldSelector, FieldSelectorError, parse_field_selector
from kube.meta import LabelSelector
from kube.selection import Operator, Requirement, SelectorError, child_path, new_requirement
from kube.selectorparser import parse
from kube.validation import (
    FieldError,
    aggregate_message,
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_label_key,
    validate_label_value,
)

__all__ = [
    "FieldSelector",
    "FieldSelectorError",
    "Operator",
    "Requirement",
    "Selector",
    "SelectorError",
    "everything",
    "new_requirement",
    "nothing",
    "parse_field_selector",
    "parse_selector",
    "selector_from_label_selector",
    "selector_from_set",
    "validate_dns1123_label",
    "validate_dns1123_subdomain",
    "validate_label_key",
    "validate_label_selector",
    "validate_label_value",
]

_SELECTOR_OPERATORS = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}


@dataclass(frozen=True)
class Selector:
    """An AND of requirements; ``nothing()`` is the one selector that matches no labels at all."""

    requirements: tuple[Requirement, ...] = ()
    matches_nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.matches_nothing:
            return False
        have = labels if labels is not None else {}
        equalities = self._equalities
        if equalities is not None:
            return equalities <= have.items()  # a subset test in C: controllers match thousands of pods
        return all(requirement.matches(have) for requirement in self.requirements)

    @property
    def label_pairs(self) -> ItemsView[str, str] | None:
        """The selector as `key=value` pairs when that is all it says, else None (then ask `matches`).

        `pairs <= labels.items()` is `matches(labels)` for a dict: loops over thousands of pods test
        it inline, without a method call per pod."""
        return None if self.matches_nothing else self._equalities

    @functools.cached_property
    def _equalities(self) -> ItemsView[str, str] | None:
        """The selector as `key=value` pairs when that is all it says (matchLabels), else None."""
        pairs = {}
        for requirement in self.requirements:
            exact = (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.IN)
            if requirement.operator not in exact or len(requirement.values) != 1 or requirement.key in pairs:
                return None
            pairs[requirement.key] = requirement.values[0]
        return pairs.items()

    def empty(self) -> bool:
        """True when the selector does not restrict anything (Everything). Nothing is not empty."""
        return not self.matches_nothing and not self.requirements

    def add(self, *requirements: Requirement) -> Selector:
        if self.matches_nothing:
            return self
        return Selector(tuple(sorted((*self.requirements, *requirements), key=lambda r: r.key)))

    def requires_exact_match(self, key: str) -> str | None:
        """The single value the selector demands for ``key`` (=, == or a one-value in), if any."""
        for requirement in self.requirements:
            if requirement.key == key:
                exact = (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.IN)
                if requirement.operator in exact and len(requirement.values) == 1:
                    return requirement.values[0]
                return None
        return None

    def __str__(self) -> str:
        return ",".join(str(requirement) for requirement in self.requirements)


_EVERYTHING = Selector()
_NOTHING = Selector(matches_nothing=True)


def everything() -> Selector:
    return _EVERYTHING


def nothing() -> Selector:
    return _NOTHING


def selector_from_set(labels: Mapping[str, str] | None) -> Selector:
    """labels.SelectorFromSet: equality on every pair, unvalidated; empty or None matches everything."""
    if not labels:
        return _EVERYTHING
    return Selector(tuple(Requirement(key, Operator.EQUALS, (labels[key],)) for key in sorted(labels)))


def validate_label_selector(selector: LabelSelector | None, path: str = "spec.selector") -> list[FieldError]:
    """metav1 validation.ValidateLabelSelector: the API server's 422 causes for a bad selector."""
    if selector is None:
        return []
    errors: list[FieldError] = []
    labels_path = child_path(path, "matchLabels")
    for key in sorted(selector.match_labels):
        errors.extend(FieldError.invalid(labels_path, key, message) for message in validate_label_key(key))
        value = selector.match_labels[key]
        errors.extend(FieldError.invalid(labels_path, value, message) for message in validate_label_value(value))
    for i, expression in enumerate(selector.match_expressions):
        at = f"{child_path(path, 'matchExpressions')}[{i}]"
        if expression.operator in ("In", "NotIn"):
            if not expression.values:
                detail = "must be specified when `operator` is 'In' or 'NotIn'"
                errors.append(FieldError.required(f"{at}.values", detail))
        elif expression.operator in ("Exists", "DoesNotExist"):
            if expression.values:
                detail = "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                errors.append(FieldError.forbidden(f"{at}.values", detail))
        else:
            errors.append(FieldError.invalid(f"{at}.operator", expression.operator, "not a valid selector operator"))
        key = expression.key
        errors.extend(FieldError.invalid(f"{at}.key", key, message) for message in validate_label_key(key))
        for j, value in enumerate(expression.values):
            errors.extend(FieldError.invalid(f"{at}.values[{j}]", value, m) for m in validate_label_value(value))
    return errors


def selector_from_label_selector(selector: LabelSelector | None, path: str = "spec.selector") -> Selector:
    """metav1.LabelSelectorAsSelector: None matches nothing, ``{}`` everything; raises SelectorError.

    It fails exactly where upstream's NewRequirement would, with the API
    server's field-path messages (e.g. ``spec.selector.matchExpressions[0].operator``).
    """
    if selector is None:
        return _NOTHING
    if not selector.match_labels and not selector.match_expressions:
        return _EVERYTHING
    if errors := validate_label_selector(selector, path):
        raise SelectorError(aggregate_message(errors), errors=errors)
    requirements = [Requirement(key, Operator.EQUALS, (value,)) for key, value in selector.match_labels.items()]
    for expression in selector.match_expressions:
        operator = _SELECTOR_OPERATORS[expression.operator]
        requirements.append(Requirement(expression.key, operator, tuple(expression.values)))
    return _EVERYTHING.add(*requirements)


def parse_selector(text: str) -> Selector:
    """labels.Parse: ``a=b,c!=d,e in (x,y),f notin (z),g,!h,i>1``; raises SelectorError naming the token."""
    return _EVERYTHING.add(*parse(text))
