"""Shadow mode in the pure core (docs/shadow.md): the controllers' state machine when their actions never
execute and the acting controller's acts are what the watch shows, and the acts both sides are recorded as."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from kube.core import Pod, PodCondition
from kube.meta import OwnerReference
from kube.testing import daemonset, node, replicaset
from kube.times import format_micro_time
from messages.actions import CreateControllerRevision, CreatePods, DeletePod, UpdateStatus
from reconciler.core.controllers import SHADOW_REBASE_TRIGGER, Controllers, Decided, Settings
from reconciler.core.daemonset.handlers import controller_key as ds_controller_key
from reconciler.core.shadow import (
    ADOPT_POD,
    CREATE_POD,
    CREATE_REVISION,
    DELETE_POD,
    KEEP_STATUS,
    OWNER_DELETED,
    RELEASE_POD,
    UPDATE_STATUS,
    UPSTREAM,
    upstream_acts,
    would_do,
)
from tests.reconciler.builders import NOW, Cluster, orphan_pod, owned_pod
from tests.reconciler.test_controllers import KEY, web
from tests.reconciler.test_daemonset_sync import ds_pod, revision_of

WINDOW = timedelta(seconds=30)
SHADOW = Settings(shadow=True, shadow_window=WINDOW)


def shadow(*objects: Any) -> tuple[Cluster, Controllers]:
    cluster = Cluster()
    controllers = Controllers(cluster.cache, settings=SHADOW)
    controllers.observe([cluster.add(obj) for obj in objects], NOW)
    return cluster, controllers


def decide(controllers: Controllers, at: timedelta = timedelta(0)) -> list[Decided]:
    now = NOW + at
    return controllers.sync_ready(now, format_micro_time(now)).decisions


def actions(decided: list[Decided], kind: type[Any]) -> list[Any]:
    return [a for d in decided for a in d.actions if isinstance(a, kind)]


def test_upstreams_pods_satisfy_the_shadows_creates() -> None:
    """The shadow's creates never happen; the acting controller's pods, as the watch shows them, are what it
    observes, and it waits for no result of its own round or status write."""
    rs = web(3)
    cluster, controllers = shadow(rs)
    first = decide(controllers)
    assert sum(len(c.pods) for c in actions(first, CreatePods)) == 3
    assert actions(first, UpdateStatus)
    assert controllers.manage_pending == {} and controllers.status_in_flight == {}
    pods = [owned_pod(f"up-{i}", rs).build() for i in range(3)]
    controllers.observe([cluster.add(p) for p in pods], NOW)
    assert controllers.expectations[KEY].fulfilled()
    assert actions(decide(controllers, timedelta(seconds=1)), CreatePods) == []  # decided once, not twice


def test_upstream_deleting_an_equal_pod_satisfies_the_shadows_deletion() -> None:
    """Scale-down: the shadow picks its pod, upstream another of equal rank. The shadow counts upstream's
    deletions of the owner's pods, so it decides again at once and, the count being right, deletes nothing."""
    rs = web(1)
    pods = [owned_pod(f"pod{i}", rs).ready(NOW).build() for i in range(3)]
    cluster, controllers = shadow(rs, *pods)
    (deleting,) = [d.summary["deleting"] for d in decide(controllers)]
    others = [p for p in pods if p.metadata.name not in deleting]
    assert len(deleting) == 2 and len(others) == 1
    gone = [others[0], next(p for p in pods if p.metadata.name == deleting[0])]  # upstream's pick: another pod
    controllers.observe([cluster.delete(p) for p in gone], NOW)
    assert controllers.expectations[KEY].fulfilled()
    assert actions(decide(controllers, timedelta(seconds=1)), DeletePod) == []


