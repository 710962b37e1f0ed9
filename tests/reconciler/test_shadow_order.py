"""What the shadow counts as an act seen before its cause (reconciler.core.shadow_order), as a table: the watch
of Pods runs ahead of the watches of ReplicaSets, DaemonSets and ControllerRevisions (docs/shadow.md, "The order
of the watch across kinds")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from kube.core import PodCondition
from kube.testing import daemonset, node
from messages.keys import ControllerKey, ControllerKind
from reconciler.core.shadow_order import early
from tests.reconciler.builders import NOW, Cluster, owned_pod
from tests.reconciler.test_controllers import web
from tests.reconciler.test_daemonset_sync import ds_pod, hash_of, revision_of

RS_KEY = ControllerKey(ControllerKind.REPLICA_SET, "default", "web")
DS_KEY = ControllerKey(ControllerKind.DAEMON_SET, "default", "foo")


def _rs_created(replicas: int, before: int) -> tuple[Cluster, Any]:
    rs = web(replicas)
    cluster = Cluster(rs, *[owned_pod(f"p{i}", rs).ready(NOW).build() for i in range(before)])
    return cluster, cluster.add(owned_pod("new", rs).build())[0]


def rs_create_within_replicas() -> tuple[Cluster, Any]:
    return _rs_created(3, 2)


def rs_create_beyond_replicas() -> tuple[Cluster, Any]:
    return _rs_created(3, 3)  # the fourth pod of a three-replica ReplicaSet: upstream saw a scale-up


def rs_deletion() -> tuple[Cluster, Any]:
    rs = web(1)
    pods = [owned_pod(f"p{i}", rs).ready(NOW).build() for i in range(2)]
    cluster = Cluster(rs, *pods)
    return cluster, cluster.delete(pods[0])[0]


def rs_deletion_below_replicas() -> tuple[Cluster, Any]:
    rs = web(2)
    pods = [owned_pod(f"p{i}", rs).ready(NOW).build() for i in range(2)]
    cluster = Cluster(rs, *pods)
    return cluster, cluster.delete(pods[0])[0]  # a scale-down upstream saw, or a pod deleted by hand


def rs_deletion_for_a_disruption() -> tuple[Cluster, Any]:
    rs = web(2)
    pods = [owned_pod(f"p{i}", rs).ready(NOW).build() for i in range(2)]
    cluster = Cluster(rs, *pods)
    pod = msgspec.structs.replace(pods[0], status=msgspec.structs.replace(pods[0].status, conditions=[
        *pods[0].status.conditions, PodCondition(type="DisruptionTarget", status="True")]))
    cluster.update(pod)
    return cluster, cluster.delete(pod)[0]


def revision_of_the_template() -> tuple[Cluster, Any]:
    ds = daemonset("foo").uid("ds-uid").build()
    cluster = Cluster(ds)
    return cluster, cluster.add(revision_of(ds))[0]


def revision_of_another_template_raised() -> tuple[Cluster, Any]:
    """A rollback: upstream raises the old revision's number before the shadow sees the old template back."""
    old = daemonset("foo").uid("ds-uid").build()
    ds = daemonset("foo").uid("ds-uid").image("other:2").build()
    previous = revision_of(old, 1)
    cluster = Cluster(ds, previous, revision_of(ds, 2))
    raised = msgspec.structs.replace(previous, revision=3)
    raised.metadata.resource_version = "99"
    return cluster, cluster.update(raised)[0]


def _ds(with_revision: bool = True) -> tuple[Cluster, Any, str]:
    ds = daemonset("foo").uid("ds-uid").build()
    revision = revision_of(ds)
    cluster = Cluster(ds, *([revision] if with_revision else []))
    return cluster, ds, hash_of(revision)


def ds_create_of_the_current_revision() -> tuple[Cluster, Any]:
    cluster, ds, current = _ds()
    return cluster, cluster.add(ds_pod("p", ds, "node-0", current).build())[0]


