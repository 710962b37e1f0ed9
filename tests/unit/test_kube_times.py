"""RFC 3339 timestamps convert to aware UTC datetimes and back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from kube.times import format_micro_time, format_time, parse_time


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