def test_each_pod_upstream_deletes_is_counted_once() -> None:
    """A graceful deletion shows as several events of one pod (deletionTimestamp set, more updates while it
    terminates, then DELETED); upstream's UID-tracking expectations count it once. Counted at each, the
    shadow's expectations were met early and it decided the last deletion again (seen on the real control
    plane: ReplicaSet/shadowed/web, kubus-only delete_pod twice)."""
    rs = web(2)
    pods = [owned_pod(f"pod{i}", rs).ready(NOW).build() for i in range(5)]
    cluster, controllers = shadow(rs, *pods)
    (deleting,) = [d.summary["deleting"] for d in decide(controllers)]
    assert len(deleting) == 3
    first, second = (next(p for p in pods if p.metadata.name == name) for name in deleting[:2])
    terminating = [owned_pod(p.metadata.name, rs).ready(NOW).deleting(NOW).rv("2").build() for p in (first, second)]
    controllers.observe([cluster.update(p) for p in terminating], NOW)
    again = owned_pod(first.metadata.name, rs).deleting(NOW).rv("3").build()  # the kubelet's update
    controllers.observe([cluster.update(again)], NOW)
    controllers.observe([cluster.delete(again)], NOW)
    assert not controllers.expectations[KEY].fulfilled()
    assert actions(decide(controllers, timedelta(seconds=1)), DeletePod) == []
    third = next(p for p in pods if p.metadata.name == deleting[2])
    controllers.observe([cluster.delete(third)], NOW)
    assert controllers.expectations[KEY].fulfilled()


def test_a_daemon_pod_upstream_deletes_is_counted_once() -> None:
    """A DaemonSet's pod deleted gracefully shows twice (deletionTimestamp set, then DELETED). Counted at each,
    the second event of a pod whose deletion had already met one expectation met the next one early, and the
    shadow decided that deletion again before upstream's showed (seen on the real control plane:
    DaemonSet/shadowed/surge, kubus-only delete_pod of node-3's old pod twice, where the audit log shows
    upstream sent one DELETE)."""
    ds = daemonset("foo").uid("ds-uid").build()
    revision = revision_of(ds)
    current = revision.metadata.labels["controller-revision-hash"]
    nodes = [node(f"node-{i}").ready().build() for i in range(2)]

    def daemon_pod(name: str, node_name: str, age: int) -> Pod:
        return ds_pod(name, ds, node_name, current).created(NOW - timedelta(minutes=age)).build()

    kept, extra = daemon_pod("a-old", "node-0", 10), daemon_pod("a-extra", "node-0", 5)
    cluster, controllers = shadow(*nodes, ds, revision, kept, extra, daemon_pod("b-old", "node-1", 10))
    assert [a.name for a in actions(decide(controllers), DeletePod)] == ["a-extra"]
    key = ds_controller_key("default", "foo")
    controllers.observe([cluster.update(ds_pod("a-extra", ds, "node-0", current).created(NOW - timedelta(minutes=5))
                                       .deleting(NOW).rv("2").build())], NOW)  # upstream deletes it
    assert controllers.expectations[key].fulfilled()
    controllers.observe([cluster.add(daemon_pod("b-extra", "node-1", 5))], NOW)  # another extra, on node-1
    assert [a.name for a in actions(decide(controllers, timedelta(seconds=1)), DeletePod)] == ["b-extra"]
    controllers.observe([cluster.delete(extra)], NOW)  # a-extra's last event: its deletion, counted already
    assert not controllers.expectations[key].fulfilled()
    assert actions(decide(controllers, timedelta(seconds=2)), DeletePod) == []


def test_what_upstream_never_did_is_given_up_after_the_window() -> None:
    """The shadow would create 3, upstream created 2: the shadow does not wait five minutes for the third
    (nor act on its imagined history) but syncs again one window later, from what upstream did."""
    rs = web(3)
    cluster, controllers = shadow(rs)
    decide(controllers)
    controllers.observe([cluster.add(owned_pod(f"up-{i}", rs).build()) for i in range(2)], NOW)
    assert actions(decide(controllers, WINDOW - timedelta(seconds=1)), CreatePods) == []  # still waiting
    (again,) = decide(controllers, WINDOW)
    assert again.trigger == SHADOW_REBASE_TRIGGER
    assert sum(len(c.pods) for c in actions([again], CreatePods)) == 1


