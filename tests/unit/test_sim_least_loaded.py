"""The scheduler's choice among feasible nodes (issue 25, round 6: the common case without a Python loop per node) is
the earlier loop's: the first node of the least load in the rotating sample, skipping full nodes."""

from __future__ import annotations

import random
from collections import Counter

from sim.registry import Registry
from sim.scheduler import DEFAULT_PODS, Scheduler
from sim.store import ObjectStore


def _reference(scheduler: Scheduler, feasible: list[str], offset: int) -> str | None:
    """The loop before the change, verbatim but for its state passed in."""
    count = len(feasible)
    sample = min(count, scheduler._sample_size(count))
    best: str | None = None
    best_load = 0
    for i in range(sample):
        node_name = feasible[(offset + i) % count]
        load = scheduler.pods_on_node[node_name]
        if load >= scheduler._capacity.get(node_name, DEFAULT_PODS):
            continue
        if best is None or load < best_load:
            best, best_load = node_name, load
    if best is None and sample < count:
        best = next((n for n in feasible if scheduler.pods_on_node[n] < scheduler._capacity.get(n, DEFAULT_PODS)),
                    None)
    return best


def test_the_choice_is_the_loops() -> None:
    rng = random.Random(25)
    scheduler = Scheduler(Registry(ObjectStore()))
    fast_paths = full_paths = 0
    for _ in range(3000):
        nodes = [f"n{i}" for i in range(rng.choice([1, 2, 7, 99, 100, 101, 250, 1000]))]
        feasible = rng.sample(nodes, rng.randint(1, len(nodes)))
        scheduler.pods_on_node = Counter({n: rng.randint(0, 4) for n in nodes if rng.random() < 0.8})
        scheduler._capacity = {n: rng.randint(1, 5) for n in nodes if rng.random() < 0.2}
        if rng.random() < 0.5:  # mostly room everywhere, as while pods are created
            scheduler._capacity = {}
        scheduler._offset = rng.randrange(len(feasible))
        expected = _reference(scheduler, feasible, (scheduler._offset + 1) % len(feasible))
        assert scheduler._least_loaded(feasible) == expected
        full = any(scheduler.pods_on_node[n] >= scheduler._capacity.get(n, DEFAULT_PODS) for n in feasible)
        full_paths += full
        fast_paths += not full
    assert fast_paths > 500 and full_paths > 500
    assert scheduler._least_loaded([]) is None
