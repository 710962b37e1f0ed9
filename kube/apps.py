"""apps/v1 kinds: DaemonSet, ReplicaSet and ControllerRevision.

The model holds what the API sent; it applies no defaults (the API server, or
the simulator standing in for it, defaults ``updateStrategy``,
``revisionHistoryLimit`` and ``replicas``).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from kube.meta import IntOrString, LabelSelector, Model, ObjectMeta, Resource
from kube.template import PodTemplateSpec

__all__ = [
    "ControllerRevision",
    "DaemonSet",
    "DaemonSetCondition",
    "DaemonSetSpec",
    "DaemonSetStatus",
    "DaemonSetUpdateStrategy",
    "ReplicaSet",
    "ReplicaSetCondition",
    "ReplicaSetSpec",
    "ReplicaSetStatus",
    "RollingUpdateDaemonSet",
]

ROLLING_UPDATE: Final = "RollingUpdate"
ON_DELETE: Final = "OnDelete"
REPLICA_FAILURE: Final = "ReplicaFailure"


class RollingUpdateDaemonSet(Model, kw_only=True):
    max_unavailable: IntOrString | None = None
    max_surge: IntOrString | None = None


class DaemonSetUpdateStrategy(Model, kw_only=True):
    type: str = ""
    rolling_update: RollingUpdateDaemonSet | None = None


class DaemonSetSpec(Model, kw_only=True):
    selector: LabelSelector | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    update_strategy: DaemonSetUpdateStrategy = msgspec.field(default_factory=DaemonSetUpdateStrategy)
    min_ready_seconds: int = 0
    revision_history_limit: int | None = None
    # extensions/v1beta1 only; apps/v1 keeps it in an annotation. Modelled for old objects.
    template_generation: int | None = None


class DaemonSetCondition(Model, kw_only=True):
    type: str = ""
    status: str = ""
    last_transition_time: str | None = None
    reason: str = ""
    message: str = ""


class DaemonSetStatus(Model, kw_only=True):
    current_number_scheduled: int = 0
    number_misscheduled: int = 0
    desired_number_scheduled: int = 0
    number_ready: int = 0
    observed_generation: int = 0
    updated_number_scheduled: int = 0
    number_available: int = 0
    number_unavailable: int = 0
    collision_count: int | None = None
    conditions: list[DaemonSetCondition] = []


class DaemonSet(Resource, kw_only=True):
    api_version: str = "apps/v1"
    kind: str = "DaemonSet"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DaemonSetSpec = msgspec.field(default_factory=DaemonSetSpec)
    status: DaemonSetStatus = msgspec.field(default_factory=DaemonSetStatus)


class ReplicaSetSpec(Model, kw_only=True):
    replicas: int | None = None
    min_ready_seconds: int = 0
    selector: LabelSelector | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)


class ReplicaSetCondition(Model, kw_only=True):
    type: str = ""
    status: str = ""
    last_transition_time: str | None = None
    reason: str = ""
    message: str = ""


class ReplicaSetStatus(Model, kw_only=True):
    replicas: int = 0
    fully_labeled_replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0
    terminating_replicas: int | None = None
    observed_generation: int = 0
    conditions: list[ReplicaSetCondition] = []


class ReplicaSet(Resource, kw_only=True):
    api_version: str = "apps/v1"
    kind: str = "ReplicaSet"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ReplicaSetSpec = msgspec.field(default_factory=ReplicaSetSpec)
    status: ReplicaSetStatus = msgspec.field(default_factory=ReplicaSetStatus)


class ControllerRevision(Resource, kw_only=True):
    """apps/v1 ControllerRevision. ``data`` is the raw JSON value (runtime.RawExtension), kept as decoded."""

    api_version: str = "apps/v1"
    kind: str = "ControllerRevision"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    data: Any = None
    revision: int = 0
