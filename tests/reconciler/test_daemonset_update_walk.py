"""update_test.go and util/daemonset_util_test.go walked case by case through ``sync_daemonset``.

tests/reconciler/test_daemonset_rollout.py replays the TestDaemonSetUpdates* scenarios against
``rolling_update`` with a manage step written in the test; here they run through the whole pure sync
(claiming, history, the real ``manage`` and ``syncNodes``, the rolling update), with upstream's test
controller around it:

- upstream's fakePodControl puts a created pod into the pod store at once (not Ready, no phase) and
  takes a deleted one out at once, and observes both in the expectations, which clearExpectations
  then drops: so every sync here starts with no expectations, and the cache holds exactly the pods
  the earlier syncs left. Pods made here carry their controller reference, as the real pod control's
  do (the fake's pods are orphans adopted again on every sync).
- clearExpectations stamps pods without a creation time with the fake clock's time; here a pod is
  created at the sync's clock.
- because the fake observes manage's creates and deletes within the sync, upstream's second
  SatisfiedExpectations check passes and rollingUpdate runs in the same syncHandler, on the store
  manage just changed. kubus never rolls on a view that lacks its own sync's actions (in production
  upstream's informer usually lags the same way; reconciler/core/daemonset/sync.py's ``_roll``): its
  rolling step comes with the next sync, at the same clock, whose manage must then issue nothing. One
  upstream syncHandler is therefore one kubus sync, plus that next one when manage acted and the
  strategy is RollingUpdate; the counts asserted are their sums, exactly upstream's numbers.
- kubus creates the current ControllerRevision one sync before the pods (docs/daemonset.md): when the
  test changes the template, the new revision is put into the cache with the DaemonSet, as the
  executor would have created it, so no upstream sync is spent on it.
"""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from kube import codec
from kube.apps import ROLLING_UPDATE, ControllerRevision, DaemonSet
from kube.core import CONDITION_FALSE, CONDITION_TRUE, POD_READY, Node, Pod, PodCondition, Toleration
from kube.meta import IntOrString, ObjectMeta
from kube.nodeaffinity import get_target_node_name
from kube.ownership import new_controller_ref
from kube.testing import DaemonSetBuilder, daemonset, node, pod
from kube.times import format_time
from reconciler.core.daemonset.handlers import REVISION_KIND, controller_key
from reconciler.core.daemonset.history import UNIQUE_LABEL_KEY, construct_history
from reconciler.core.daemonset.rollout import TEMPLATE_GENERATION_LABEL, is_pod_updated
from reconciler.core.daemonset.sync import DaemonSetPlan, sync_daemonset
from tests.reconciler.builders import NOW, Cluster

SIMPLE_DAEMON_SET_LABEL = {"name": "simple-daemon", "type": "production"}
KEY = controller_key("default", "foo")


def new_daemonset() -> DaemonSetBuilder:
    """newDaemonSet("foo"): OnDelete, revisionHistoryLimit 2, image foo/bar, selecting simpleDaemonSetLabel."""
    return (daemonset("foo").uid("foo-uid").selector(SIMPLE_DAEMON_SET_LABEL).on_delete().revision_history_limit(2)
            .image("foo/bar"))


def at(seconds: int) -> datetime:
    """testingclock.NewFakeClock(time.Unix(seconds, 0))."""
    return datetime.fromtimestamp(seconds, UTC)


@dataclass
class Synced:
    creates: int
    deletes: int
    plans: list[DaemonSetPlan]