def test_a_shadow_behind_the_events_does_not_give_up_on_its_clock_alone() -> None:
    """The window is the events' time, not only the shadow's: a shadow deciding on events observed before its
    window ran out (it is behind, a backlog under load) waits on, though its own clock has passed the window;
    an idle batch (no event: nothing left to read) or an event observed after the window gives up. Seen on the
    real control plane under load: a rebase 3.9 s after the decision, with upstream's deletion observed at
    1.2 s still unread, decided the deletion a second time (DaemonSet/shadowed/manual, kubus-only)."""
    rs = web(3)
    cluster, controllers = shadow(rs)
    decide(controllers)
    controllers.observe([cluster.add(owned_pod(f"up-{i}", rs).build()) for i in range(2)], NOW)
    late = NOW + WINDOW + timedelta(seconds=1)
    behind = controllers.sync_ready(late, format_micro_time(late), events_until=NOW + timedelta(seconds=1))
    assert actions(behind.decisions, CreatePods) == []  # still waiting for upstream's third create
    assert [d.trigger for d in behind.decisions if d.trigger == SHADOW_REBASE_TRIGGER] == []
    after = NOW + WINDOW + timedelta(seconds=2)
    (again,) = controllers.sync_ready(after, format_micro_time(after), events_until=NOW + WINDOW).decisions
    assert again.trigger == SHADOW_REBASE_TRIGGER


def test_a_create_before_the_nodes_untaint_is_held_until_a_node_event() -> None:
    """Upstream creates a daemon pod once a node's taint is removed; the pod (and the DaemonSet's status written
    for it) may show before the node's update. The hold ends with a node's event, not the owner's: released by
    the status write, the shadow decided on the node still tainted and would have deleted upstream's new pod
    (seen on the real control plane: DaemonSet/shadowed/agent, kubus-only delete_pod on kwok-node-1)."""
    ds = daemonset("foo").uid("ds-uid").build()
    revision = revision_of(ds)
    current = revision.metadata.labels["controller-revision-hash"]
    tainted = node("node-0").ready().taint("dedicated", "db", effect="NoSchedule").build()
    cluster, controllers = shadow(tainted, ds, revision)
    decide(controllers)
    key = ds_controller_key("default", "foo")
    controllers.observe([cluster.add(ds_pod("up-0", ds, "node-0", current).build())], NOW)  # before the untaint
    assert str(key) in controllers.held_early
    status = msgspec.structs.replace(ds, status=msgspec.structs.replace(ds.status, current_number_scheduled=1))
    controllers.observe([cluster.update(status)], NOW)  # upstream's status write for it
    assert actions(decide(controllers, timedelta(seconds=1)), DeletePod) == []
    assert str(key) in controllers.held_early
    controllers.observe([cluster.update(node("node-0").ready().build())], NOW)  # the untaint shows
    assert str(key) not in controllers.held_early
    assert actions(decide(controllers, timedelta(seconds=2)), DeletePod) == []


def test_a_shadow_waits_to_see_the_revision_it_would_have_written() -> None:
    """The shadow's revision write never lands; until upstream's shows (or REVISION_WRITE_WAIT passes), a sync
    would write it again. It is held back as an acting kubus is held back by its executor's result."""
    ds = daemonset("foo").uid("ds-uid").build()
    cluster, controllers = shadow(node("node-0").ready().build(), ds)
    key = ds_controller_key("default", "foo")
    controllers.queue.add(key)
    assert actions(decide(controllers), CreateControllerRevision)
    controllers.queue.add(key)  # another event of the DaemonSet before the revision's
    assert decide(controllers, timedelta(milliseconds=10)) == []
    controllers.observe([cluster.add(revision_of(ds))], NOW)
    later = decide(controllers, timedelta(milliseconds=20))
    assert later and not actions(later, CreateControllerRevision)


def upstreams_revision(ds: Any, hash_: str = "77ddf77d5b") -> Any:
    """The revision kube-controller-manager writes for ``ds``: the same data as kubus's, but named and labelled
    with upstream's own hash (ComputeHash over a go-spew dump, which kubus does not reproduce: see
    reconciler/core/daemonset/history.py)."""
    revision = revision_of(ds)
    revision.metadata.name = f"{ds.metadata.name}-{hash_}"
    revision.metadata.uid = f"uid-{revision.metadata.name}"
    revision.metadata.labels = {**revision.metadata.labels, "controller-revision-hash": hash_}
    return revision


