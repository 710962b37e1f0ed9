"""Where a DaemonSet's pods belong: NodeShouldRunDaemonPod and the pod-spec changes that go with it.

Upstream (pkg/controller/daemon/daemon_controller.go, daemon/util/daemonset_util.go and
pkg/apis/core/v1/helper) decides placement by running three of the scheduler's filters against a pod
built from the template: node name, required node affinity (nodeSelector included), and taints with
effect NoSchedule or NoExecute. Nothing else is looked at: not resources, host ports, node conditions,
``spec.unschedulable`` nor a node's deletion. The scheduler binds daemon pods (the controller pins them
with a ``metadata.name`` matchField), and the node lifecycle controller turns conditions and cordoning
into taints, which the tolerations every daemon pod gets make harmless.

The two answers differ only for taints: a pod that does not tolerate a NoSchedule taint is not created,
but one already there keeps running; only an untolerated NoExecute taint removes it.

Everything here is pure: inputs are never mutated and results share nothing mutable with them.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from kube.apps import DaemonSet
from kube.core import OBJECT_NAME_FIELD, Affinity, Node, PodSpec, Taint, Toleration
from kube.nodeaffinity import RequiredNodeAffinity, replace_daemon_node_affinity, required_node_affinity
from kube.taints import (
    NO_EXECUTE,
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    TAINT_NODE_DISK_PRESSURE,
    TAINT_NODE_MEMORY_PRESSURE,
    TAINT_NODE_NETWORK_UNAVAILABLE,
    TAINT_NODE_NOT_READY,
    TAINT_NODE_PID_PRESSURE,
    TAINT_NODE_UNREACHABLE,
    TAINT_NODE_UNSCHEDULABLE,
    find_matching_untolerated_taint,
)
from kube.validation import FieldError

__all__ = [
    "DAEMON_TOLERATIONS",
    "EVERYWHERE",
    "HOST_NETWORK_TOLERATIONS",
    "Placement",
    "add_or_update_daemon_pod_tolerations",
    "add_or_update_toleration",
    "daemon_placer",
    "daemon_pod_tolerations",
    "node_placer",
    "node_should_run_daemon_pod",
    "replace_node_name_node_affinity",
    "replace_node_name_node_affinity_raw",
    "untainted_everywhere",
    "validate_tolerations",
]

EXISTS: Final = "Exists"

DAEMON_TOLERATIONS: Final[tuple[tuple[str, str], ...]] = (
    # Infinite NoExecute tolerations: taint-based eviction must not drain daemons from sick nodes.
    (TAINT_NODE_NOT_READY, NO_EXECUTE),
    (TAINT_NODE_UNREACHABLE, NO_EXECUTE),
    # TaintNodesByCondition: daemons run despite pressure and cordoning.
    (TAINT_NODE_DISK_PRESSURE, NO_SCHEDULE),
    (TAINT_NODE_MEMORY_PRESSURE, NO_SCHEDULE),
    (TAINT_NODE_PID_PRESSURE, NO_SCHEDULE),
    (TAINT_NODE_UNSCHEDULABLE, NO_SCHEDULE),
)
"""(key, effect) of the ``Exists`` tolerations AddOrUpdateDaemonPodTolerations adds to every daemon pod, in order."""

HOST_NETWORK_TOLERATIONS: Final[tuple[tuple[str, str], ...]] = ((TAINT_NODE_NETWORK_UNAVAILABLE, NO_SCHEDULE),)
"""Added after DAEMON_TOLERATIONS when ``spec.hostNetwork``: such a pod does not need the pod network."""

TOLERATION_OPERATORS: Final = ("Equal", EXISTS)
COMPARISON_OPERATORS: Final = ("Lt", "Gt")
TAINT_EFFECTS: Final = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)

TOLERATIONS_PATH: Final = "spec.template.spec.tolerations"

# Read-only instances for the hot path (every node x every DaemonSet on a node event); never handed out.
_DAEMON: Final = tuple(Toleration(key=key, operator=EXISTS, effect=effect) for key, effect in DAEMON_TOLERATIONS)
_HOST_NETWORK: Final = tuple(
    Toleration(key=key, operator=EXISTS, effect=effect) for key, effect in HOST_NETWORK_TOLERATIONS
)


class Placement(NamedTuple):
    """NodeShouldRunDaemonPod's answer; a plain ``(shouldRun, shouldContinueRunning)`` tuple too."""

    should_run: bool
    """A daemon pod should be created on the node if it has none."""
    should_continue_running: bool
    """A daemon pod already on the node should be kept."""