class TestController:
    """newTestController with ``nodes`` Ready nodes (addNodes), the fake pod control and a fake clock."""

    __test__ = False

    def __init__(self, ds: DaemonSet, nodes: int = 5, *extra: Node) -> None:
        self.cluster = Cluster(*[node(f"node-{i}").ready().build() for i in range(nodes)])
        for changed in extra:  # manager.nodeStore.Update
            changed.metadata.resource_version = "2"
            self.cluster.update(changed)
        self.now = NOW
        self.rv = itertools.count(1)
        self.names = itertools.count()
        self.ds = ds
        self.update(ds)

    # --- the stores ---------------------------------------------------------------------------------------

    def update(self, ds: DaemonSet) -> None:
        """manager.dsStore.Add / Update, with the revision kubus's previous sync would have created."""
        ds.metadata.resource_version = str(next(self.rv))
        self.ds = ds
        self.cluster.update(ds)
        history = construct_history(ds, self.revisions())
        if history.create is not None:
            revision = history.create
            revision.metadata.uid = f"uid-{revision.metadata.name}"
            revision.metadata.resource_version = str(next(self.rv))
            self.cluster.add(revision)

    def revisions(self) -> list[ControllerRevision]:
        return self.cluster.cache.owned_or_orphans(REVISION_KIND, "default", self.ds.metadata.uid)

    def pods(self) -> list[Pod]:
        return sorted(self.cluster.cache.owned_or_orphans("Pod", "default", self.ds.metadata.uid),
                      key=lambda p: p.metadata.name)

    def current_hash(self) -> str:
        """currentDSHash."""
        history = construct_history(self.ds, self.revisions())
        assert history.hash is not None
        return history.hash

    def set_readiness(self, ready: bool, count: int | None = None, fn: Callable[[Pod], bool] = lambda _: True) -> None:
        """setPodReadiness (count given) / markPodsReady (every pod): the Ready condition turns ``ready``
        at the fake clock's time; pods already so, or being deleted, are skipped."""
        for p in self.pods():
            if count is not None and count <= 0:
                break
            if p.metadata.deletion_timestamp is not None or _is_ready(p) == ready or not fn(p):
                continue
            p = copy.deepcopy(p)  # the cache's own object stays as it was
            p.status.conditions = [c for c in p.status.conditions if c.type != POD_READY] + [PodCondition(
                type=POD_READY, status=CONDITION_TRUE if ready else CONDITION_FALSE,
                last_transition_time=format_time(self.now))]
            p.metadata.resource_version = str(next(self.rv))
            self.cluster.update(p)
            if count is not None:
                count -= 1
        assert count is None or count == 0, f"could not mark {count} pods ready={ready}"

    # --- syncHandler ----------------------------------------------------------------------------------------

    def _sync_once(self) -> DaemonSetPlan:
        plan = sync_daemonset(KEY, self.cluster.cache, None, {}, self.now, f"corr-{next(self.names)}")
        assert not plan.waiting_for_history
        assert (plan.adopt, plan.release, plan.revision_creates, plan.pod_relabels) == ([], [], [], [])
        assert plan.failed is None and plan.events == []  # expectedEvents 0
        for _, _, body in plan.creates:
            created = codec.decode_builtin(body, Pod)
            n = next(self.names)
            created.metadata.name = created.metadata.name or f"pod-{n:04d}"
            created.metadata.uid = f"uid-pod-{n:04d}"
            created.metadata.resource_version = str(next(self.rv))
            created.metadata.creation_timestamp = format_time(self.now)
            self.cluster.add(created)
        for doomed in plan.deletes:
            self.cluster.delete(doomed)
        for revision in plan.revision_deletes:
            self.cluster.delete(revision)
        return plan

    def sync(self) -> Synced:
        """One upstream syncHandler (see the module's docstring)."""
        first = self._sync_once()
        plans = [first]
        rolling_update = self.ds.spec.update_strategy.type == ROLLING_UPDATE
        if (first.creates or first.deletes) and not first.rolled and rolling_update:
            rest = self._sync_once()
            assert rest.rolled, "manage acted again on the view its own actions made"
            plans.append(rest)
        return Synced(sum(len(p.creates) for p in plans), sum(len(p.deletes) for p in plans), plans)

    def expect(self, creates: int, deletes: int) -> None:
        """clearExpectations + expectSyncDaemonSets(creates, deletes, 0)."""
        synced = self.sync()
        assert (synced.creates, synced.deletes) == (creates, deletes)


def _is_ready(p: Pod) -> bool:
    return any(c.type == POD_READY and c.status == CONDITION_TRUE for c in p.status.conditions)


def rolling(ds: DaemonSetBuilder, max_unavailable: IntOrString) -> DaemonSet:
    """ds.Spec.UpdateStrategy = RollingUpdate with only MaxUnavailable set."""
    return ds.rolling_update(max_unavailable=max_unavailable, max_surge=None).build()


def update_surge(ds: DaemonSetBuilder, max_surge: IntOrString) -> DaemonSet:
    """newUpdateSurge: maxUnavailable 0, maxSurge ``max_surge``."""
    return ds.rolling_update(max_unavailable=0, max_surge=max_surge).build()


# --- update_test.go ---------------------------------------------------------------------------------------


def test_daemonset_updates_pods() -> None:
    """TestDaemonSetUpdatesPods: maxUnavailable 2 over 5 nodes, each step deleting then refilling."""
    manager = TestController(new_daemonset().build())
    manager.expect(5, 0)
    manager.set_readiness(True)

    manager.update(rolling(new_daemonset().image("foo2/bar2"), 2))
    manager.expect(0, 2)
    manager.expect(2, 0)
    manager.set_readiness(True)

    manager.expect(0, 2)
    manager.expect(2, 0)
    manager.set_readiness(True)

    manager.expect(0, 1)
    manager.expect(1, 0)
    manager.set_readiness(True)

    manager.expect(0, 0)
    assert {p.metadata.labels[UNIQUE_LABEL_KEY] for p in manager.pods()} == {manager.current_hash()}


