"""A DaemonSet's pods: the body created for a node (CreatePodTemplate + GetPodFromTemplate) and syncNodes' arithmetic.

Upstream (pkg/controller/daemon/daemon_controller.go syncNodes, daemon/util/daemonset_util.go, and
pkg/controller/controller_utils.go GetPodFromTemplate) builds every pod of one sync from one template:

* CreatePodTemplate: a copy of ``spec.template`` with the daemon tolerations added
  (AddOrUpdateDaemonPodTolerations), the legacy label ``pod-template-generation`` set to the template
  generation when the DaemonSet has one (the ``deprecated.daemonset.template.generation`` annotation,
  parsed as an int64; an unparsable annotation counts as none), and the label
  ``controller-revision-hash`` set to the current revision's hash when that is not empty;
* per node: the required node affinity replaced by one ``metadata.name In [node]`` matchField
  (ReplaceDaemonSetPodNodeNameNodeAffinity), so the scheduler binds the pod to that node;
* GetPodFromTemplate: the template's labels, annotations and finalizers, ``generateName: <ds name>-``,
  and a controller reference to the DaemonSet (apps/v1, ``controller`` and ``blockOwnerDeletion``).

kubus names the pod itself, from an idempotency key, in the API server's alphabet
(``reconciler.core.podtemplate``), and records the key in an annotation, so a redelivered create meets
its own pod. The body is built from the template's raw JSON, so fields kubus does not model survive.

syncNodes caps the creates and the deletes of one sync at ``burstReplicas`` (250) each, takes the first
ones in order (the rest wait for a later sync), and always sets the expectations to the capped counts,
even 0 and 0: the DaemonSet counts creations and deletions, it does not track pod keys.

Pure: no I/O, no clock (``now`` is passed in), inputs never mutated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from kube.apps import DaemonSet
from kube.core import Pod
from kube.intstr import parse_int64
from kube.ownership import new_controller_ref
from kube.pods import pod_key
from kube.template import PodTemplateSpec
from reconciler.core.daemonset.placement import (
    add_or_update_daemon_pod_tolerations,
    replace_node_name_node_affinity_raw,
)
from reconciler.core.expectations import Expectations, expect
from reconciler.core.podtemplate import NO_LABELS_ERROR, PodFactory

__all__ = [
    "API_VERSION",
    "BURST_REPLICAS",
    "KIND",
    "NO_LABELS_ERROR",
    "TEMPLATE_GENERATION_ANNOTATION",
    "TEMPLATE_GENERATION_LABEL",
    "UNIQUE_LABEL_KEY",
    "DaemonPodFactory",
    "SyncNodesPlan",
    "create_key",
    "create_pod_template",
    "daemon_pod_body",
    "sync_nodes",
    "template_generation",
]

BURST_REPLICAS: Final = 250
"""daemon_controller.go BurstReplicas: at most this many creates, and this many deletes, per sync."""
API_VERSION: Final = "apps/v1"
KIND: Final = "DaemonSet"
UNIQUE_LABEL_KEY: Final = "controller-revision-hash"
"""apps.DefaultDaemonSetUniqueLabelKey (= ControllerRevisionHashLabelKey)."""
TEMPLATE_GENERATION_LABEL: Final = "pod-template-generation"
"""extensions.DaemonSetTemplateGenerationKey: the legacy label of pods made before revision hashes."""
TEMPLATE_GENERATION_ANNOTATION: Final = "deprecated.daemonset.template.generation"
"""apps.DeprecatedTemplateGeneration: where apps/v1 keeps the template generation."""


def template_generation(ds: DaemonSet) -> int | None:
    """util.GetTemplateGeneration with syncNodes' error handling: the annotation as an int64, None if absent
    or unparsable (``strconv.ParseInt(s, 10, 64)``: an optional sign and decimal digits, in range)."""
    text = ds.metadata.annotations.get(TEMPLATE_GENERATION_ANNOTATION)
    return parse_int64(text) if text is not None else None


def create_pod_template(template: PodTemplateSpec, generation: int | None, hash_: str) -> PodTemplateSpec:
    """util.CreatePodTemplate, returning a new template (``template`` is untouched; unmodelled fields kept).

    The daemon tolerations are added; ``pod-template-generation`` is set when ``generation`` is not None,
    then ``controller-revision-hash`` when ``hash_`` is not empty (both overwrite a template label).
    """
    result = template.copy()
    result.spec = add_or_update_daemon_pod_tolerations(result.spec)
    labels = dict(result.metadata.labels)
    if generation is not None:
        labels[TEMPLATE_GENERATION_LABEL] = str(generation)
    if hash_:
        labels[UNIQUE_LABEL_KEY] = hash_
    result.metadata.labels = labels
    return result


def create_key(key_base: str, node_name: str) -> str:
    """The idempotency key of the create for ``node_name`` in the decision ``key_base``."""
    return f"{key_base}/create/{node_name}"


class DaemonPodFactory:
    """The pod bodies of one sync: CreatePodTemplate once, then one body per node.

    ``template`` is CreatePodTemplate's result; ``has_labels`` is False when it has no labels, which
    makes upstream's createPods refuse every create (:data:`NO_LABELS_ERROR`) before calling the API.
    """

    def __init__(self, ds: DaemonSet, hash_: str) -> None:
        self.template = create_pod_template(ds.spec.template, template_generation(ds), hash_)
        self.has_labels = bool(self.template.metadata.labels)
        self._factory = PodFactory(self.template, ds.metadata.name, new_controller_ref(ds.metadata, API_VERSION, KIND),
                                   ds.metadata.namespace)

    def body(self, node_name: str, key: str) -> dict[str, Any]:
        """The Pod to create on ``node_name`` for idempotency key ``key``: required node affinity pinned to it."""
        body = self._factory.body(key)
        spec = dict(body["spec"])  # the factory's spec is shared by every body: replace, never mutate
        spec["affinity"] = replace_node_name_node_affinity_raw(spec.get("affinity"), node_name)
        body["spec"] = spec
        return body


def daemon_pod_body(ds: DaemonSet, hash_: str, node_name: str, key: str) -> dict[str, Any]:
    """The Pod body ``ds`` creates on ``node_name`` (one-off; use :class:`DaemonPodFactory` for many)."""
    return DaemonPodFactory(ds, hash_).body(node_name, key)


@dataclass(frozen=True)
class SyncNodesPlan:
    """syncNodes' decisions for the shell: creates (slow-start batches) and deletes (in parallel).

    ``creates`` are ``(node name, idempotency key, pod body)`` for the first ``create_diff`` nodes;
    ``deletes`` the first ``delete_diff`` pods. ``deferred_nodes`` and ``deferred_deletes`` are what the
    burst cap left for a later sync. ``expectations`` is SetExpectations(create_diff, delete_diff),
    stamped ``now``, minus the creates known to fail before any call: with ``create_error`` set
    (a template without labels) nothing is created and no creation is expected, which is where
    upstream's expectations end up after its failed slow-start batch.
    """

    creates: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    deletes: list[Pod] = field(default_factory=list)
    create_diff: int = 0
    delete_diff: int = 0
    expectations: Expectations = field(default_factory=Expectations)
    deferred_nodes: list[str] = field(default_factory=list)
    deferred_deletes: list[Pod] = field(default_factory=list)
    create_error: str | None = None


def sync_nodes(ds: DaemonSet, nodes_needing_pods: Sequence[str], pods_to_delete: Sequence[Pod], hash_: str, *,
               now: datetime, key_base: str, burst: int = BURST_REPLICAS) -> SyncNodesPlan:
    """syncNodes' arithmetic: cap both lists at ``burst`` (``createDiff > burstReplicas`` -> burstReplicas),
    set the expectations to the capped counts, and build the bodies of the creates.

    Upstream creates on ``nodesNeedingDaemonPods[0:createDiff]`` and deletes ``podsToDelete[0:deleteDiff]``,
    in the order manage produced them, which is why manage's order is deterministic here.
    """
    create_diff = min(len(nodes_needing_pods), burst)
    delete_diff = min(len(pods_to_delete), burst)
    chosen = list(nodes_needing_pods[:create_diff])
    deletes = list(pods_to_delete[:delete_diff])
    deferred_nodes = list(nodes_needing_pods[create_diff:])
    deferred_deletes = list(pods_to_delete[delete_diff:])
    # the counts are upstream's; the keys of the pods it deletes let a deletion be observed whatever
    # ownerReferences the pod's last state carried (Controllers.observe)
    deleting = frozenset(pod_key(p) for p in deletes)
    if not chosen:  # nothing to create: no template to build (it costs a deep copy of the pod template)
        return SyncNodesPlan(deletes=deletes, create_diff=create_diff, delete_diff=delete_diff,
                             expectations=expect(create_diff, delete_diff, now, deleting),
                             deferred_nodes=deferred_nodes, deferred_deletes=deferred_deletes)
    factory = DaemonPodFactory(ds, hash_)
    if not factory.has_labels:
        # createPods fails each create before the API call; slow start stops after the first batch and
        # lowers the expectations by the skipped ones: no creation stays expected, and no event is recorded
        return SyncNodesPlan(deletes=deletes, create_diff=create_diff, delete_diff=delete_diff,
                             expectations=expect(0, delete_diff, now, deleting), deferred_nodes=deferred_nodes,
                             deferred_deletes=deferred_deletes, create_error=NO_LABELS_ERROR)
    creates = [(name, key, factory.body(name, key)) for name in chosen for key in (create_key(key_base, name),)]
    return SyncNodesPlan(creates=creates, deletes=deletes, create_diff=create_diff, delete_diff=delete_diff,
                         expectations=expect(create_diff, delete_diff, now, deleting), deferred_nodes=deferred_nodes,
                         deferred_deletes=deferred_deletes)
