"""One meaning per exit code across the commands (issue 24; runtime/exitcodes.py, the README's commands table):
3 is "ran, and the answer is no" for replay --diff, audit (tests/audit) and db current alike; 2 is "did not start"
(tests/pipeline/test_startup_errors.py has a case per command); 0 done."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import exitcodes


def kubus(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBUS_")}
    return subprocess.run([sys.executable, "-m", "kubus", *argv], capture_output=True, text=True, timeout=120, env=env)


def test_the_codes() -> None:
    assert (exitcodes.DONE, exitcodes.FAILED, exitcodes.NOT_STARTED, exitcodes.NO) == (0, 1, 2, 3)


def test_replay_diff_divergence_is_3_and_none_is_0(history_file: Path) -> None:
    same = kubus("replay", "--from-file", str(history_file), "--diff")
    assert same.returncode == exitcodes.DONE, same.stdout + same.stderr
    assert "no divergence" in same.stdout
    changed = kubus("replay", "--from-file", str(history_file), "--diff", "--controller", "demo/web",
                    "--set", "spec.replicas=7")
    assert changed.returncode == exitcodes.NO, changed.stdout + changed.stderr


def test_db_current_behind_is_3_and_up_to_date_is_0(tmp_path: Path) -> None:
    import sqlite3

    sqlite3.connect(tmp_path / "kubus.db").close()  # a database with no schema yet
    behind = kubus("db", "current", "--data-dir", str(tmp_path))
    assert behind.returncode == exitcodes.NO, behind.stdout + behind.stderr
    assert "run `kubus db upgrade`" in behind.stdout
    assert kubus("db", "upgrade", "--data-dir", str(tmp_path)).returncode == exitcodes.DONE
    assert kubus("db", "current", "--data-dir", str(tmp_path)).returncode == exitcodes.DONE


@pytest.mark.parametrize("argv", [["nope"], ["audit"], ["replay", "--since-seq", "x"], ["up", "--controllers", "cron"]])
def test_a_usage_error_is_2(argv: list[str]) -> None:
    result = kubus(*argv)
    assert result.returncode == exitcodes.NOT_STARTED, result.stderr
    assert "Traceback" not in result.stderr