def ds_create_before_any_revision() -> tuple[Cluster, Any]:
    cluster, ds, current = _ds(with_revision=False)
    return cluster, cluster.add(ds_pod("p", ds, "node-0", current).build())[0]


def ds_create_of_an_unknown_revision() -> tuple[Cluster, Any]:
    cluster, ds, _ = _ds()
    return cluster, cluster.add(ds_pod("p", ds, "node-0", "unseen").build())[0]


def _ds_deleted(hash_of_pod: Callable[[str], str], ready: bool = True, disrupted: bool = False,
                with_revision: bool = True) -> tuple[Cluster, Any]:
    cluster, ds, current = _ds(with_revision)
    builder = ds_pod("p", ds, "node-0", hash_of_pod(current))
    if not ready:
        builder = builder.ready(NOW, status="False")
    pod = builder.build()
    cluster.add(pod)
    if disrupted:
        pod = msgspec.structs.replace(pod, status=msgspec.structs.replace(pod.status, conditions=[
            *pod.status.conditions, PodCondition(type="DisruptionTarget", status="True")]))
        cluster.update(pod)
    return cluster, cluster.delete(pod)[0]


def _ds_evicted_by_taint(node_taint: str | None) -> tuple[Cluster, Any]:
    """An old pod of an OnDelete DaemonSet deleted by the taint-eviction controller (DisruptionTarget, reason
    DeletionByTaintManager) while its node, as the cache has it, carries `node_taint` (NoExecute) or none."""
    ds = daemonset("foo").uid("ds-uid").on_delete().build()
    builder = node("node-1").ready()
    if node_taint is not None:
        builder = builder.taint(node_taint, "db", effect="NoExecute")
    cluster = Cluster(ds, revision_of(ds), builder.build())
    pod = ds_pod("p", ds, "node-1", "old").build()
    cluster.add(pod)
    pod = msgspec.structs.replace(pod, status=msgspec.structs.replace(pod.status, conditions=[
        *pod.status.conditions, PodCondition(type="DisruptionTarget", status="True", reason="DeletionByTaintManager")]))
    cluster.update(pod)
    return cluster, cluster.delete(pod)[0]


def _on_delete_deleted(node_taint: str | None = None, *, on_node: bool = True, failed: bool = False,
                       rolling: bool = False) -> tuple[Cluster, Any]:
    """An old Ready pod of an OnDelete (or, `rolling`, a RollingUpdate) DaemonSet deleted without a mark of why,
    its node in the cache with `node_taint` (NoExecute) or none (`on_node` False: the node not in the cache)."""
    builder = daemonset("foo").uid("ds-uid")
    ds = (builder if rolling else builder.on_delete()).build()
    nodes = []
    if on_node:
        node_builder = node("node-1").ready()
        if node_taint is not None:
            node_builder = node_builder.taint(node_taint, "db", effect="NoExecute")
        nodes.append(node_builder.build())
    cluster = Cluster(ds, revision_of(ds), *nodes)
    pod_builder = ds_pod("p", ds, "node-1", "old")
    pod = (pod_builder.phase("Failed") if failed else pod_builder).build()
    cluster.add(pod)
    return cluster, cluster.delete(pod)[0]


def _extra_deleted(on_delete: bool) -> tuple[Cluster, Any]:
    """The newer of two Ready pods of the current revision on one node deleted (podsShouldBeOnNode's excess)."""
    builder = daemonset("foo").uid("ds-uid")
    ds = (builder.on_delete() if on_delete else builder).build()
    revision = revision_of(ds)
    cluster = Cluster(ds, revision, node("node-0").ready().build())
    cluster.add(ds_pod("kept", ds, "node-0", hash_of(revision)).build())
    extra = ds_pod("extra", ds, "node-0", hash_of(revision)).build()
    cluster.add(extra)
    return cluster, cluster.delete(extra)[0]


