"""The stand-in controller's pure decision and the expectations it keeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kube.core import Pod
from kube.testing import pod
from reconciler.core import standin
from reconciler.core.expectations import EXPECTATIONS_TIMEOUT, Expectations, expect

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pods(count: int, namespace: str = "ns", **overrides: str) -> list[Pod]:
    built = []
    for i in range(count):
        b = pod(f"p{i}").ns(namespace).labels(**{standin.LABEL: namespace})
        if overrides.get("phase"):
            b = b.phase(overrides["phase"])
        built.append(b.build())
    return built


@pytest.mark.parametrize(
    ("annotation", "existing", "expectations", "creates", "reason"),
    [
        pytest.param("3", [], Expectations(), 3, "3 pods missing", id="creates-missing"),
        pytest.param("3", pods(3), Expectations(), 0, "enough pods", id="enough"),
        pytest.param("1", pods(2), Expectations(), 0, "more pods than asked; the stand-in never deletes",
                     id="never-deletes"),
        pytest.param("3", [], expect(3, 0, NOW), 0, "waiting for 3 creations to be observed",
                     id="waits-for-expectations"),
        pytest.param("3", [], expect(3, 0, NOW - EXPECTATIONS_TIMEOUT - timedelta(seconds=1)), 3, "3 pods missing",
                     id="expired-expectations-count-as-satisfied"),
        pytest.param("3", [], expect(3, 0, NOW).lowered(adds=3), 3, "3 pods missing",
                     id="lowered-expectations-are-fulfilled"),
        pytest.param("2", pods(2, phase="Failed"), Expectations(), 2, "2 pods missing",
                     id="failed-pods-are-not-active"),
        pytest.param("0", [], Expectations(), 0, "enough pods", id="zero"),
    ],
)
def test_plan(annotation: str, existing: list[Pod], expectations: Expectations, creates: int, reason: str) -> None:
    """plan() creates exactly the missing pods, and nothing while creations are still expected."""
    result = standin.plan("ns", {standin.ANNOTATION: annotation}, existing, expectations, NOW, "42")
    assert len(result.creates) == creates
    assert result.reason == reason
    if creates:
        assert result.expectations == expect(creates, 0, NOW)


def test_plan_is_deterministic_and_names_follow_keys() -> None:
    """The same inputs give the same pods; each pod's name derives from its idempotency key."""
    first = standin.plan("ns", {standin.ANNOTATION: "2"}, [], Expectations(), NOW, "7")
    again = standin.plan("ns", {standin.ANNOTATION: "2"}, [], Expectations(), NOW, "7")
    assert first == again
    for key, body in first.creates:
        assert body["metadata"]["name"] == standin.pod_name(key)
        assert body["metadata"]["annotations"]["kubus.io/idempotency-key"] == key
        assert len(body["metadata"]["name"]) == len("standin-") + 5


@pytest.mark.parametrize("value", ["three", "-1"])
def test_bad_annotation_names_the_field(value: str) -> None:
    """A malformed annotation is refused with a message naming the annotation."""
    with pytest.raises(ValueError, match=standin.ANNOTATION):
        standin.plan("ns", {standin.ANNOTATION: value}, [], Expectations(), NOW, "1")


@pytest.mark.parametrize(
    ("start", "step", "satisfied"),
    [
        pytest.param(expect(1, 0, NOW), lambda e: e.creation_observed(), True, id="creation-observed"),
        pytest.param(expect(0, 1, NOW, frozenset({"ns/a"})), lambda e: e.deletion_observed("ns/a"), True,
                     id="expected-deletion-observed"),
        pytest.param(expect(0, 1, NOW, frozenset({"ns/a"})), lambda e: e.deletion_observed("ns/b"), False,
                     id="unexpected-deletion-ignored"),
        pytest.param(expect(0, 1, NOW, frozenset({"ns/a"})),
                     lambda e: e.deletion_observed("ns/a").deletion_observed("ns/a"), True,
                     id="deletion-counted-once"),
        pytest.param(expect(2, 0, NOW), lambda e: e.creation_observed(), False, id="one-of-two"),
    ],
)
def test_expectations(start: Expectations, step, satisfied: bool) -> None:  # type: ignore[no-untyped-def]
    """Expectations follow upstream: observed creations and UID-tracked deletions count down once."""
    after = step(start)
    assert after.satisfied(NOW) is satisfied
    assert after.dels >= 0 and after.adds >= 0, "an observation never counts twice or for nothing expected"
