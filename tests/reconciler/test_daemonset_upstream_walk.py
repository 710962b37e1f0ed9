"""daemon_controller_test.go, walked case by case: the test functions no other kubus test mirrored yet.

Each test names its upstream function. Upstream's expectSyncDaemonSets(creates, deletes, events) runs one
syncHandler; here a sync is ``sync_daemonset`` on a cache that already holds the current ControllerRevision
(kubus creates the revision one sync before the pods, see docs/daemonset.md), or the controllers engine where
upstream's assertion is about what follows the executor's results (errors, requeues). Upstream's
updateStrategies() (OnDelete, and RollingUpdate with maxUnavailable 1) run every case twice, as here.
Resource requests and host ports are not modelled: upstream's NodeShouldRunDaemonPod ignores them too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

import pytest

from kube import codec
from kube.core import POD_RUNNING, Node, Pod
from kube.testing import DaemonSetBuilder, daemonset, node, pod
from messages.actions import FAILED, SUCCEEDED, CreatePods, UpdateStatus
from reconciler.core.controllers import Controllers
from reconciler.core.daemonset.handlers import controller_key
from reconciler.core.daemonset.sync import DaemonSetPlan, sync_daemonset
from reconciler.core.expectations import Expectations
from reconciler.core.replicaset.sync import ManageError
from tests.reconciler.builders import NOW, Cluster
from tests.reconciler.test_controllers import create_results, of_type, only, result
from tests.reconciler.test_controllers import sync as engine_sync
from tests.reconciler.test_daemonset_sync import revision_of

SIMPLE_DAEMON_SET_LABEL = {"name": "simple-daemon", "type": "production"}
SIMPLE_NODE_LABEL = {"color": "blue", "speed": "fast"}
KEY = controller_key("default", "foo")
MS = timedelta(milliseconds=1)

Strategy = Callable[[DaemonSetBuilder], DaemonSetBuilder]
STRATEGIES = pytest.mark.parametrize("strategy", [
    pytest.param(lambda b: b.on_delete(), id="OnDelete"),
    pytest.param(lambda b: b.rolling_update(max_unavailable=1, max_surge=0), id="RollingUpdate"),
])


def new_ds(strategy: Strategy = lambda b: b.on_delete()) -> DaemonSetBuilder:
    """newDaemonSet("foo"): selecting (and labelling its template with) simpleDaemonSetLabel, OnDelete."""
    return strategy(daemonset("foo").uid("foo-uid").selector(SIMPLE_DAEMON_SET_LABEL))


def add_nodes(start: int, count: int, labels: Mapping[str, str] | None = None) -> list[Node]:
    """addNodes: Ready nodes node-<start>..."""
    return [node(f"node-{i}").labels(labels or {}).ready().build() for i in range(start, start + count)]


def sync(cluster: Cluster, expectations: Expectations | None = None, now: datetime = NOW) -> DaemonSetPlan:
    return sync_daemonset(KEY, cluster.cache, expectations, {}, now, "corr")


def created_pod(body: dict[str, object], uid: str) -> Pod:
    """A pod the executor made from a create's body, as the watch then shows it."""
    made = codec.decode_builtin(body, Pod)
    made.metadata.namespace = made.metadata.namespace or "default"
    made.metadata.uid = uid
    made.status.phase = POD_RUNNING
    return made


@STRATEGIES
def test_simple_daemonset_updates_status_after_launching_pods(strategy: Strategy) -> None:
    """TestSimpleDaemonSetUpdatesStatusAfterLaunchingPods: 5 nodes, 5 creates, and a status with
    CurrentNumberScheduled 5.

    Upstream's fake pod control writes each pod it creates into the informer's store at once, so the
    updateDaemonSetStatus of the same syncHandler already lists them. kubus decides on one snapshot of the
    cache: the deciding sync's status counts what the cache held (no pod yet), and the status counting the 5 pods
    is the one computed from the store upstream's status read, the cache once their watch events are in."""
    ds = new_ds(strategy).build()
    cluster = Cluster(*add_nodes(0, 5), ds, revision_of(ds))
    plan = sync(cluster)
    assert [n for n, _, _ in plan.creates] == [f"node-{i}" for i in range(5)]
    assert (plan.deletes, plan.events) == ([], [])
    assert plan.status is not None and plan.status.current_number_scheduled == 0  # no pod in this snapshot

    expectations = plan.expectations
    assert expectations is not None
    for i, (_, _, body) in enumerate(plan.creates):
        cluster.add(created_pod(body, f"created-{i}"))
        expectations = expectations.creation_observed()  # the fake pod control's CreationObserved
    after = sync(cluster, expectations)
    assert (after.creates, after.deletes, after.events) == ([], [], [])
    assert after.status is not None
    assert (after.status.desired_number_scheduled, after.status.current_number_scheduled,
            after.status.updated_number_scheduled) == (5, 5, 5)