def node_should_run_daemon_pod(node: Node, ds: DaemonSet, *, comparison_operators: bool = False) -> Placement:
    """NodeShouldRunDaemonPod: (shouldRun, shouldContinueRunning) for ``ds``'s pod on ``node``.

    The pod upstream builds (NewPod) is the template with ``spec.nodeName`` set to this node and the daemon
    tolerations added; only its node selector, affinity and tolerations matter, so no pod is built here.
    ``comparison_operators`` is the TaintTolerationComparisonOperators gate, which upstream passes to
    FindMatchingUntoleratedTaint (off: a toleration with ``Lt`` or ``Gt`` tolerates nothing).
    """
    spec = ds.spec.template.spec
    return _placement(spec, _with_daemon_tolerations(spec.tolerations, spec.host_network), comparison_operators,
                      _node_affinity(spec), node)


def daemon_placer(ds: DaemonSet, *, comparison_operators: bool = False) -> Callable[[Node], Placement]:
    """:func:`node_should_run_daemon_pod` for ``ds``, as a function of the node alone.

    The same answers, node by node; the pod's tolerations (the template's plus the daemon ones) and its
    nodeSelector and required node affinity are worked out once instead of once per node, which matters when it
    runs for every node of a sync.
    """
    spec = ds.spec.template.spec
    tolerations = _with_daemon_tolerations(spec.tolerations, spec.host_network)
    return functools.partial(_placement, spec, tolerations, comparison_operators, _node_affinity(spec))


EVERYWHERE: Final = Placement(True, True)
"""The answer for a node the daemon may run on and keep running on (one shared value)."""
_NOWHERE: Final = Placement(False, False)


def untainted_everywhere(ds: DaemonSet) -> bool:
    """Whether every node without taints is :data:`EVERYWHERE` for ``ds``: its template names no node and has
    no nodeSelector and no affinity, so NodeShouldRunDaemonPod has nothing but taints to look at. A loop
    over thousands of nodes then asks :func:`daemon_placer` only about the tainted ones."""
    spec = ds.spec.template.spec
    return not spec.node_name and not spec.node_selector and spec.affinity is None


def node_placer(ds: DaemonSet, *, comparison_operators: bool = False) -> Callable[[Node], Placement]:
    """:func:`daemon_placer`, asking it only about tainted nodes when the template looks at nothing but taints
    (:func:`untainted_everywhere`): an untainted node is then EVERYWHERE."""
    place = daemon_placer(ds, comparison_operators=comparison_operators)
    if not untainted_everywhere(ds):
        return place
    return lambda node: place(node) if node.spec.taints else EVERYWHERE


def _node_affinity(spec: PodSpec) -> RequiredNodeAffinity | None:
    """The template's required node affinity, None without a nodeSelector or an affinity (then every node matches)."""
    return required_node_affinity(spec) if spec.node_selector or spec.affinity is not None else None


def _placement(spec: PodSpec, tolerations: Sequence[Toleration], comparison_operators: bool,
               affinity: RequiredNodeAffinity | None, node: Node) -> Placement:
    # A template pinned to another node by nodeName runs nowhere else. NewPod then sets nodeName to this
    # node, so upstream's fitsNodeName predicate always holds past this check.
    if spec.node_name and spec.node_name != node.metadata.name:
        return _NOWHERE
    # GetRequiredNodeAffinity(pod).Match(node), parse errors ignored: a term that cannot parse never matches.
    # (Without a nodeSelector or an affinity it always matches: skipped, this runs for every node.)
    if affinity is not None and not affinity.matches(node):
        return _NOWHERE
    taints = node.spec.taints
    if not taints:
        return EVERYWHERE
    if find_matching_untolerated_taint(taints, tolerations, _schedules_or_executes,
                                       comparison_operators=comparison_operators) is None:
        return EVERYWHERE
    # Not "is the first untolerated taint NoExecute": any untolerated NoExecute taint, wherever it is listed.
    evicting = find_matching_untolerated_taint(taints, tolerations, _executes,
                                               comparison_operators=comparison_operators)
    return Placement(False, evicting is None)


def _schedules_or_executes(taint: Taint) -> bool:
    return taint.effect in (NO_SCHEDULE, NO_EXECUTE)  # PreferNoSchedule and unknown effects are ignored


def _executes(taint: Taint) -> bool:
    return taint.effect == NO_EXECUTE


def add_or_update_toleration(tolerations: Sequence[Toleration], toleration: Toleration) -> list[Toleration]:
    """AddOrUpdateTolerationInPodSpec on a list, returning a new one of copies.

    Tolerations are identified by (key, effect, operator, value), compared exactly: no ``""``-means-Equal
    defaulting. Every toleration with the same identity is replaced, in place, by ``toleration`` (so a
    ``tolerationSeconds`` is dropped or changed); with none, ``toleration`` is appended.

    Upstream has an early "already present, change nothing" return, but it compares a ``*Toleration``
    with a ``Toleration`` via Semantic.DeepEqual, whose type check makes it always false; so it never
    fires, and duplicates differing only in ``tolerationSeconds`` are all replaced, not left alone.
    """
    return [copy.copy(t) for t in _add_or_update(tolerations, toleration)]