def test_daemonset_updates_pods_with_max_surge() -> None:
    """TestDaemonSetUpdatesPodsWithMaxSurge: maxSurge 2, maxUnavailable 0."""
    manager = TestController(new_daemonset().build())
    manager.expect(5, 0)
    manager.set_readiness(True)

    max_surge = 2
    manager.update(update_surge(new_daemonset().image("foo2/bar2"), max_surge))
    manager.expect(max_surge, 0)
    manager.expect(0, 0)
    manager.set_readiness(True)

    manager.expect(max_surge, max_surge)
    manager.expect(0, 0)
    manager.set_readiness(True)

    manager.expect(5 % max_surge, max_surge)
    manager.expect(0, 0)
    manager.set_readiness(True)

    manager.expect(0, 5 % max_surge)
    manager.expect(0, 0)
    assert len(manager.pods()) == 5


def test_daemonset_updates_pods_not_matching_taints_with_max_surge() -> None:
    """TestDaemonSetUpdatesPodsNotMatchTainstWithMaxSurge: node-0 is tainted NoSchedule, which only the first
    template tolerates; the new one makes it a node to sunset (shouldRun false, shouldContinueRunning true)."""
    control_plane = "node-role.kubernetes.io/control-plane"
    max_surge = 1
    tolerating = new_daemonset().tolerations(Toleration(key=control_plane, operator="Exists"))
    tainted = node("node-0").ready().taint(control_plane, "", "NoSchedule").build()
    manager = TestController(update_surge(tolerating, max_surge), 5, tainted)
    manager.expect(5, 0)
    manager.set_readiness(True)

    # RollingUpdate DaemonSet without toleration
    manager.update(update_surge(new_daemonset(), max_surge))
    assert manager.ds.spec.template.spec.tolerations == []
    manager.expect(max_surge, 1)
    manager.expect(0, 0)
    manager.set_readiness(True)

    for _ in range(3):
        manager.expect(max_surge, max_surge)
        manager.expect(0, 0)
        manager.set_readiness(True)

    manager.expect(0, max_surge)
    manager.expect(0, 0)
    assert sorted(get_target_node_name(p) or "" for p in manager.pods()) == [f"node-{i}" for i in range(1, 5)]


def test_daemonset_updates_when_new_pod_is_not_ready() -> None:
    """TestDaemonSetUpdatesWhenNewPosIsNotReady: the new pods never turn Ready, so numUnavailable stays at
    maxUnavailable 3 and the rollout stops after one step."""
    manager = TestController(new_daemonset().build())
    manager.expect(5, 0)
    manager.set_readiness(True)

    manager.update(rolling(new_daemonset().image("foo2/bar2"), 3))
    manager.expect(0, 3)
    manager.expect(3, 0)
    manager.expect(0, 0)


def test_daemonset_updates_some_old_pods_not_ready() -> None:
    """TestDaemonSetUpdatesSomeOldPodsNotReady: after a first step leaves two new pods unready, a second
    update replaces those two and leaves the three available old pods alone."""
    manager = TestController(new_daemonset().build())
    manager.expect(5, 0)
    manager.set_readiness(True)

    max_unavailable = 2
    manager.update(rolling(new_daemonset().image("foo2/bar2"), max_unavailable))
    # All old pods are available, should update 2
    manager.expect(0, max_unavailable)
    manager.expect(max_unavailable, 0)
    manager.expect(0, 0)

    # Perform another update, verify we delete and create 2 pods, three available should remain untouched
    manager.update(rolling(new_daemonset().image("foo2/bar3"), max_unavailable))
    manager.expect(0, max_unavailable)
    manager.expect(max_unavailable, 0)
    manager.expect(0, 0)
    assert sum(_is_ready(p) for p in manager.pods()) == 5 - max_unavailable


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_daemonset_updates_save_old_healthy_pods(seed: int) -> None:
    """TestDaemonSetUpdatesSaveOldHealthyPods: 20 nodes, 10 updated pods never turn Ready; however small
    maxUnavailable gets (rand.Intn(10), here from a seeded generator), only those 10 are replaced."""
    manager = TestController(new_daemonset().build(), 20)
    manager.expect(20, 0)
    manager.set_readiness(True)

    # first update to get 10 old pods which should never be touched
    max_unavailable = 10
    manager.update(rolling(new_daemonset().image("foo2/bar2"), max_unavailable))
    manager.expect(0, max_unavailable)
    manager.expect(max_unavailable, 0)
    manager.expect(0, 0)

    # save the pods we want to maintain running
    old_ready_pods = {p.metadata.name for p in manager.pods() if _is_ready(p)}
    draw = random.Random(seed)
    for i in range(10):
        manager.update(rolling(new_daemonset().image(f"foo2/bar3-{i}"), draw.randrange(10)))
        # only the 10 unavailable pods will be allowed to be updated
        manager.expect(0, 10)
        manager.expect(10, 0)
        manager.expect(0, 0)
        # verify that the ready pods are never touched
        assert {p.metadata.name for p in manager.pods() if _is_ready(p)} >= old_ready_pods

    max_unavailable = 11
    manager.update(rolling(new_daemonset().image("foo2/bar4"), max_unavailable))
    manager.expect(0, max_unavailable)
    manager.expect(max_unavailable, 0)
    manager.expect(0, 0)
    assert sum(_is_ready(p) for p in manager.pods()) == 9


