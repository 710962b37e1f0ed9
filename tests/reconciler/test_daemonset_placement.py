"""DaemonSet placement: NodeShouldRunDaemonPod, the daemon tolerations, node-name pinning, toleration checks.

Cases come from daemon_controller_test.go (TestNodeShouldRunDaemonPod and the taint, selector and
node-name launch tests), daemonset_util_test.go (TestReplaceDaemonSetPodNodeNameNodeAffinity) and
AddOrUpdateTolerationInPodSpec's code in pkg/apis/core/v1/helper.
"""

from __future__ import annotations

import msgspec
import pytest

from kube.apps import DaemonSet
from kube.core import (
    Affinity,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodSpec,
    PreferredSchedulingTerm,
    Toleration,
)
from kube.template import PodTemplateSpec
from kube.testing import DaemonSetBuilder, NodeBuilder, daemonset, node
from kube.times import format_time
from reconciler.core.daemonset.placement import (
    Placement,
    add_or_update_daemon_pod_tolerations,
    add_or_update_toleration,
    daemon_pod_tolerations,
    node_should_run_daemon_pod,
    replace_node_name_node_affinity,
    replace_node_name_node_affinity_raw,
    validate_tolerations,
)
from tests.reconciler.builders import NOW

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
DISK = "node.kubernetes.io/disk-pressure"
MEMORY = "node.kubernetes.io/memory-pressure"
PID = "node.kubernetes.io/pid-pressure"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
NETWORK = "node.kubernetes.io/network-unavailable"

SIMPLE_DAEMON_SET_LABEL = {"name": "simple-daemon", "type": "production"}
SIMPLE_DAEMON_SET_LABEL2 = {"name": "simple-daemon", "type": "test"}

RUN = Placement(True, True)
KEEP_ONLY = Placement(False, True)
NEVER = Placement(False, False)


def exists(key: str, effect: str, seconds: int | None = None) -> Toleration:
    return Toleration(key=key, operator="Exists", effect=effect, toleration_seconds=seconds)


DAEMON = [
    exists(NOT_READY, "NoExecute"),
    exists(UNREACHABLE, "NoExecute"),
    exists(DISK, "NoSchedule"),
    exists(MEMORY, "NoSchedule"),
    exists(PID, "NoSchedule"),
    exists(UNSCHEDULABLE, "NoSchedule"),
]
NETWORK_TOLERATION = exists(NETWORK, "NoSchedule")

# noScheduleTolerations / noScheduleTaints / noExecuteTaints of daemon_controller_test.go
DEDICATED = Toleration(key="dedicated", value="user1", effect="NoSchedule")


def expr(key: str, operator: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=list(values))


def term(*expressions: NodeSelectorRequirement,
         fields: list[NodeSelectorRequirement] | None = None) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=list(expressions), match_fields=fields or [])


def required(*terms: NodeSelectorTerm, preferred: list[PreferredSchedulingTerm] | None = None) -> Affinity:
    return Affinity(node_affinity=NodeAffinity(
        required_during_scheduling_ignored_during_execution=NodeSelector(node_selector_terms=list(terms)),
        preferred_during_scheduling_ignored_during_execution=preferred or []))


def preferred_only(*terms: NodeSelectorTerm) -> Affinity:
    return Affinity(node_affinity=NodeAffinity(
        preferred_during_scheduling_ignored_during_execution=[PreferredSchedulingTerm(weight=1, preference=t)
                                                              for t in terms]))


def pinned(name: str) -> Affinity:
    return required(term(fields=[expr("metadata.name", "In", name)]))


def simple_node() -> NodeBuilder:
    """newNode("test-node", simpleDaemonSetLabel), plus a numeric label for Gt/Lt."""
    return node("test-node").labels(SIMPLE_DAEMON_SET_LABEL, cores="8")


def ds(template_node_name: str = "") -> DaemonSetBuilder:
    builder = daemonset("ds")
    if not template_node_name:
        return builder
    return builder.template(_with_node_name(builder.build(), template_node_name))


def _with_node_name(built: DaemonSet, name: str) -> PodTemplateSpec:
    template = built.spec.template.copy()
    template.spec.node_name = name
    return template


