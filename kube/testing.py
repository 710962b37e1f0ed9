"""Chainable builders for tests: ``pod("p1").on_node("n1").owned_by(ds).ready(at=t).build()``.

Every method returns a new builder, so a partly built value can be shared:
``base = pod().ns("kube-system")`` then ``base.named("a")`` and ``base.named("b")``.
Defaults look like what a real API server returns (defaulted specs,
generation 1, a UID derived from kind/namespace/name), so controller code
sees the same shapes in tests as in production.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Generic, Self, TypeVar

from kube.apps import (
    ON_DELETE,
    ROLLING_UPDATE,
    DaemonSet,
    DaemonSetSpec,
    DaemonSetUpdateStrategy,
    ReplicaSet,
    ReplicaSetSpec,
    RollingUpdateDaemonSet,
)
from kube.core import (
    CONDITION_FALSE,
    CONDITION_TRUE,
    CONTAINER_RESTART_POLICY_ALWAYS,
    NODE_READY,
    POD_PENDING,
    POD_READY,
    Affinity,
    Container,
    ContainerStatus,
    Node,
    NodeCondition,
    Pod,
    PodCondition,
    PodSpec,
    Taint,
    Toleration,
)
from kube.meta import IntOrString, LabelSelector, ObjectMeta
from kube.nodeaffinity import replace_daemon_node_affinity
from kube.ownership import new_controller_ref
from kube.template import PodTemplateSpec
from kube.times import format_time

__all__ = ["daemonset", "node", "pod", "replicaset"]

T = TypeVar("T", Pod, Node, DaemonSet, ReplicaSet)
W = TypeVar("W", DaemonSet, ReplicaSet)


def _merged(mapping: Mapping[str, str] | None, extra: Mapping[str, str]) -> dict[str, str]:
    # Keys like "app.kubernetes.io/name" cannot be keyword arguments, hence the mapping.
    return {**(mapping or {}), **extra}


class _Builder(Generic[T]):
    def __init__(self, obj: T) -> None:
        self._obj: T = obj

    def _with(self, change: Callable[[T], object]) -> Self:
        obj: T = copy.deepcopy(self._obj)
        change(obj)
        return type(self)(obj)

    def build(self) -> T:
        obj: T = copy.deepcopy(self._obj)
        meta = obj.metadata
        if not meta.uid:
            meta.uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"kubus:{obj.kind}/{meta.namespace}/{meta.name}"))
        return obj

    def named(self, name: str) -> Self:
        return self._with(lambda o: setattr(o.metadata, "name", name))

    def ns(self, namespace: str) -> Self:
        return self._with(lambda o: setattr(o.metadata, "namespace", namespace))

    def uid(self, uid: str) -> Self:
        return self._with(lambda o: setattr(o.metadata, "uid", uid))

    def rv(self, resource_version: str) -> Self:
        return self._with(lambda o: setattr(o.metadata, "resource_version", resource_version))

    def generation(self, generation: int) -> Self:
        return self._with(lambda o: setattr(o.metadata, "generation", generation))

    def labels(self, mapping: Mapping[str, str] | None = None, /, **labels: str) -> Self:
        return self._with(lambda o: o.metadata.labels.update(_merged(mapping, labels)))

    def annotations(self, mapping: Mapping[str, str] | None = None, /, **annotations: str) -> Self:
        return self._with(lambda o: o.metadata.annotations.update(_merged(mapping, annotations)))

    def created(self, at: datetime) -> Self:
        return self._with(lambda o: setattr(o.metadata, "creation_timestamp", format_time(at)))

    def deleting(self, at: datetime) -> Self:
        return self._with(lambda o: setattr(o.metadata, "deletion_timestamp", format_time(at)))

    def finalizers(self, *finalizers: str) -> Self:
        return self._with(lambda o: o.metadata.finalizers.extend(finalizers))

    def owned_by(self, owner: DaemonSet | ReplicaSet | Pod | Node, *, controller: bool = True) -> Self:
        """Add an owner reference to ``owner`` (a built object, so its UID is set)."""
        ref = new_controller_ref(owner.metadata, owner.api_version, owner.kind)
        if not controller:
            ref.controller = None
            ref.block_owner_deletion = None
        return self._with(lambda o: o.metadata.owner_references.append(ref))


class PodBuilder(_Builder[Pod]):
    def on_node(self, node_name: str) -> Self:
        return self._with(lambda o: setattr(o.spec, "node_name", node_name))

    def target_node(self, node_name: str) -> Self:
        """Pin an unscheduled pod the DaemonSet way: a ``metadata.name In [node]`` matchField."""
        return self._with(
            lambda o: setattr(o.spec, "affinity", replace_daemon_node_affinity(o.spec.affinity, node_name))
        )

    def phase(self, phase: str) -> Self:
        return self._with(lambda o: setattr(o.status, "phase", phase))

    def ready(self, at: datetime | None = None, *, status: str = CONDITION_TRUE) -> Self:
        """Set the Ready condition (replacing any), with ``lastTransitionTime`` = ``at`` when given."""
        condition = PodCondition(
            type=POD_READY, status=status, last_transition_time=format_time(at) if at is not None else None
        )

        def change(p: Pod) -> None:
            p.status.conditions = [c for c in p.status.conditions if c.type != POD_READY] + [condition]

        return self._with(change)

    def not_ready(self, at: datetime | None = None) -> Self:
        return self.ready(at, status=CONDITION_FALSE)

    def restarts(self, count: int) -> Self:
        def change(p: Pod) -> None:
            names = [c.name for c in p.spec.containers] or ["main"]
            p.status.container_statuses = [ContainerStatus(name=n, restart_count=count) for n in names]

        return self._with(change)

    def container(self, name: str, image: str) -> Self:
        return self._with(lambda o: o.spec.containers.append(Container(name=name, image=image)))

    def init_container(self, name: str, *, restart_policy: str | None = None, restarts: int = 0,
                       image: str = "busybox") -> Self:
        """Add an init container and its status with ``restarts`` (``restart_policy="Always"``: a sidecar)."""

        def change(p: Pod) -> None:
            p.spec.init_containers.append(Container(name=name, image=image, restart_policy=restart_policy))
            p.status.init_container_statuses.append(ContainerStatus(name=name, restart_count=restarts))

        return self._with(change)

    def sidecar(self, name: str, restarts: int = 0) -> Self:
        """A restartable init container (``restartPolicy: Always``) that restarted ``restarts`` times."""
        return self.init_container(name, restart_policy=CONTAINER_RESTART_POLICY_ALWAYS, restarts=restarts)

    def node_selector(self, mapping: Mapping[str, str] | None = None, /, **labels: str) -> Self:
        return self._with(lambda o: o.spec.node_selector.update(_merged(mapping, labels)))

    def tolerations(self, *tolerations: Toleration) -> Self:
        return self._with(lambda o: o.spec.tolerations.extend(tolerations))

    def generate_name(self, prefix: str) -> Self:
        return self._with(lambda o: setattr(o.metadata, "generate_name", prefix))


class NodeBuilder(_Builder[Node]):
    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> Self:
        return self._with(lambda o: o.spec.taints.append(Taint(key=key, value=value, effect=effect)))

    def unschedulable(self, flag: bool = True) -> Self:
        return self._with(lambda o: setattr(o.spec, "unschedulable", flag))

    def condition(self, condition_type: str, status: str, at: datetime | None = None) -> Self:
        condition = NodeCondition(
            type=condition_type,
            status=status,
            last_transition_time=format_time(at) if at is not None else None,
        )

        def change(n: Node) -> None:
            n.status.conditions = [c for c in n.status.conditions if c.type != condition_type] + [condition]

        return self._with(change)

    def ready(self, status: str = CONDITION_TRUE, at: datetime | None = None) -> Self:
        return self.condition(NODE_READY, status, at)

    def allocatable(self, mapping: Mapping[str, str] | None = None, /, **resources: str) -> Self:
        return self._with(lambda o: o.status.allocatable.update(_merged(mapping, resources)))


class _WorkloadBuilder(_Builder[W]):
    def selector(self, mapping: Mapping[str, str] | None = None, /, **labels: str) -> Self:
        """Select these labels and stamp them on the template, as a user's manifest would."""
        wanted = _merged(mapping, labels)

        def change(o: W) -> None:
            o.spec.selector = LabelSelector(match_labels=dict(wanted))
            o.spec.template.metadata.labels = dict(wanted)

        return self._with(change)

    def raw_selector(self, selector: LabelSelector | None) -> Self:
        """Set ``spec.selector`` alone (e.g. None, or one the template does not match)."""
        return self._with(lambda o: setattr(o.spec, "selector", selector))

    def template_labels(self, mapping: Mapping[str, str] | None = None, /, **labels: str) -> Self:
        return self._with(lambda o: o.spec.template.metadata.labels.update(_merged(mapping, labels)))

    def template(self, template: PodTemplateSpec) -> Self:
        return self._with(lambda o: setattr(o.spec, "template", template.copy()))

    def image(self, image: str) -> Self:
        def change(o: W) -> None:
            for container in o.spec.template.spec.containers:
                container.image = image

        return self._with(change)

    def node_selector(self, mapping: Mapping[str, str] | None = None, /, **labels: str) -> Self:
        return self._with(lambda o: o.spec.template.spec.node_selector.update(_merged(mapping, labels)))

    def tolerations(self, *tolerations: Toleration) -> Self:
        return self._with(lambda o: o.spec.template.spec.tolerations.extend(tolerations))

    def affinity(self, affinity: Affinity | None) -> Self:
        return self._with(lambda o: setattr(o.spec.template.spec, "affinity", affinity))

    def min_ready_seconds(self, seconds: int) -> Self:
        return self._with(lambda o: setattr(o.spec, "min_ready_seconds", seconds))

    def observed_generation(self, generation: int) -> Self:
        return self._with(lambda o: setattr(o.status, "observed_generation", generation))