def test_daemonset_updates_all_old_not_ready_pods_and_new_not_ready_pods() -> None:
    """TestDaemonSetUpdatesAllOldNotReadyPodsAndNewNotReadyPods: with maxUnavailable 10, 88 unavailable new
    pods, 2 unavailable old pods and 10 available old pods, the 2 unavailable old pods are still replaced."""
    manager = TestController(new_daemonset().build(), 100)
    manager.expect(100, 0)
    manager.set_readiness(True)
    hash1 = manager.current_hash()

    max_unavailable = 10
    manager.update(rolling(new_daemonset().image("foo2/bar2"), max_unavailable))
    # we need to iterate 10 times, since we allow 10 max unavailable, to reach 100 nodes rollout
    for _ in range(10):
        manager.expect(0, max_unavailable)
        manager.expect(max_unavailable, 0)
        # make sure to mark the pods ready, otherwise the followup rollouts will fail
        manager.set_readiness(True)
    manager.expect(0, 0)

    # the latter 90 pods not ready, the first 12 with the older hash, 2 of them not ready
    old_unavailable_pods = set()
    for i, p in enumerate(manager.pods()):
        changed = copy.deepcopy(p)
        if i >= 10:
            changed.status.conditions = [c for c in changed.status.conditions if c.type != POD_READY] + [
                PodCondition(type=POD_READY, status=CONDITION_FALSE, last_transition_time=format_time(manager.now))]
        if i < 12:
            changed.metadata.labels[UNIQUE_LABEL_KEY] = hash1
            if i >= 10:
                old_unavailable_pods.add(p.metadata.name)
        changed.metadata.resource_version = str(next(manager.rv))
        manager.cluster.update(changed)

    # expect 2 old pods deletion in 1st iteration
    manager.expect(0, 2)
    # expect 2 new pods creation in 2nd iteration
    manager.expect(2, 0)
    # expect no modifications in 3rd iteration
    manager.expect(0, 0)
    assert not old_unavailable_pods & {p.metadata.name for p in manager.pods()}


def test_daemonset_updates_all_old_pods_not_ready() -> None:
    """TestDaemonSetUpdatesAllOldPodsNotReady: every old pod is unavailable, so all go at once."""
    manager = TestController(new_daemonset().build())
    manager.expect(5, 0)

    manager.update(rolling(new_daemonset().image("foo2/bar2"), 3))
    manager.expect(0, 5)
    manager.expect(5, 0)
    manager.expect(0, 0)