@pytest.mark.parametrize(("node_builder", "ds_builder", "expected"), [
    # TestNodeShouldRunDaemonPod
    pytest.param(simple_node(), ds(), RUN, id="ShouldRunDaemonPod"),
    pytest.param(simple_node(), ds("other-node"), NEVER, id="ErrPodNotMatchHostName"),
    pytest.param(simple_node(), ds().node_selector(SIMPLE_DAEMON_SET_LABEL2), NEVER, id="ErrNodeSelectorNotMatch"),
    pytest.param(simple_node(), ds().node_selector(SIMPLE_DAEMON_SET_LABEL), RUN, id="node-selector-matches"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("type", "In", "test")))), NEVER,
                 id="ErrPodAffinityNotMatch"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("type", "In", "production")))), RUN,
                 id="affinity-matches"),
    pytest.param(simple_node().unschedulable(), ds(), RUN, id="ShouldRunDaemonPodOnUnschedulableNode"),
    # node name: TestNameDaemonSetLaunchesPods, TestNameAndSelector..., TestInconsistentNameSelector...
    pytest.param(simple_node(), ds("test-node"), RUN, id="template-node-name-is-this-node"),
    pytest.param(simple_node(), ds("test-node").node_selector(SIMPLE_DAEMON_SET_LABEL), RUN,
                 id="node-name-and-selector-match"),
    pytest.param(simple_node(), ds("test-node").node_selector(SIMPLE_DAEMON_SET_LABEL2), NEVER,
                 id="node-name-matches-selector-does-not"),
    pytest.param(simple_node(), ds("other-node").node_selector(SIMPLE_DAEMON_SET_LABEL), NEVER,
                 id="selector-matches-node-name-does-not"),
    pytest.param(node("bare").labels({}), ds().node_selector(color="blue"), NEVER, id="selector-on-unlabelled-node"),
    # required node affinity operators (nodeaffinity.GetRequiredNodeAffinity(pod).Match)
    pytest.param(simple_node(), ds().affinity(required(term(expr("type", "NotIn", "test")))), RUN, id="notin"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("type", "NotIn", "production")))), NEVER,
                 id="notin-excludes"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("type", "Exists")))), RUN, id="exists"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("gpu", "Exists")))), NEVER, id="exists-missing"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("gpu", "DoesNotExist")))), RUN, id="does-not-exist"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("cores", "Gt", "4")))), RUN, id="gt"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("cores", "Gt", "8")))), NEVER, id="gt-equal-fails"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("cores", "Lt", "16")))), RUN, id="lt"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("type", "Gt", "4")))), NEVER,
                 id="gt-on-non-integer-label"),
    pytest.param(simple_node(), ds().affinity(pinned("test-node")), RUN, id="match-fields-this-node"),
    pytest.param(simple_node(), ds().affinity(pinned("other-node")), NEVER, id="match-fields-other-node"),
    pytest.param(simple_node(), ds().affinity(required(term(fields=[expr("metadata.name", "NotIn", "other")]))), RUN,
                 id="match-fields-notin"),
    pytest.param(simple_node(),
                 ds().affinity(required(term(expr("type", "In", "test")), term(expr("cores", "Exists")))), RUN,
                 id="terms-are-ored"),
    pytest.param(simple_node(),
                 ds().affinity(required(term(expr("type", "In", "production"),
                                             fields=[expr("metadata.name", "In", "other")]))),
                 NEVER, id="expressions-and-fields-are-anded"),
    pytest.param(simple_node(), ds().node_selector(SIMPLE_DAEMON_SET_LABEL).affinity(pinned("other-node")), NEVER,
                 id="selector-and-affinity-both-needed"),
    pytest.param(simple_node(), ds().affinity(required()), NEVER, id="required-without-terms-matches-nothing"),
    pytest.param(simple_node(), ds().affinity(required(term())), NEVER, id="empty-term-matches-nothing"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("type", "Foo", "x")))), NEVER,
                 id="unparsable-term-never-matches"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("cores", "Gt", "4", "5")))), NEVER,
                 id="gt-with-two-values-never-matches"),
    pytest.param(simple_node(), ds().affinity(required(term(fields=[expr("metadata.name", "Exists")]))), NEVER,
                 id="bad-field-operator-never-matches"),
    pytest.param(simple_node(), ds().affinity(required(term(expr("type", "Foo")), term(expr("type", "Exists")))), RUN,
                 id="unparsable-term-does-not-hide-a-good-one"),
    pytest.param(simple_node(), ds().affinity(preferred_only(term(expr("type", "In", "test")))), RUN,
                 id="preferred-terms-are-ignored"),
    pytest.param(simple_node(), ds().affinity(Affinity()), RUN, id="affinity-without-node-affinity"),
    # taints: TestNoScheduleTaintedDoesntEvicitRunningIntolerantPod, TestNoExecuteTaintedDoesEvicitRunning...,
    # TestTaintedNodeDaemonDoesNotLaunchIntolerantPod, TestTaintedNodeDaemonLaunchesToleratePod
    pytest.param(simple_node().taint("dedicated", "user1", "NoSchedule"), ds(), KEEP_ONLY, id="noschedule-untolerated"),
    pytest.param(simple_node().taint("dedicated", "user1", "NoExecute"), ds(), NEVER, id="noexecute-untolerated"),
    pytest.param(simple_node().taint("dedicated", "user1", "NoSchedule"), ds().tolerations(DEDICATED), RUN,
                 id="noschedule-tolerated"),
    pytest.param(simple_node(), ds().tolerations(DEDICATED), RUN, id="TestNodeDaemonLaunchesToleratePod"),
    pytest.param(simple_node().taint("dedicated", "user2", "NoSchedule"), ds().tolerations(DEDICATED), KEEP_ONLY,
                 id="toleration-value-differs"),
    pytest.param(simple_node().taint("dedicated", "user1", "NoExecute"), ds().tolerations(DEDICATED), NEVER,
                 id="noschedule-toleration-does-not-cover-noexecute"),
    pytest.param(simple_node().taint("dedicated", "user1", "NoExecute"),
                 ds().tolerations(Toleration(key="dedicated", operator="Equal", value="user1")), RUN,
                 id="toleration-without-effect-covers-all-effects"),
    pytest.param(simple_node().taint("dedicated", "anything", "NoExecute"),
                 ds().tolerations(Toleration(key="dedicated", operator="Exists", effect="NoExecute")), RUN,
                 id="exists-ignores-value"),
    pytest.param(simple_node().taint("a", "1", "NoExecute").taint("b", "2", "NoSchedule"),
                 ds().tolerations(Toleration(operator="Exists")), RUN, id="empty-key-exists-tolerates-everything"),
    pytest.param(simple_node().taint("a", "1", "NoExecute"),
                 ds().tolerations(Toleration(operator="Exists", effect="NoSchedule")), NEVER,
                 id="empty-key-exists-limited-to-its-effect"),
    pytest.param(simple_node().taint("dedicated", "user1", "NoExecute"),
                 ds().tolerations(Toleration(key="dedicated", operator="Exists", effect="NoExecute",
                                             toleration_seconds=60)), RUN,
                 id="toleration-seconds-still-tolerates"),
    pytest.param(simple_node().taint("dedicated", "user1", "PreferNoSchedule"), ds(), RUN,
                 id="prefer-no-schedule-ignored"),
    pytest.param(simple_node().taint("dedicated", "user1", "Bogus"), ds(), RUN, id="unknown-taint-effect-ignored"),
    pytest.param(simple_node().taint("dedicated", "user1", "NoSchedule"),
                 ds().tolerations(Toleration(key="dedicated", operator="Foo", value="user1")), KEEP_ONLY,
                 id="unknown-operator-tolerates-nothing"),
    pytest.param(simple_node().taint("a", "1", "NoSchedule").taint("b", "2", "NoExecute"), ds(), NEVER,
                 id="any-untolerated-noexecute-stops-it-not-just-the-first-taint"),
    pytest.param(simple_node().taint("a", "1", "NoExecute").taint("b", "2", "NoSchedule"),
                 ds().tolerations(Toleration(key="a", operator="Exists")), KEEP_ONLY,
                 id="noexecute-tolerated-noschedule-not"),
    # the daemon tolerations: TestNotReadyNodeDaemonLaunchesPod, TestUnreachableNodeDaemonLaunchesPod,
    # TestTaintPressureNodeDaemonLaunchesPod, TestNetworkUnavailableNodeDaemonLaunchesPod
    pytest.param(simple_node().taint(NOT_READY, effect="NoExecute").ready("False"), ds(), RUN,
                 id="not-ready-noexecute"),
    pytest.param(simple_node().taint(UNREACHABLE, effect="NoExecute").ready("Unknown"), ds(), RUN,
                 id="unreachable-noexecute"),
    pytest.param(simple_node().taint(DISK).taint(MEMORY).taint(PID), ds(), RUN, id="pressure-noschedule"),
    pytest.param(simple_node().taint(UNSCHEDULABLE).unschedulable(), ds(), RUN, id="cordoned-node"),
    pytest.param(simple_node().taint(NOT_READY, effect="NoSchedule"), ds(), KEEP_ONLY,
                 id="not-ready-noschedule-is-not-covered"),
    pytest.param(simple_node().taint(DISK, effect="NoExecute"), ds(), NEVER, id="pressure-noexecute-is-not-covered"),
    pytest.param(simple_node().condition("NetworkUnavailable", "True"), ds(), RUN, id="network-unavailable-condition"),
    pytest.param(simple_node().taint(NETWORK), ds(), KEEP_ONLY, id="network-unavailable-taint"),
    pytest.param(simple_node().taint(NETWORK), ds().host_network(), RUN, id="network-unavailable-host-network"),
    pytest.param(simple_node().taint(NOT_READY, effect="NoExecute"),
                 ds().tolerations(exists(NOT_READY, "NoExecute", seconds=0)), RUN,
                 id="user-toleration-seconds-replaced-by-infinite-one"),
    # what placement does not look at
    pytest.param(simple_node().deleting(NOW), ds(), RUN, id="node-being-deleted"),
    pytest.param(simple_node().ready("False"), ds(), RUN, id="not-ready-condition-without-taint"),
    pytest.param(simple_node().allocatable(cpu="0", memory="0", pods="0"), ds(), RUN, id="resources-ignored"),
])
def test_node_should_run_daemon_pod(node_builder: NodeBuilder, ds_builder: DaemonSetBuilder,
                                    expected: Placement) -> None:
    """NodeShouldRunDaemonPod: (shouldRun, shouldContinueRunning)."""
    assert node_should_run_daemon_pod(node_builder.build(), ds_builder.build()) == expected


