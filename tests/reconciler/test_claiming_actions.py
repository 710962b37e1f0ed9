"""The creates and deletes of a sync that claims orphans wait on its claim (`after_claim`): upstream's ClaimPods
fails the whole sync when canAdopt's fresh read finds the controller gone or being deleted, so that sync creates
and deletes nothing (replica_set_test.go's TestDoNotAdoptOrCreateIfBeingDeletedRace, daemon_controller_test.go's
TestDontDoAnythingIfBeingDeletedRace). The executor makes that read (tests/executor/test_adoption.py); the plan
says which actions wait on it."""

from __future__ import annotations

from typing import Any

from kube.testing import daemonset, node, pod, replicaset
from messages.actions import CreatePods, DeletePod, OwnerCheck, PatchPod
from reconciler.core.controllers import Controllers
from tests.reconciler.builders import NOW, Cluster, orphan_pod, owned_pod
from tests.reconciler.test_controllers import of_type, only, sync
from tests.reconciler.test_daemonset_sync import revision_of


def _decide(*objects: Any) -> list[Any]:
    cluster = Cluster()
    controllers = Controllers(cluster.cache)
    controllers.observe([cluster.add(obj) for obj in objects], NOW)
    return only(sync(controllers)).actions


def test_a_replicaset_claiming_an_orphan_creates_only_after_its_claim() -> None:
    rs = replicaset("web").selector({"app": "web"}).replicas(3).rv("1").build()
    actions = _decide(rs, orphan_pod("stray", rs).build())
    [adopt] = of_type(actions, PatchPod)
    [create] = of_type(actions, CreatePods)
    check = OwnerCheck(kind="ReplicaSet", name="web", uid=rs.metadata.uid)
    assert adopt.owner_check == check
    assert create.after_claim == check and len(create.pods) == 2


def test_a_replicaset_claiming_an_orphan_deletes_its_own_pods_only_after_its_claim() -> None:
    rs = replicaset("web").selector({"app": "web"}).replicas(1).rv("1").build()
    owned = [owned_pod(f"own-{i}", rs).build() for i in range(2)]
    actions = _decide(rs, *owned, orphan_pod("stray", rs).build())
    deletes = of_type(actions, DeletePod)
    assert len(deletes) == 2
    for delete in deletes:  # an orphan it deletes is adopted first by the delete itself; its own wait on the claim
        assert (delete.adopt_first is None) == (delete.after_claim is not None), delete


def test_a_replicaset_that_claims_nothing_creates_and_deletes_at_once() -> None:
    rs = replicaset("web").selector({"app": "web"}).replicas(2).rv("1").build()
    [create] = of_type(_decide(rs), CreatePods)
    assert create.after_claim is None
    actions = _decide(rs, *[owned_pod(f"own-{i}", rs).build() for i in range(3)])
    assert [d.after_claim for d in of_type(actions, DeletePod)] == [None]


def test_a_daemonset_claiming_an_orphan_creates_only_after_its_claim() -> None:
    ds = daemonset("agent").selector({"app": "agent"}).rv("1").build()
    nodes = [node(f"node-{i}").ready().build() for i in range(3)]
    stray = pod("stray").labels({"app": "agent"}).on_node("node-0").build()
    actions = _decide(*nodes, ds, revision_of(ds), stray)
    [create] = of_type(actions, CreatePods)
    assert create.after_claim == OwnerCheck(kind="DaemonSet", name="agent", uid=ds.metadata.uid)
    assert len(create.pods) == 2
    alone = _decide(*nodes, ds, revision_of(ds))
    assert [c.after_claim for c in of_type(alone, CreatePods)] == [None]
