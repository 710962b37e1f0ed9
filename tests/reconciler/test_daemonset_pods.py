"""A DaemonSet's pod bodies (CreatePodTemplate, GetPodFromTemplate, node-name pinning) and syncNodes' arithmetic.

Cases come from daemonset_util_test.go (TestCreatePodTemplate, TestGetTemplateGeneration), and
daemon_controller_test.go (TestSimpleDaemonSetScheduleDaemonSetPodsLaunchesPods, the ControllerRef checks
of validateSyncDaemonSets, TestDaemonSetPodCreateExpectationsError's burst) and syncNodes' code.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from kube.apps import DaemonSet
from kube.core import Pod, Toleration
from kube.names import ALPHABET
from kube.template import PodTemplateSpec
from kube.testing import daemonset, pod
from messages.actions import IDEMPOTENCY_ANNOTATION
from messages.naming import generated_name
from reconciler.core.daemonset.pods import (
    BURST_REPLICAS,
    NO_LABELS_ERROR,
    TEMPLATE_GENERATION_ANNOTATION,
    TEMPLATE_GENERATION_LABEL,
    UNIQUE_LABEL_KEY,
    DaemonPodFactory,
    create_key,
    create_pod_template,
    daemon_pod_body,
    sync_nodes,
    template_generation,
)
from reconciler.core.expectations import expect
from tests.reconciler.builders import NOW, names

HASH = "7b9c6d5f4"
LABELS = {"name": "simple-daemon", "type": "production"}


def exists(key: str, effect: str) -> dict[str, str]:
    return {"key": key, "operator": "Exists", "effect": effect}


DAEMON_TOLERATIONS = [
    exists("node.kubernetes.io/not-ready", "NoExecute"),
    exists("node.kubernetes.io/unreachable", "NoExecute"),
    exists("node.kubernetes.io/disk-pressure", "NoSchedule"),
    exists("node.kubernetes.io/memory-pressure", "NoSchedule"),
    exists("node.kubernetes.io/pid-pressure", "NoSchedule"),
    exists("node.kubernetes.io/unschedulable", "NoSchedule"),
]


def pin(node_name: str) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                     "values": [node_name]}]}]}


def new_ds(**annotations: str) -> DaemonSet:
    built = daemonset("foo").selector(LABELS).uid("ds-uid").build()
    built.metadata.annotations = dict(annotations)
    return built


RICH_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": dict(LABELS), "annotations": {"team": "infra"}, "finalizers": ["example.com/keep"]},
    "spec": {
        "containers": [{"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}],
                        "resources": {"requests": {"cpu": "50m"}}}],
        "volumes": [{"name": "host", "hostPath": {"path": "/var/log"}}],
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "user1", "effect": "NoSchedule"},
                        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "color", "operator": "In", "values": ["blue"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["elsewhere"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["a"]}]}}]},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"x": "y"}}}]}},
        "priorityClassName": "system-node-critical",
    },
}


def rich_ds(**annotations: str) -> DaemonSet:
    built = new_ds(**annotations)
    built.spec.template = PodTemplateSpec.from_builtins(copy.deepcopy(RICH_TEMPLATE))
    return built


# --- GetTemplateGeneration and CreatePodTemplate --------------------------------------------------------------


@pytest.mark.parametrize(("annotations", "expected"), [
    pytest.param({}, None, id="no annotation"),
    pytest.param({TEMPLATE_GENERATION_ANNOTATION: "1"}, 1, id="one"),
    pytest.param({TEMPLATE_GENERATION_ANNOTATION: "-7"}, -7, id="negative parses"),
    pytest.param({TEMPLATE_GENERATION_ANNOTATION: "9223372036854775807"}, 2**63 - 1, id="int64 max"),
    pytest.param({TEMPLATE_GENERATION_ANNOTATION: "9223372036854775808"}, None, id="overflow: error -> nil"),
    pytest.param({TEMPLATE_GENERATION_ANNOTATION: "bad"}, None, id="not a number: error -> nil"),
    pytest.param({TEMPLATE_GENERATION_ANNOTATION: ""}, None, id="empty: error -> nil"),
])
def test_template_generation(annotations: dict[str, str], expected: int | None) -> None:
    """TestGetTemplateGeneration, with syncNodes turning a parse error into nil."""
    assert template_generation(new_ds(**annotations)) == expected


@pytest.mark.parametrize(("generation", "hash_", "expected_extra"), [
    pytest.param(None, "", {}, id="no generation, no hash"),
    pytest.param(None, HASH, {UNIQUE_LABEL_KEY: HASH}, id="hash only"),
    pytest.param(1, "", {TEMPLATE_GENERATION_LABEL: "1"}, id="generation only"),
    pytest.param(3, HASH, {TEMPLATE_GENERATION_LABEL: "3", UNIQUE_LABEL_KEY: HASH}, id="both"),
])
def test_create_pod_template_labels(generation: int | None, hash_: str, expected_extra: dict[str, str]) -> None:
    """TestCreatePodTemplate: the generation and hash labels, and the daemon tolerations, on a copy."""
    ds = new_ds()
    before = ds.spec.template.to_builtins()
    template = create_pod_template(ds.spec.template, generation, hash_)
    assert template.metadata.labels == {**LABELS, **expected_extra}
    assert template.to_builtins()["spec"]["tolerations"] == DAEMON_TOLERATIONS
    assert ds.spec.template.to_builtins() == before


def test_create_pod_template_overwrites_template_labels_and_adds_host_network_toleration() -> None:
    ds = daemonset("foo").selector(LABELS).template_labels({UNIQUE_LABEL_KEY: "stale",
                                                            TEMPLATE_GENERATION_LABEL: "0"}).host_network().build()
    template = create_pod_template(ds.spec.template, 2, HASH)
    assert template.metadata.labels == {**LABELS, UNIQUE_LABEL_KEY: HASH, TEMPLATE_GENERATION_LABEL: "2"}
    assert template.to_builtins()["spec"]["tolerations"] == [
        *DAEMON_TOLERATIONS, exists("node.kubernetes.io/network-unavailable", "NoSchedule")]


def test_create_pod_template_keeps_unmodelled_fields_and_replaces_daemon_tolerations() -> None:
    template = create_pod_template(rich_ds().spec.template, None, HASH).to_builtins()
    spec = template["spec"]
    assert spec["volumes"] == RICH_TEMPLATE["spec"]["volumes"]
    assert spec["containers"] == RICH_TEMPLATE["spec"]["containers"]
    assert spec["priorityClassName"] == "system-node-critical"
    # the user's not-ready toleration has the daemon one's identity: replaced in place, tolerationSeconds gone
    assert spec["tolerations"] == [RICH_TEMPLATE["spec"]["tolerations"][0], *DAEMON_TOLERATIONS]
    assert template["metadata"]["annotations"] == {"team": "infra"}


# --- the pod body -------------------------------------------------------------------------------------------


def test_body() -> None:
    ds = new_ds()
    body = daemon_pod_body(ds, HASH, "node-3", "corr/create/node-3")
    meta = body["metadata"]
    assert (body["apiVersion"], body["kind"]) == ("v1", "Pod")
    assert meta["name"] == generated_name("foo-", "corr/create/node-3")
    assert re.fullmatch(rf"foo-[{ALPHABET}]{{5}}", meta["name"])
    assert (meta["generateName"], meta["namespace"]) == ("foo-", "default")
    assert meta["labels"] == {**LABELS, UNIQUE_LABEL_KEY: HASH}
    assert meta["annotations"] == {IDEMPOTENCY_ANNOTATION: "corr/create/node-3"}
    # validateSyncDaemonSets: every pod has a ControllerRef, apps/v1 DaemonSet, controller true
    assert meta["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "foo", "uid": "ds-uid",
                                        "controller": True, "blockOwnerDeletion": True}]
    spec = body["spec"]
    assert spec["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": pin("node-3")}}
    assert "nodeName" not in spec
    assert spec["tolerations"] == DAEMON_TOLERATIONS
    assert spec["containers"] == [{"name": "main", "image": "busybox"}]


def test_body_keeps_the_template_and_replaces_only_the_required_terms() -> None:
    ds = rich_ds(**{TEMPLATE_GENERATION_ANNOTATION: "4"})
    body = daemon_pod_body(ds, HASH, "node-1", "k")
    meta = body["metadata"]
    assert meta["labels"] == {**LABELS, TEMPLATE_GENERATION_LABEL: "4", UNIQUE_LABEL_KEY: HASH}
    assert meta["annotations"] == {"team": "infra", IDEMPOTENCY_ANNOTATION: "k"}
    assert meta["finalizers"] == ["example.com/keep"]
    affinity = body["spec"]["affinity"]
    original = RICH_TEMPLATE["spec"]["affinity"]
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == pin("node-1")
    assert affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == (
        original["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"])
    assert affinity["podAntiAffinity"] == original["podAntiAffinity"]
    assert body["spec"]["volumes"] == RICH_TEMPLATE["spec"]["volumes"]
    assert ds.spec.template.to_builtins() == RICH_TEMPLATE  # untouched


def test_factory_bodies_do_not_share_affinity() -> None:
    """TestSimpleDaemonSetScheduleDaemonSetPodsLaunchesPods: each pod has one term, one matchField: its node."""
    factory = DaemonPodFactory(rich_ds(), HASH)
    nodes = [f"node-{i}" for i in range(5)]
    bodies = [factory.body(n, create_key("corr", n)) for n in nodes]
    for node_name, body in zip(nodes, bodies, strict=True):
        terms = body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]
        assert "nodeName" not in body["spec"]
    assert len({b["metadata"]["name"] for b in bodies}) == 5


# --- syncNodes ------------------------------------------------------------------------------------------------


def victims(count: int) -> list[Pod]:
    return [pod(f"victim-{i:03d}").on_node(f"node-{i}").build() for i in range(count)]


@pytest.mark.parametrize(("creates", "deletes", "expected"), [
    pytest.param(0, 0, (0, 0), id="nothing: expectations still set to 0/0"),
    pytest.param(5, 2, (5, 2), id="under the burst"),
    pytest.param(BURST_REPLICAS, BURST_REPLICAS, (250, 250), id="at the burst"),
    pytest.param(BURST_REPLICAS + 1, 300, (250, 250), id="over the burst: capped"),
])
def test_sync_nodes_caps_at_burst(creates: int, deletes: int, expected: tuple[int, int]) -> None:
    ds = new_ds()
    nodes = [f"node-{i:03d}" for i in range(creates)]
    pods = victims(deletes)
    plan = sync_nodes(ds, nodes, pods, HASH, now=NOW, key_base="corr")
    assert (plan.create_diff, plan.delete_diff) == expected
    # the DaemonSet counts deletions (any pod it controls that goes counts, as upstream); the keys of those
    # it deletes itself let their deletion be observed whatever their last state's ownerReferences were
    deleting = frozenset(f"default/{p.metadata.name}" for p in pods[:expected[1]])
    assert plan.expectations == expect(expected[0], expected[1], NOW, deleting)
    assert [n for n, _, _ in plan.creates] == nodes[:expected[0]]
    assert plan.deferred_nodes == nodes[expected[0]:]
    assert names(plan.deletes) == names(pods[:expected[1]])
    assert names(plan.deferred_deletes) == names(pods[expected[1]:])
    assert plan.create_error is None


def test_sync_nodes_bodies_and_keys() -> None:
    ds = new_ds()
    plan = sync_nodes(ds, ["node-b", "node-a"], [], HASH, now=NOW, key_base="ds-7")
    assert [(n, k) for n, k, _ in plan.creates] == [("node-b", "ds-7/create/node-b"), ("node-a", "ds-7/create/node-a")]
    for node_name, key, body in plan.creates:
        assert body == daemon_pod_body(ds, HASH, node_name, key)
        assert body["metadata"]["annotations"][IDEMPOTENCY_ANNOTATION] == key


def test_sync_nodes_with_a_custom_burst() -> None:
    plan = sync_nodes(new_ds(), ["a", "b", "c"], victims(3), HASH, now=NOW, key_base="k", burst=2)
    assert ([n for n, _, _ in plan.creates], plan.deferred_nodes) == (["a", "b"], ["c"])
    assert plan.expectations == expect(2, 2, NOW, frozenset({"default/victim-000", "default/victim-001"}))


def test_sync_nodes_without_labels_creates_nothing() -> None:
    """createPods refuses a pod without labels before calling the API: no create is expected, deletes go on."""
    ds = daemonset("foo").uid("u").build()
    ds.spec.template.metadata.labels = {}
    plan = sync_nodes(ds, ["a", "b", "c"], victims(1), "", now=NOW, key_base="k")
    assert plan.creates == []
    assert plan.create_error == NO_LABELS_ERROR
    assert plan.expectations == expect(0, 1, NOW, frozenset({"default/victim-000"}))
    assert (plan.create_diff, names(plan.deletes)) == (3, ["victim-000"])
    # a hash alone is a label: creates go ahead
    assert len(sync_nodes(ds, ["a"], [], HASH, now=NOW, key_base="k").creates) == 1


def test_toleration_model_is_unchanged_by_factory() -> None:
    ds = daemonset("foo").selector(LABELS).tolerations(Toleration(key="k", operator="Exists")).build()
    DaemonPodFactory(ds, HASH)
    assert ds.spec.template.spec.tolerations == [Toleration(key="k", operator="Exists")]