SLA = "node.kubernetes.io/sla"


@pytest.mark.parametrize(("node_builder", "tolerations", "gate_on", "gate_off"), [
    pytest.param(simple_node().taint(SLA, "950", "NoSchedule"), [Toleration(key=SLA, operator="Gt", value="750")],
                 RUN, KEEP_ONLY, id="gt-no-schedule"),
    pytest.param(simple_node().taint(SLA, "950", "NoExecute"), [Toleration(key=SLA, operator="Gt", value="750")],
                 RUN, NEVER, id="gt-no-execute"),
    pytest.param(simple_node().taint(SLA, "500", "NoExecute"), [Toleration(key=SLA, operator="Lt", value="750")],
                 RUN, NEVER, id="lt-no-execute"),
    pytest.param(simple_node().taint(SLA, "950", "NoExecute"), [Toleration(key=SLA, operator="Gt", value="0750")],
                 NEVER, NEVER, id="gt-value-not-canonical-tolerates-nothing-either-way"),
    pytest.param(simple_node().taint(SLA, "950", "NoExecute"),
                 [Toleration(key=SLA, operator="Gt", value="750"), exists(SLA, "NoExecute")],
                 RUN, RUN, id="another-toleration-still-tolerates"),
])
def test_comparison_operators_follow_the_feature_gate(node_builder: NodeBuilder, tolerations: list[Toleration],
                                                      gate_on: Placement, gate_off: Placement) -> None:
    """NodeShouldRunDaemonPod passes the TaintTolerationComparisonOperators gate to FindMatchingUntoleratedTaint:
    with it off (the default) a toleration with Lt or Gt tolerates nothing."""
    n, d = node_builder.build(), ds().tolerations(*tolerations).build()
    assert node_should_run_daemon_pod(n, d, comparison_operators=True) == gate_on
    assert node_should_run_daemon_pod(n, d, comparison_operators=False) == gate_off
    assert node_should_run_daemon_pod(n, d) == gate_off


