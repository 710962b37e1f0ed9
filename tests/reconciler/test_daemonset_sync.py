"""syncDaemonSet as one pure composition: history, claim, manage + syncNodes, rolling update, status."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from kube.apps import ControllerRevision, DaemonSet
from kube.core import (
    EVENT_WARNING,
    POD_FAILED,
    POD_RUNNING,
    Affinity,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    Toleration,
)
from kube.features import FeatureGates
from kube.meta import LabelSelector
from kube.testing import DaemonSetBuilder, PodBuilder, daemonset, node, pod
from reconciler.core.daemonset.backoff import FailedPodBackoff, failed_pods_backoff_key
from reconciler.core.daemonset.handlers import controller_key
from reconciler.core.daemonset.history import UNIQUE_LABEL_KEY, construct_history
from reconciler.core.daemonset.manage import FAILED_DAEMON_POD, DaemonEvent
from reconciler.core.daemonset.pods import create_key
from reconciler.core.daemonset.rollout import (
    MAX_UNAVAILABLE_FIELD,
    RolloutValueError,
    unavailable_count,
    updated_desired_node_counts,
)
from reconciler.core.daemonset.status import SELECTING_ALL_MESSAGE, SELECTING_ALL_REASON
from reconciler.core.daemonset.sync import BadInput, DaemonSetPlan, sync_daemonset
from reconciler.core.expectations import Expectations, expect
from tests.reconciler.builders import NOW, Cluster, names

KEY = controller_key("default", "foo")
NODES = ["node-0", "node-1", "node-2"]


def new_ds() -> DaemonSetBuilder:
    return daemonset("foo").uid("ds-uid")


def revision_of(ds: DaemonSet, number: int = 1) -> ControllerRevision:
    """The revision snapshot would create for ``ds``, as the cache holds it once created."""
    revision = construct_history(ds, []).create
    assert revision is not None
    revision.metadata.uid = f"uid-{revision.metadata.name}"
    revision.revision = number
    return revision


def hash_of(revision: ControllerRevision) -> str:
    return revision.metadata.labels[UNIQUE_LABEL_KEY]


def ds_pod(name: str, ds: DaemonSet, node_name: str, hash_: str) -> PodBuilder:
    return (pod(name).labels(ds.spec.template.metadata.labels).labels({UNIQUE_LABEL_KEY: hash_}).owned_by(ds)
            .on_node(node_name).phase(POD_RUNNING).ready(NOW - timedelta(hours=1)))


def cluster_of(*objects: object) -> Cluster:
    return Cluster(*[node(n).ready().build() for n in NODES], *objects)


def sync(cluster: Cluster, expectations: Expectations | None = None,
         entries: dict[str, FailedPodBackoff] | None = None, now: datetime = NOW) -> DaemonSetPlan:
    return sync_daemonset(KEY, cluster.cache, expectations, entries or {}, now, "corr")


def test_a_missing_daemonset_drops_its_expectations() -> None:
    plan = sync(cluster_of())
    assert plan.ds is None
    assert (plan.creates, plan.status, plan.expectations) == ([], None, None)


def test_the_first_sync_of_a_new_daemonset_creates_only_the_revision() -> None:
    ds = new_ds().build()
    plan = sync(cluster_of(ds))
    assert plan.waiting_for_history
    assert names_of(plan.revision_creates) == [revision_of(ds).metadata.name]
    assert len(plan.revision_bodies) == 1
    assert plan.hash == hash_of(revision_of(ds))
    assert (plan.creates, plan.deletes, plan.status, plan.expectations, plan.events) == ([], [], None, None, [])


def names_of(revisions: list[ControllerRevision]) -> list[str]:
    return [r.metadata.name for r in revisions]


def test_with_the_revision_present_a_pod_is_created_on_each_node() -> None:
    ds = new_ds().build()
    revision = revision_of(ds)
    plan = sync(cluster_of(ds, revision))
    assert not plan.waiting_for_history
    assert plan.revision_creates == [] and plan.revision_patches == []
    assert [(n, k) for n, k, _ in plan.creates] == [(n, create_key("corr", n)) for n in NODES]
    for node_name, _, body in plan.creates:
        assert body["metadata"]["labels"] == {"app": "foo", UNIQUE_LABEL_KEY: hash_of(revision)}
        terms = body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]
    assert plan.expectations == expect(3, 0, NOW)
    assert plan.status is not None
    assert (plan.status.desired_number_scheduled, plan.status.current_number_scheduled,
            plan.status.observed_generation) == (3, 0, 1)
    assert plan.warnings == [] and plan.requeue_after is None


def test_a_tainted_node_is_skipped() -> None:
    ds = new_ds().build()
    tainted = node("node-3").ready().taint("dedicated", "x", "NoSchedule").build()
    plan = sync(cluster_of(ds, revision_of(ds), tainted))
    assert [n for n, _, _ in plan.creates] == NODES
    assert plan.explain["nodes"]["node-3"]["should_run"] is False
    assert plan.status is not None and plan.status.desired_number_scheduled == 3


SLA_GT_750 = Toleration(key="sla", operator="Gt", value="750", effect="NoSchedule")


@pytest.mark.parametrize(("gates", "creates_on", "warnings"), [
    pytest.param(FeatureGates(), NODES, [("InvalidToleration", "spec.template.spec.tolerations[0].operator")],
                 id="gate-off-by-default-gt-tolerates-nothing"),
    pytest.param(FeatureGates(taint_toleration_comparison_operators=True), [*NODES, "node-3"], [],
                 id="gate-on-gt-tolerates-a-higher-value"),
])
def test_comparison_operators_reach_placement_through_the_gates(gates: FeatureGates, creates_on: list[str],
                                                                warnings: list[tuple[str, str]]) -> None:
    """syncDaemonSet reads TaintTolerationComparisonOperators (utilfeature.DefaultFeatureGate upstream, a value
    handed in here) for every placement it makes: manage, the status, and its toleration warnings."""
    ds = new_ds().tolerations(SLA_GT_750).build()
    tainted = node("node-3").ready().taint("sla", "950", "NoSchedule").build()
    plan = sync_daemonset(KEY, cluster_of(ds, revision_of(ds), tainted).cache, None, {}, NOW, "corr", gates)
    assert [n for n, _, _ in plan.creates] == creates_on
    assert plan.status is not None and plan.status.desired_number_scheduled == len(creates_on)
    assert [(w.reason, w.field) for w in plan.warnings] == warnings


def test_pending_expectations_only_write_the_status() -> None:
    ds = new_ds().build()
    plan = sync(cluster_of(ds, revision_of(ds)), expect(3, 0, NOW))
    assert (plan.creates, plan.deletes, plan.expectations, plan.managed) == ([], [], None, False)
    assert plan.status is not None
    assert (plan.status.desired_number_scheduled, plan.status.observed_generation) == (3, 0)
    # why, in the decision's reason (issue 21, 7: it said only "expectations not satisfied")
    assert plan.explain["reason"] == ("expectations not satisfied: waiting to observe 3 creates, expected since "
                                      "2026-03-15T12:00:00.000Z (0s ago; they expire after 5m0s): status only")


def test_a_sync_adopting_pods_writes_no_status_until_they_are_its_own() -> None:
    """updateDaemonSetStatus claims the pods first and writes nothing when an adoption fails, so no status of
    upstream's counts a pod that is not yet the DaemonSet's: the adopting sync counts the orphan on node-0 (no pod
    made there) but writes no status; the sync after the adoption writes one counting it. Had another DaemonSet
    taken it, the retry makes a pod on node-0 and its status counts no pod there."""
    ds = new_ds().on_delete().build()
    revision = revision_of(ds)
    orphan = (pod("stray").labels(ds.spec.template.metadata.labels).on_node("node-0").phase(POD_RUNNING)
              .ready(NOW - timedelta(hours=1)))
    plan = sync(cluster_of(ds, revision, orphan.build()))
    assert (names(plan.adopt), [n for n, _, _ in plan.creates]) == (["stray"], ["node-1", "node-2"])
    assert plan.status is None

    adopted = sync(cluster_of(ds, revision, orphan.owned_by(ds).build()), plan.expectations)
    assert (adopted.adopt, adopted.creates) == ([], [])
    assert adopted.status is not None
    assert (adopted.status.desired_number_scheduled, adopted.status.current_number_scheduled,
            adopted.status.number_ready) == (3, 1, 1)

    other = daemonset("other").uid("other-uid").build()
    taken = (pod("stray").labels(ds.spec.template.metadata.labels).on_node("node-0").phase(POD_RUNNING)
             .ready(NOW - timedelta(hours=1)).owned_by(other).build())
    retry = sync(cluster_of(ds, revision, taken))
    assert (retry.adopt, [n for n, _, _ in retry.creates]) == ([], NODES)
    assert retry.status is not None and retry.status.current_number_scheduled == 0


def rolled_cluster(builder: DaemonSetBuilder) -> tuple[Cluster, DaemonSet, str]:
    """Three ready pods of the old template; the DaemonSet now runs a new image, both revisions exist."""
    old_ds = builder.build()
    old = revision_of(old_ds, 1)
    ds = builder.image("busybox:2").build()
    current = revision_of(ds, 2)
    pods = [ds_pod(f"old-{i}", ds, n, hash_of(old)).build() for i, n in enumerate(NODES)]
    return Cluster(*[node(n).ready().build() for n in NODES], ds, old, current, *pods), ds, hash_of(current)


def test_rolling_update_with_max_unavailable_1_deletes_one_old_pod_per_sync() -> None:
    cluster, ds, hash_ = rolled_cluster(new_ds().rolling_update(max_unavailable=1))
    first = sync(cluster)
    assert (names(first.deletes), first.creates, first.rolled) == (["old-0"], [], True)
    assert first.expectations == expect(0, 1, NOW, frozenset({"default/old-0"}))
    assert first.revision_deletes == []  # the old revision still has live pods

    cluster.delete(first.deletes[0])
    second = sync(cluster)  # the deletion was observed: manage refills node-0, no rolling step meanwhile
    assert ([n for n, _, _ in second.creates], second.deletes, second.rolled) == (["node-0"], [], False)

    cluster.add(ds_pod("new-0", ds, "node-0", hash_).build())
    third = sync(cluster)
    assert (names(third.deletes), third.creates) == (["old-1"], [])


def converged_cluster(builder: DaemonSetBuilder, tainted: int = 0) -> tuple[Cluster, DaemonSet]:
    """Every node the daemon should run on runs a ready pod of the current revision; ``tainted`` more nodes carry
    a NoSchedule taint the daemon does not tolerate, and no pod."""
    ds = builder.build()
    current = revision_of(ds)
    pods = [ds_pod(f"pod-{i}", ds, n, hash_of(current)).build() for i, n in enumerate(NODES)]
    others = [node(f"tainted-{i}").ready().taint("dedicated", "db").build() for i in range(tainted)]
    return Cluster(*[node(n).ready().build() for n in NODES], *others, ds, current, *pods), ds


@pytest.mark.parametrize(("max_unavailable", "max_surge", "tainted"), [
    (1, 0, 0), ("50%", 0, 2), ("10%", None, 1), (0, "34%", 0), (0, "100%", 3), (0, 0, 1), ("150%", 0, 0)])
def test_a_converged_rolling_update_works_out_upstreams_budgets(max_unavailable: int | str, max_surge: int | str | None,
                                                               tainted: int) -> None:
    # nothing to replace: the step skips rollingUpdate's walk, and still states updatedDesiredNodeCounts' budgets
    # over the nodes the daemon should run on (the tainted ones not among them)
    cluster, ds = converged_cluster(new_ds().rolling_update(max_unavailable=max_unavailable, max_surge=max_surge),
                                    tainted)
    plan = sync(cluster)
    counts = updated_desired_node_counts(
        ds, {**{n: True for n in NODES}, **{f"tainted-{i}": False for i in range(tainted)}}, {})
    assert plan.explain["rollout"] == {"max_surge": counts.max_surge, "max_unavailable": counts.max_unavailable,
                                       "desired": len(NODES), "deleting": [], "surging_on": []}
    assert (plan.creates, plan.deletes, plan.failed, plan.rolled) == ([], [], None, True)


def test_a_converged_rolling_update_with_a_bad_max_surge_fails_as_upstream() -> None:
    cluster, ds = converged_cluster(new_ds().rolling_update(max_unavailable=0, max_surge="x%"))
    with pytest.raises(RolloutValueError) as raised:
        updated_desired_node_counts(ds, {n: True for n in NODES}, {})
    plan = sync(cluster)
    assert plan.failed == f"couldn't get unavailable numbers: {raised.value}"
    assert (plan.creates, plan.deletes, plan.rolled) == ([], [], False)


def test_on_delete_replaces_nothing() -> None:
    cluster, _, _ = rolled_cluster(new_ds().on_delete())
    plan = sync(cluster)
    assert (plan.creates, plan.deletes, plan.rolled) == ([], [], False)
    assert plan.expectations == expect(0, 0, NOW)
    assert plan.status is not None and plan.status.updated_number_scheduled == 0


def test_an_empty_selector_only_records_selecting_all() -> None:
    ds = new_ds().raw_selector(LabelSelector()).build()
    plan = sync(cluster_of(ds, revision_of(ds)))
    assert plan.events == [DaemonEvent(EVENT_WARNING, SELECTING_ALL_REASON, SELECTING_ALL_MESSAGE)]
    assert (plan.creates, plan.revision_creates, plan.status, plan.expectations) == ([], [], None, None)


def test_a_daemonset_being_deleted_is_left_alone() -> None:
    ds = new_ds().deleting(NOW).finalizers("keep").build()
    plan = sync(cluster_of(ds))
    assert plan.ds is not None
    assert (plan.creates, plan.revision_creates, plan.status, plan.events) == ([], [], None, [])


def test_a_bad_max_unavailable_warns_and_skips_the_rolling_update() -> None:
    cluster, ds, _ = rolled_cluster(new_ds().rolling_update(max_unavailable="abc"))
    with pytest.raises(RolloutValueError) as raised:
        unavailable_count(ds, 1)
    plan = sync(cluster)
    assert plan.warnings == [BadInput("InvalidRollingUpdate", str(raised.value), MAX_UNAVAILABLE_FIELD)]
    assert str(raised.value).startswith(f"{MAX_UNAVAILABLE_FIELD}: invalid value for MaxUnavailable: ")
    assert plan.failed == f"couldn't get unavailable numbers: {raised.value}"  # retried with backoff
    assert (plan.deletes, plan.rolled, plan.managed) == ([], False, True)


def test_a_bad_max_unavailable_does_not_stop_manage() -> None:
    ds = new_ds().rolling_update(max_unavailable="abc").build()
    plan = sync(cluster_of(ds, revision_of(ds)))
    assert [n for n, _, _ in plan.creates] == NODES
    assert [w.field for w in plan.warnings] == [MAX_UNAVAILABLE_FIELD]


def test_a_failed_pod_is_deleted_then_backed_off() -> None:
    ds = new_ds().build()
    revision = revision_of(ds)
    failed: Pod = ds_pod("failed", ds, "node-0", hash_of(revision)).phase(POD_FAILED).build()
    others = [ds_pod(f"ok-{n}", ds, n, hash_of(revision)).build() for n in NODES[1:]]
    cluster = cluster_of(ds, revision, failed, *others)
    first = sync(cluster)
    assert names(first.deletes) == ["failed"]
    assert first.events == [DaemonEvent(EVENT_WARNING, FAILED_DAEMON_POD,
                                        "Found failed daemon pod default/failed on node node-0, will try to kill it")]
    key = failed_pods_backoff_key(ds, "node-0")
    assert first.backoff_updates == [FailedPodBackoff(key=key, delay_seconds=1.0, last_update=NOW)]
    assert first.expectations == expect(0, 1, NOW, frozenset({"default/failed"}))

    entries = {entry.key: entry for entry in first.backoff_updates}
    second = sync(cluster, None, entries, NOW + timedelta(milliseconds=500))  # the pod is still there, failed
    assert (second.deletes, second.creates, second.events, second.backoff_updates) == ([], [], [], [])
    assert second.requeue_after == timedelta(seconds=1)


def test_a_taken_revision_name_only_bumps_the_collision_count() -> None:
    ds = new_ds().build()
    squatter = revision_of(ds)
    squatter.data = {"spec": {"template": {"$patch": "replace"}}}
    squatter.metadata.owner_references = []
    squatter.metadata.labels = {"other": "app"}
    plan = sync(cluster_of(ds, squatter))
    assert plan.waiting_for_history
    assert (plan.collision_count, plan.revision_creates, plan.creates, plan.hash) == (1, [], [], None)
    assert plan.status is None  # the executor bumps it from a fresh read


def test_a_selector_not_matching_the_template_warns_and_creates_nothing() -> None:
    """The API refuses it; let through, each pod made would go unclaimed and be made again, without end."""
    ds = new_ds().selector(app="foo").template_labels(app="bar").build()
    plan = sync(cluster_of(ds, revision_of(ds)))
    assert plan.warnings == [BadInput(
        "InvalidSelector", 'spec.template.metadata.labels: Invalid value: map[string]string{"app":"bar"}: '
        "`selector` does not match template `labels`", "spec.template.metadata.labels")]
    assert (plan.creates, plan.deletes, plan.revision_creates, plan.status) == ([], [], [], None)


@pytest.mark.parametrize(("expression", "problem"), [
    (NodeSelectorRequirement(key="cpus", operator="Gt", values=["abc"]),
     "matchExpressions[0].values[0]: Invalid value: \"abc\": for 'Gt', 'Lt' operators, the value must be an integer"),
    (NodeSelectorRequirement(key="bad key!", operator="Exists"),
     "matchExpressions[0].key: Invalid value: \"bad key!\""),
])
def test_a_node_affinity_term_that_cannot_parse_warns_and_matches_no_node(
        expression: NodeSelectorRequirement, problem: str) -> None:
    affinity = Affinity(node_affinity=NodeAffinity(required_during_scheduling_ignored_during_execution=NodeSelector(
        node_selector_terms=[NodeSelectorTerm(match_expressions=[expression])])))
    ds = new_ds().affinity(affinity).build()
    plan = sync(cluster_of(ds, revision_of(ds)))
    path = "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    [warning] = plan.warnings
    assert (warning.reason, warning.field) == ("InvalidNodeAffinity",
                                               f"{path}.nodeSelectorTerms[0].{problem.partition(':')[0]}")
    assert warning.message.startswith(f"{path}.nodeSelectorTerms[0].{problem}")
    assert plan.creates == [] and plan.status is not None and plan.status.desired_number_scheduled == 0


def test_a_percentage_over_100_is_scaled_as_upstream_with_a_warning() -> None:
    """150% of 3 nodes is 4 (rounded down): every old pod may go at once, as upstream decides."""
    cluster, _, _ = rolled_cluster(new_ds().rolling_update(max_unavailable="150%"))
    plan = sync(cluster)
    assert plan.warnings == [BadInput(
        "InvalidRollingUpdate", f'{MAX_UNAVAILABLE_FIELD}: Invalid value: "150%": must not be greater than 100%',
        MAX_UNAVAILABLE_FIELD)]
    assert plan.rolled and len(plan.deletes) == len(NODES)


def test_both_values_zero_fall_back_to_max_unavailable_1_with_a_warning() -> None:
    cluster, _, _ = rolled_cluster(new_ds().rolling_update(max_unavailable=0, max_surge=0))
    plan = sync(cluster)
    assert [(w.reason, w.field) for w in plan.warnings] == [("InvalidRollingUpdate", MAX_UNAVAILABLE_FIELD)]
    assert "cannot be 0 when maxSurge is 0" in plan.warnings[0].message
    assert (len(plan.deletes), plan.rolled, plan.failed) == (1, True, None)


# --- the decision summary at scale ---------------------------------------------------------------------------
def _many_nodes(count: int, *objects: object) -> Cluster:
    return Cluster(*[node(f"node-{i:05d}").ready().build() for i in range(count)], *objects)


def test_the_summary_of_an_apply_onto_many_nodes_counts_the_nodes_needing_a_pod_instead_of_naming_them() -> None:
    """Every sync of an apply is recorded; one naming each node still without its pod (three times: the per-node
    answers, nodes_needing_pods, deferred_nodes) made the audit trail grow with nodes x rounds, quadratically:
    1.6 MB for the first of 60 rounds at 15,000 nodes, 50 MB over the apply. What the sync acts on is named
    (its creates are in the actions), the rest is counted, so the summary's size does not grow with the nodes."""
    sizes = {}
    for count in (300, 3_000):
        ds = new_ds().build()
        plan = sync(_many_nodes(count, ds, revision_of(ds)))
        assert len(plan.creates) == 250  # burstReplicas
        assert (plan.explain["nodes_needing_pods"], plan.explain["deferred_nodes"]) == (count, count - 250)
        assert plan.explain["nodes"] == {} and plan.explain["node_count"] == count
        sizes[count] = len(json.dumps(plan.explain))
    assert sizes[3_000] <= sizes[300] + 10, sizes


