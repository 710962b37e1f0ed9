"""client-go's rate-limited delaying queue: default_rate_limiters_test.go, delaying_queue_test.go, queue_test.go.

Upstream steps a fake clock; here every call takes the time, so the cases read as a timeline.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from kube.flowcontrol import TokenBucket
from reconciler.core.workqueue import BASE_DELAY, BUCKET_BURST, BUCKET_QPS, MAX_DELAY, WorkQueue
from tests.reconciler.builders import NOW

MS = timedelta(milliseconds=1)


def test_defaults_are_client_gos() -> None:
    """DefaultControllerRateLimiter: 5 ms doubling to 1000 s, and a 10 qps bucket of 100."""
    assert (5 * MS, timedelta(seconds=1000), 100) == (BASE_DELAY, MAX_DELAY, BUCKET_BURST)
    assert BUCKET_QPS == 10.0


def test_exponential_backoff_doubles_per_item_up_to_the_cap() -> None:
    """TestItemExponentialFailureRateLimiter with the controller defaults: one item's delays double."""
    q = WorkQueue()
    delays = [q.when("one", NOW + i * timedelta(hours=1)) for i in range(20)]
    expected = [5 * MS * 2**i for i in range(18)] + [MAX_DELAY, MAX_DELAY]
    assert delays == expected
    assert delays[17] == timedelta(seconds=655.36)
    assert q.failures("one") == 20


def test_backoff_is_per_item_and_forget_resets_it() -> None:
    """TestItemExponentialFailureRateLimiter: a second item starts at the base; Forget starts over."""
    q = WorkQueue()
    assert [q.when("one", NOW) for _ in range(5)] == [5 * MS, 10 * MS, 20 * MS, 40 * MS, 80 * MS]
    assert [q.when("two", NOW) for _ in range(2)] == [5 * MS, 10 * MS]
    assert (q.failures("one"), q.failures("two")) == (5, 2)
    q.forget("one")
    assert q.failures("one") == 0
    assert q.when("one", NOW) == 5 * MS
    assert q.failures("two") == 2


def test_backoff_never_overflows() -> None:
    """TestItemExponentialFailureRateLimiterOverFlow: a thousand failures still wait MaxDelay."""
    q = WorkQueue()
    delays = [q.when("overflow", NOW + i * timedelta(hours=1)) for i in range(1000)]
    assert delays[-1] == MAX_DELAY
    assert max(delays) == MAX_DELAY


def test_bucket_delays_the_101st_immediate_failure_by_100ms() -> None:
    """The overall bucket (10 qps, burst 100) only shows once 100 distinct keys failed at once."""
    q = WorkQueue()
    delays = [q.when(f"key-{i}", NOW) for i in range(102)]
    assert delays[:100] == [5 * MS] * 100  # the per-item backoff wins while tokens last
    assert delays[100] == 100 * MS
    assert delays[101] == 200 * MS


def test_bucket_refills_at_ten_per_second() -> None:
    q = WorkQueue()
    for i in range(101):
        q.when(f"key-{i}", NOW)  # the bucket owes one token
    # a second later 10 tokens came back: 9 are left after the debt, so no wait beyond the backoff
    assert q.when("later", NOW + timedelta(seconds=1)) == 5 * MS


@pytest.mark.parametrize(
    ("reservations", "expected"),
    [
        pytest.param([0.0] * 100, [timedelta(0)] * 100, id="burst-is-free"),
        pytest.param([0.0] * 101, [timedelta(0)] * 100 + [100 * MS], id="debt-of-one-token"),
        pytest.param([0.0] * 100 + [0.05], [timedelta(0)] * 100 + [50 * MS], id="half-a-token-refilled"),
        pytest.param([0.0] * 100 + [0.1], [timedelta(0)] * 101, id="one-token-refilled"),
        pytest.param([0.0] * 100 + [1000.0, 1000.0], [timedelta(0)] * 102, id="refill-caps-at-burst"),
    ],
)
def test_token_bucket_reserve(reservations: list[float], expected: list[timedelta]) -> None:
    """rate.Limiter.Reserve().Delay(): tokens may go negative and the debt is waited for."""
    bucket: TokenBucket[datetime] = TokenBucket(BUCKET_QPS, BUCKET_BURST)
    assert [timedelta(seconds=bucket.reserve(NOW + timedelta(seconds=s))) for s in reservations] == expected


def test_token_bucket_refill_is_capped_at_burst() -> None:
    bucket: TokenBucket[datetime] = TokenBucket(BUCKET_QPS, BUCKET_BURST)
    for _ in range(100):
        bucket.reserve(NOW)
    bucket.reserve(NOW + timedelta(hours=1))
    assert bucket.tokens == BUCKET_BURST - 1