def test_placement_is_a_plain_pair_and_inputs_are_untouched() -> None:
    """The answer unpacks like upstream's two booleans; neither the node nor the DaemonSet changes."""
    n = simple_node().taint("dedicated", "user1", "NoSchedule").build()
    d = ds().tolerations(exists(NOT_READY, "NoExecute", seconds=300)).build()
    before = (msgspec.to_builtins(n), d.spec.template.to_builtins())
    should_run, should_continue_running = node_should_run_daemon_pod(n, d)
    assert (should_run, should_continue_running) == (False, True)
    assert node_should_run_daemon_pod(n, d).should_continue_running is True
    assert (msgspec.to_builtins(n), d.spec.template.to_builtins()) == before


@pytest.mark.parametrize(("tolerations", "host_network", "expected"), [
    pytest.param([], False, DAEMON, id="none"),
    pytest.param([], True, [*DAEMON, NETWORK_TOLERATION], id="host-network"),
    pytest.param([DEDICATED], False, [DEDICATED, *DAEMON], id="user-tolerations-first"),
    pytest.param([exists(NOT_READY, "NoExecute", seconds=300)], False, DAEMON,
                 id="same-identity-replaced-seconds-dropped"),
    pytest.param([DEDICATED, exists(UNSCHEDULABLE, "NoSchedule"), exists(PID, "NoSchedule", seconds=5)], False,
                 [DEDICATED, exists(UNSCHEDULABLE, "NoSchedule"), exists(PID, "NoSchedule"), *DAEMON[:4]],
                 id="replaced-in-place"),
    pytest.param([exists(NOT_READY, "NoExecute", seconds=300), exists(NOT_READY, "NoExecute")], False,
                 [exists(NOT_READY, "NoExecute"), exists(NOT_READY, "NoExecute"), *DAEMON[1:]],
                 id="every-duplicate-replaced"),
    pytest.param([Toleration(key=NOT_READY, effect="NoExecute")], False,
                 [Toleration(key=NOT_READY, effect="NoExecute"), *DAEMON], id="different-operator-kept"),
    pytest.param([Toleration(key=NOT_READY, operator="Equal", effect="NoExecute")], False,
                 [Toleration(key=NOT_READY, operator="Equal", effect="NoExecute"), *DAEMON],
                 id="equal-is-not-exists"),
    pytest.param([Toleration(key=NOT_READY, operator="Exists")], False,
                 [Toleration(key=NOT_READY, operator="Exists"), *DAEMON], id="different-effect-kept"),
    pytest.param([exists(NETWORK, "NoSchedule", seconds=9)], False, [exists(NETWORK, "NoSchedule", seconds=9),
                                                                   *DAEMON], id="network-kept-without-host-network"),
    pytest.param([exists(NETWORK, "NoSchedule", seconds=9)], True, [NETWORK_TOLERATION, *DAEMON],
                 id="network-replaced-with-host-network"),
])
def test_daemon_pod_tolerations(tolerations: list[Toleration], host_network: bool,
                                expected: list[Toleration]) -> None:
    """AddOrUpdateDaemonPodTolerations, with AddOrUpdateTolerationInPodSpec's replace-by-identity rule."""
    spec = PodSpec(tolerations=tolerations, host_network=host_network)
    before = msgspec.to_builtins(spec)
    assert daemon_pod_tolerations(spec) == expected
    assert msgspec.to_builtins(spec) == before