class DaemonSetBuilder(_WorkloadBuilder[DaemonSet]):
    def host_network(self, flag: bool = True) -> Self:
        return self._with(lambda o: setattr(o.spec.template.spec, "host_network", flag))

    def rolling_update(self, max_unavailable: IntOrString | None = 1, max_surge: IntOrString | None = 0) -> Self:
        strategy = DaemonSetUpdateStrategy(
            type=ROLLING_UPDATE,
            rolling_update=RollingUpdateDaemonSet(max_unavailable=max_unavailable, max_surge=max_surge),
        )
        return self._with(lambda o: setattr(o.spec, "update_strategy", strategy))

    def on_delete(self) -> Self:
        return self._with(lambda o: setattr(o.spec, "update_strategy", DaemonSetUpdateStrategy(type=ON_DELETE)))

    def revision_history_limit(self, limit: int | None) -> Self:
        return self._with(lambda o: setattr(o.spec, "revision_history_limit", limit))

    def collision_count(self, count: int | None) -> Self:
        return self._with(lambda o: setattr(o.status, "collision_count", count))


class ReplicaSetBuilder(_WorkloadBuilder[ReplicaSet]):
    def replicas(self, count: int | None) -> Self:
        return self._with(lambda o: setattr(o.spec, "replicas", count))

    def status(self, *, replicas: int = 0, ready: int = 0, available: int = 0, fully_labeled: int = 0) -> Self:
        def change(o: ReplicaSet) -> None:
            o.status.replicas = replicas
            o.status.ready_replicas = ready
            o.status.available_replicas = available
            o.status.fully_labeled_replicas = fully_labeled

        return self._with(change)


