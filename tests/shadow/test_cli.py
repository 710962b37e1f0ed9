"""The shadow's flags and `kubus shadow report`'s input handling (the report's content: test_shadow.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from kubus.cli import build_parser


@pytest.mark.parametrize("command", ["up", "reconcile"])
def test_shadow_flags_and_their_variables(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args([command])
    assert (args.shadow, args.shadow_window) == (False, timedelta(seconds=30))
    monkeypatch.setenv("KUBUS_SHADOW", "true")
    monkeypatch.setenv("KUBUS_SHADOW_WINDOW", "45s")
    args = build_parser().parse_args([command])
    assert (args.shadow, args.shadow_window) == (True, timedelta(seconds=45))
    assert build_parser().parse_args([command, "--shadow-window", "2m"]).shadow_window == timedelta(minutes=2)


def test_a_window_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["reconcile", "--shadow", "--shadow-window", "0s"])
    assert "--shadow-window: must be more than 0: '0s'" in capsys.readouterr().err


def test_the_report_of_a_missing_store_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["shadow", "report", "--data-dir", str(tmp_path / "nowhere")])
    assert args.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("kubus shadow report: ") and "nowhere" in err


def test_the_report_of_a_controller_that_is_not_namespace_name(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from store.urls import DB_FILE

    (tmp_path / DB_FILE).touch()
    args = build_parser().parse_args(["shadow", "report", "--data-dir", str(tmp_path), "--controller", "web"])
    assert args.run(args) == 2
    assert "--controller: expected NAMESPACE/NAME, got 'web'" in capsys.readouterr().err
