"""The key-based scale-down order against upstream's comparator itself, on random pods.

`pods_to_delete_order` sorts by tuples; `_less` is ActivePodsWithRanks.Less rule by rule. Wherever
`_less` is a consistent order the two must agree: no pod may come after one `_less` puts behind it.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from kube.core import POD_PENDING, POD_RUNNING, POD_UNKNOWN, Pod
from kube.pods import pod_facts
from kube.testing import pod
from kube.times import format_time
from reconciler.core.ranking import (
    POD_DELETION_COST,
    _buckets_meet,
    _facts_order,
    _less,
    _Ranked,
    _sort_keys,
    logarithmic_rank_diff,
    pods_to_delete_order,
    tie_class,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def random_pod(rng: random.Random, i: int, ready_times: list[datetime | None]) -> Pod:
    b = pod(f"p{i:03d}").uid(f"uid-{rng.randrange(10**6):06d}-{i}").phase(
        rng.choice([POD_PENDING, POD_UNKNOWN, POD_RUNNING, POD_RUNNING]))
    if rng.random() < 0.8:
        b = b.on_node(rng.choice(["n1", "n2", "n3"]))
    if rng.random() < 0.7:
        b = b.ready(ready_times.pop() if len(ready_times) > 1 else ready_times[0])
    if rng.random() < 0.3:
        b = b.restarts(rng.randrange(3))
    if rng.random() < 0.3:  # a sidecar: its restarts break ties of the regular containers'
        b = b.sidecar("proxy", rng.randrange(3))
    if rng.random() < 0.9:
        b = b.created(NOW - timedelta(seconds=rng.choice([1, 2, 3, 70, 4000, 90000])))
    if rng.random() < 0.2:
        b = b.annotations({POD_DELETION_COST: str(rng.choice([-5, 0, 7]))})
    return b.build()


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("times", ["distinct", "shared"])
def test_key_order_never_contradicts_the_comparator(seed: int, times: str) -> None:
    rng = random.Random(seed)
    count = 30
    if times == "distinct":  # every Ready pod its own Ready time: _less is a consistent order
        ready_times: list[datetime | None] = [NOW - timedelta(seconds=s) for s in rng.sample(range(1, 200_000), 200)]
    else:  # one Ready time for all: also consistent (restarts and creation decide)
        ready_times = [NOW - timedelta(seconds=rng.randrange(1, 100_000))]  # never popped: one left
    pods = [random_pod(rng, i, ready_times) for i in range(count)]
    if times == "distinct":
        used: set[object] = set()
        for p in pods:  # make the Ready times really distinct
            for c in p.status.conditions:
                assert c.last_transition_time not in used or c.status != "True"
                used.add(c.last_transition_time)
    ranks = [rng.randrange(3) for _ in pods]
    ordered = pods_to_delete_order(pods, ranks, NOW)
    rank_of = {p.metadata.name: r for p, r in zip(pods, ranks, strict=True)}
    ranked = [_Ranked.of(p, rank_of[p.metadata.name]) for p in ordered]
    for i, earlier in enumerate(ranked):
        for later in ranked[i + 1:]:
            assert not _less(later, earlier, NOW), (later.pod.metadata.name, earlier.pod.metadata.name)
    assert sorted(p.metadata.name for p in ordered) == sorted(p.metadata.name for p in pods)


@pytest.mark.parametrize("seed", range(60))
def test_the_facts_keys_order_as_the_tuple_keys(seed: int) -> None:
    """The scale-down sync sorts by keys built from the cache's per-pod facts (`_fact_keys`): fields packed
    into ints, times in microseconds. They must order every pod list as `_sort_keys` does, its tie rule and
    input order (the sort is stable) included, and times on the other side of `now` too."""
    rng = random.Random(seed)
    shared = [NOW - timedelta(seconds=s) for s in (1, 2, 70, 4000)]
    ready_times: list[datetime | None] = [
        rng.choice([*shared, NOW + timedelta(seconds=5), NOW, NOW - timedelta(microseconds=rng.randrange(1, 10**6)),
                    NOW - timedelta(days=rng.randrange(1, 4000))]) for _ in range(400)]
    pods = [random_pod(rng, i, ready_times) for i in range(rng.randrange(1, 60))]
    for p in pods:
        if rng.random() < 0.2:  # a Ready condition without a transition time, a timestamp that does not parse
            for c in p.status.conditions:
                c.last_transition_time = rng.choice([None, "", "yesterday"])
        if rng.random() < 0.3:  # created now or later (by another clock): bucket -1; none at all or unreadable
            p.metadata.creation_timestamp = rng.choice([format_time(NOW), format_time(NOW + timedelta(seconds=5)),
                                                        None, "2026-13-45T00:00:00Z"])
    ranks = [rng.randrange(4) for _ in pods]
    by_tuples = [pods[i] for i in sorted(range(len(pods)), key=_sort_keys(pods, ranks, NOW).__getitem__)]
    assert [p.metadata.name for p in pods_to_delete_order(pods, ranks, NOW)] == [p.metadata.name for p in by_tuples]
    facts = [pod_facts(p) for p in pods]
    limit = rng.randrange(len(pods) + 1)
    assert _facts_order(facts, ranks, NOW, limit) == by_tuples[:limit]


def test_ranks_out_of_the_packed_range_take_the_tuple_keys() -> None:
    rng = random.Random(7)
    ready_times: list[datetime | None] = [NOW - timedelta(seconds=s) for s in range(1, 100)]
    pods = [random_pod(rng, i, ready_times) for i in range(20)]
    ranks = [rng.choice([-3, 0, 2**32, 2**40]) for _ in pods]
    by_tuples = [pods[i] for i in sorted(range(len(pods)), key=_sort_keys(pods, ranks, NOW).__getitem__)]
    assert pods_to_delete_order(pods, ranks, NOW) == by_tuples


def _equal_but_for_uid(a: _Ranked, b: _Ranked, now: datetime) -> bool:
    """The reference: `_less` orders neither before the other once they share a UID."""
    twin = _Ranked(b.pod, b.rank, b.node_name, b.phase, b.ready, b.cost, b.ready_time, b.restarts, b.created, a.uid)
    return not _less(a, twin, now) and not _less(twin, a, now)


@pytest.mark.parametrize("seed", range(30))
def test_the_tie_class_at_one_moment_is_the_comparators_tie(seed: int) -> None:
    """With no room for the clock, a pick's tie class is exactly the pods `_less` leaves unordered against it
    but for the UID."""
    rng = random.Random(seed)
    ready_times: list[datetime | None] = [NOW - timedelta(seconds=rng.choice([1, 2, 3, 5, 9, 70, 4000]))
                                          for _ in range(60)]
    pods = [random_pod(rng, i, ready_times) for i in range(30)]
    ranks = [rng.randrange(3) for _ in pods]
    ranked = [_Ranked.of(p, r) for p, r in zip(pods, ranks, strict=True)]
    for mine in ranked:
        expected = [r.pod.metadata.name for r in ranked if r is mine or _equal_but_for_uid(mine, r, NOW)]
        assert [p.metadata.name for p in tie_class(pods, ranks, mine.pod, NOW, NOW)] == expected


@pytest.mark.parametrize("seed", range(200))
def test_buckets_meet_in_a_window_as_a_fine_scan_finds(seed: int) -> None:
    """`_buckets_meet` against sampling the window every millisecond (the times are whole milliseconds, so no
    bucket change falls between two samples unseen but for sub-millisecond runs, excluded by construction)."""
    rng = random.Random(seed)
    newer = NOW - timedelta(milliseconds=rng.randrange(1, 20_000))
    older = newer - timedelta(milliseconds=rng.randrange(1, 20_000))
    slack = timedelta(milliseconds=rng.randrange(0, 3_000))
    earliest, latest = NOW - slack, NOW + slack
    found = False
    at = earliest
    while at <= latest and not found:
        found = logarithmic_rank_diff(newer, older, at) == 0
        at += timedelta(milliseconds=1)
    assert _buckets_meet(newer, older, earliest, latest) == found


def test_a_pick_at_a_buckets_edge_ties_with_its_neighbour_within_the_clocks_slack() -> None:
    """Ready 4 s and 5 s ago (the API's times are whole seconds) straddle 2**32 ns (4.29 s): distinct buckets at
    the shadow's moment, one bucket 0.3 s later, when upstream may have decided. Ready 1 s and 60 s ago never
    share one within 2 s."""
    def ready_since(name: str, seconds: int) -> Pod:
        return pod(name).uid(f"uid-{name}").phase(POD_RUNNING).on_node("n1").ready(
            NOW - timedelta(seconds=seconds)).created(NOW - timedelta(seconds=90)).build()

    edge = [ready_since("a", 4), ready_since("b", 5)]
    assert logarithmic_rank_diff(NOW - timedelta(seconds=4), NOW - timedelta(seconds=5), NOW) != 0
    assert [p.metadata.name for p in tie_class(edge, [0, 0], edge[0], NOW, NOW)] == ["a"]
    slack = timedelta(seconds=2)
    assert [p.metadata.name for p in tie_class(edge, [0, 0], edge[0], NOW - slack, NOW + slack)] == ["a", "b"]
    apart = [ready_since("c", 1), ready_since("d", 60)]
    assert [p.metadata.name for p in tie_class(apart, [0, 0], apart[0], NOW - slack, NOW + slack)] == ["c"]