def test_a_shadow_sees_upstreams_revision_of_the_same_data_at_once() -> None:
    """Upstream's revision has the data the shadow would have written under another name: the shadow stops
    waiting as soon as it shows, and goes on with upstream's hash (not after REVISION_WRITE_WAIT, deaf to every
    event of the DaemonSet meanwhile, as it did against the real kube-controller-manager)."""
    ds = daemonset("foo").uid("ds-uid").build()
    cluster, controllers = shadow(node("node-0").ready().build(), ds)
    key = ds_controller_key("default", "foo")
    controllers.queue.add(key)
    assert actions(decide(controllers), CreateControllerRevision)
    theirs = upstreams_revision(ds)
    assert theirs.metadata.name != revision_of(ds).metadata.name
    controllers.observe([cluster.add(theirs)], NOW)
    controllers.queue.add(key)
    later = decide(controllers, timedelta(milliseconds=20))
    assert later and not actions(later, CreateControllerRevision)
    (create,) = actions(later, CreatePods)
    assert msgspec.json.decode(create.pods[0].pod)["metadata"]["labels"]["controller-revision-hash"] == "77ddf77d5b"


def test_a_normal_reconciler_is_unchanged() -> None:
    """Without shadow mode the round and the status write are awaited, as before."""
    cluster = Cluster()
    controllers = Controllers(cluster.cache)
    controllers.observe([cluster.add(web(3))], NOW)
    decide(controllers)
    assert controllers.manage_pending == {KEY: 3} and KEY in controllers.status_in_flight
    assert Settings().start_state().get("shadow_window_us") is None
    assert Settings.from_start_state(SHADOW.start_state()) == SHADOW


# --- the acts -------------------------------------------------------------------------------------------------
def test_the_watch_shows_upstreams_acts() -> None:
    rs = web(2)
    cluster = Cluster(rs)
    created = owned_pod("up-0", rs).build()
    change, seq, msg_id = cluster.add(created)
    (act,) = upstream_acts(change, seq, msg_id, cluster.cache)
    assert (act.side, act.verb, act.controller_key, act.owner_uid, act.target, act.ref) == (
        UPSTREAM, CREATE_POD, str(KEY), rs.metadata.uid, "", msg_id)
    deleting = owned_pod("up-0", rs).deleting(NOW).rv("2").build()
    (act,) = upstream_acts(*cluster.update(deleting), cluster.cache)
    assert (act.verb, act.target) == (DELETE_POD, "default/up-0")
    assert upstream_acts(*cluster.delete(deleting), cluster.cache) == []  # its deletion was seen already
    orphan = orphan_pod("o", rs).build()
    cluster.add(orphan)
    (act,) = upstream_acts(*cluster.update(owned_pod("o", rs).rv("3").build()), cluster.cache)
    assert (act.verb, act.target) == (ADOPT_POD, "default/o")
    (act,) = upstream_acts(*cluster.update(orphan_pod("o", rs).rv("4").build()), cluster.cache)
    assert (act.verb, act.target) == (RELEASE_POD, "default/o")
    written = web(2)
    written.status.replicas = 2
    written.metadata.resource_version = "5"
    (act,) = upstream_acts(*cluster.update(written), cluster.cache)
    assert (act.verb, act.fields["replicas"]) == (UPDATE_STATUS, 2)
    (act,) = upstream_acts(*cluster.delete(written), cluster.cache)
    assert act.verb == OWNER_DELETED


def test_a_daemon_pod_is_keyed_by_node_and_revision() -> None:
    ds = daemonset("foo").uid("ds-uid").build()
    cluster, controllers = shadow(node("node-0").ready().build(), ds)
    revision = revision_of(ds)
    controllers.observe([cluster.add(revision)], NOW)
    decided = decide(controllers)
    acts = [a for d in decided for a in would_do(d, cluster.cache, NOW)]
    (create,) = [a for a in acts if a.verb == CREATE_POD]
    assert (create.target, create.hash) == ("node-0", revision.metadata.labels["controller-revision-hash"])
    created = msgspec.json.decode(actions(decided, CreatePods)[0].pods[0].pod)
    assert created["metadata"]["labels"]["controller-revision-hash"] == create.hash


