"""Pod readiness, availability and activity follow podutil and controller_utils."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kube.core import (
    Affinity,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodCondition,
)
from kube.nodeaffinity import get_target_node_name
from kube.pods import (
    get_pod_condition,
    get_pod_ready_condition,
    is_pod_active,
    is_pod_available,
    is_pod_ready,
    is_pod_terminal,
    is_pod_terminating,
    pod_facts,
    pod_key,
)
from kube.testing import pod

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        pytest.param(pod().build(), False, id="no-conditions"),
        pytest.param(pod().ready().build(), True, id="ready-true"),
        pytest.param(pod().not_ready().build(), False, id="ready-false"),
        pytest.param(pod().ready(status="Unknown").build(), False, id="ready-unknown"),
    ],
)
def test_is_pod_ready(subject: Pod, expected: bool) -> None:
    """Ready means a Ready condition with status True."""
    assert is_pod_ready(subject) is expected


@pytest.mark.parametrize(
    ("subject", "min_ready_seconds", "expected"),
    [
        pytest.param(pod().not_ready(at=NOW - timedelta(hours=1)).build(), 0, False, id="not-ready"),
        pytest.param(pod().ready().build(), 0, True, id="ready-no-min-ready-seconds"),
        pytest.param(pod().ready().build(), 10, False, id="ready-without-transition-time"),
        pytest.param(pod().ready(at=NOW - timedelta(seconds=11)).build(), 10, True, id="ready-long-enough"),
        pytest.param(pod().ready(at=NOW - timedelta(seconds=10)).build(), 10, True, id="exactly-at-the-boundary"),
        pytest.param(pod().ready(at=NOW - timedelta(seconds=9)).build(), 10, False, id="not-ready-long-enough"),
        pytest.param(pod().ready(at=NOW + timedelta(seconds=5)).build(), 0, True, id="future-transition-mrs-zero"),
    ],
)
def test_is_pod_available(subject: Pod, min_ready_seconds: int, expected: bool) -> None:
    """IsPodAvailable: ready and (mrs == 0 or lastTransitionTime + mrs <= now)."""
    assert is_pod_available(subject, min_ready_seconds, NOW) is expected


def test_unparsable_transition_time_is_not_available() -> None:
    """A garbled timestamp counts as no timestamp."""
    subject = pod().ready().build()
    condition = get_pod_ready_condition(subject)
    assert condition is not None
    condition.last_transition_time = "yesterday"
    assert not is_pod_available(subject, 5, NOW)


@pytest.mark.parametrize(
    ("subject", "active", "terminal", "terminating"),
    [
        pytest.param(pod().phase("Pending").build(), True, False, False, id="pending"),
        pytest.param(pod().phase("Running").build(), True, False, False, id="running"),
        pytest.param(pod().phase("Unknown").build(), True, False, False, id="unknown"),
        pytest.param(pod().phase("Succeeded").build(), False, True, False, id="succeeded"),
        pytest.param(pod().phase("Failed").build(), False, True, False, id="failed"),
        pytest.param(pod().phase("Running").deleting(NOW).build(), False, False, True, id="running-deleting"),
        pytest.param(pod().phase("Failed").deleting(NOW).build(), False, True, False, id="failed-deleting"),
    ],
)
def test_pod_lifecycle_predicates(subject: Pod, active: bool, terminal: bool, terminating: bool) -> None:
    """IsPodActive = not terminal and not deleting; terminating = deleting and not terminal."""
    assert (is_pod_active(subject), is_pod_terminal(subject), is_pod_terminating(subject)) == (
        active,
        terminal,
        terminating,
    )


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        pytest.param(pod("web-1").ns("prod").build(), "prod/web-1", id="namespaced"),
        pytest.param(pod("web-1").ns("").build(), "web-1", id="no-namespace"),
    ],
)
def test_pod_key(subject: Pod, expected: str) -> None:
    """MetaNamespaceKeyFunc."""
    assert pod_key(subject) == expected


def test_get_pod_condition_by_type() -> None:
    """Conditions are looked up by type."""
    subject = pod().ready(at=NOW).build()
    assert get_pod_condition(subject, "Ready") is get_pod_ready_condition(subject)
    assert get_pod_condition(subject, "PodScheduled") is None


def test_get_pod_condition_takes_the_first_of_a_type() -> None:
    """Of two conditions of one type (a status that repeats one), the first is the pod's, as upstream's loop finds."""
    subject = pod().not_ready().build()
    first = subject.status.conditions[0]
    subject.status.conditions = [PodCondition(type="PodScheduled", status="True"), first,
                                 PodCondition(type="Ready", status="True", last_transition_time="2024-05-01T12:00:00Z")]
    assert get_pod_ready_condition(subject) is first
    assert get_pod_condition(subject, "Initialized") is None


def _required(*terms: list[NodeSelectorRequirement]) -> Affinity:
    return Affinity(node_affinity=NodeAffinity(required_during_scheduling_ignored_during_execution=NodeSelector(
        node_selector_terms=[NodeSelectorTerm(match_fields=fields) for fields in terms])))


def _with_affinity(subject: Pod, affinity: Affinity) -> Pod:
    subject.spec.affinity = affinity
    return subject


def _name_in(*values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key="metadata.name", operator="In", values=list(values))


@pytest.mark.parametrize(
    ("subject", "node"),
    [
        pytest.param(pod("a").on_node("node-1").build(), "node-1", id="bound"),
        pytest.param(_with_affinity(pod("a").on_node("node-1").build(), _required([_name_in("node-2")])), "node-1",
                     id="bound-wins-over-affinity"),
        pytest.param(_with_affinity(pod("a").build(), _required([_name_in("node-2")])), "node-2", id="pinned"),
        pytest.param(_with_affinity(pod("a").build(), _required([], [_name_in("node-3")])), "node-3", id="second-term"),
        pytest.param(_with_affinity(pod("a").build(), _required([_name_in("node-2", "node-3")])), None,
                     id="two-values"),
        pytest.param(_with_affinity(pod("a").build(), _required([_name_in("")])), "", id="empty-value"),
        pytest.param(_with_affinity(pod("a").build(), Affinity()), None, id="no-node-affinity"),
        pytest.param(pod("a").build(), None, id="unscheduled"),
    ],
)
def test_the_facts_name_the_target_node_as_get_target_node_name(subject: Pod, node: str | None) -> None:
    """Issue 25: the DaemonSet's sync groups pods by PodFacts.node, read once per pod version; it must be
    GetTargetNodeName (spec.nodeName, else the one `metadata.name In [x]` matchField), and name the pod."""
    facts = pod_facts(subject)
    assert (facts.node, get_target_node_name(subject)) == (node, node)
    assert facts.name == "a"
