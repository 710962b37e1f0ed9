"""The reconciler's controller-runtime and client-go metrics (issue 24): what a sync counts as is decided by the
decision's own error and requeue, with the controllers' lowercase names; the controllers' key queues report
client-go's workqueue_* metrics, timed by the shell's clock through the queue's probe."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter

from kube.meta import LabelSelector, LabelSelectorRequirement
from kube.testing import replicaset
from messages.actions import FAILED, SKIPPED, CreatePods
from reconciler import metrics
from reconciler.consuming import Reconciler
from reconciler.core.controllers import Controllers, Decided
from tests.reconciler.builders import NOW, observed, owned_pod
from tests.reconciler.test_controllers import KEY, MS, create_results, engine, only, sync, web
from tests.reconciler.test_daemonset_sync import new_ds as daemonset_builder
from tests.reconciler.test_daemonset_sync import rolled_cluster


def value(metric: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


def created_then_refused() -> Decided:
    """A ReplicaSet whose creates were refused: the next sync returns manageReplicasErr (its summary says so
    under "manage_error", and has no "error" key)."""
    _, controllers = engine(web(3))
    create = only(sync(controllers)).actions[0]
    assert isinstance(create, CreatePods)
    controllers.results(create_results(create, [(FAILED, 403, "Forbidden", "exceeded quota"),
                                                (SKIPPED, 0, "SlowStartStopped", ""),
                                                (SKIPPED, 0, "SlowStartStopped", "")]), NOW)
    decided = only(sync(controllers, NOW + 5 * MS))
    assert "error" not in decided.summary and decided.summary["manage_error"] == "exceeded quota"
    return decided


def invalid_selector() -> Decided:
    """upstream logs an invalid selector and returns nil: not a failed sync, though its summary has "error"."""
    selector = LabelSelector(match_expressions=[LabelSelectorRequirement(key="app", operator="Bogus")])
    decided = only(sync(engine(replicaset("web").raw_selector(selector).replicas(2).build())[1]))
    assert "error" in decided.summary
    return decided


def waiting_for_min_ready() -> Decided:
    rs = replicaset("web").selector(app="web").replicas(1).min_ready_seconds(30).build()
    return only(sync(engine(rs, owned_pod("pod0", rs).ready(NOW - timedelta(seconds=10)).build())[1]))


def bad_max_unavailable() -> Decided:
    cluster, _, _ = rolled_cluster(daemonset_builder().rolling_update(max_unavailable="abc"))
    controllers = Controllers(cluster.cache)
    controllers.resync_all()
    return only(sync(controllers))


def clean() -> Decided:
    _, controllers = engine(web(3))
    return only(sync(controllers))


@pytest.mark.parametrize(("scenario", "controller", "result"), [
    pytest.param(clean, "replicaset", "success", id="clean"),
    pytest.param(created_then_refused, "replicaset", "error", id="manage-error-without-an-error-key"),
    pytest.param(invalid_selector, "replicaset", "success", id="invalid-selector-is-no-failed-sync"),
    pytest.param(waiting_for_min_ready, "replicaset", "requeue_after", id="requeue-after-min-ready"),
    pytest.param(bad_max_unavailable, "daemonset", "error", id="daemonset-rollout-error"),
])
def test_reconcile_total_counts_the_decisions_own_result(scenario: Callable[[], Decided], controller: str,
                                                         result: str) -> None:
    decided = scenario()
    before = {r: value("controller_runtime_reconcile_total", controller=controller, result=r)
              for r in ("success", "error", "requeue", "requeue_after")}
    errors = value("controller_runtime_reconcile_errors_total", controller=controller)
    timed = value("controller_runtime_reconcile_time_seconds_count", controller=controller)
    metrics.reconciled(decided)
    after = {r: value("controller_runtime_reconcile_total", controller=controller, result=r) for r in before}
    assert {r: after[r] - before[r] for r in before} == {r: float(r == result) for r in before}
    assert value("controller_runtime_reconcile_errors_total", controller=controller) - errors == (result == "error")
    assert value("controller_runtime_reconcile_time_seconds_count", controller=controller) - timed == 1
    # the kinds as label values only in lowercase, as kube-controller-manager names its controllers
    assert value("controller_runtime_reconcile_total", controller=decided.controller_kind, result=result) == 0


def test_a_requeue_at_once_is_requeue() -> None:
    decided = clean()
    decided.requeue_after = timedelta(0)
    assert decided.result == "requeue"
    decided.error = "boom"
    assert decided.result == "error"  # an error wins over a requeue, as in controller-runtime


class Stopwatch:
    """The shell's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def queue_values(name: str) -> dict[str, float]:
    return {metric: value(metric, name=name) for metric in (
        "workqueue_depth", "workqueue_adds_total", "workqueue_retries_total",
        "workqueue_queue_duration_seconds_count", "workqueue_queue_duration_seconds_sum",
        "workqueue_work_duration_seconds_count", "workqueue_work_duration_seconds_sum",
        "workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds")}


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 6) for k in before if after[k] != before[k]}