def test_daemonset_updates_all_old_pods_not_ready_max_surge() -> None:
    """TestDaemonSetUpdatesAllOldPodsNotReadyMaxSurge: surge beside unavailable old pods, then
    minReadySeconds 15 holding back the deletion of ready old pods, with the fake clock."""
    manager = TestController(new_daemonset().build())
    manager.expect(5, 0)

    max_surge = 3
    manager.update(update_surge(new_daemonset().image("foo2/bar2"), max_surge))

    # all old pods are unavailable so should be surged
    manager.now = at(100)
    manager.expect(5, 0)

    # waiting for pods to go ready, old pods are deleted
    manager.now = at(200)
    manager.expect(0, 5)

    manager.set_readiness(True, 5)
    manager.update(update_surge(new_daemonset().image("foo3/bar3").min_ready_seconds(15), max_surge))

    manager.now = at(300)
    manager.expect(3, 0)

    hash_ = manager.current_hash()
    current_nodes = {get_target_node_name(p) for p in manager.pods()
                     if p.metadata.labels.get(UNIQUE_LABEL_KEY) == hash_}
    # mark two updated pods as ready at time 300
    manager.set_readiness(True, 2, lambda p: p.metadata.labels.get(UNIQUE_LABEL_KEY) == hash_)
    # mark one of the old pods that is on a node without an updated pod as unready
    manager.set_readiness(False, 1, lambda p: p.metadata.labels.get(UNIQUE_LABEL_KEY) != hash_
                          and get_target_node_name(p) not in current_nodes)

    # the new pods should still be considered waiting to hit min readiness, so one pod should be created to
    # replace the deleted old pod
    manager.now = at(310)
    manager.expect(1, 0)

    # the new pods are now considered available, so delete the old pods
    manager.now = at(320)
    manager.expect(1, 3)

    # mark all updated pods as ready at time 320
    manager.set_readiness(True, 3, lambda p: p.metadata.labels.get(UNIQUE_LABEL_KEY) == hash_)

    # the new pods are now considered available, so delete the old pods
    manager.now = at(340)
    manager.expect(0, 2)

    # controller has completed upgrade
    manager.now = at(350)
    manager.expect(0, 0)
    assert [p.metadata.labels[UNIQUE_LABEL_KEY] for p in manager.pods()] == [hash_] * 5


def test_daemonset_updates_no_template_changed() -> None:
    """TestDaemonSetUpdatesNoTemplateChanged: switching OnDelete to RollingUpdate (maxUnavailable 3) changes no
    template, so no pod is removed, Ready or not."""
    manager = TestController(new_daemonset().build())
    manager.expect(5, 0)
    revisions = manager.revisions()

    manager.update(rolling(new_daemonset(), 3))
    assert manager.revisions() == revisions  # the same revision: the strategy is not part of it
    manager.expect(0, 0)


def test_controlled_histories_same_namespace() -> None:
    """TestControlledHistories, "controller revision in the same namespace": the DaemonSet's own revision and
    an orphan in its namespace matching its selector are both its history (the orphan adopted)."""
    ds1 = new_daemonset().named("ds1").uid("ds1-uid").build()
    own = controller_revision("ds1-x1", "default", ds1, owned=True)
    orphan = controller_revision("ds1-x2", "default", ds1, owned=False)
    plan = sync_daemonset(controller_key("default", "ds1"), Cluster(ds1, own, orphan).cache, None, {}, NOW, "c")
    assert [r.metadata.name for r in plan.revision_adopt] == ["ds1-x2"]
    assert plan.revision_release == []
    assert plan.history is not None
    assert sorted(r.metadata.name for r in plan.history.old) == ["ds1-x1", "ds1-x2"]


def test_controlled_histories_other_namespace() -> None:
    """TestControlledHistories, "Skip adopting the controller revision in namespace other than the one in which DS
    lives"."""
    ds1 = new_daemonset().named("ds1").uid("ds1-uid").build()
    elsewhere = controller_revision("ds1-x3", "default-other", ds1, owned=False)
    plan = sync_daemonset(controller_key("default", "ds1"), Cluster(ds1, elsewhere).cache, None, {}, NOW, "c")
    assert (plan.revision_adopt, plan.revision_release) == ([], [])
    assert plan.history is not None and plan.history.old == []


def controller_revision(name: str, namespace: str, ds: DaemonSet, *, owned: bool) -> ControllerRevision:
    """newControllerRevision: the template's labels, no data, owned by ``ds`` or by nothing."""
    refs = [new_controller_ref(ds.metadata, ds.api_version, ds.kind)] if owned else []
    return ControllerRevision(metadata=ObjectMeta(
        name=name, namespace=namespace, uid=f"uid-{namespace}-{name}", resource_version="1",
        labels=dict(ds.spec.template.metadata.labels), owner_references=refs), revision=0)


# --- util/daemonset_util_test.go ----------------------------------------------------------------------------


@pytest.mark.parametrize("labels", [
    pytest.param(None, id="no-labels"),
    pytest.param({}, id="empty-labels"),
])
def test_is_pod_updated_without_labels(labels: dict[str, str] | None) -> None:
    """TestIsPodUpdated, "no labels" (nil) beside "empty labels": neither the generation nor the hash matches."""
    built = pod("pod1").on_node("node1").build()
    if labels is not None:
        built.metadata.labels = labels
    assert is_pod_updated(built, "55555", 12345) is False
    assert TEMPLATE_GENERATION_LABEL not in built.metadata.labels

