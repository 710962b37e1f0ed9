"""tests.simulation.SimProcess: a sim that did not start in time is not left running."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import simulation


def test_a_sim_that_did_not_start_in_time_is_stopped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started: list[subprocess.Popen[bytes]] = []
    popen = subprocess.Popen

    def spawn(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        started.append(popen(*args, **kwargs))
        return started[-1]

    def gave_up(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("timed out waiting for the sim to start")  # what wait_for raises at its deadline

    monkeypatch.setattr(simulation.subprocess, "Popen", spawn)
    monkeypatch.setattr(simulation, "wait_for", gave_up)
    with pytest.raises(AssertionError, match="timed out"):
        simulation.SimProcess(tmp_path)
    assert len(started) == 1
    assert started[0].poll() is not None  # killed and reaped, not orphaned
