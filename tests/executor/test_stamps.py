"""executor.stamps formats timestamps exactly as kube.times does (its per-second text is remembered)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from executor import stamps
from kube import times

BASE = datetime(2026, 11, 29, 6, 59, 59, 999_998, tzinfo=UTC)


def moments() -> list[datetime]:
    """Runs within one second and across every field's boundary (second, minute, hour, day, month, year, with
    the other fields unchanged), microseconds of every width, years strftime writes without padding, and back."""
    out = [BASE + timedelta(microseconds=n) for n in range(6)]
    out += [datetime(2026, 1, 1, 0, 0, 0, us, tzinfo=UTC) for us in (0, 1, 9, 10, 99_999, 100_000, 999_999)]
    same_second = datetime(2026, 3, 4, 5, 6, 7, 0, tzinfo=UTC)
    for field, value in (("minute", 8), ("hour", 9), ("day", 10), ("month", 11), ("year", 2027)):
        out += [same_second, same_second.replace(**{field: value}), same_second]
    out += [datetime(999, 12, 31, 23, 59, 59, 5, tzinfo=UTC), datetime(1, 1, 1, tzinfo=UTC),
            datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC), BASE, BASE - timedelta(days=400), BASE]
    return out


def test_the_same_text_as_kube_times_for_every_moment_in_any_order() -> None:
    for moment in moments() + moments()[::-1]:
        assert stamps.format_micro_time(moment) == times.format_micro_time(moment), moment
        assert stamps.format_time(moment) == times.format_time(moment), moment


def test_other_zones_are_converted_to_utc_and_naive_times_refused_as_kube_times_does() -> None:
    stamps.format_micro_time(BASE)  # a UTC stamp of the very same fields remembered first
    stamps.format_time(BASE)
    elsewhere = BASE.replace(tzinfo=timezone(timedelta(hours=2)))
    assert stamps.format_micro_time(elsewhere) == times.format_micro_time(elsewhere) == "2026-11-29T04:59:59.999998Z"
    assert stamps.format_time(elsewhere) == times.format_time(elsewhere) == "2026-11-29T04:59:59Z"
    for format in (stamps.format_micro_time, stamps.format_time):
        with pytest.raises(ValueError, match="naive"):
            format(BASE.replace(tzinfo=None))


def test_a_datetime_subclass_is_formatted_by_kube_times() -> None:
    class Shifted(datetime):
        def astimezone(self, tz=None):  # type: ignore[no-untyped-def,override]
            return datetime.astimezone(self + timedelta(seconds=1), tz)

    moment = Shifted(2026, 11, 29, 6, 0, 0, 5, tzinfo=UTC)
    assert stamps.format_micro_time(moment) == times.format_micro_time(moment) == "2026-11-29T06:00:01.000005Z"
    assert stamps.format_time(moment) == times.format_time(moment) == "2026-11-29T06:00:01Z"
