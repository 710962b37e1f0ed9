"""sim.schema.prune in one pass per object (issue 25) prunes exactly as the three-pass version before it did.

The reference below is the earlier implementation, verbatim: random objects built from the Pod, DaemonSet and
Event schemas, with unknown fields, strategic-merge directives, nulls, empty and wrong-typed values sprinkled in,
must come out the same, with the same unknown paths in the same order.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from sim import schema
from sim.schema import _ALWAYS_WRITTEN, SchemaNode


def _reference(value: Any, node: SchemaNode, path: str, unknown: list[str]) -> None:
    if node is None:
        return
    if isinstance(node, tuple):
        container, item = node
        if item is None:
            return
        if container == "list" and isinstance(value, list):
            for i, element in enumerate(value):
                _reference(element, item, f"{path}[{i}]", unknown)
        elif container == "map" and isinstance(value, dict):
            for key, element in value.items():
                _reference(element, item, f"{path}[{key}]", unknown)
        return
    if not isinstance(value, dict):
        return
    for key in [k for k in value if k not in node]:
        if key.startswith("$"):
            continue
        unknown.append(f"{path}.{key}" if path else key)
        del value[key]
    for key in [k for k, v in value.items() if isinstance(node.get(k), tuple)
                and (v is None or v == [] or v == {}) and k not in _ALWAYS_WRITTEN]:
        del value[key]
    for key, child in value.items():
        sub = node.get(key)
        if sub is not None and child is not None:
            _reference(child, sub, f"{path}.{key}" if path else key, unknown)


def _random(node: SchemaNode, rng: random.Random, depth: int) -> Any:
    odd = rng.random()
    if odd < 0.06:
        return None
    if odd < 0.09:
        return rng.choice([[], {}, "", 0, False, "x"])
    if node is None or depth > 6:
        return rng.choice(["v", 3, True, 1.5, {"free": "form"}, ["a"]])
    if isinstance(node, tuple):
        container, item = node
        if container == "list":
            return [_random(item, rng, depth + 1) for _ in range(rng.randint(0, 3))]
        return {f"k{i}": _random(item, rng, depth + 1) for i in range(rng.randint(0, 3))}
    fields = rng.sample(sorted(node), min(len(node), rng.randint(0, 6)))
    obj = {name: _random(node[name], rng, depth + 1) for name in fields}
    if rng.random() < 0.3:
        obj[rng.choice(["unknownField", "extra", "$patch", "$setElementOrder/x"])] = _random(None, rng, depth + 1)
    for always in _ALWAYS_WRITTEN & set(node):
        if rng.random() < 0.3:
            obj[always] = rng.choice([[], None])
    return obj


@pytest.mark.parametrize("kind", ["Pod", "DaemonSet", "Event"])
def test_prune_is_the_earlier_prune(kind: str) -> None:
    rng = random.Random(25)
    root = schema.root(kind)
    assert isinstance(root, dict)
    pruned_something = 0
    for _ in range(400):
        obj = _random(root, rng, 0)
        if not isinstance(obj, dict):
            continue
        expected, expected_unknown = copy.deepcopy(obj), []  # type: ignore[var-annotated]
        _reference(expected, root, "", expected_unknown)
        unknown = schema.prune(kind, obj)
        assert (obj, unknown) == (expected, expected_unknown)
        pruned_something += bool(expected_unknown)
    assert pruned_something > 50  # the cases exercised what they are about