def test_the_summary_names_at_most_a_bounded_number_of_unusual_nodes_and_counts_the_rest() -> None:
    """A node selector that no longer matches: every node's pod is to go, 250 a sync. The summary names the
    nodes whose pods this sync deletes and counts the others."""
    count = 1_200
    ds = new_ds().build()
    revision = revision_of(ds)
    pods = [ds_pod(f"foo-{i:05d}", ds, f"node-{i:05d}", hash_of(revision)).build() for i in range(count)]
    moved = new_ds().node_selector({"pool": "gpu"}).build()
    plan = sync(_many_nodes(count, moved, revision_of(moved), revision, *pods))
    assert len(plan.deletes) == 250
    assert plan.explain["deferred_deletes"] == count - 250
    listed = plan.explain["nodes"]
    assert len(listed) == 500 and plan.explain["nodes_not_listed"] == count - 500
    assert all(entry["should_continue_running"] is False and len(entry["pods"]) == 1 for entry in listed.values())
    deleted_on = {p.spec.node_name for p in plan.deletes}
    assert deleted_on <= set(listed), sorted(deleted_on - set(listed))[:3]


class _Watched:
    """A pod that notes its name in ``touched`` whenever anything reads one of its fields."""

    def __init__(self, pod: Pod, touched: set[str]) -> None:
        object.__setattr__(self, "_pod", pod)
        object.__setattr__(self, "_touched", touched)

    def __getattr__(self, field: str) -> object:
        pod = object.__getattribute__(self, "_pod")
        object.__getattribute__(self, "_touched").add(pod.metadata.name)
        return getattr(pod, field)


