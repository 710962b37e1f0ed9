"""Ingest's counters as runtime.metrics shows them (CounterMap): a key names the same series whether it is looked up
as the series' own label values or as values whose str() they are, and what is added reaches the registry."""

from __future__ import annotations

import pytest
from prometheus_client import Counter

from ingest.counting import Counters
from runtime.metrics import CounterMap, private


def test_a_kind_and_type_count_in_one_series() -> None:
    counters = Counters()
    counters.published[("Pod", "ADDED")] += 1
    counters.published.inc(("Pod", "ADDED"))
    counters.published.inc(("Pod", "DELETED"), 3)
    counters.duplicates.inc("Pod")
    counters.duplicates["Pod"] += 1
    assert counters.published[("Pod", "ADDED")] == 2 and counters.published[("Pod", "DELETED")] == 3
    assert sorted(counters.published) == [("Pod", "ADDED"), ("Pod", "DELETED")]
    assert counters.duplicates["Pod"] == 2 and list(counters.duplicates) == ["Pod"]
    sample = counters.registry.get_sample_value
    assert sample("kubus_ingest_events_total", {"kind": "Pod", "type": "ADDED"}) == 2
    assert sample("kubus_ingest_duplicates_total", {"kind": "Pod"}) == 2
    assert counters.snapshot()["published"] == {"Pod": {"ADDED": 2, "DELETED": 3}}


@pytest.fixture
def by_kind() -> CounterMap:
    return CounterMap(Counter("things", "Things", ["kind"], registry=private()))


@pytest.fixture
def by_pair() -> CounterMap:
    return CounterMap(Counter("pairs", "Pairs", ["a", "b"], registry=private()))


def test_values_that_are_not_str_name_the_series_of_their_str(by_kind: CounterMap, by_pair: CounterMap) -> None:
    by_kind[1] += 1
    by_kind.inc("1")
    by_kind.inc(True)
    by_kind.inc(["x"])  # unhashable: its str() is the label value
    assert by_kind["1"] == 2 and by_kind[1] == 2 and by_kind[True] == 1 and by_kind["['x']"] == 1
    assert sorted(by_kind) == ["1", "True", "['x']"]
    by_pair.inc(("a", 1))
    by_pair[("a", "1")] += 1
    assert by_pair[("a", 1)] == 2 and list(by_pair) == [("a", "1")]


def test_membership_and_get(by_kind: CounterMap) -> None:
    assert "Pod" not in by_kind and by_kind.get("Pod") is None and by_kind["Pod"] == 0 and len(by_kind) == 0
    by_kind.inc("Pod")
    by_kind.inc(7)
    assert "Pod" in by_kind and 7 in by_kind and "7" in by_kind and ["Pod"] not in by_kind
    assert by_kind.get("Pod") == 1 and by_kind.get(7) == 1 and len(by_kind) == 2


def test_a_counter_does_not_go_down(by_kind: CounterMap) -> None:
    by_kind.inc("Pod", 2)
    with pytest.raises(ValueError, match="cannot go down"):
        by_kind["Pod"] = 1