def test_a_would_do_deletion_names_its_tie_class() -> None:
    """Three ready pods created at the same time rank equal but for their UID: any of them is upstream's pick."""
    rs = web(2)
    pods = [owned_pod(f"pod{i}", rs).ready(NOW).created(NOW).build() for i in range(3)]
    cluster, controllers = shadow(rs, *pods)
    decided = decide(controllers)
    (deletion,) = [a for d in decided for a in would_do(d, cluster.cache, NOW) if a.verb == DELETE_POD]
    assert deletion.ties == ("default/pod0", "default/pod1", "default/pod2")


def test_an_unowned_replicasets_tie_class_ranks_as_its_sync_does() -> None:
    """The tie class is the sync's own order with the UID taken out. An unowned ReplicaSet has no related pods
    (getIndirectlyRelatedPods: no controller, none), so every rank is 0 whatever node a pod is on. Ranked
    against its own pods instead, two pods on node-a outranked the one on node-b and the class split by node:
    upstream's pick of the node-b pod compared as a divergence (ReplicaSet/shadowed/web on the real control
    plane, in four of six runs)."""
    rs = web(2)
    placed = {"pod0": "node-a", "pod1": "node-a", "pod2": "node-b"}
    pods = [owned_pod(name, rs).ready(NOW).created(NOW).on_node(node_name).build()
            for name, node_name in placed.items()]
    cluster, controllers = shadow(rs, *pods)
    (deletion,) = [a for d in decide(controllers) for a in would_do(d, cluster.cache, NOW) if a.verb == DELETE_POD]
    assert deletion.ties == ("default/pod0", "default/pod1", "default/pod2")


def test_a_scale_down_pick_at_a_buckets_edge_names_the_pods_upstreams_clock_could_tie() -> None:
    """Ready 4 s and 5 s before the shadow decides: LogarithmicScaleDown's buckets differ (31 and 32) at its
    moment and are one 0.3 s later. Upstream decided the same scale-down on its own clock, within
    CLOCK_SLACK of the shadow's: either pod is its pick."""
    rs = web(1)
    pods = [owned_pod(f"pod{age}", rs).ready(NOW - timedelta(seconds=age)).created(NOW - timedelta(seconds=60))
            .build() for age in (4, 5)]
    cluster, controllers = shadow(rs, *pods)
    (deletion,) = [a for d in decide(controllers) for a in would_do(d, cluster.cache, NOW) if a.verb == DELETE_POD]
    assert (deletion.target, deletion.ties) == ("default/pod4", ("default/pod4", "default/pod5"))


def test_an_owned_replicasets_tie_class_ranks_by_its_related_pods() -> None:
    """A ReplicaSet with a controller (a Deployment's) ranks by the active pods of every ReplicaSet of that
    controller on the same node: a pod doubled up with a sibling's goes first, and is no tie of the others."""
    deployment = OwnerReference(api_version="apps/v1", kind="Deployment", name="web", uid="deploy-uid",
                                controller=True)
    rs = web(2)
    rs.metadata.owner_references.append(deployment)
    sibling = replicaset("web-old").uid("web-old-uid").selector({"app": "old"}).replicas(1).rv("1").build()
    sibling.metadata.owner_references.append(deployment)
    placed = {"pod0": "node-a", "pod1": "node-b", "pod2": "node-c"}
    pods = [owned_pod(name, rs).ready(NOW).created(NOW).on_node(node_name).build()
            for name, node_name in placed.items()]
    neighbour = owned_pod("old-0", sibling).labels(app="old").ready(NOW).created(NOW).on_node("node-b").build()
    cluster, controllers = shadow(rs, sibling, *pods, neighbour)
    decided = decide(controllers)
    (deletion,) = [a for d in decided if d.controller_key == str(KEY)
                   for a in would_do(d, cluster.cache, NOW) if a.verb == DELETE_POD]
    assert (deletion.target, deletion.ties) == ("default/pod1", ("default/pod1",))