def watch_pods(cluster: Cluster) -> set[str]:
    """Puts a _Watched in place of every pod the cache's facts hold; returns the set of the names read."""
    touched: set[str] = set()
    cache = cluster.cache
    for uid, facts in list(cache.pod_facts.items()):
        watched = facts._replace(pod=_Watched(facts.pod, touched))
        cache.pod_facts[uid] = watched
        for group in cache.pod_groups.values():
            if uid in group:
                group[uid] = watched
    return touched


def test_a_sync_reads_the_facts_and_only_the_pods_it_deletes() -> None:
    """Issue 25: the sync (claim, grouping by node, manage, the rolling walk, cleanupHistory, the status, the
    decision's summary) reads each pod's facts, which the cache keeps once per pod version, and a pod itself
    only where it acts on it. At thousands of nodes reading every pod's fields was most of a sync's time."""
    nodes = [f"node-{i}" for i in range(12)]
    builder = new_ds().rolling_update(max_unavailable=3)
    old_ds = builder.build()
    old = revision_of(old_ds, 1)
    ds = builder.image("busybox:2").build()
    current = revision_of(ds, 2)

    steady = Cluster(*[node(n).ready().build() for n in nodes], old_ds, old,
                     *[ds_pod(f"pod-{n}", old_ds, n, hash_of(old)).build() for n in nodes])
    touched = watch_pods(steady)
    plan = sync_daemonset(KEY, steady.cache, None, {}, NOW, "corr")
    assert (plan.creates, plan.deletes, plan.status is not None) == ([], [], True)
    assert plan.status is not None and (plan.status.desired_number_scheduled, plan.status.number_available,
                                        plan.status.updated_number_scheduled) == (12, 12, 12)
    assert touched == set()

    rolling = Cluster(*[node(n).ready().build() for n in nodes], ds, old, current,
                      *[ds_pod(f"pod-{n}", ds, n, hash_of(old)).build() for n in nodes])
    touched = watch_pods(rolling)
    plan = sync_daemonset(KEY, rolling.cache, None, {}, NOW, "corr")
    assert plan.rolled and names(plan.deletes) == ["pod-node-0", "pod-node-1", "pod-node-10"]
    assert plan.status is not None and (plan.status.number_available, plan.status.updated_number_scheduled) == (12, 0)
    assert touched <= set(names(plan.deletes)), sorted(touched - set(names(plan.deletes)))
