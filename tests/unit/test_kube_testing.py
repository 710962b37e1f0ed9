"""The test builders produce API-shaped objects and never share state between builds."""

from __future__ import annotations

from datetime import UTC, datetime

from kube import codec
from kube.apps import DaemonSet, ReplicaSet
from kube.core import Node, Pod, Toleration
from kube.labels import selector_from_label_selector
from kube.nodeaffinity import get_target_node_name
from kube.ownership import get_controller_of
from kube.pods import is_pod_available, is_pod_ready
from kube.testing import daemonset, node, pod, replicaset

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def test_pod_builder_chain() -> None:
    """The chain from the style guide builds a running, ready, owned pod on a node."""
    ds = daemonset("fluentd").build()
    p = (
        pod("p1")
        .ns("kube-system")
        .on_node("n1")
        .labels(app="fluentd")
        .owned_by(ds)
        .ready(at=T0)
        .phase("Running")
        .build()
    )
    assert (p.metadata.name, p.metadata.namespace, p.spec.node_name) == ("p1", "kube-system", "n1")
    assert p.status.phase == "Running"
    assert is_pod_ready(p)
    assert is_pod_available(p, 0, T0)
    ref = get_controller_of(p.metadata)
    assert ref is not None
    assert (ref.kind, ref.name, ref.uid, ref.api_version) == ("DaemonSet", "fluentd", ds.metadata.uid, "apps/v1")
    assert codec.decode(codec.encode(p), Pod) == p


def test_builders_are_immutable_and_reusable() -> None:
    """Each call returns a new builder; building twice gives equal, unshared objects."""
    base = pod().ns("prod").labels(app="x")
    a, b = base.named("a").build(), base.named("b").labels(extra="1").build()
    assert a.metadata.labels == {"app": "x"}
    assert b.metadata.labels == {"app": "x", "extra": "1"}
    first, second = base.build(), base.build()
    first.metadata.labels["mutated"] = "yes"
    assert "mutated" not in second.metadata.labels


def test_uids_are_deterministic_and_distinct() -> None:
    """UIDs derive from kind, namespace and name unless set."""
    assert pod("a").build().metadata.uid == pod("a").build().metadata.uid
    assert pod("a").build().metadata.uid != pod("b").build().metadata.uid
    assert pod("a").build().metadata.uid != node("a").build().metadata.uid
    assert pod("a").uid("explicit").build().metadata.uid == "explicit"


def test_labels_accept_keys_that_are_not_identifiers() -> None:
    """A mapping argument allows prefixed keys."""
    p = pod().labels({"app.kubernetes.io/name": "web"}, tier="front").build()
    assert p.metadata.labels == {"app.kubernetes.io/name": "web", "tier": "front"}


def test_pod_builder_details() -> None:
    """Restarts, tolerations, node selector, target node and deletion."""
    p = (
        pod()
        .restarts(3)
        .tolerations(Toleration(operator="Exists"))
        .node_selector(zone="a")
        .target_node("n2")
        .deleting(T0)
        .created(T0)
        .generate_name("ds-")
        .build()
    )
    assert p.status.container_statuses[0].restart_count == 3
    assert p.spec.tolerations == [Toleration(operator="Exists")]
    assert p.spec.node_selector == {"zone": "a"}
    assert get_target_node_name(p) == "n2"
    assert p.metadata.deletion_timestamp == p.metadata.creation_timestamp == "2024-05-01T12:00:00Z"
    assert p.metadata.generate_name == "ds-"
    assert pod().not_ready(at=T0).ready(at=T0).build().status.conditions[0].status == "True"


def test_node_builder() -> None:
    """Taints, cordon and conditions."""
    n = node("n1").labels(zone="a").taint("dedicated", "db", "NoExecute").unschedulable().ready().build()
    assert n.metadata.labels == {"kubernetes.io/hostname": "n1", "zone": "a"}
    assert n.spec.taints[0].key == "dedicated"
    assert n.spec.taints[0].effect == "NoExecute"
    assert n.spec.unschedulable
    assert [(c.type, c.status) for c in n.status.conditions] == [("Ready", "True")]
    assert node().ready("False").ready().build().status.conditions[0].status == "True"
    assert codec.decode(codec.encode(n), Node) == n


def test_daemonset_builder_defaults_like_the_api_server() -> None:
    """RollingUpdate with maxUnavailable 1 and maxSurge 0, history 10, template matching the selector."""
    ds = daemonset("fluentd").build()
    assert ds.spec.update_strategy.type == "RollingUpdate"
    rolling = ds.spec.update_strategy.rolling_update
    assert rolling is not None
    assert (rolling.max_unavailable, rolling.max_surge) == (1, 0)
    assert ds.spec.revision_history_limit == 10
    assert ds.metadata.generation == 1
    assert selector_from_label_selector(ds.spec.selector).matches(ds.spec.template.metadata.labels)
    assert codec.decode(codec.encode(ds), DaemonSet) == ds


def test_daemonset_builder_options() -> None:
    """Selector, image, strategy and status setters."""
    ds = (
        daemonset()
        .selector(app="x")
        .template_labels(extra="1")
        .image("img:2")
        .host_network()
        .rolling_update("10%", "20%")
        .min_ready_seconds(5)
        .collision_count(2)
        .observed_generation(1)
        .build()
    )
    assert ds.spec.selector is not None
    assert ds.spec.selector.match_labels == {"app": "x"}
    assert ds.spec.template.metadata.labels == {"app": "x", "extra": "1"}
    assert ds.spec.template.spec.containers[0].image == "img:2"
    assert ds.spec.template.spec.host_network
    assert ds.spec.update_strategy.rolling_update is not None
    assert ds.spec.update_strategy.rolling_update.max_surge == "20%"
    assert (ds.spec.min_ready_seconds, ds.status.collision_count, ds.status.observed_generation) == (5, 2, 1)
    assert daemonset().on_delete().build().spec.update_strategy.rolling_update is None
    assert daemonset().raw_selector(None).build().spec.selector is None


def test_replicaset_builder() -> None:
    """Replicas, selector and status counts."""
    rs = replicaset("web").replicas(3).selector(app="web", tier="front").status(replicas=2, ready=1).build()
    assert rs.spec.replicas == 3
    assert rs.spec.template.metadata.labels == {"app": "web", "tier": "front"}
    assert (rs.status.replicas, rs.status.ready_replicas) == (2, 1)
    assert codec.decode(codec.encode(rs), ReplicaSet) == rs


def test_template_is_copied_into_the_builder() -> None:
    """Changing a template after handing it to a builder does not change what it builds."""
    template = daemonset().build().spec.template
    builder = replicaset().template(template)
    template.spec.containers[0].image = "changed"
    assert builder.build().spec.template.spec.containers[0].image == "busybox"