def test_add_or_update_daemon_pod_tolerations_returns_a_new_spec() -> None:
    """The spec comes back whole with new tolerations; it shares nothing with the input."""
    spec = daemonset("ds").tolerations(DEDICATED).build().spec.template.spec
    before = msgspec.to_builtins(spec)
    result = add_or_update_daemon_pod_tolerations(spec)
    assert result.tolerations == [DEDICATED, *DAEMON]
    assert result.containers == spec.containers
    assert result.restart_policy == "Always"
    result.tolerations[0].value = "changed"
    result.containers[0].image = "changed"
    assert msgspec.to_builtins(spec) == before


def test_add_or_update_toleration() -> None:
    """AddOrUpdateTolerationInPodSpec: appended when new, replacing every match, copies returned."""
    infinite = exists(NOT_READY, "NoExecute")
    bounded = exists(NOT_READY, "NoExecute", seconds=300)
    assert add_or_update_toleration([], infinite) == [infinite]
    assert add_or_update_toleration([DEDICATED], infinite) == [DEDICATED, infinite]
    assert add_or_update_toleration([infinite, DEDICATED], bounded) == [bounded, DEDICATED]
    assert add_or_update_toleration([bounded, DEDICATED, bounded], infinite) == [infinite, DEDICATED, infinite]
    result = add_or_update_toleration([DEDICATED], infinite)
    assert result[0] is not DEDICATED and result[1] is not infinite


