"""kube.times.format_time and format_micro_time remember the last UTC second's text: they answer exactly what
strftime of the moment in UTC answers, in any order of moments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from kube import times


def _strftime_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _strftime_micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

BASE = datetime(2026, 11, 29, 6, 59, 59, 999_998, tzinfo=UTC)


def moments() -> list[datetime]:
    """Runs within one second and across every field's boundary (second, minute, hour, day, month, year, with
    the other fields unchanged), microseconds of every width, years strftime writes without padding, and back."""
    out = [BASE + timedelta(microseconds=n) for n in range(6)]
    out += [datetime(2026, 1, 1, 0, 0, 0, us, tzinfo=UTC) for us in (0, 1, 9, 10, 99_999, 100_000, 999_999)]
    same_second = datetime(2026, 3, 4, 5, 6, 7, 0, tzinfo=UTC)
    for field, value in (("second", 8), ("minute", 8), ("hour", 9), ("day", 10), ("month", 11), ("year", 2027)):
        out += [same_second, same_second.replace(**{field: value}), same_second]
    out += [datetime(999, 12, 31, 23, 59, 59, 5, tzinfo=UTC), datetime(1, 1, 1, tzinfo=UTC),
            datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC), BASE, BASE - timedelta(days=400), BASE]
    return out


def test_the_same_text_as_strftime_for_every_moment_in_any_order() -> None:
    for moment in moments() + moments()[::-1]:
        assert times.format_micro_time(moment) == _strftime_micro_time(moment), moment
        assert times.format_time(moment) == _strftime_time(moment), moment


def test_other_zones_are_converted_to_utc_and_naive_times_refused() -> None:
    times.format_micro_time(BASE)  # a UTC stamp of the very same fields remembered first
    times.format_time(BASE)
    elsewhere = BASE.replace(tzinfo=timezone(timedelta(hours=2)))
    assert times.format_micro_time(elsewhere) == _strftime_micro_time(elsewhere) == "2026-11-29T04:59:59.999998Z"
    assert times.format_time(elsewhere) == _strftime_time(elsewhere) == "2026-11-29T04:59:59Z"
    for format in (times.format_micro_time, times.format_time):
        with pytest.raises(ValueError, match="naive"):
            format(BASE.replace(tzinfo=None))


def test_a_datetime_subclass_is_converted_as_it_converts_itself() -> None:
    class Shifted(datetime):
        def astimezone(self, tz=None):  # type: ignore[no-untyped-def,override]
            return datetime.astimezone(self + timedelta(seconds=1), tz)

    moment = Shifted(2026, 11, 29, 6, 0, 0, 5, tzinfo=UTC)
    times.format_time(datetime(2026, 11, 29, 6, 0, 0, tzinfo=UTC))  # the same fields remembered first
    times.format_micro_time(datetime(2026, 11, 29, 6, 0, 0, tzinfo=UTC))
    assert times.format_micro_time(moment) == _strftime_micro_time(moment) == "2026-11-29T06:00:01.000005Z"
    assert times.format_time(moment) == _strftime_time(moment) == "2026-11-29T06:00:01Z"
