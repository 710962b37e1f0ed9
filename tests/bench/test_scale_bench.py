"""A smoke test of bench/scale_bench.py, so that it cannot rot: the whole scale benchmark at two tiny sizes.

It runs the real pipeline (a sim, nats-server, ingest, reconcile, execute as processes) on 20 and 40 nodes,
so it asserts convergence (the benchmark raises if the DaemonSet does not reach every node), that every
figure was measured, and that the table, the exponents and the plot are printed and written; the figures'
values are not judged.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench import scale_bench


def test_the_scale_benchmark_converges_and_prints_every_figure(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "scale.svg"
    results = scale_bench.main(["--sizes", "20,40", "--sync-runs", "2", "--svg", str(plot)])
    assert [f.nodes for f in results] == [20, 40]
    for figures in results:
        rows = figures.rows()
        missing = [name for name, value in rows.items() if math.isnan(value) or value <= 0]
        assert not missing, (figures.nodes, missing)
        assert set(figures.cpu_s) == set(figures.peak_rss_mib) == set(scale_bench.PROCESSES)
    out = capsys.readouterr().out
    assert "    20 nodes: all available in" in out and "    40 nodes: all available in" in out
    assert "| figure | 20 | 40 | k 20→40 |" in out
    for name in results[0].rows():
        assert f"| {name} |" in out, name
    assert "| kubus / bare (bare s / kubus s) |" in out and "| CPU ms per pod, all five |" in out
    root = ET.fromstring(plot.read_text())
    assert root.tag.endswith("svg")
    assert len(root.findall("{http://www.w3.org/2000/svg}polyline")) == len(scale_bench.PLOTTED)


def test_the_growth_exponent_is_the_log_log_slope() -> None:
    assert scale_bench.exponent(1_000, 2.0, 2_000, 4.0) == pytest.approx(1.0)
    assert scale_bench.exponent(1_000, 1.0, 10_000, 100.0) == pytest.approx(2.0)
    assert scale_bench.exponent(5_000, 7.0, 15_000, 7.0) == 0.0
    assert math.isnan(scale_bench.exponent(1_000, 0.0, 2_000, 4.0))


def test_sizes_out_of_order_are_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        scale_bench.main(["--sizes", "2000,1000"])
    assert exit_.value.code == 2
    assert "--sizes must be distinct and ascending, got [2000, 1000]" in capsys.readouterr().err
