"""Valid label maps and owner reference lists are remembered by the sim's metadata validation (issue 25).

A controller's objects carry the same labels and owner references one after another; only those found valid are
remembered, so every answer (errors, their order and wording) must be the one a first check gives.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from sim import validation
from sim.validation import ApiFieldError, validate_labels, validate_object_meta, validate_owner_references

_KEYS = ["app", "tier", "example.com/role", "a/b/c", "-bad", "", "x" * 64, "Ünï", "pod-template-hash"]
_VALUES = ["web", "", "v1.2", "-bad", "y" * 64, "ok_1", "a b"]
_REF_FIELDS: list[tuple[str, list[Any]]] = [
    ("apiVersion", ["apps/v1", "v1", "", "a/b/c", 1]),
    ("kind", ["ReplicaSet", "Event", "", None]),
    ("name", ["web", "", 7]),
    ("uid", ["u-1", "", False]),
    ("controller", [True, False, None, 1, "true"]),
    ("blockOwnerDeletion", [True, None]),
]


def _errors(check: Any, *args: Any) -> list[str]:
    errs: list[ApiFieldError] = []
    check(*args, errs)
    return [e.error() for e in errs]


def _label_map(rng: random.Random) -> dict[str, str]:
    return {rng.choice(_KEYS): rng.choice(_VALUES) for _ in range(rng.randrange(4))}


def _refs(rng: random.Random) -> Any:
    if rng.random() < 0.1:
        return rng.choice(["", 0, {}, None, [], [None], ["x"], False])
    return [{key: rng.choice(values) for key, values in _REF_FIELDS if rng.random() < 0.9}
            for _ in range(rng.randrange(1, 4))]


@pytest.fixture
def small_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validation, "_VALID_KEPT", 20)  # so that the runs below fill it many times
    monkeypatch.setattr(validation, "_valid_label_maps", set())
    monkeypatch.setattr(validation, "_valid_owner_references", set())


@pytest.mark.usefixtures("small_memory")
def test_remembered_label_maps_and_owner_references_answer_as_the_first_time() -> None:
    rng = random.Random(25)
    cases = [(_label_map(rng), _refs(rng)) for _ in range(300)]
    cases += cases[:50]  # the same maps and lists again, as a controller's next objects bring them
    first = [(_errors(validate_labels, labels, "metadata.labels"),
              _errors(validate_owner_references, {"ownerReferences": refs}, "metadata.ownerReferences"))
             for labels, refs in cases]
    assert any(labels for labels, _ in first) and any(not labels for labels, _ in first)
    assert any(refs for _, refs in first) and any(not refs for _, refs in first)
    again = [(_errors(validate_labels, labels, "metadata.labels"),
              _errors(validate_owner_references, {"ownerReferences": refs}, "metadata.ownerReferences"))
             for labels, refs in reversed(cases)]
    assert list(reversed(again)) == first


@pytest.mark.usefixtures("small_memory")
def test_a_remembered_valid_map_or_list_is_not_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    real_labels, real_refs = validation._validate_labels, validation._validate_owner_references
    monkeypatch.setattr(validation, "_validate_labels", lambda *a: checked.append("labels") or real_labels(*a))
    monkeypatch.setattr(validation, "_validate_owner_references",
                        lambda *a: checked.append("refs") or real_refs(*a))
    meta = {"name": "web-1", "namespace": "default", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u-1",
                                 "controller": True}]}
    bad = {"name": "web-2", "namespace": "default", "labels": {"app": "-bad"},
           "ownerReferences": [{"apiVersion": "apps/v1", "kind": "", "name": "web", "uid": "u-1"}]}
    for obj in ({"metadata": meta}, {"metadata": dict(meta, name="web-3")}, {"metadata": bad}, {"metadata": bad}):
        assert _errors(validate_object_meta, obj, True, validation.subdomain_name) == (
            [] if obj["metadata"] is not bad else [
                'metadata.labels: Invalid value: "-bad": a valid label must be an empty string or consist of '
                "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character "
                "(e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
                'metadata.ownerReferences.kind: Invalid value: "": kind must not be empty'])
    assert checked == ["labels", "refs", "labels", "refs", "labels", "refs"]  # the valid ones once, the bad each time


@pytest.mark.usefixtures("small_memory")
@pytest.mark.parametrize("remembered, asked, expected", [
    ([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": True}],
     [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": 1}],
     ["metadata.ownerReferences.controller: Invalid value: 1: must be of type boolean"]),
    ([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "1"}],
     [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": 1}],
     ["metadata.ownerReferences.uid: Invalid value: 1: must be of type string",
      'metadata.ownerReferences.uid: Invalid value: "": uid must not be empty']),
    ([], "", ['metadata.ownerReferences: Invalid value: "": must be of type array']),
    (None, {}, ["metadata.ownerReferences: Invalid value: map[string]string{}: must be of type array"]),
    (None, False, ["metadata.ownerReferences: Invalid value: false: must be of type array"]),
], ids=["bool-not-int", "string-not-int", "empty-string", "empty-object", "false"])
def test_a_remembered_list_answers_only_for_the_same_json(remembered: Any, asked: Any, expected: list[str]) -> None:
    """A value of another JSON type, even one Python finds equal or falsy like an empty list, is checked."""
    path = "metadata.ownerReferences"
    assert _errors(validate_owner_references, {"ownerReferences": remembered}, path) == []
    assert _errors(validate_owner_references, {"ownerReferences": asked}, path) == expected