def test_workqueue_metrics_follow_the_controllers_key_queue() -> None:
    """client-go's workqueue metrics, per controller: adds (an add of a waiting key is none), depth, the time a
    key waited and the time its sync took, on the shell's clock; a failed sync is a retry."""
    clock = Stopwatch()
    probe = metrics.WorkqueueProbe(clock)
    try:
        rs_before, ds_before = queue_values("replicaset"), queue_values("daemonset")
        _, controllers = engine()
        controllers.use_probe(probe)
        controllers.use_stopwatch(clock)
        controllers.enqueue(KEY)
        controllers.enqueue(KEY)  # already waiting: not an add
        assert delta(rs_before, queue_values("replicaset")) == {"workqueue_adds_total": 1, "workqueue_depth": 1}
        clock.now += 2.0  # waits 2 s before it is taken
        original = controllers._sync

        def slow_sync(*args: Any) -> Decided:
            clock.now += 0.5  # the sync takes half a second
            # while it runs, the key is being processed: unfinished work and the longest processor say so
            assert queue_values("replicaset")["workqueue_unfinished_work_seconds"] == 0.5
            assert queue_values("replicaset")["workqueue_longest_running_processor_seconds"] == 0.5
            return original(*args)

        controllers._sync = slow_sync  # type: ignore[method-assign]
        only(sync(controllers))
        assert delta(rs_before, queue_values("replicaset")) == {
            "workqueue_adds_total": 1, "workqueue_queue_duration_seconds_count": 1,
            "workqueue_queue_duration_seconds_sum": 2.0, "workqueue_work_duration_seconds_count": 1,
            "workqueue_work_duration_seconds_sum": 0.5}
        controllers.queue.add_rate_limited(KEY, NOW)
        assert delta(rs_before, queue_values("replicaset"))["workqueue_retries_total"] == 1
        assert delta(ds_before, queue_values("daemonset")) == {}  # the other controller's queue saw nothing
    finally:
        probe.close()


def test_a_closed_probe_leaves_no_depth_behind() -> None:
    """A reconciler loop replaced (a stream reset, a change of partitions) takes its queued keys with it."""
    before = value("workqueue_depth", name="replicaset")
    probe = metrics.WorkqueueProbe(Stopwatch())
    _, controllers = engine(web(3))  # observed: the ReplicaSet waits in the queue
    controllers.queue.probe = probe
    controllers.enqueue(KEY)
    controllers.queue.add(KEY.__class__(KEY.kind, "other", "web"))
    assert value("workqueue_depth", name="replicaset") == before + 1  # KEY waited already before the probe
    probe.close()
    assert value("workqueue_depth", name="replicaset") == before


def test_labelled_counts_add_one_increment_per_item() -> None:
    """Each item counts once on the child of its label values, however the batch mixes them; a later batch adds."""
    registry = CollectorRegistry()
    counter = Counter("kubus_test_items", "items", ["kind", "type"], registry=registry)
    counts = metrics.LabelledCounts(counter)
    counts.add([("Pod", "MODIFIED"), ("Node", "ADDED"), ("Pod", "MODIFIED"), ("Pod", "DELETED"), ("Pod", "MODIFIED")])
    counts.add(iter([("Node", "ADDED")]))
    counts.add([])
    samples = {(s.labels["kind"], s.labels["type"]): s.value for s in next(iter(registry.collect())).samples
               if s.name == "kubus_test_items_total"}
    assert samples == {("Pod", "MODIFIED"): 3, ("Node", "ADDED"): 2, ("Pod", "DELETED"): 1}


def test_the_reconciler_counts_each_event_it_folds() -> None:
    """kubus_reconciler_events_total by kind and type: every event of a batch once."""
    reconciler = Reconciler(object(), object())  # type: ignore[arg-type]  # counting needs neither
    pod = owned_pod("pod0", web(3)).build()
    events = [observed(pod, "ADDED"), observed(pod, "MODIFIED"), observed(pod, "MODIFIED")]
    before = {t: value("kubus_reconciler_events_total", kind="Pod", type=t) for t in ("ADDED", "MODIFIED")}
    reconciler._count(events)
    reconciler._count(events[1:])
    assert {t: value("kubus_reconciler_events_total", kind="Pod", type=t) - before[t] for t in before} == {
        "ADDED": 1, "MODIFIED": 4}
