"""RFC 3339 timestamps convert to aware UTC datetimes and back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from kube.times import (
    format_go_duration,
    format_micro_time,
    format_time,
    parse_go_duration,
    parse_time,
    parse_typed_time,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2024-01-02T03:04:05Z", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), id="utc"),
        pytest.param("2024-01-02t03:04:05z", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), id="lowercase"),
        pytest.param("2024-01-02T05:04:05+02:00", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), id="offset"),
        pytest.param("2024-01-02T03:04:05.123456Z", datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC), id="micro"),
        pytest.param("2024-01-02T03:04:05.5Z", datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=UTC), id="one-digit"),
        pytest.param(
            "2024-01-02T03:04:05.123456789Z", datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC), id="nanos-truncated"
        ),
    ],
)
def test_parse_time(text: str, expected: datetime) -> None:
    """Parsed values are aware and in UTC."""
    parsed = parse_time(text)
    assert parsed == expected
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "text",
    ["2024-01-02", "2024-01-02T03:04:05", "2024-01-02 03:04:05Z", "2024-01-02T03:04:05Z\n", "yesterday", ""],
)
def test_parse_time_rejects_non_rfc3339(text: str) -> None:
    """Missing offsets, dates alone and junk are errors, as in Go's time.Parse(RFC3339)."""
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_time(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2025-06-01T10:00:00Z", datetime(2025, 6, 1, 10, tzinfo=UTC), id="rfc3339"),
        pytest.param(" 2025-06-01T10:00:00z ", datetime(2025, 6, 1, 10, tzinfo=UTC), id="padded-lowercase"),
        pytest.param("2025-06-01T12:00:00+02:00", datetime(2025, 6, 1, 10, tzinfo=UTC), id="offset"),
        pytest.param("2025-06-01T10:00:00", datetime(2025, 6, 1, 10, tzinfo=UTC), id="no-offset-is-utc"),
        pytest.param("2025-06-01 10:00", datetime(2025, 6, 1, 10, tzinfo=UTC), id="space-and-no-seconds"),
        pytest.param("2025-06-01", datetime(2025, 6, 1, tzinfo=UTC), id="a-date-is-its-midnight"),
    ],
)
def test_parse_typed_time_is_lenient_and_utc(text: str, expected: datetime) -> None:
    """A typed timestamp may leave out the offset (UTC), the seconds or the time; the result is aware UTC."""
    parsed = parse_typed_time(text)
    assert parsed == expected
    assert parsed.tzinfo is UTC


def test_parse_typed_time_reads_what_parse_time_reads() -> None:
    """Every RFC 3339 form parse_time accepts reads the same when typed."""
    for text in ["2024-01-02t03:04:05z", "2024-01-02T05:04:05+02:00", "2024-01-02T03:04:05.123456789Z"]:
        assert parse_typed_time(text) == parse_time(text)
    with pytest.raises(ValueError):
        parse_typed_time("yesterday")


def test_format_time_round_trips() -> None:
    """format_time writes whole seconds in UTC; parse_time reads it back."""
    moment = datetime(2024, 1, 2, 5, 4, 5, 999999, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(moment) == "2024-01-02T03:04:05Z"
    assert format_micro_time(moment) == "2024-01-02T03:04:05.999999Z"
    assert parse_time(format_time(moment)) == moment.replace(microsecond=0)


def test_naive_datetimes_are_refused() -> None:
    """A naive datetime has no defined instant."""
    with pytest.raises(ValueError, match="naive"):
        format_time(datetime(2024, 1, 2))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("12h", timedelta(hours=12), id="hours"),
        pytest.param("0", timedelta(0), id="zero-needs-no-unit"),
        pytest.param("0s", timedelta(0), id="zero-seconds"),
        pytest.param("1h30m", timedelta(hours=1, minutes=30), id="combined"),
        pytest.param("1.5h", timedelta(hours=1, minutes=30), id="fraction"),
        pytest.param("2h45m30.5s", timedelta(hours=2, minutes=45, seconds=30.5), id="everything"),
        pytest.param("300ms", timedelta(milliseconds=300), id="milliseconds"),
        pytest.param("10us", timedelta(microseconds=10), id="microseconds"),
        pytest.param("10\u00b5s", timedelta(microseconds=10), id="micro-sign"),
        pytest.param("1500ns", timedelta(microseconds=1), id="nanoseconds-truncated"),
        pytest.param("+5m", timedelta(minutes=5), id="plus"),
        pytest.param("-5m", -timedelta(minutes=5), id="minus"),
        pytest.param(".5s", timedelta(milliseconds=500), id="leading-dot"),
    ],
)
def test_parse_go_duration(text: str, expected: timedelta) -> None:
    """time.ParseDuration, as kube-controller-manager's duration flags read their values."""
    assert parse_go_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", 'time: invalid duration ""', id="empty"),
        pytest.param("5", 'time: missing unit in duration "5"', id="no-unit"),
        pytest.param("1h5", 'time: missing unit in duration "1h5"', id="trailing-number"),
        pytest.param("7d", 'time: unknown unit "d" in duration "7d"', id="days-are-not-go"),
        pytest.param("x", 'time: invalid duration "x"', id="letters"),
        pytest.param(".s", 'time: invalid duration ".s"', id="no-digits"),
        pytest.param("-", 'time: invalid duration "-"', id="sign-only"),
        pytest.param("3000000h", 'time: invalid duration "3000000h"', id="overflow"),
    ],
)
def test_bad_go_durations(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_go_duration(text)


@pytest.mark.parametrize(
    ("duration", "text"),
    [
        pytest.param(timedelta(hours=12), "12h0m0s", id="hours"),
        pytest.param(timedelta(0), "0s", id="zero"),
        pytest.param(timedelta(minutes=90, seconds=1.25), "1h30m1.25s", id="fraction"),
        pytest.param(timedelta(milliseconds=300), "300ms", id="milliseconds"),
        pytest.param(timedelta(microseconds=7), "7\u00b5s", id="microseconds"),
        pytest.param(-timedelta(minutes=5), "-5m0s", id="negative"),
    ],
)
def test_format_go_duration(duration: timedelta, text: str) -> None:
    """Duration.String()."""
    assert format_go_duration(duration) == text
    assert parse_go_duration(text) == duration
