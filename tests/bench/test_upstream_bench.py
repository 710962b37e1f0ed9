"""A smoke test of bench/upstream_bench.py, so that it cannot rot: upstream's controllers beside kubus on two fresh
real control planes of 5 kwok nodes, unthrottled (about a minute).

The figures are not judged (5 pods say nothing of speed), but they must come out: every step timed on both sides,
the CPU seconds of each process, the API writes by user and verb from the audit log (each side's pods made by its
own controllers, none by the other's), the ratio, and the comparison of what the API shows, whose differences must
all be the ones explained by design.
"""

from __future__ import annotations

import pytest

from bench import upstream_bench
from controlplane.building import Build

NODES = 5


@pytest.mark.slow
def test_the_quick_run_prints_the_figures_and_the_comparison(controlplane_build: Build) -> None:
    lines: list[str] = []
    results = upstream_bench.run(NODES, NODES, ["unthrottled"], timeout=60, say=lines.append)
    out = "\n".join(lines)
    upstream, kubus, found = results["unthrottled"]

    assert [s.name for s in upstream.steps] == [s.name for s in kubus.steps] == list(upstream_bench.STEPS), out
    for side in (upstream, kubus):
        for step in side.steps:
            assert step.seconds > 0 and step.pods == NODES, (side.side, step)
            assert step.cpu["kube-apiserver"] > 0 and step.cpu["etcd"] > 0, (side.side, step.name, step.cpu)
    assert all(s.cpu["kubus"] > 0 and "kubus/nats-server" in s.cpu for s in kubus.steps), out
    assert not any(k.startswith("kubus") for s in upstream.steps for k in s.cpu), out

    # who made the pods: each side's controllers, never the other's, and the benchmark only what it is said to do
    ds_controller = "system:serviceaccount:kube-system:daemon-set-controller"
    rs_controller = "system:serviceaccount:kube-system:replicaset-controller"
    (up_create, up_update, up_rs, up_down), (create, update, rs, down) = upstream.steps, kubus.steps
    assert up_create.writes[(ds_controller, "create", "pods")] == NODES, up_create.writes
    assert up_update.writes[(ds_controller, "delete", "pods")] == NODES, up_update.writes
    assert up_rs.writes[(rs_controller, "create", "pods")] == NODES, up_rs.writes
    assert up_down.writes[(rs_controller, "delete", "pods")] == NODES, up_down.writes
    assert create.writes[("kubus", "create", "pods")] == NODES, create.writes
    assert update.writes[("kubus", "delete", "pods")] == NODES == update.writes[("kubus", "create", "pods")]
    assert rs.writes[("kubus", "create", "pods")] == NODES, rs.writes
    assert down.writes[("kubus", "delete", "pods")] == NODES, down.writes
    for side, others in ((upstream, {"kubus"}), (kubus, {ds_controller, rs_controller})):
        assert not [key for s in side.steps for key in s.writes if key[0] in others], side.side
        assert {key for s in side.steps for key in s.writes if key[0] == "bench"} == {
            ("bench", "create", "daemonsets"), ("bench", "patch", "daemonsets"), ("bench", "create", "replicasets"),
            ("bench", "patch", "replicasets/scale")}, side.side

    # the report: per step the times and their ratio, CPU per process and per pod, the writes, the comparison
    for name in upstream_bench.STEPS:
        assert f"-- {name}: time upstream " in out and f"what the API shows after {name}: " in out, out
    assert out.count("ratio kubus/upstream ") == 4 and out.count("CPU ms per pod (5 pods)") == 4, out
    assert "=== summary" in out and "kubus/upstream <= 2.00: " in out, out
    # the same end state but for what differs by design: the field managers' names, kubus's create keys
    assert found, "the field managers (kube-controller-manager, kubus) differ by design: the comparison saw nothing"
    assert [f for f in found if upstream_bench.explain(*f[1:]) is None] == [], out
    assert {f[1] for f in found} >= {"DaemonSet pods.shape.metadata.managers",
                                                 "ReplicaSet.managers", "ControllerRevisions.revision 2.managers"}
    assert "unthrottled: " in out and " 0 unexplained" in out and "[UNEXPLAINED]" not in out, out


def test_an_event_difference_is_the_spam_filters_only_when_the_sides_had_different_refills() -> None:
    """client-go's spam filter lets 25 events per object through, then one per 300 s: which of the later events
    are written depends on how long the steps took, not on the controller. Any other difference stays unexplained."""
    path = "events (sum of count).DaemonSet Normal SuccessfulDelete (daemonset-controller)"
    absent = object()
    why = upstream_bench.explain(path, absent, 901, ({"DaemonSet": 262.0}, {"DaemonSet": 320.0}))
    assert why is not None and "spam filter" in why and "262 s after the DaemonSet's creation upstream" in why, why
    assert upstream_bench.explain(path, absent, 901, ({"DaemonSet": 262.0}, {"DaemonSet": 299.0})) is None
    assert upstream_bench.explain(path, absent, 901, ({"ReplicaSet": 10.0}, {"ReplicaSet": 400.0})) is None
    assert upstream_bench.explain("ReplicaSet.status.replicas", 3, 2) is None
    assert upstream_bench.explain("DaemonSet pods.shape.metadata.managers", ["kube-controller-manager Update"],
                                  ["kubus Update"]) is not None
    assert upstream_bench.explain("DaemonSet pods.shape.metadata.managers", ["kube-controller-manager Update"],
                                  ["kubus Update", "kubus Update status"]) is None


def test_a_difference_unchanged_since_an_earlier_step_is_judged_as_it_was_then() -> None:
    """After ds-update the DaemonSet's 901 deletions were written by kubus (a refilled token at 320 s) and not by
    upstream (262 s); by rs-up both sides are past 300 s, but no DaemonSet event took upstream's token since: the
    difference is the same one, explained as it was after ds-update."""
    from collections import Counter

    from bench.upstream_bench import THROTTLES, Side, Step

    key = "events (sum of count)"
    event = "DaemonSet Normal SuccessfulDelete (daemonset-controller)"

    def side(name: str, counts: list[dict[str, int]], ages: list[float]) -> Side:
        creates = {"DaemonSet Normal SuccessfulCreate (daemonset-controller)": 1010}
        return Side(name, THROTTLES["default"], [
            Step(step, 5, 1.0, {"kube-apiserver": 1.0}, Counter(), {key: {**creates, **c}}, {"DaemonSet": age})
            for step, c, age in zip(("ds-update", "rs-up"), counts, ages, strict=True)], {})

    lines: list[str] = []
    found = upstream_bench.report(side("upstream", [{}, {}], [262.0, 330.0]),
                                  side("kubus", [{event: 901}, {event: 901}], [320.0, 390.0]), lines.append)
    assert [(step, path) for step, path, *_ in found] == [("ds-update", f"{key}.{event}"), ("rs-up", f"{key}.{event}")]
    assert all(upstream_bench.explain(*f[1:]) is not None for f in found), "\n".join(lines)
    assert "[UNEXPLAINED]" not in "\n".join(lines)
    # a difference that changed is judged again
    found = upstream_bench.report(side("upstream", [{}, {}], [262.0, 330.0]),
                                  side("kubus", [{event: 901}, {event: 902}], [320.0, 390.0]), lines.append)
    assert upstream_bench.explain(*found[1][1:]) is None and "[UNEXPLAINED]" in lines[-1], lines[-1]
