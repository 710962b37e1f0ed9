"""PodTemplateSpec keeps every field a user wrote through decode, edit and encode."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import msgspec
import pytest

from kube import codec
from kube.apps import DaemonSet, ReplicaSet
from kube.core import Affinity, Container, PodSpec, Toleration
from kube.meta import ObjectMeta
from kube.nodeaffinity import replace_daemon_node_affinity
from kube.template import PodTemplateSpec

RICH_TEMPLATE: dict[str, Any] = {
    "metadata": {
        "creationTimestamp": None,
        "labels": {"app": "fluentd", "tier": "logging"},
        "annotations": {"prometheus.io/scrape": "true"},
    },
    "spec": {
        "initContainers": [{"name": "init-perms", "image": "busybox:1.36", "command": ["sh", "-c", "chmod 777 /x"]}],
        "containers": [
            {
                "name": "fluentd",
                "image": "fluent/fluentd:v1.16",
                "env": [
                    {
                        "name": "NODE",
                        "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}},
                    },
                    {"name": "LEVEL", "value": "info"},
                ],
                "resources": {"limits": {"memory": "200Mi"}, "requests": {"cpu": "100m", "memory": "200Mi"}},
                "volumeMounts": [{"name": "varlog", "mountPath": "/var/log", "readOnly": True}],
                "securityContext": {"privileged": False, "capabilities": {"drop": ["ALL"]}},
                "imagePullPolicy": "IfNotPresent",
                "terminationMessagePath": "/dev/termination-log",
            },
            {"name": "sidecar", "image": "busybox", "args": ["sleep", "infinity"]},
        ],
        "volumes": [{"name": "varlog", "hostPath": {"path": "/var/log", "type": ""}}],
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "fluentd"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
        "hostNetwork": False,
        "dnsPolicy": "ClusterFirst",
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": 30,
        "priorityClassName": "system-node-critical",
        "securityContext": {},
        "notAKubernetesField": {"nested": [1, 2.5, None, "x"], "flag": True},
    },
}


def decoded(template: dict[str, Any]) -> PodTemplateSpec:
    return PodTemplateSpec.from_builtins(copy.deepcopy(template))


@pytest.mark.parametrize(
    "template",
    [
        pytest.param(RICH_TEMPLATE, id="volumes-env-resources-init-containers-unknown-field"),
        pytest.param({}, id="empty-object"),
        pytest.param({"metadata": {}, "spec": {}}, id="empty-metadata-and-spec"),
        pytest.param({"spec": {"affinity": None, "terminationGracePeriodSeconds": None}}, id="explicit-nulls"),
        pytest.param({"spec": {"hostNetwork": False, "containers": []}}, id="explicit-defaults"),
    ],
)
def test_unmodified_template_round_trips_to_an_equal_object(template: dict[str, Any]) -> None:
    """Decoding then encoding gives back the same JSON object, modelled or not."""
    assert decoded(template).to_builtins() == template


@pytest.mark.parametrize("owner", [pytest.param(DaemonSet, id="daemonset"), pytest.param(ReplicaSet, id="replicaset")])
def test_template_survives_a_round_trip_through_its_owner(owner: type[DaemonSet] | type[ReplicaSet]) -> None:
    """The codec wires the template in: bytes -> object -> bytes keeps spec.template equal."""
    body = {
        "apiVersion": "apps/v1",
        "kind": owner.__name__,
        "metadata": {"name": "x"},
        "spec": {"template": RICH_TEMPLATE},
    }
    obj = codec.decode(json.dumps(body).encode(), owner)
    again = json.loads(codec.encode(obj))
    assert again["spec"]["template"] == RICH_TEMPLATE
    assert codec.decode_builtin(codec.to_builtins(obj), owner) == obj


def test_typed_views_read_the_modelled_fields() -> None:
    """The views expose what kubus models and nothing it does not."""
    template = decoded(RICH_TEMPLATE)
    assert template.metadata.labels == {"app": "fluentd", "tier": "logging"}
    assert [c.name for c in template.spec.containers] == ["fluentd", "sidecar"]
    assert template.spec.termination_grace_period_seconds == 30
    assert template.spec.tolerations == [
        Toleration(key="node-role.kubernetes.io/control-plane", operator="Exists", effect="NoSchedule")
    ]
    assert template.spec.affinity == Affinity()


def test_edits_through_the_views_keep_unmodelled_fields() -> None:
    """Changing image, node name, tolerations and affinity leaves env, volumes and the rest alone."""
    template = decoded(RICH_TEMPLATE)
    template.spec.containers[0].image = "fluent/fluentd:v1.17"
    template.spec.node_name = "node-1"
    template.spec.tolerations.append(Toleration(key="node.kubernetes.io/not-ready", operator="Exists"))
    template.spec.affinity = replace_daemon_node_affinity(template.spec.affinity, "node-1")
    template.metadata.labels["controller-revision-hash"] = "abc"

    out = template.to_builtins()

    expected = copy.deepcopy(RICH_TEMPLATE)
    expected["metadata"]["labels"]["controller-revision-hash"] = "abc"
    spec = expected["spec"]
    spec["containers"][0]["image"] = "fluent/fluentd:v1.17"
    spec["nodeName"] = "node-1"
    spec["tolerations"].append({"key": "node.kubernetes.io/not-ready", "operator": "Exists"})
    spec["affinity"]["nodeAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
        }
    }
    assert out == expected


def test_containers_are_paired_by_name_when_reordered() -> None:
    """Reordering containers moves each one's unmodelled fields with it."""
    template = decoded(RICH_TEMPLATE)
    template.spec.containers.reverse()
    containers = template.to_builtins()["spec"]["containers"]
    assert containers == [RICH_TEMPLATE["spec"]["containers"][1], RICH_TEMPLATE["spec"]["containers"][0]]


