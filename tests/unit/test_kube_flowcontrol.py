"""The one doubling backoff and the one token bucket (kube.flowcontrol), on both clocks kubus uses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kube.flowcontrol import TokenBucket, doubled

S = timedelta(seconds=1)


@pytest.mark.parametrize(("delay", "times", "cap", "expected"), [
    pytest.param(0.2, 0, 30.0, 0.2, id="no-doubling-yet"),
    pytest.param(0.2, 3, 30.0, 1.6, id="three-doublings"),
    pytest.param(0.2, 8, 30.0, 30.0, id="capped"),
    pytest.param(50.0, 0, 30.0, 30.0, id="a-first-delay-above-the-cap-is-capped"),
    pytest.param(S, 4, 15 * 60 * S, 16 * S, id="timedelta"),
    pytest.param(S, 10, 15 * 60 * S, 15 * 60 * S, id="timedelta-capped"),
])
def test_doubled_doubles_up_to_the_cap(delay: float | timedelta, times: int, cap: float | timedelta,
                                       expected: float | timedelta) -> None:
    """`min(cap, delay * 2**times)`, for float seconds and for timedeltas."""
    assert doubled(delay, times, cap) == expected  # type: ignore[type-var]


def test_doubled_is_exact_and_never_overflows() -> None:
    """A thousand doublings of a timedelta stop at the cap instead of overflowing; floats stay exact."""
    assert doubled(timedelta(milliseconds=5), 1000, timedelta(seconds=1000)) == timedelta(seconds=1000)
    assert [doubled(0.05, n, 1e9) for n in range(30)] == [min(1e9, 0.05 * 2.0**n) for n in range(30)]


def test_token_bucket_reads_a_datetime_clock_as_a_float_one() -> None:
    """The same reservations at the same instants wait the same, whichever clock tells the time."""
    start = datetime(2025, 1, 1, tzinfo=UTC)
    offsets = [0.0, 0.0, 0.0, 0.05, 0.05, 1.0]
    on_floats: TokenBucket[float] = TokenBucket(10, 2)
    on_datetimes: TokenBucket[datetime] = TokenBucket(10, 2)
    floats = [on_floats.reserve(s) for s in offsets]
    datetimes = [on_datetimes.reserve(start + s * S) for s in offsets]
    assert floats == datetimes
    assert [round(w, 6) for w in floats] == [0.0, 0.0, 0.1, 0.15, 0.25, 0.0]
