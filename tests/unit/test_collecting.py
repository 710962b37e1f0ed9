"""runtime/collecting.py: the survivors of a full collection are frozen, young garbage is still collected, and every
interval a full collection thaws and scans everything, so a garbage cycle among long-lived objects is freed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from runtime import collecting


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def clock() -> Iterator[list[float]]:
    now = [1000.0]
    policy = collecting.FreezeSurvivors(interval=600.0, clock=lambda: now[0])
    gc.callbacks.append(policy)
    try:
        yield now
    finally:
        gc.callbacks.remove(policy)
        gc.unfreeze()


def test_a_full_collection_freezes_its_survivors_and_young_cycles_are_still_collected(clock: list[float]) -> None:
    kept = [Node() for _ in range(1000)]
    gc.collect()
    frozen = gc.get_freeze_count()
    assert frozen >= len(kept)  # out of the next collections' sight
    young = _cycle()
    gc.collect()
    assert young() is None  # allocated after the freeze: collected as before
    assert gc.get_freeze_count() >= frozen


def test_a_cycle_that_became_garbage_while_frozen_is_freed_after_the_interval(clock: list[float]) -> None:
    long_lived = _cycle()
    holder = [long_lived()]
    gc.collect()  # survives: frozen with its cycle
    holder.clear()  # now garbage, but frozen: no collection sees it
    gc.collect()
    assert long_lived() is not None
    clock[0] += 600.0  # the interval has passed: the next full collection thaws first
    gc.collect()
    assert long_lived() is None


def test_install_is_once_per_process() -> None:
    try:
        first = collecting.install()
        assert collecting.install() is first
        assert gc.callbacks.count(first) == 1
    finally:
        collecting.uninstall()
    assert first not in gc.callbacks and gc.get_freeze_count() == 0