def _template(labels: Mapping[str, str]) -> PodTemplateSpec:
    return PodTemplateSpec(
        metadata=ObjectMeta(labels=dict(labels)),
        spec=PodSpec(containers=[Container(name="main", image="busybox")], restart_policy="Always"),
    )


def pod(name: str = "pod") -> PodBuilder:
    """A Pending pod in ``default`` with one container."""
    return PodBuilder(
        Pod(
            metadata=ObjectMeta(name=name, namespace="default"),
            spec=PodSpec(containers=[Container(name="main", image="busybox")]),
        )
    ).phase(POD_PENDING)


def node(name: str = "node") -> NodeBuilder:
    """A node with a ``kubernetes.io/hostname`` label and no conditions or taints."""
    return NodeBuilder(Node(metadata=ObjectMeta(name=name, labels={"kubernetes.io/hostname": name})))


def daemonset(name: str = "ds") -> DaemonSetBuilder:
    """A defaulted DaemonSet in ``default`` selecting ``app=<name>``: RollingUpdate 1/0, history 10."""
    spec = DaemonSetSpec(
        selector=LabelSelector(match_labels={"app": name}),
        template=_template({"app": name}),
        update_strategy=DaemonSetUpdateStrategy(
            type=ROLLING_UPDATE, rolling_update=RollingUpdateDaemonSet(max_unavailable=1, max_surge=0)
        ),
        revision_history_limit=10,
    )
    return DaemonSetBuilder(DaemonSet(metadata=ObjectMeta(name=name, namespace="default", generation=1), spec=spec))


def replicaset(name: str = "rs") -> ReplicaSetBuilder:
    """A ReplicaSet in ``default`` selecting ``app=<name>`` with one replica."""
    spec = ReplicaSetSpec(
        replicas=1,
        selector=LabelSelector(match_labels={"app": name}),
        template=_template({"app": name}),
    )
    return ReplicaSetBuilder(ReplicaSet(metadata=ObjectMeta(name=name, namespace="default", generation=1), spec=spec))