@pytest.mark.parametrize("surge,new_ready,awaiting,expected", [
    (True, True, True, True),  # an old pod beside an available new one, the shadow awaiting its round
    (True, True, False, False),  # the shadow awaited nothing: it could have decided it
    (True, False, True, False),  # the new pod not Ready beside a Ready old one: upstream keeps the old one
    (False, True, True, False),  # no surge: a rolling step's deletion, the budget's to judge
])
def test_a_surge_deletion_while_the_shadow_awaits_its_round_is_awaited(surge: bool, new_ready: bool, awaiting: bool,
                                                                        expected: bool) -> None:
    builder = daemonset("foo").uid("ds-uid")
    ds = (builder.rolling_update(max_unavailable=0, max_surge=1) if surge else builder).build()
    revision = revision_of(ds)
    current = revision.metadata.labels["controller-revision-hash"]
    new = ds_pod("new-0", ds, "node-0", current)
    old = ds_pod("old-0", ds, "node-0", "old").build()
    cluster = Cluster(node("node-0").ready().build(), ds, revision, old,
                      (new if new_ready else new.ready(NOW, status="False")).build())
    key = str(ds_controller_key("default", "foo"))
    (act,) = upstream_acts(*cluster.delete(old), cluster.cache, awaiting={key} if awaiting else frozenset())
    assert (act.verb, act.target, act.awaited) == (DELETE_POD, "node-0", expected)


def _surging(ready_old: tuple[str, ...], unready_old: tuple[str, ...] = ()) -> tuple[Cluster, list[Decided]]:
    """A DaemonSet rolling out with maxSurge 1 over node-0..node-2, each with an old pod (Ready or not); the
    shadow's decision once the current revision shows."""
    ds = daemonset("foo").uid("ds-uid").rolling_update(max_unavailable=0, max_surge=1).build()
    nodes = [node(f"node-{i}").ready().build() for i in range(3)]
    old = [ds_pod(f"old-{n}", ds, n, "old").build() for n in ready_old]
    old += [ds_pod(f"old-{n}", ds, n, "old").ready(NOW, status="False").build() for n in unready_old]
    cluster, controllers = shadow(*nodes, ds, *old, revision_of(ds))
    return cluster, decide(controllers)


def test_a_surge_create_names_the_nodes_upstream_could_have_picked() -> None:
    """maxSurge: upstream starts the surge pod beside an old, available pod, walking the nodes in Go map order;
    every node of an old available pod and no new one is its tie class. kubus picks the first by name."""
    cluster, decided = _surging(("node-0", "node-1", "node-2"))
    (create,) = [a for d in decided for a in would_do(d, cluster.cache, NOW) if a.verb == CREATE_POD]
    assert (create.target, create.ties) == ("node-0", ("node-0", "node-1", "node-2"))


def test_a_surge_create_beside_an_unavailable_pod_is_no_tie() -> None:
    """An old pod that is not available gets its new pod whatever the budget (allowedNewNodes): no pick there; the
    surge budget's one pod goes beside one of the available old pods, in map order."""
    cluster, decided = _surging(("node-0", "node-1"), unready_old=("node-2",))
    creates = {a.target: a.ties for d in decided for a in would_do(d, cluster.cache, NOW) if a.verb == CREATE_POD}
    assert creates == {"node-2": (), "node-0": ("node-0", "node-1")}


def test_a_surge_deletion_is_no_tie() -> None:
    """With surge an old pod goes once the new pod beside it is available: that node, no other."""
    ds = daemonset("foo").uid("ds-uid").rolling_update(max_unavailable=0, max_surge=1).build()
    revision = revision_of(ds)
    new = revision.metadata.labels["controller-revision-hash"]
    nodes = [node(f"node-{i}").ready().build() for i in range(3)]
    pods = [ds_pod(f"old-{i}", ds, f"node-{i}", "old").build() for i in range(3)]
    cluster, controllers = shadow(*nodes, ds, *pods, ds_pod("new-0", ds, "node-0", new).build(), revision)
    deletions = [a for d in decide(controllers) for a in would_do(d, cluster.cache, NOW) if a.verb == DELETE_POD]
    assert [(a.target, a.ties) for a in deletions] == [("node-0", ("node-0",))]


