"""A smoke test of bench/daemonset_bench.py, so that it cannot rot: the sync benchmark at a tiny size.

The benchmark's own assertions do the checking (the steady state does nothing, the rolling step deletes
maxUnavailable's worth of old pods); the figures themselves are not judged here.
"""

from __future__ import annotations

import msgspec
import pytest

from bench import daemonset_bench


def test_the_sync_benchmark_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    figures = daemonset_bench.bench_sync([10, 25], runs=2)
    assert set(figures) == {10, 25}
    assert all(set(f) == {"steady", "rolling", "engine", "frozen", "selecting", "status_kept", "status_fresh",
                          "rolling_kept"} and min(f.values()) > 0
               for f in figures.values())
    out = capsys.readouterr().out
    assert "10 nodes: steady" in out and "rolling step deleting 1 old pods" in out
    assert "25 nodes: steady" in out and "rolling step deleting 3 old pods" in out


def test_the_bare_clients_pods_are_the_daemonsets_pinned_to_their_nodes() -> None:
    bodies = [msgspec.json.decode(b) for b in daemonset_bench.bare_bodies(3)]
    assert [b["metadata"]["name"] for b in bodies] == ["agent-bare-000000", "agent-bare-000001", "agent-bare-000002"]
    for i, body in enumerate(bodies):
        assert "ownerReferences" not in body["metadata"]
        terms = body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [f"node-{i}"]
