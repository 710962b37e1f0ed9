"""`--since` and `--until` take a duration ago or an RFC 3339 time on every command that has them (issue 24):
replay and events export took RFC 3339 only, audit durations too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

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


# --- -o json|yaml|wide ------------------------------------------------------------------------------------------

def test_yaml_is_the_json_records_as_documents(bundles: list[Any]) -> None:
    import io
    import json

    import yaml

    from replay.report import Replay, ReplayOptions

    def printed(output: str) -> str:
        out = io.StringIO()
        run = Replay(ReplayOptions(format=output, decisions=True), out)
        for bundle in bundles:
            if not run.feed(bundle):
                break
        run.finish("test")
        return out.getvalue()

    as_json = [json.loads(line) for line in printed("json").splitlines()]
    as_yaml = list(yaml.safe_load_all(printed("yaml")))
    for summary in (as_json[-1]["summary"], as_yaml[-1]["summary"]):  # how long it took differs from run to run
        del summary["seconds"], summary["events_per_second"]
    assert len(as_json) > 2 and as_yaml == as_json


@pytest.mark.parametrize(("argv", "output"), [([], "text"), (["-o", "wide"], "text"), (["-o", "json"], "json"),
                                              (["-o", "yaml"], "yaml"), (["--format", "json"], "json"),
                                              (["--format", "text"], "text")])
def test_replay_output_flags(argv: list[str], output: str) -> None:
    args = build_parser().parse_args(["replay", *argv])
    assert (args.output if args.output in ("json", "yaml") else "text") == output


@pytest.mark.parametrize("flag", ["--output-file", "-f", "--output", "-o"])
def test_events_export_writes_to_a_file_named_by_output_file(flag: str) -> None:
    """-f/--output-file; -o/--output FILE, its earlier spelling, still works (hidden)."""
    assert build_parser().parse_args(["events", "export", flag, "h.jsonl"]).output == "h.jsonl"