def test_a_create_on_an_empty_node_is_no_tie() -> None:
    ds = daemonset("foo").uid("ds-uid").rolling_update(max_unavailable=0, max_surge=1).build()
    cluster, controllers = shadow(node("node-0").ready().build(), node("node-1").ready().build(), ds,
                                  revision_of(ds))
    decided = decide(controllers)
    creates = {a.target: a.ties for d in decided for a in would_do(d, cluster.cache, NOW) if a.verb == CREATE_POD}
    assert creates == {"node-0": (), "node-1": ()}


def test_a_revision_create_is_keyed_by_its_data() -> None:
    """Not by its name: upstream names a DaemonSet's revision with a hash kubus does not reproduce, so the
    shadow's would-do create and upstream's create of the same data are one act; another template is not."""
    ds = daemonset("foo").uid("ds-uid").build()
    cluster, controllers = shadow(node("node-0").ready().build(), ds)
    controllers.queue.add(ds_controller_key("default", "foo"))
    decided = decide(controllers)
    (act,) = [a for d in decided for a in would_do(d, cluster.cache, NOW) if a.verb == CREATE_REVISION]
    (theirs,) = upstream_acts(*cluster.add(upstreams_revision(ds)), cluster.cache)
    assert (theirs.verb, theirs.target) == (CREATE_REVISION, act.target)
    assert act.target.startswith("foo ")
    other = daemonset("foo").uid("ds-uid").image("other:2").build()
    (different,) = upstream_acts(*cluster.add(upstreams_revision(other, "5c6b7d8f9")), cluster.cache)
    assert different.target != act.target


def test_a_replicaset_pod_evicted_for_a_taint_is_not_the_controllers_act() -> None:
    """kube-controller-manager's taint-eviction controller deletes a ReplicaSet's pod from a NoExecute-tainted
    node, after marking it DisruptionTarget (DeletionByTaintManager); the ReplicaSet controller never deletes
    for a taint, so the deletion is not upstream's ReplicaSet act (the replacement it creates is)."""
    rs = web(2)
    cluster = Cluster(rs)
    running = owned_pod("up-0", rs).build()
    cluster.add(running)
    marked = owned_pod("up-0", rs).rv("2").build()
    marked.status.conditions = [PodCondition(type="DisruptionTarget", status="True",
                                             reason="DeletionByTaintManager")]
    cluster.update(marked)
    evicted = owned_pod("up-0", rs).deleting(NOW).rv("3").build()
    evicted.status.conditions = marked.status.conditions
    assert upstream_acts(*cluster.update(evicted), cluster.cache) == []
    deleted = owned_pod("up-1", rs).build()
    cluster.add(deleted)
    (act,) = upstream_acts(*cluster.update(owned_pod("up-1", rs).deleting(NOW).rv("5").build()), cluster.cache)
    assert act.verb == DELETE_POD  # without the mark it is the controller's


def test_a_daemon_pod_evicted_for_a_taint_is_still_the_daemonsets_act() -> None:
    """The DaemonSet controller deletes its pod from a node whose NoExecute taint it does not tolerate itself;
    which of it and the taint-eviction controller gets there first is a race, and either way it is the
    DaemonSet's decision."""
    ds = daemonset("foo").uid("ds-uid").build()
    cluster = Cluster(ds)
    pod_ = ds_pod("foo-a", ds, "node-0", "h").build()
    cluster.add(pod_)
    evicted = ds_pod("foo-a", ds, "node-0", "h").deleting(NOW).rv("3").build()
    evicted.status.conditions = [*evicted.status.conditions,
                                 PodCondition(type="DisruptionTarget", status="True", reason="DeletionByTaintManager")]
    (act,) = upstream_acts(*cluster.update(evicted), cluster.cache)
    assert (act.verb, act.target) == (DELETE_POD, "node-0")


