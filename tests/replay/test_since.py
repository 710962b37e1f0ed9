"""`--since` and `--until` take a duration ago or an RFC 3339 time on every command that has them (issue 24):
replay and events export took RFC 3339 only, audit durations too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kubus import replay_command
from kubus.cli import build_parser

T = datetime(2026, 11, 23, 5, 12, 3, tzinfo=UTC)


@pytest.mark.parametrize("command", [["replay"], ["events", "export"]])
@pytest.mark.parametrize(("since", "ago"), [("1h", timedelta(hours=1)), ("30m", timedelta(minutes=30)),
                                            ("2d", timedelta(days=2)), ("1h30m", timedelta(minutes=90))])
def test_a_duration_ago(command: list[str], since: str, ago: timedelta) -> None:
    before = datetime.now(UTC)
    window = replay_command._window(build_parser().parse_args([*command, "--since", since, "--until", "1s"]))
    after = datetime.now(UTC)
    assert before - ago <= window.since <= after - ago
    assert window.since < window.until <= after


@pytest.mark.parametrize("command", [["replay"], ["events", "export"]])
@pytest.mark.parametrize("text", ["2026-11-23T05:12:03Z", "2026-11-23T06:12:03+01:00", "2026-11-23T05:12:03"])
def test_an_rfc3339_time(command: list[str], text: str) -> None:
    assert replay_command._window(build_parser().parse_args([*command, "--since", text])).since == T


@pytest.mark.parametrize("command", [["replay"], ["events", "export"], ["audit", "failures"]])
def test_neither_is_refused_saying_both_forms(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args([*command, "--since", "yesterday", "--data-dir", "/nonexistent"])
    assert args.run(args) == 2
    err = capsys.readouterr().err
    assert "'yesterday' is neither a duration (90s, 15m, 1h, 7d) nor a timestamp (2025-06-01T10:00:00Z)" in err, err