def daemon_pod_tolerations(spec: PodSpec) -> list[Toleration]:
    """``spec.tolerations`` after AddOrUpdateDaemonPodTolerations (copies; ``spec`` is untouched)."""
    return [copy.copy(t) for t in _with_daemon_tolerations(spec.tolerations, spec.host_network)]


def add_or_update_daemon_pod_tolerations(spec: PodSpec) -> PodSpec:
    """AddOrUpdateDaemonPodTolerations, returning a new spec: the template's tolerations plus the daemon ones.

    For a ``kube.template.PodTemplateSpec``, assign the result to ``template.copy().spec``: the encoder keeps
    the template's unmodelled fields.
    """
    result = copy.deepcopy(spec)
    result.tolerations = daemon_pod_tolerations(spec)
    return result


def _with_daemon_tolerations(tolerations: Sequence[Toleration], host_network: bool) -> list[Toleration]:
    """The tolerations of NewPod, sharing the input's and this module's instances: for reading only."""
    result = list(tolerations)
    for toleration in (*_DAEMON, *_HOST_NETWORK) if host_network else _DAEMON:
        result = _add_or_update(result, toleration)
    return result


def _add_or_update(tolerations: Iterable[Toleration], toleration: Toleration) -> list[Toleration]:
    result: list[Toleration] = []
    updated = False
    for existing in tolerations:
        if _same_identity(existing, toleration):
            result.append(toleration)
            updated = True
        else:
            result.append(existing)
    if not updated:
        result.append(toleration)
    return result


def _same_identity(a: Toleration, b: Toleration) -> bool:
    """Toleration.MatchToleration."""
    return a.key == b.key and a.effect == b.effect and a.operator == b.operator and a.value == b.value


def replace_node_name_node_affinity(affinity: Affinity | None, node_name: str) -> Affinity:
    """ReplaceDaemonSetPodNodeNameNodeAffinity, returning a new value (``affinity`` is untouched).

    The required node selector becomes exactly one term, ``matchFields: metadata.name In [node_name]``:
    every required term is dropped, matchExpressions and other matchFields alike (upstream assumes the
    pod was only sent to nodes its affinity admits). Preferred terms are kept.
    """
    return replace_daemon_node_affinity(affinity, node_name)


def replace_node_name_node_affinity_raw(affinity: Any, node_name: str) -> dict[str, Any]:
    """ReplaceDaemonSetPodNodeNameNodeAffinity on the JSON form of ``spec.affinity``, returning a new dict.

    For pod bodies built from a template's raw JSON: everything besides the required node selector's terms
    (``podAffinity``, ``podAntiAffinity``, preferred terms, unmodelled fields) is kept, deep-copied.
    ``None`` or a non-object stands for no affinity, as a JSON ``null`` does.
    """
    pinned = {"matchFields": [{"key": OBJECT_NAME_FIELD, "operator": "In", "values": [node_name]}]}
    result = copy.deepcopy(dict(affinity)) if isinstance(affinity, Mapping) else {}
    node_affinity = result.get("nodeAffinity")
    if not isinstance(node_affinity, dict):
        node_affinity = result["nodeAffinity"] = {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, dict):
        required = node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {}
    required["nodeSelectorTerms"] = [pinned]
    return result


def validate_tolerations(ds: DaemonSet, *, comparison_operators: bool = False) -> list[tuple[str, str]]:
    """(field path, message) for each toleration operator or effect the controller cannot understand.

    Such a toleration tolerates nothing (ToleratesTaint's default branch), which is what placement does
    with it; this only names it, so the controller can warn in an Event. Empty operator (Equal) and empty
    effect (all effects) are valid. ``comparison_operators`` is the TaintTolerationComparisonOperators
    gate: with it, ``Lt`` and ``Gt`` are understood (``kube.taints`` evaluates them); without it (upstream's
    default) they tolerate nothing, and the API server refuses them in new objects. Messages are
    field.NotSupported's, as the API server words them, e.g. ``spec.template.spec.tolerations[2].operator:
    Unsupported value: "Foo": supported values: "Equal", "Exists"``.
    """
    operators = TOLERATION_OPERATORS + COMPARISON_OPERATORS if comparison_operators else TOLERATION_OPERATORS
    problems: list[tuple[str, str]] = []
    for i, toleration in enumerate(ds.spec.template.spec.tolerations):
        if toleration.operator and toleration.operator not in operators:
            path = f"{TOLERATIONS_PATH}[{i}].operator"
            # named as the API names them (the comparison operators are an alpha gate it does not offer)
            problems.append((path, str(FieldError.not_supported(path, toleration.operator, TOLERATION_OPERATORS))))
        if toleration.effect and toleration.effect not in TAINT_EFFECTS:
            path = f"{TOLERATIONS_PATH}[{i}].effect"
            problems.append((path, str(FieldError.not_supported(path, toleration.effect, TAINT_EFFECTS))))
    return problems
