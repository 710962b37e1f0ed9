"""kube.codec decodes kube-apiserver JSON, ignores unknown fields and names bad fields."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from kube import codec
from kube.apps import ControllerRevision, DaemonSet, ReplicaSet
from kube.core import Event, Node, Pod
from kube.meta import List, Status, WatchEvent

MANAGED_FIELDS = [
    {
        "manager": "kube-controller-manager",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2024-05-01T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:phase": {}}},
        "subresource": "status",
    }
]

NODE = {
    "kind": "Node",
    "apiVersion": "v1",
    "metadata": {
        "name": "worker-1",
        "uid": "0b6f7d4e-8b3a-4a1e-9c55-1d2f3e4a5b6c",
        "resourceVersion": "48213",
        "creationTimestamp": "2024-05-01T09:00:00Z",
        "labels": {"kubernetes.io/hostname": "worker-1", "kubernetes.io/os": "linux"},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        "managedFields": MANAGED_FIELDS,
    },
    "spec": {
        "podCIDR": "10.244.1.0/24",
        "podCIDRs": ["10.244.1.0/24"],
        "providerID": "kind://docker/kind/worker-1",
        "taints": [
            {
                "key": "node.kubernetes.io/not-ready",
                "effect": "NoSchedule",
                "timeAdded": "2024-05-01T09:00:00Z",
            }
        ],
        "unschedulable": True,
    },
    "status": {
        "capacity": {"cpu": "8", "memory": "16318136Ki", "pods": "110"},
        "allocatable": {"cpu": "8", "memory": "16318136Ki", "pods": "110"},
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "lastHeartbeatTime": "2024-05-01T10:00:00Z",
                "lastTransitionTime": "2024-05-01T09:00:00Z",
                "reason": "KubeletNotReady",
                "message": "container runtime network not ready",
            }
        ],
        "addresses": [{"type": "InternalIP", "address": "172.18.0.3"}],
        "nodeInfo": {"kubeletVersion": "v1.33.1", "architecture": "amd64"},
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
    },
}

POD: dict[str, Any] = {
    "kind": "Pod",
    "apiVersion": "v1",
    "metadata": {
        "name": "fluentd-7xk2p",
        "generateName": "fluentd-",
        "namespace": "kube-system",
        "uid": "5f1c2d3e-0000-4000-8000-000000000001",
        "resourceVersion": "48300",
        "generation": 1,
        "creationTimestamp": "2024-05-01T10:00:00Z",
        "labels": {"app": "fluentd", "controller-revision-hash": "6d8f7b9c5", "pod-template-generation": "1"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": "fluentd",
                "uid": "9a8b7c6d-0000-4000-8000-000000000002",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "managedFields": MANAGED_FIELDS,
    },
    "spec": {
        "volumes": [
            {
                "name": "kube-api-access",
                "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
            }
        ],
        "containers": [{"name": "fluentd", "image": "fluent/fluentd:v1.16", "resources": {}}],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "nodeName": "worker-1",
        "schedulerName": "default-scheduler",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["worker-1"]}]}
                    ]
                }
            }
        },
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "priority": 2000001000,
        "enableServiceLinks": True,
    },
    "status": {
        "observedGeneration": 1,
        "phase": "Running",
        "conditions": [
            {
                "type": "Initialized",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": "2024-05-01T10:00:01Z",
            },
            {
                "type": "Ready",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": "2024-05-01T10:00:05Z",
            },
        ],
        "hostIP": "172.18.0.3",
        "hostIPs": [{"ip": "172.18.0.3"}],
        "podIP": "10.244.1.7",
        "podIPs": [{"ip": "10.244.1.7"}],
        "startTime": "2024-05-01T10:00:00Z",
        "containerStatuses": [
            {
                "name": "fluentd",
                "state": {"running": {"startedAt": "2024-05-01T10:00:03Z"}},
                "lastState": {},
                "ready": True,
                "restartCount": 2,
                "image": "fluent/fluentd:v1.16",
                "imageID": "docker.io/fluent/fluentd@sha256:abc",
                "started": True,
            }
        ],
        "qosClass": "BestEffort",
    },
}

TEMPLATE = {
    "metadata": {"creationTimestamp": None, "labels": {"app": "fluentd"}},
    "spec": {
        "containers": [{"name": "fluentd", "image": "fluent/fluentd:v1.16", "resources": {}}],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "securityContext": {},
        "schedulerName": "default-scheduler",
    },
}

DAEMONSET = {
    "kind": "DaemonSet",
    "apiVersion": "apps/v1",
    "metadata": {
        "name": "fluentd",
        "namespace": "kube-system",
        "uid": "9a8b7c6d-0000-4000-8000-000000000002",
        "resourceVersion": "48400",
        "generation": 3,
        "creationTimestamp": "2024-05-01T09:59:00Z",
        "annotations": {"deprecated.daemonset.template.generation": "3"},
        "managedFields": MANAGED_FIELDS,
    },
    "spec": {
        "selector": {"matchLabels": {"app": "fluentd"}},
        "template": TEMPLATE,
        "updateStrategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 0},
        },
        "minReadySeconds": 5,
        "revisionHistoryLimit": 10,
    },
    "status": {
        "currentNumberScheduled": 3,
        "numberMisscheduled": 1,
        "desiredNumberScheduled": 3,
        "numberReady": 2,
        "observedGeneration": 3,
        "updatedNumberScheduled": 2,
        "numberAvailable": 2,
        "numberUnavailable": 1,
        "collisionCount": 1,
    },
}

REPLICASET = {
    "kind": "ReplicaSet",
    "apiVersion": "apps/v1",
    "metadata": {
        "name": "web-5d8f9c7b6",
        "namespace": "default",
        "uid": "11111111-0000-4000-8000-000000000003",
        "resourceVersion": "5000",
        "generation": 2,
        "labels": {"app": "web", "pod-template-hash": "5d8f9c7b6"},
        "annotations": {"deployment.kubernetes.io/revision": "1"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "web",
                "uid": "22222222-0000-4000-8000-000000000004",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    },
    "spec": {
        "replicas": 3,
        "minReadySeconds": 10,
        "selector": {
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["frontend"]}],
        },
        "template": {"metadata": {"labels": {"app": "web", "tier": "frontend"}}, "spec": TEMPLATE["spec"]},
    },
    "status": {
        "replicas": 3,
        "fullyLabeledReplicas": 3,
        "readyReplicas": 2,
        "availableReplicas": 1,
        "observedGeneration": 2,
        "conditions": [
            {
                "type": "ReplicaFailure",
                "status": "True",
                "lastTransitionTime": "2024-05-01T10:00:00Z",
                "reason": "FailedCreate",
                "message": 'pods "web-5d8f9c7b6-x" is forbidden: exceeded quota',
            }
        ],
    },
}

CONTROLLER_REVISION = {
    "kind": "ControllerRevision",
    "apiVersion": "apps/v1",
    "metadata": {
        "name": "fluentd-6d8f7b9c5",
        "namespace": "kube-system",
        "uid": "33333333-0000-4000-8000-000000000005",
        "resourceVersion": "48390",
        "labels": {"app": "fluentd", "controller-revision-hash": "6d8f7b9c5"},
        "ownerReferences": POD["metadata"]["ownerReferences"],
    },
    "data": {"spec": {"template": {**TEMPLATE, "$patch": "replace"}}},
    "revision": 3,
}

EVENT = {
    "kind": "Event",
    "apiVersion": "v1",
    "metadata": {
        "name": "fluentd.17c9a1b2c3d4e5f6",
        "namespace": "kube-system",
        "uid": "44444444-0000-4000-8000-000000000006",
        "resourceVersion": "48401",
        "creationTimestamp": "2024-05-01T10:00:00Z",
    },
    "involvedObject": {
        "kind": "DaemonSet",
        "namespace": "kube-system",
        "name": "fluentd",
        "uid": "9a8b7c6d-0000-4000-8000-000000000002",
        "apiVersion": "apps/v1",
        "resourceVersion": "48390",
    },
    "reason": "SuccessfulCreate",
    "message": "Created pod: fluentd-7xk2p",
    "source": {"component": "daemonset-controller"},
    "firstTimestamp": "2024-05-01T10:00:00Z",
    "lastTimestamp": "2024-05-01T10:00:00Z",
    "count": 1,
    "type": "Normal",
    "eventTime": None,
    "reportingComponent": "daemonset-controller",
    "reportingInstance": "",
}


def as_bytes(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        pytest.param(NODE, Node, id="node"),
        pytest.param(POD, Pod, id="pod"),
        pytest.param(DAEMONSET, DaemonSet, id="daemonset"),
        pytest.param(REPLICASET, ReplicaSet, id="replicaset"),
        pytest.param(CONTROLLER_REVISION, ControllerRevision, id="controllerrevision"),
        pytest.param(EVENT, Event, id="event"),
    ],
)
def test_api_server_json_decodes_and_re_decodes(body: dict[str, Any], kind: type[Any]) -> None:
    """Each kind decodes from kube-apiserver JSON; its encoding decodes back to an equal object."""
    obj = codec.decode(as_bytes(body), kind)
    assert obj.kind == body["kind"]
    assert obj.metadata.name == body["metadata"]["name"]
    assert codec.decode(codec.encode(obj), kind) == obj
    assert codec.decode_builtin(body, kind) == obj


def test_pod_fields_land_in_the_model() -> None:
    """Acronym fields (hostIP, podIP) and nested statuses map to snake_case attributes."""
    pod = codec.decode(as_bytes(POD), Pod)
    assert pod.status.host_ip == "172.18.0.3"
    assert pod.status.pod_ip == "10.244.1.7"
    assert pod.status.container_statuses[0].restart_count == 2
    assert pod.status.conditions[1].last_transition_time == "2024-05-01T10:00:05Z"
    assert pod.spec.tolerations[1].toleration_seconds == 300
    assert pod.metadata.owner_references[0].block_owner_deletion is True


def test_node_fields_land_in_the_model() -> None:
    """podCIDR(s) and providerID keep their API spelling on the wire."""
    node = codec.decode(as_bytes(NODE), Node)
    assert node.spec.pod_cidrs == ["10.244.1.0/24"]
    assert node.spec.provider_id.startswith("kind://")
    encoded = json.loads(codec.encode(node))
    assert encoded["spec"]["podCIDR"] == "10.244.1.0/24"
    assert "managedFields" not in encoded["metadata"]


def test_workload_fields_land_in_the_model() -> None:
    """IntOrString fields keep their type; the template keeps every field."""
    ds = codec.decode(as_bytes(DAEMONSET), DaemonSet)
    assert ds.spec.update_strategy.rolling_update is not None
    assert ds.spec.update_strategy.rolling_update.max_unavailable == "25%"
    assert ds.spec.update_strategy.rolling_update.max_surge == 0
    assert ds.status.collision_count == 1
    assert json.loads(codec.encode(ds))["spec"]["template"] == TEMPLATE
    rs = codec.decode(as_bytes(REPLICASET), ReplicaSet)
    assert rs.spec.replicas == 3
    assert rs.status.conditions[0].reason == "FailedCreate"
    revision = codec.decode(as_bytes(CONTROLLER_REVISION), ControllerRevision)
    assert revision.data == CONTROLLER_REVISION["data"]


def test_top_level_kinds_always_write_api_version_and_kind() -> None:
    """An empty object still says what it is; nested defaults are omitted."""
    assert json.loads(codec.encode(Pod())) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {},
        "spec": {},
        "status": {},
    }


def test_list_response_decodes() -> None:
    """List[Pod] reads items and the list metadata used to resume a watch."""
    body: dict[str, Any] = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "48500", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"},
        "items": [POD, POD],
    }
    pods = codec.decode(as_bytes(body), List[Pod])
    assert pods.metadata.resource_version == "48500"
    assert pods.metadata.continue_ == "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"
    assert [p.metadata.name for p in pods.items] == ["fluentd-7xk2p", "fluentd-7xk2p"]
    assert json.loads(codec.encode(pods))["metadata"]["continue"] == body["metadata"]["continue"]


@pytest.mark.parametrize(
    ("line", "expected_type", "expected_class"),
    [
        pytest.param({"type": "ADDED", "object": POD}, "ADDED", Pod, id="added"),
        pytest.param(
            {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}},
            "BOOKMARK",
            Pod,
            id="bookmark",
        ),
        pytest.param(
            {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "code": 410,
                    "reason": "Expired",
                },
            },
            "ERROR",
            Status,
            id="error-is-a-status",
        ),
    ],
)
def test_watch_events_decode_by_type(line: dict[str, Any], expected_type: str, expected_class: type[Any]) -> None:
    """ERROR events carry a Status, every other event the watched kind."""
    event = codec.decode_watch_event(as_bytes(line), Pod)
    assert event.type == expected_type
    assert isinstance(event.object, expected_class)


def test_watch_event_generic_decodes_directly() -> None:
    """WatchEvent[Kind] works with plain decode when errors are not expected."""
    event = codec.decode(as_bytes({"type": "DELETED", "object": NODE}), WatchEvent[Node])
    assert event.object.metadata.name == "worker-1"


@pytest.mark.parametrize(
    ("body", "kind", "expected"),
    [
        pytest.param(
            {
                "kind": "ReplicaSet",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"replicas": "three"},
            },
            ReplicaSet,
            ("ReplicaSet", "default/web", "$.spec.replicas", "Expected `int | null`, got `str`"),
            id="replicas-three",
        ),
        pytest.param(
            {
                "kind": "DaemonSet",
                "metadata": {"name": "ds"},
                "spec": {"template": {"spec": {"containers": [{"name": 5}]}}},
            },
            DaemonSet,
            ("DaemonSet", "ds", "$.spec.template.spec.containers[0].name", "Expected `str`, got `int`"),
            id="inside-the-template",
        ),
        pytest.param(
            {"kind": "PodList", "items": [{"metadata": {"name": "a", "labels": {"x": 1}}}]},
            List[Pod],
            ("PodList", "", "$.items[0].metadata.labels[...]", "Expected `str`, got `int`"),
            id="inside-a-list",
        ),
        pytest.param(
            {"metadata": {"name": "n"}, "spec": {"taints": {}}},
            Node,
            ("Node", "n", "$.spec.taints", "Expected `array`, got `object`"),
            id="kind-from-the-target-type",
        ),
    ],
)
def test_malformed_object_names_kind_object_and_field(
    body: dict[str, Any], kind: type[Any], expected: tuple[str, str, str, str]
) -> None:
    """DecodeError carries kind, namespace/name, JSON path and message, from bytes and from dicts."""
    attempts: list[Callable[[], object]] = [
        lambda: codec.decode(as_bytes(body), kind),
        lambda: codec.decode_builtin(body, kind),
    ]
    for attempt in attempts:
        with pytest.raises(codec.DecodeError) as caught:
            attempt()
        error = caught.value
        assert (error.kind, error.name, error.path, error.message) == expected
        assert expected[2] in str(error)
        assert isinstance(error, ValueError)


def test_malformed_json_is_a_decode_error() -> None:
    """Bytes that are not JSON at all still raise DecodeError, without a path."""
    with pytest.raises(codec.DecodeError, match="JSON is malformed") as caught:
        codec.decode(b"{not json", Pod)
    assert caught.value.path == ""


def test_to_builtins_uses_api_field_names() -> None:
    """to_builtins gives plain dicts with camelCase keys, templates included."""
    ds = codec.decode(as_bytes(DAEMONSET), DaemonSet)
    plain = codec.to_builtins(ds)
    assert plain["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": "25%", "maxSurge": 0}
    assert plain["spec"]["template"] == TEMPLATE


@pytest.mark.parametrize(("body", "expected"), [
    pytest.param(NODE, ("Node", "", "worker-1", "", "0b6f7d4e-8b3a-4a1e-9c55-1d2f3e4a5b6c", "48213"), id="node"),
    pytest.param({"metadata": {"generateName": "web-", "namespace": "default"}},
                 ("", "default", "", "web-", "", ""), id="a-pod-to-create-named-by-generateName"),
    pytest.param({"kind": "Pod", "metadata": {"name": "p", "labels": "not-a-map"}, "spec": 3},
                 ("Pod", "", "p", "", "", ""), id="readable-where-the-model-is-not"),
    pytest.param({}, ("", "", "", "", "", ""), id="nothing-set"),
])
def test_decode_head_reads_kind_and_identity_only(body: dict[str, Any], expected: tuple[str, ...]) -> None:
    """decode_head reads kind, name, generateName, namespace, uid and resourceVersion and skips the rest."""
    head = codec.decode_head(as_bytes(body))
    meta = head.metadata
    assert (head.kind, meta.namespace, meta.name, meta.generate_name, meta.uid, meta.resource_version) == expected


def test_decode_head_of_something_not_an_object_raises() -> None:
    """A JSON array (or a wrongly typed name) is not an object's head: msgspec.DecodeError."""
    for data in (b"[1, 2]", b'{"metadata": {"name": 5}}'):
        with pytest.raises(msgspec.DecodeError):
            codec.decode_head(data)


def test_decode_metadata_reads_all_of_metadata_and_skips_the_rest() -> None:
    """decode_metadata gives the whole ObjectMeta (annotations, deletion timestamp) of any kind, spec unread."""
    body = {"kind": "Pod", "metadata": {"name": "p", "annotations": {"kubus.io/idempotency-key": "k"},
                                        "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": 3}
    meta = codec.decode_metadata(as_bytes(body))
    assert (meta.name, meta.annotations, meta.deletion_timestamp) == (
        "p", {"kubus.io/idempotency-key": "k"}, "2026-01-01T00:00:00Z")


def test_decode_metadata_of_metadata_the_model_refuses_raises() -> None:
    """Metadata that does not fit the model (labels not a map) is a msgspec.DecodeError, as is a JSON array."""
    for data in (b"[1, 2]", b'{"metadata": {"name": "p", "labels": "not-a-map"}}'):
        with pytest.raises(msgspec.DecodeError):
            codec.decode_metadata(data)