@pytest.mark.parametrize(("sync_error", "status_error"), [
    pytest.param(True, False, id="sync error"),
    pytest.param(False, True, id="status error"),
    pytest.param(True, True, id="sync and status error"),
])
@STRATEGIES
def test_simple_daemonset_updates_status_error(strategy: Strategy, sync_error: bool, status_error: bool) -> None:
    """TestSimpleDaemonSetUpdatesStatusError: one node; a failing pod create (podControl.Err), a failing
    UpdateStatus, or both. syncDaemonSet writes the status whatever manage returned (1 create attempted, the
    status written in the same sync), and returns the sync error before the status error: processNextWorkItem
    re-adds the key with the rate limiter once.

    In kubus both errors come back as the executor's results of the one decision: the create's error is the one
    kept (as the error syncDaemonSet returns), and the key is retried once with the rate limiter's 5 ms."""
    ds = new_ds(strategy).build()
    cluster = Cluster(*add_nodes(0, 1), ds, revision_of(ds))
    controllers = Controllers(cluster.cache)
    controllers.queue.add(KEY)
    decided = only(engine_sync(controllers))
    (create,) = of_type(decided.actions, CreatePods)
    (write,) = of_type(decided.actions, UpdateStatus)
    assert len(create.pods) == 1
    assert decided.summary["deletes"] == [] and decided.summary["status_written"]

    message = "sync error"
    create_outcome = (FAILED, 500, "InternalError", message) if sync_error else (SUCCEEDED, 201, "", "")
    controllers.results(create_results(create, [create_outcome]), NOW)
    controllers.results([result(write, FAILED, code=500, message="status error") if status_error
                         else result(write, SUCCEEDED, rv="2")], NOW)
    assert controllers.errors == ({KEY: ManageError(message, creating=True)} if sync_error else {})
    assert controllers.queue.failures(KEY) == 1
    assert controllers.queue.next_ready_at() == NOW + 5 * MS


@STRATEGIES
def test_dont_do_anything_if_being_deleted(strategy: Strategy) -> None:
    """TestDontDoAnythingIfBeingDeleted: a DaemonSet with a deletionTimestamp, its template bound to the one
    node, a foreign pod there: no create, no delete, no event (and, in kubus, no revision and no status)."""
    builder = new_ds(strategy).deleting(NOW).finalizers("keep")
    template = builder.build().spec.template.copy()
    template.spec.node_name = "not-too-much-mem"
    ds = builder.template(template).build()
    target = node("not-too-much-mem").ready().allocatable(memory="200M", cpu="200m").build()
    foreign = pod("foreign").on_node("not-too-much-mem").build()
    plan = sync(Cluster(target, ds, revision_of(ds), foreign))
    assert plan.ds is not None
    assert (plan.creates, plan.deletes, plan.events) == ([], [], [])
    assert (plan.revision_creates, plan.adopt, plan.status, plan.expectations) == ([], [], None, None)


def test_selector_daemonset_launches_pods() -> None:
    """TestSelectorDaemonSetLaunchesPods: newDaemonSet (OnDelete) with simpleNodeLabel as its node selector,
    4 unlabelled nodes and 3 labelled ones: 3 creates, on the labelled nodes."""
    ds = new_ds().node_selector(SIMPLE_NODE_LABEL).build()
    plan = sync(Cluster(*add_nodes(0, 4), *add_nodes(4, 3, SIMPLE_NODE_LABEL), ds, revision_of(ds)))
    assert [n for n, _, _ in plan.creates] == ["node-4", "node-5", "node-6"]
    assert (plan.deletes, plan.events) == ([], [])
    assert plan.status is not None and plan.status.desired_number_scheduled == 3