def test_add_dedups_and_keeps_first_position() -> None:
    """queue.Add: a key already waiting is not added twice and keeps its place."""
    q = WorkQueue()
    for key in ["a", "b", "a", "c", "b"]:
        q.add(key)
    assert len(q) == 3
    assert q.pop_ready(NOW) == ["a", "b", "c"]
    assert len(q) == 0
    assert q.pop_ready(NOW) == []


def test_add_after_waits_for_its_time() -> None:
    """TestSimpleQueue: nothing before the delay; ready exactly when it passed."""
    q = WorkQueue()
    q.add_after("foo", 50 * MS, NOW)
    assert len(q) == 0
    assert q.next_ready_at() == NOW + 50 * MS
    assert q.pop_ready(NOW + 49 * MS) == []
    assert q.pop_ready(NOW + 50 * MS) == ["foo"]
    assert q.next_ready_at() is None
    assert q.pop_ready(NOW + timedelta(hours=1)) == []


@pytest.mark.parametrize(
    "delays",
    [
        pytest.param([50, 70], id="earlier-first"),
        pytest.param([70, 50], id="later-first"),
        pytest.param([50, 50], id="same"),
    ],
)
def test_add_after_keeps_the_earliest_time(delays: list[int]) -> None:
    """TestDeduping: a waiting key is ready at the earliest of its times, and only once."""
    q = WorkQueue()
    for delay in delays:
        q.add_after("foo", delay * MS, NOW)
    assert q.next_ready_at() == NOW + 50 * MS
    assert q.pop_ready(NOW + 49 * MS) == []
    assert q.pop_ready(NOW + 50 * MS) == ["foo"]
    assert q.pop_ready(NOW + 100 * MS) == []
    assert q.next_ready_at() is None


def test_two_keys_fire_in_time_order() -> None:
    """TestAddTwoFireEarly: the shorter delay fires first; re-adding one later fires it later."""
    q = WorkQueue()
    q.add_after("foo", timedelta(seconds=1), NOW)
    q.add_after("bar", 50 * MS, NOW)
    assert q.pop_ready(NOW + 60 * MS) == ["bar"]
    q.add_after("foo", 50 * MS, NOW + 60 * MS)
    assert q.pop_ready(NOW + 100 * MS) == []
    assert q.pop_ready(NOW + 110 * MS) == ["foo"]
    assert q.pop_ready(NOW + timedelta(seconds=1)) == []  # the superseded 1 s entry never fires


def test_delayed_keys_pop_in_ready_order() -> None:
    """TestCopyShifting: keys added with decreasing delays come out soonest first."""
    q = WorkQueue()
    q.add_after("first", timedelta(seconds=1), NOW)
    q.add_after("second", 500 * MS, NOW)
    q.add_after("third", 250 * MS, NOW)
    assert q.pop_ready(NOW + timedelta(seconds=2)) == ["third", "second", "first"]


def test_ready_keys_come_before_newly_promoted_ones() -> None:
    q = WorkQueue()
    q.add_after("delayed", 10 * MS, NOW)
    q.add("now")
    assert q.pop_ready(NOW + 10 * MS) == ["now", "delayed"]


@pytest.mark.parametrize("delay", [timedelta(0), -MS], ids=["zero", "negative"])
def test_add_after_without_delay_adds_now(delay: timedelta) -> None:
    q = WorkQueue()
    q.add_after("foo", delay, NOW)
    assert len(q) == 1
    assert q.next_ready_at() is None


def test_a_ready_key_still_fires_its_delayed_entry() -> None:
    """As upstream: Add does not cancel a pending AddAfter of the same key."""
    q = WorkQueue()
    q.add_after("foo", timedelta(seconds=1), NOW)
    q.add("foo")
    assert q.pop_ready(NOW) == ["foo"]
    assert q.pop_ready(NOW + timedelta(seconds=1)) == ["foo"]


def test_add_rate_limited_waits_the_backoff() -> None:
    """TestRateLimitingQueue: AddRateLimited waits 5 ms, then 10 ms; Forget starts over."""
    q = WorkQueue()
    q.add_rate_limited("one", NOW)
    assert q.failures("one") == 1
    assert q.pop_ready(NOW + 4 * MS) == []
    assert q.pop_ready(NOW + 5 * MS) == ["one"]
    later = NOW + timedelta(seconds=1)
    q.add_rate_limited("one", later)
    assert q.next_ready_at() == later + 10 * MS
    assert q.failures("one") == 2
    q.forget("one")
    assert q.failures("one") == 0
    assert q.pop_ready(later + 10 * MS) == ["one"]
