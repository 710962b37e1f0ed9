"""A smoke test of bench/daemonset_tally_bench.py, so that it cannot rot."""

from __future__ import annotations

import sys

import pytest

from bench import daemonset_tally_bench


@pytest.mark.parametrize("flags", [[], ["--full"], ["--from-scratch"]])
def test_the_tally_benchmark_runs_at_a_tiny_size(flags: list[str], monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["daemonset_tally_bench", "--nodes", "20", "--syncs", "3", *flags])
    daemonset_tally_bench.main()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["sync 1", "sync 2", "sync 3"]