def test_a_scale_ups_pods_seen_before_the_scale_hold_the_shadow_back() -> None:
    """The watch of Pods runs ahead of the ReplicaSets': upstream's pods for a scale from 3 to 5 may show before
    the scale. The shadow does not decide on a cluster where a three-replica ReplicaSet has four pods (it would
    delete one, which no controller does): it holds the ReplicaSet back until the ReplicaSet's own event, then
    decides on what it sees, and upstream's pod is recorded as seen before its cause."""
    rs = web(3)
    pods = [owned_pod(f"p{i}", rs).ready(NOW).build() for i in range(3)]
    cluster, controllers = shadow(rs, *pods)
    decide(controllers)
    fourth = owned_pod("up-3", rs).build()
    change = cluster.add(fourth)
    controllers.observe([change], NOW)
    assert decide(controllers, timedelta(milliseconds=10)) == []  # held: no deletion of a fourth pod
    (act,) = upstream_acts(change[0], change[1], change[2], cluster.cache, controllers.held_early)
    assert (act.verb, act.early) == (CREATE_POD, True)
    scaled = web(5)
    scaled.metadata.resource_version = "999"
    controllers.observe([cluster.update(scaled)], NOW)
    later = decide(controllers, timedelta(milliseconds=20))
    assert sum(len(c.pods) for c in actions(later, CreatePods)) == 1
    assert actions(later, DeletePod) == []


def test_an_early_hold_ends_after_the_window() -> None:
    """A cause that never shows holds the owner back one window at most; then it decides on what it sees."""
    rs = web(3)
    pods = [owned_pod(f"p{i}", rs).ready(NOW).build() for i in range(3)]
    cluster, controllers = shadow(rs, *pods)
    decide(controllers)
    controllers.observe([cluster.add(owned_pod("up-3", rs).build())], NOW)
    assert decide(controllers, timedelta(milliseconds=10)) == []
    assert controllers.next_ready_at() == NOW + WINDOW
    assert len(actions(decide(controllers, WINDOW), DeletePod)) == 1


def test_a_daemon_pod_seen_before_its_revision_is_early() -> None:
    """A DaemonSet's first pods may show before the revision upstream wrote first in the same sync."""
    ds = daemonset("foo").uid("ds-uid").build()
    cluster, controllers = shadow(node("node-0").ready().build(), node("node-1").ready().build(), ds)
    decide(controllers)  # would create the revision: held until it shows
    revision = upstreams_revision(ds)
    change = cluster.add(ds_pod("up-0", ds, "node-0", "77ddf77d5b").build())
    controllers.observe([change], NOW)
    (act,) = upstream_acts(change[0], change[1], change[2], cluster.cache, controllers.held_early)
    assert (act.verb, act.target, act.early) == (CREATE_POD, "node-0", True)
    controllers.observe([cluster.add(revision)], NOW)
    later = decide(controllers, timedelta(milliseconds=20))
    acts = [a for d in later for a in would_do(d, cluster.cache, NOW) if a.verb == CREATE_POD]
    assert [a.target for a in acts] == ["node-1"]


def test_a_decision_without_a_status_write_keeps_the_status_it_saw() -> None:
    """The shadow's status writes never land: once upstream's write shows the shadow computes the same status and
    writes nothing. That decision is recorded too (KEEP_STATUS, the status it saw), so the comparator knows the
    shadow's status as of its last decision, not only as of its last write."""
    rs = web(3)
    pods = [owned_pod(f"pod{i}", rs).ready(NOW).created(NOW).build() for i in range(3)]
    cluster, controllers = shadow(rs, *pods)
    first = decide(controllers)
    (write,) = actions(first, UpdateStatus)
    written = msgspec.json.decode(write.status)
    assert [a.verb for d in first for a in would_do(d, cluster.cache, NOW)] == [UPDATE_STATUS]
    upstream = msgspec.structs.replace(rs, status=msgspec.convert(written, type(rs.status)),
                                       metadata=msgspec.structs.replace(rs.metadata, resource_version="9"))
    controllers.observe([cluster.update(upstream)], NOW)
    second = decide(controllers, timedelta(seconds=1))
    assert actions(second, UpdateStatus) == []
    (kept,) = [a for d in second for a in would_do(d, cluster.cache, NOW)]
    assert (kept.verb, kept.fields, kept.seq) == (KEEP_STATUS, msgspec.to_builtins(upstream.status),
                                                  second[0].stream_seq)
