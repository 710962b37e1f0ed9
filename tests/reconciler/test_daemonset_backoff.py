"""The DaemonSet's failed-pod backoff: client-go flowcontrol.Backoff as immutable values.

Cases come from client-go's util/flowcontrol/backoff_test.go (TestSlowBackoff, TestBackoffHighWaterMark,
TestBackoffGC, TestIsInBackOffSinceUpdate, run with their own initial and max durations) and from
daemon_controller_test.go (TestDaemonKillFailedPodsBackoff's boundary checks, failedPodsBackoffKey).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from kube.testing import daemonset
from reconciler.core.daemonset import backoff
from reconciler.core.daemonset.backoff import (
    BACKOFF_GC_INTERVAL,
    INITIAL_DELAY,
    MAX_DELAY,
    FailedPodBackoff,
    failed_pods_backoff_key,
    gc_cutoff,
)
from tests.reconciler.builders import NOW

KEY = "uid/1/node-0"
STEP = timedelta(seconds=1)
MICRO = timedelta(microseconds=1)


def entry(delay: float, at: timedelta = timedelta(0), key: str = KEY) -> FailedPodBackoff:
    return FailedPodBackoff(key=key, delay_seconds=delay, last_update=NOW + at)


def test_constants_are_upstreams() -> None:
    """NewBackOff(1*time.Second, 15*time.Minute) in apps.go, GC every BackoffGCInterval."""
    seconds = [d.total_seconds() for d in (INITIAL_DELAY, MAX_DELAY, BACKOFF_GC_INTERVAL)]
    assert seconds == [1, 15 * 60, 60]


def test_key_is_uid_observed_generation_and_node() -> None:
    """failedPodsBackoffKey: fmt.Sprintf("%s/%d/%s", ds.UID, ds.Status.ObservedGeneration, nodeName)."""
    ds = daemonset("foo").uid("5ad3").generation(4).observed_generation(3).build()
    assert failed_pods_backoff_key(ds, "node-0") == "5ad3/3/node-0"
    assert failed_pods_backoff_key(daemonset("foo").uid("u").build(), "n") == "u/0/n"


def test_slow_backoff() -> None:
    """TestSlowBackoff: Get before each Next, one step apart: 0 1 2 4 8 16 32 50 50 50 (max 50s)."""
    maximum = 50 * STEP
    table: dict[str, FailedPodBackoff] = {}
    seen = []
    for tick in range(1, 11):
        now = NOW + tick * STEP
        seen.append(backoff.get(table, KEY) / STEP)
        table = backoff.next(table, KEY, now, STEP, maximum)
        assert table[KEY].last_update == now
    assert seen == [0, 1, 2, 4, 8, 16, 32, 50, 50, 50]


def test_default_doubling_is_capped_at_fifteen_minutes() -> None:
    table: dict[str, FailedPodBackoff] = {}
    delays = []
    for i in range(12):
        table = backoff.next(table, KEY, NOW + i * STEP)
        delays.append(table[KEY].delay_seconds)
    assert delays == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900]
    assert table[KEY].delay == MAX_DELAY


def test_high_water_mark_kept_until_two_max_idle() -> None:
    """TestBackoffHighWaterMark: max 5s; after max+1s idle, Next stays at max (no reset before 2*max)."""
    maximum = 5 * STEP
    table: dict[str, FailedPodBackoff] = {}
    now = NOW
    for _ in range(6):
        now += STEP
        table = backoff.next(table, KEY, now, STEP, maximum)
    now += maximum + STEP
    table = backoff.next(table, KEY, now, STEP, maximum)
    assert backoff.get(table, KEY) == maximum


@pytest.mark.parametrize(("idle", "expected"), [
    pytest.param(2 * MAX_DELAY, 900.0, id="exactly-2max-idle: not expired, stays at max"),
    pytest.param(2 * MAX_DELAY + MICRO, 1.0, id="more-than-2max-idle: starts over"),
    pytest.param(timedelta(seconds=3), 8.0, id="recent: doubles"),
])
def test_next_resets_after_two_max(idle: timedelta, expected: float) -> None:
    """hasExpired: eventTime.Sub(lastUpdate) > 2*maxDuration."""
    table = {KEY: entry(900.0 if expected != 8.0 else 4.0)}
    result = backoff.next(table, KEY, NOW + idle)
    assert result[KEY] == FailedPodBackoff(key=KEY, delay_seconds=expected, last_update=NOW + idle)


def test_next_returns_a_new_mapping() -> None:
    other = entry(2.0, key="uid/1/node-1")
    table = {KEY: entry(1.0), other.key: other}
    result = backoff.next(table, KEY, NOW + STEP)
    assert table == {KEY: entry(1.0), other.key: other}
    assert result == {KEY: entry(2.0, STEP), other.key: other}


# TestIsInBackOffSinceUpdate (max 10s): (tick, in backoff, current delay); Next is called when not in backoff
IN_BACKOFF_SINCE_UPDATE = [
    (0, False, 0), (1, False, 1), (2, True, 2), (3, False, 2), (4, True, 4), (5, True, 4), (6, True, 4),
    (7, False, 4), (8, True, 8), (9, True, 8), (10, True, 8), (11, True, 8), (12, True, 8), (13, True, 8),
    (14, True, 8), (15, False, 8), (16, True, 10), (17, True, 10), (18, True, 10), (19, True, 10), (20, True, 10),
    (21, True, 10), (22, True, 10), (23, True, 10), (24, True, 10), (25, False, 10), (26, True, 10),
    (27, True, 10), (28, True, 10), (29, True, 10), (30, True, 10), (31, True, 10), (32, True, 10),
    (33, True, 10), (34, True, 10), (35, False, 10), (56, False, 0), (57, False, 1),
]


def test_is_in_backoff_since_update() -> None:
    maximum = 10 * STEP
    table: dict[str, FailedPodBackoff] = {}
    for tick, in_backoff, value in IN_BACKOFF_SINCE_UPDATE:
        now = NOW + tick * STEP
        assert backoff.is_in_backoff_since(table, KEY, now, maximum) is in_backoff, tick
        if in_backoff:
            assert backoff.get(table, KEY) == value * STEP, tick
        else:
            table = backoff.next(table, KEY, now, STEP, maximum)


@pytest.mark.parametrize(("at", "expected"), [
    pytest.param(timedelta(0), True, id="right after Next"),
    pytest.param(STEP - MICRO, True, id="just before the delay ends"),
    pytest.param(STEP, False, id="when the delay ends"),
    pytest.param(2 * MAX_DELAY + MICRO, False, id="expired"),
])
def test_backoff_boundaries(at: timedelta, expected: bool) -> None:
    """TestDaemonKillFailedPodsBackoff: in backoff until exactly lastUpdate + delay."""
    table = backoff.next({}, KEY, NOW)
    assert backoff.is_in_backoff_since(table, KEY, NOW + at) is expected


def test_unknown_key_is_not_in_backoff() -> None:
    assert backoff.is_in_backoff_since({}, KEY, NOW) is False
    assert backoff.get({}, KEY) == timedelta(0)


def test_expired_entry_is_not_in_backoff_even_with_a_long_delay() -> None:
    """An entry last raised more than 2*max ago no longer holds anything back, whatever its delay says."""
    table = {KEY: entry(10_000.0)}
    assert backoff.is_in_backoff_since(table, KEY, NOW + 2 * MAX_DELAY) is True
    assert backoff.is_in_backoff_since(table, KEY, NOW + 2 * MAX_DELAY + MICRO) is False


def test_gc() -> None:
    """TestBackoffGC (max 5s): kept after max+1s idle, dropped after 2*(max+1s); the boundary is strict."""
    maximum = 5 * STEP
    table = {KEY: entry(5.0)}
    assert backoff.gc(table, NOW + maximum + STEP, maximum) == table
    assert backoff.gc(table, NOW + 2 * (maximum + STEP), maximum) == {}
    assert backoff.gc(table, NOW + 2 * maximum, maximum) == table


def test_gc_keeps_fresh_entries_and_leaves_input_alone() -> None:
    old = entry(900.0, key="a")
    fresh = entry(1.0, 2 * MAX_DELAY, key="b")
    table = {"a": old, "b": fresh}
    now = NOW + 2 * MAX_DELAY + MICRO
    assert backoff.gc(table, now) == {"b": fresh}
    assert table == {"a": old, "b": fresh}


def test_gc_cutoff_matches_gc() -> None:
    """store.backoff.gc drops last_update < cutoff: the same entries gc() drops."""
    now = NOW + timedelta(hours=2)
    cutoff = gc_cutoff(now)
    assert cutoff == now - 2 * MAX_DELAY
    entries = [entry(1.0, timedelta(hours=2) - 2 * MAX_DELAY + d, key=str(i))
               for i, d in enumerate((-MICRO, timedelta(0), MICRO))]
    kept = backoff.gc({e.key: e for e in entries}, now)
    assert sorted(kept) == sorted(e.key for e in entries if not e.last_update < cutoff) == ["1", "2"]
