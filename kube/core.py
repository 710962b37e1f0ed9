"""core/v1 kinds kubus reads or writes: Node, Pod, Event, and their parts.

Only the fields the controllers and the simulator use are modelled; decoding
ignores the rest. A Pod decoded here is therefore a lossy view: pod bodies
that must keep every user-written field are built from a
``kube.template.PodTemplateSpec``, which is lossless.
"""

from __future__ import annotations

from typing import Final

import msgspec

from kube.meta import Model, ObjectMeta, ObjectReference, Resource

__all__ = [
    "Affinity",
    "Container",
    "ContainerStatus",
    "Event",
    "EventSource",
    "Node",
    "NodeAffinity",
    "NodeCondition",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeSpec",
    "NodeStatus",
    "Pod",
    "PodCondition",
    "PodSpec",
    "PodStatus",
    "PreferredSchedulingTerm",
    "Taint",
    "Toleration",
]

POD_PENDING: Final = "Pending"
POD_RUNNING: Final = "Running"
POD_SUCCEEDED: Final = "Succeeded"
POD_FAILED: Final = "Failed"
POD_UNKNOWN: Final = "Unknown"

CONDITION_TRUE: Final = "True"
CONDITION_FALSE: Final = "False"
CONDITION_UNKNOWN: Final = "Unknown"

POD_READY: Final = "Ready"
NODE_READY: Final = "Ready"

EVENT_NORMAL: Final = "Normal"
EVENT_WARNING: Final = "Warning"

OBJECT_NAME_FIELD: Final = "metadata.name"
"""The only field ``matchFields`` may select on."""


class Taint(Model, kw_only=True):
    key: str = ""
    value: str = ""
    effect: str = ""
    time_added: str | None = None


class Toleration(Model, kw_only=True):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class NodeSelectorRequirement(Model, kw_only=True):
    key: str = ""
    operator: str = ""
    values: list[str] = []


class NodeSelectorTerm(Model, kw_only=True):
    match_expressions: list[NodeSelectorRequirement] = []
    match_fields: list[NodeSelectorRequirement] = []


class NodeSelector(Model, kw_only=True):
    node_selector_terms: list[NodeSelectorTerm] = []


class PreferredSchedulingTerm(Model, kw_only=True):
    weight: int = 0
    preference: NodeSelectorTerm = msgspec.field(default_factory=NodeSelectorTerm)


class NodeAffinity(Model, kw_only=True):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = []


class Affinity(Model, kw_only=True):
    """Only node affinity is modelled; pod (anti-)affinity survives in templates, not here."""

    node_affinity: NodeAffinity | None = None


CONTAINER_RESTART_POLICY_ALWAYS: Final = "Always"
"""An init container's ``restartPolicy: Always``: a restartable init container, a sidecar (KEP-753)."""


class Container(Model, kw_only=True):
    name: str = ""
    image: str = ""
    restart_policy: str | None = None  # only init containers may set it: Always makes one a sidecar


class PodSpec(Model, kw_only=True):
    node_name: str = ""
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    tolerations: list[Toleration] = []
    host_network: bool = False
    init_containers: list[Container] = []
    containers: list[Container] = []
    restart_policy: str = ""
    termination_grace_period_seconds: int | None = None
    scheduler_name: str = ""


class PodCondition(Model, kw_only=True):
    type: str = ""
    status: str = ""
    last_probe_time: str | None = None
    last_transition_time: str | None = None
    reason: str = ""
    message: str = ""


class ContainerStatus(Model, kw_only=True):
    name: str = ""
    ready: bool = False
    restart_count: int = 0
    image: str = ""


class PodStatus(Model, kw_only=True):
    observed_generation: int = 0
    phase: str = ""
    conditions: list[PodCondition] = []
    init_container_statuses: list[ContainerStatus] = []
    container_statuses: list[ContainerStatus] = []
    start_time: str | None = None
    host_ip: str = msgspec.field(default="", name="hostIP")
    pod_ip: str = msgspec.field(default="", name="podIP")
    reason: str = ""
    message: str = ""


class Pod(Resource, kw_only=True):
    api_version: str = "v1"
    kind: str = "Pod"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class NodeSpec(Model, kw_only=True):
    pod_cidr: str = msgspec.field(default="", name="podCIDR")
    pod_cidrs: list[str] = msgspec.field(default_factory=list, name="podCIDRs")
    provider_id: str = msgspec.field(default="", name="providerID")
    unschedulable: bool = False
    taints: list[Taint] = []


class NodeCondition(Model, kw_only=True):
    type: str = ""
    status: str = ""
    last_heartbeat_time: str | None = None
    last_transition_time: str | None = None
    reason: str = ""
    message: str = ""


class NodeStatus(Model, kw_only=True):
    capacity: dict[str, str] = {}
    allocatable: dict[str, str] = {}
    conditions: list[NodeCondition] = []


class Node(Resource, kw_only=True):
    api_version: str = "v1"
    kind: str = "Node"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class EventSource(Model, kw_only=True):
    component: str = ""
    host: str = ""


class Event(Resource, kw_only=True):
    """core/v1 Event, as the controllers' event recorders write them."""

    api_version: str = "v1"
    kind: str = "Event"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    involved_object: ObjectReference = msgspec.field(default_factory=ObjectReference)
    reason: str = ""
    message: str = ""
    source: EventSource = msgspec.field(default_factory=EventSource)
    first_timestamp: str | None = None
    last_timestamp: str | None = None
    count: int = 0
    type: str = ""
    event_time: str | None = None
    action: str = ""
    reporting_component: str = ""
    reporting_instance: str = ""