def _created_on(taint: str | None) -> tuple[Cluster, Any]:
    """A pod of the current revision created on node-1, which the cache has tainted `taint` (NoSchedule) or not."""
    ds = daemonset("foo").uid("ds-uid").build()
    revision = revision_of(ds)
    builder = node("node-1").ready()
    if taint is not None:
        builder = builder.taint(taint, "db", effect="NoSchedule")
    cluster = Cluster(ds, revision, builder.build())
    return cluster, cluster.add(ds_pod("p", ds, "node-1", hash_of(revision)).build())[0]


CASES: dict[str, tuple[Callable[[], tuple[Cluster, Any]], ControllerKey | None]] = {
    "a ReplicaSet's create within its replicas": (rs_create_within_replicas, None),
    "a ReplicaSet's create beyond its replicas": (rs_create_beyond_replicas, RS_KEY),
    "a ReplicaSet's deletion": (rs_deletion, None),
    "a ReplicaSet's deletion below its replicas": (rs_deletion_below_replicas, RS_KEY),
    "a ReplicaSet's pod deleted for a disruption": (rs_deletion_for_a_disruption, None),
    "a revision of the DaemonSet's template": (revision_of_the_template, None),
    "a revision of another template raised": (revision_of_another_template_raised, DS_KEY),
    "a DaemonSet's create of its current revision": (ds_create_of_the_current_revision, None),
    "a DaemonSet's create before its template's revision": (ds_create_before_any_revision, DS_KEY),
    "a DaemonSet's create of an unknown revision": (ds_create_of_an_unknown_revision, DS_KEY),
    # seen on the real control plane: upstream created DaemonSet/shadowed/agent's pod on kwok-node-1 once the taint
    # scenario's taint was removed, and the pod showed before the node's update
    "a DaemonSet's create on a node the cache has tainted": (lambda: _created_on("dedicated"), DS_KEY),
    "a DaemonSet's create on a node that runs it": (lambda: _created_on(None), None),
    "an old pod deleted (a rolling step)": (lambda: _ds_deleted(lambda _: "old"), None),
    "a current Ready pod deleted": (lambda: _ds_deleted(lambda h: h), DS_KEY),
    "a current pod not Ready deleted": (lambda: _ds_deleted(lambda h: h, ready=False), None),
    "a current pod deleted for a disruption": (lambda: _ds_deleted(lambda h: h, disrupted=True), None),
    # seen on the real control plane: the taint scenario's NoExecute taint evicted the OnDelete DaemonSet's pod,
    # and the pod's deletion showed before the node's taint, its cause
    "a pod evicted for a taint the node does not show yet": (lambda: _ds_evicted_by_taint(None), DS_KEY),
    "a pod evicted for the node's NoExecute taint": (lambda: _ds_evicted_by_taint("dedicated"), None),
    # seen on the real control plane: the DaemonSet controller deleted the OnDelete DaemonSet's pod from the node
    # the taint scenario tainted NoExecute before the taint-eviction controller marked it, and the deletion showed
    # before the taint. OnDelete never deletes a pod for an update: a node that still runs it is a cause not seen
    "an OnDelete pod deleted from a node that still runs it": (lambda: _on_delete_deleted(), DS_KEY),
    "an OnDelete pod deleted from a node tainted NoExecute": (lambda: _on_delete_deleted("dedicated"), None),
    "an OnDelete pod deleted from a node gone": (lambda: _on_delete_deleted(on_node=False), None),
    "an OnDelete pod that failed, deleted": (lambda: _on_delete_deleted(failed=True), None),
    "a RollingUpdate old pod deleted (a rolling step)": (lambda: _on_delete_deleted(rolling=True), None),
    "a current Ready pod deleted beside another on its node": (lambda: _extra_deleted(on_delete=False), None),
    "an OnDelete pod deleted beside another on its node": (lambda: _extra_deleted(on_delete=True), None),
    "a deletion before the template's revision": (lambda: _ds_deleted(lambda _: "old", with_revision=False),
                                                  DS_KEY),
}


@pytest.mark.parametrize("build,expected", list(CASES.values()), ids=list(CASES))
def test_early(build: Callable[[], tuple[Cluster, Any]], expected: ControllerKey | None) -> None:
    cluster, change = build()
    assert early(change, cluster.cache) == expected