def test_template_tolerations_survive_in_the_encoded_template() -> None:
    """Assigning the new spec to a template copy keeps unmodelled template fields and drops the seconds."""
    template = PodTemplateSpec.from_builtins({
        "metadata": {"labels": {"app": "ds"}},
        "spec": {"containers": [{"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]}],
                 "tolerations": [{"key": NOT_READY, "operator": "Exists", "effect": "NoExecute",
                                  "tolerationSeconds": 300}]}})
    copied = template.copy()
    copied.spec = add_or_update_daemon_pod_tolerations(copied.spec)
    raw = copied.to_builtins()
    assert raw["spec"]["containers"] == [{"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]}]
    assert raw["spec"]["tolerations"][0] == {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute"}
    assert len(raw["spec"]["tolerations"]) == 6
    assert template.to_builtins()["spec"]["tolerations"][0]["tolerationSeconds"] == 300


HOSTNAME_TERM = term(expr("kubernetes.io/hostname", "In", "host_1"))
PREFERRED = [PreferredSchedulingTerm(weight=1, preference=HOSTNAME_TERM)]
PINNED_HOST_1 = pinned("host_1")

REPLACE_CASES = [
    # TestReplaceDaemonSetPodNodeNameNodeAffinity, in order
    pytest.param(None, PINNED_HOST_1, id="nil-affinity"),
    pytest.param(required(HOSTNAME_TERM), PINNED_HOST_1, id="hostname-expression-replaced"),
    pytest.param(Affinity(node_affinity=NodeAffinity(preferred_during_scheduling_ignored_during_execution=PREFERRED)),
                 required(term(fields=[expr("metadata.name", "In", "host_1")]), preferred=PREFERRED),
                 id="preferred-kept-required-added"),
    pytest.param(required(term(fields=[expr("metadata.name", "In", "host_1", "host_2")])), PINNED_HOST_1,
                 id="two-node-names"),
    pytest.param(required(term(expr("hostname", "In", "host_1")), term(fields=[expr("metadata.name", "In", "host_2")])),
                 PINNED_HOST_1, id="every-term-replaced"),
    pytest.param(required(term(fields=[expr("metadata.name", "NotIn", "host_2")])), PINNED_HOST_1, id="notin"),
    pytest.param(required(term(fields=[expr("metadata.foo", "In", "bar")])), PINNED_HOST_1, id="unknown-field-key"),
    # and
    pytest.param(Affinity(), PINNED_HOST_1, id="no-node-affinity"),
    pytest.param(required(HOSTNAME_TERM, preferred=PREFERRED),
                 required(term(fields=[expr("metadata.name", "In", "host_1")]), preferred=PREFERRED),
                 id="required-replaced-preferred-kept"),
    pytest.param(required(), PINNED_HOST_1, id="required-without-terms"),
]


@pytest.mark.parametrize(("affinity", "expected"), REPLACE_CASES)
def test_replace_node_name_node_affinity(affinity: Affinity | None, expected: Affinity) -> None:
    """ReplaceDaemonSetPodNodeNameNodeAffinity on the typed value; the input is left untouched."""
    before = msgspec.to_builtins(affinity)
    assert replace_node_name_node_affinity(affinity, "host_1") == expected
    assert msgspec.to_builtins(affinity) == before


@pytest.mark.parametrize(("affinity", "expected"), REPLACE_CASES)
def test_replace_node_name_node_affinity_raw(affinity: Affinity | None, expected: Affinity) -> None:
    """The same cases on the JSON form give the JSON form of the same answers."""
    raw = msgspec.to_builtins(affinity)
    before = msgspec.to_builtins(affinity)
    assert replace_node_name_node_affinity_raw(raw, "host_1") == msgspec.to_builtins(expected)
    assert raw == before


def test_replace_node_name_node_affinity_raw_keeps_what_is_not_modelled() -> None:
    """Pod (anti-)affinity, unknown fields and explicit nulls are handled as Go's decode-then-encode would."""
    pod_affinity = {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}
    raw = {"podAffinity": pod_affinity, "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": []}]}}}
    pin = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    result = replace_node_name_node_affinity_raw(raw, "n1")
    assert result == {"podAffinity": pod_affinity,
                      "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": pin}}}
    assert result["podAffinity"] is not pod_affinity
    assert raw["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {  # type: ignore[index]
        "nodeSelectorTerms": [{"matchExpressions": []}]}
    assert replace_node_name_node_affinity_raw({"nodeAffinity": None}, "n1") == {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": pin}}}
    assert replace_node_name_node_affinity_raw(
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": None}}, "n1") == {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": pin}}}