def test_clearing_a_field_removes_it() -> None:
    """Setting a modelled field back to its default drops it from the JSON."""
    template = decoded(RICH_TEMPLATE)
    template.spec.tolerations = []
    template.spec.termination_grace_period_seconds = None
    spec = template.to_builtins()["spec"]
    assert "tolerations" not in spec
    assert "terminationGracePeriodSeconds" not in spec
    assert spec["volumes"] == RICH_TEMPLATE["spec"]["volumes"]


def test_template_built_from_views_encodes_like_a_struct() -> None:
    """A template made in code has no unmodelled fields and omits defaults."""
    template = PodTemplateSpec(
        metadata=ObjectMeta(labels={"app": "x"}), spec=PodSpec(containers=[Container(name="c", image="i")])
    )
    assert template.to_builtins() == {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    assert template.to_pod_builtins()["kind"] == "Pod"


def test_copies_are_independent() -> None:
    """copy() and deepcopy() share neither views nor raw JSON with the original."""
    original = decoded(RICH_TEMPLATE)
    clone = original.copy()
    clone.spec.containers[0].image = "other"
    clone.to_builtins()["spec"]["volumes"].append({"name": "mutated"})
    assert original.to_builtins() == RICH_TEMPLATE
    assert clone != original
    assert copy.deepcopy(original) == original


def test_returned_json_does_not_alias_the_template() -> None:
    """Mutating the output of to_builtins() does not change the template."""
    template = decoded(RICH_TEMPLATE)
    template.to_builtins()["spec"]["volumes"][0]["name"] = "changed"
    assert template.to_builtins() == RICH_TEMPLATE


def test_repr_lists_unmodelled_keys() -> None:
    """The repr shows which top-level parts only live in the raw JSON."""
    text = repr(decoded(RICH_TEMPLATE))
    assert "spec.volumes" in text
    assert "spec.notAKubernetesField" in text


@pytest.mark.parametrize(
    ("template", "message"),
    [
        pytest.param(
            {"spec": {"containers": "x"}},
            "Expected `array`, got `str` - at `$.spec.containers`",
            id="bad-list",
        ),
        pytest.param([], "Expected `object`, got `array`", id="not-an-object"),
    ],
)
def test_malformed_template_names_the_field(template: Any, message: str) -> None:
    """from_builtins raises msgspec's ValidationError with the path inside the template."""
    with pytest.raises(msgspec.ValidationError, match=re.escape(message)):
        PodTemplateSpec.from_builtins(template)