def test_pinned_pod_fits_its_node_only() -> None:
    """A DaemonSet whose template carries the pin places only on that node, whatever the node's labels."""
    d = ds().affinity(replace_node_name_node_affinity(required(term(expr("type", "In", "test"))), "test-node")).build()
    assert node_should_run_daemon_pod(simple_node().build(), d) == RUN
    assert node_should_run_daemon_pod(node("other-node").labels(SIMPLE_DAEMON_SET_LABEL2).build(), d) == NEVER


OPERATOR_MESSAGE = ('spec.template.spec.tolerations[{i}].operator: Unsupported value: "{v}": '
                    'supported values: "Equal", "Exists"')
EFFECT_MESSAGE = ('spec.template.spec.tolerations[{i}].effect: Unsupported value: "{v}": '
                  'supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"')


@pytest.mark.parametrize(("tolerations", "expected"), [
    pytest.param([], [], id="none"),
    pytest.param([DEDICATED, Toleration(operator="Exists"), Toleration(key="k", operator="Equal", value="v",
                                                                       effect="PreferNoSchedule"),
                  exists("k", "NoExecute", seconds=5), Toleration(key="n", operator="Gt", value="3")], [],
                 id="all-valid"),
    pytest.param([DEDICATED, DEDICATED, Toleration(key="k", operator="Foo")],
                 [("spec.template.spec.tolerations[2].operator", OPERATOR_MESSAGE.format(i=2, v="Foo"))],
                 id="unknown-operator"),
    pytest.param([Toleration(key="k", operator="exists", effect="NoExecute")],
                 [("spec.template.spec.tolerations[0].operator", OPERATOR_MESSAGE.format(i=0, v="exists"))],
                 id="operators-are-case-sensitive"),
    pytest.param([Toleration(key="k", effect="NoScheduleNoAdmit")],
                 [("spec.template.spec.tolerations[0].effect", EFFECT_MESSAGE.format(i=0, v="NoScheduleNoAdmit"))],
                 id="unknown-effect"),
    pytest.param([DEDICATED, Toleration(key="k", operator="In", effect="Never")],
                 [("spec.template.spec.tolerations[1].operator", OPERATOR_MESSAGE.format(i=1, v="In")),
                  ("spec.template.spec.tolerations[1].effect", EFFECT_MESSAGE.format(i=1, v="Never"))],
                 id="both-operator-then-effect"),
])
def test_validate_tolerations(tolerations: list[Toleration], expected: list[tuple[str, str]]) -> None:
    """(field path, message) per unknown operator or effect, worded as field.NotSupported (gate on: Gt is known)."""
    assert validate_tolerations(ds().tolerations(*tolerations).build(), comparison_operators=True) == expected


def test_validate_tolerations_without_comparison_operators() -> None:
    """With the TaintTolerationComparisonOperators gate off (its default), Lt and Gt are unknown too."""
    d = ds().tolerations(Toleration(key="n", operator="Lt", value="3"), DEDICATED).build()
    assert validate_tolerations(d, comparison_operators=True) == []
    assert validate_tolerations(d) == validate_tolerations(d, comparison_operators=False)
    assert validate_tolerations(d, comparison_operators=False) == [
        ("spec.template.spec.tolerations[0].operator",
         'spec.template.spec.tolerations[0].operator: Unsupported value: "Lt": supported values: "Equal", "Exists"')]


def test_deleting_timestamp_is_set_on_the_node() -> None:
    """Guard for the node-being-deleted case: the builder really marks the node as deleting."""
    assert simple_node().deleting(NOW).build().metadata.deletion_timestamp == format_time(NOW)
