"""sim.defaulting: the defaults kube-apiserver v1.32 applies, checked against literal objects."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest

from sim.defaulting import default_object, format_quantity, parse_quantity

NOT_READY = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
               "tolerationSeconds": 300}
CONTAINER_DEFAULTS = {"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
POD_SPEC_DEFAULTS = {"dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                     "securityContext": {}, "terminationGracePeriodSeconds": 30}


def pod(**spec: Any) -> dict[str, Any]:
    spec.setdefault("containers", [{"name": "web", "image": "nginx"}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"}, "spec": spec}


def daemonset(**spec: Any) -> dict[str, Any]:
    spec.setdefault("selector", {"matchLabels": {"app": "agent"}})
    spec.setdefault("template", {"metadata": {"labels": {"app": "agent"}},
                                 "spec": {"containers": [{"name": "agent", "image": "agent"}]}})
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": spec}


def test_full_pod_matches_what_kube_apiserver_returns() -> None:
    """A pod exercising every common default comes back exactly as kube-apiserver stores it."""
    container = {
        "name": "web", "image": "nginx:1.25", "ports": [{"containerPort": 80}],
        "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "livenessProbe": {"httpGet": {"port": 80}},
        "resources": {"limits": {"cpu": "0.5", "memory": "128Mi"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    volumes = [{"name": "data"}, {"name": "cfg", "configMap": {"name": "cfg"}},
               {"name": "host", "hostPath": {"path": "/var/log"}}]
    expected_container = {
        "name": "web", "image": "nginx:1.25", "imagePullPolicy": "IfNotPresent", **CONTAINER_DEFAULTS,
        "ports": [{"containerPort": 80, "protocol": "TCP"}],
        "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}],
        "livenessProbe": {"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1,
                          "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "500m", "memory": "128Mi"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    expected = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "containers": [expected_container],
            "volumes": [{"name": "data", "emptyDir": {}},
                        {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 420}},
                        {"name": "host", "hostPath": {"path": "/var/log", "type": ""}}],
            **POD_SPEC_DEFAULTS,
            "enableServiceLinks": True, "priority": 0, "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [NOT_READY, UNREACHABLE], "serviceAccountName": "default", "serviceAccount": "default",
        },
        "status": {"phase": "Pending", "qosClass": "Guaranteed"},
    }
    assert default_object("Pod", pod(containers=[container], volumes=volumes)) == expected


def test_daemonset_template_matches_what_kube_apiserver_returns() -> None:
    """A DaemonSet gets the apps/v1 defaults and a template without any pod-only (admission) fields."""
    expected_spec = {
        "selector": {"matchLabels": {"app": "agent"}},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
        "revisionHistoryLimit": 10,
        "template": {
            "metadata": {"labels": {"app": "agent"}, "creationTimestamp": None},
            "spec": {"containers": [{"name": "agent", "image": "agent", "imagePullPolicy": "Always",
                                     "resources": {}, **CONTAINER_DEFAULTS}],
                     **POD_SPEC_DEFAULTS},
        },
    }
    assert default_object("DaemonSet", daemonset())["spec"] == expected_spec


@pytest.mark.parametrize(("strategy", "expected"), [
    pytest.param(None, {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                 id="absent"),
    pytest.param({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "10%"}},
                 {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": "10%"}},
                 id="only-missing-fields-filled"),
    pytest.param({"type": "RollingUpdate"},
                 {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                 id="rolling-without-parameters"),
    pytest.param({"type": "OnDelete"}, {"type": "OnDelete"}, id="on-delete-untouched"),
])
def test_daemonset_update_strategy(strategy: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    """updateStrategy defaults to RollingUpdate 1/0 and fills only what is missing."""
    ds = daemonset(updateStrategy=strategy) if strategy is not None else daemonset()
    assert default_object("DaemonSet", ds)["spec"]["updateStrategy"] == expected


@pytest.mark.parametrize(("image", "policy"), [
    pytest.param("nginx", "Always", id="untagged"),
    pytest.param("nginx:latest", "Always", id="latest"),
    pytest.param("nginx:1.25", "IfNotPresent", id="tagged"),
    pytest.param("nginx@sha256:" + "a" * 64, "IfNotPresent", id="digest"),
    pytest.param("registry:5000/team/app", "Always", id="registry-port-untagged"),
    pytest.param("registry:5000/team/app:v2", "IfNotPresent", id="registry-port-tagged"),
    pytest.param("Not An Image", "IfNotPresent", id="unparseable"),
])
def test_image_pull_policy(image: str, policy: str) -> None:
    """imagePullPolicy follows parsers.ParseImageName: Always only for an explicit or implied :latest."""
    defaulted = default_object("Pod", pod(containers=[{"name": "c", "image": image}]))
    assert defaulted["spec"]["containers"][0]["imagePullPolicy"] == policy


@pytest.mark.parametrize(("tolerations", "expected"), [
    pytest.param(None, [NOT_READY, UNREACHABLE], id="none"),
    pytest.param([{"operator": "Exists"}], [{"operator": "Exists"}], id="tolerates-everything"),
    pytest.param([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
                 [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}, UNREACHABLE],
                 id="tolerates-not-ready-forever"),
    pytest.param([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoSchedule"}],
                 [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoSchedule"},
                  NOT_READY, UNREACHABLE], id="other-effect-does-not-count"),
])
def test_default_toleration_seconds(tolerations: list[dict[str, Any]] | None, expected: list[dict[str, Any]]) -> None:
    """DefaultTolerationSeconds adds the 300s NoExecute tolerations unless the pod already tolerates them."""
    spec = {"tolerations": tolerations} if tolerations is not None else {}
    assert default_object("Pod", pod(**spec))["spec"]["tolerations"] == expected


@pytest.mark.parametrize(("resources", "qos"), [
    pytest.param([{}], "BestEffort", id="best-effort"),
    pytest.param([{"requests": {"cpu": "0", "memory": "0"}}], "BestEffort", id="zero-requests"),
    pytest.param([{"limits": {"cpu": "1", "memory": "1Gi"}}], "Guaranteed", id="limits-only"),
    pytest.param([{"requests": {"cpu": "1000m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1024Mi"}}],
                 "Guaranteed", id="equal-in-other-units"),
    pytest.param([{"requests": {"cpu": "100m"}}], "Burstable", id="requests-only"),
    pytest.param([{"limits": {"cpu": "1", "memory": "1Gi"}}, {}], "Burstable", id="one-container-unbounded"),
    pytest.param([{"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}],
                 "Burstable", id="request-below-limit"),
])
def test_qos_class(resources: list[dict[str, Any]], qos: str) -> None:
    """status.qosClass is computed from cpu and memory as qos.GetPodQOS does."""
    containers = [{"name": f"c{i}", "image": "x", "resources": r} for i, r in enumerate(resources)]
    assert default_object("Pod", pod(containers=containers))["status"]["qosClass"] == qos


@pytest.mark.parametrize(("text", "canonical"), [
    pytest.param("0.5", "500m", id="fraction"),
    pytest.param("1000m", "1", id="whole-milli"),
    pytest.param("100m", "100m", id="milli"),
    pytest.param("1024Mi", "1Gi", id="binary-up"),
    pytest.param("1.5Ki", "1536", id="binary-not-whole"),
    pytest.param("512Ki", "512Ki", id="binary"),
    pytest.param(2000, "2k", id="json-number"),
    pytest.param("1500", "1500", id="decimal-not-whole"),
    pytest.param("1e3", "1e3", id="exponent"),
    pytest.param("0.0001", "1m", id="rounded-up-to-milli"),
    pytest.param("0", "0", id="zero"),
])
def test_quantities_are_canonical(text: Any, canonical: str) -> None:
    """Resource quantities are rounded up to milli-units and spelled as Quantity.String() spells them."""
    container = {"name": "c", "image": "x", "resources": {"requests": {"memory": text}}}
    defaulted = default_object("Pod", pod(containers=[container]))
    assert defaulted["spec"]["containers"][0]["resources"]["requests"]["memory"] == canonical


def test_parse_quantity_keeps_exact_value_and_format() -> None:
    """parse_quantity returns the exact value and the suffix family that decides the output format."""
    assert parse_quantity("1.5Gi") == (Fraction(3 * 2**29), "BinarySI")
    assert parse_quantity("nonsense") is None
    assert format_quantity(Fraction(-3, 2), "DecimalSI") == "-1500m"


def test_pod_only_defaults_stay_out_of_templates() -> None:
    """enableServiceLinks, priority, tolerations and the service account are pod-only, as upstream."""
    template_spec = default_object("DaemonSet", daemonset())["spec"]["template"]["spec"]
    for key in ("enableServiceLinks", "priority", "preemptionPolicy", "tolerations", "serviceAccountName"):
        assert key not in template_spec


def test_service_account_alias_round_trips() -> None:
    """The deprecated serviceAccount field mirrors serviceAccountName, in either direction."""
    assert default_object("Pod", pod(serviceAccount="robot"))["spec"]["serviceAccountName"] == "robot"
    ds = daemonset()
    ds["spec"]["template"]["spec"]["serviceAccountName"] = "agent"
    assert default_object("DaemonSet", ds)["spec"]["template"]["spec"]["serviceAccount"] == "agent"


def test_system_priority_class_and_host_network() -> None:
    """A system PriorityClass sets its priority; hostNetwork pods get hostPort = containerPort."""
    spec = default_object("Pod", pod(priorityClassName="system-node-critical", hostNetwork=True,
                                     containers=[{"name": "c", "image": "x", "ports": [{"containerPort": 9100}]}]))
    assert spec["spec"]["priority"] == 2000001000
    assert spec["spec"]["containers"][0]["ports"] == [{"containerPort": 9100, "hostPort": 9100, "protocol": "TCP"}]


@pytest.mark.parametrize(("kind", "obj", "expected"), [
    pytest.param("Namespace", {"metadata": {"name": "team"}},
                 {"metadata": {"name": "team", "labels": {"kubernetes.io/metadata.name": "team"}},
                  "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}, id="namespace"),
    pytest.param("Node", {"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4", "memory": "8192Mi"}}},
                 {"metadata": {"name": "n1"}, "spec": {},
                  "status": {"capacity": {"cpu": "4", "memory": "8Gi"}, "allocatable": {"cpu": "4", "memory": "8Gi"}}},
                 id="node"),
    pytest.param("ReplicaSet", {"metadata": {"name": "rs"}, "spec": {}},
                 {"metadata": {"name": "rs"}, "spec": {"replicas": 1, "template": {
                     "metadata": {"creationTimestamp": None}, "spec": POD_SPEC_DEFAULTS}}}, id="replicaset"),
    pytest.param("Event", {"metadata": {"name": "e"}},
                 {"metadata": {"name": "e"}, "involvedObject": {}, "source": {}, "firstTimestamp": None,
                  "lastTimestamp": None, "eventTime": None, "reportingComponent": "", "reportingInstance": ""},
                 id="event"),
    pytest.param("ControllerRevision", {"metadata": {"name": "r"}, "data": {}},
                 {"metadata": {"name": "r"}, "data": {}, "revision": 0}, id="controllerrevision"),
    pytest.param("Unknown", {"a": 1}, {"a": 1}, id="unknown-kind"),
])
def test_other_kinds(kind: str, obj: dict[str, Any], expected: dict[str, Any]) -> None:
    """Namespaces, nodes, ReplicaSets, events and revisions get exactly their upstream defaults."""
    assert default_object(kind, obj) == expected


@pytest.mark.parametrize("kind", ["Pod", "DaemonSet", "ReplicaSet", "Namespace", "Node", "Event",
                                  "ControllerRevision"])
def test_defaulting_is_idempotent(kind: str) -> None:
    """Defaulting an already defaulted object changes nothing."""
    objects = {"Pod": pod(containers=[{"name": "c", "image": "x", "resources": {"limits": {"cpu": "0.5"}}}]),
               "DaemonSet": daemonset(), "ReplicaSet": {"metadata": {"name": "rs"}, "spec": {"template": {}}},
               "Namespace": {"metadata": {"name": "ns"}},
               "Node": {"metadata": {"name": "n"}, "status": {"capacity": {"memory": "1.5Gi"}}},
               "Event": {"metadata": {"name": "e"}}, "ControllerRevision": {"metadata": {"name": "r"}}}
    once = default_object(kind, objects[kind])
    assert default_object(kind, copy.deepcopy(once)) == once


@pytest.mark.parametrize("obj", [
    pytest.param(None, id="null"),
    pytest.param([], id="array"),
    pytest.param({"spec": "nope"}, id="spec-string"),
    pytest.param({"spec": {"containers": "nope", "volumes": [1, None], "tolerations": {}}}, id="lists-wrong"),
    pytest.param({"spec": {"containers": [{"resources": [], "ports": "x", "livenessProbe": 3}]}}, id="container-wrong"),
    pytest.param({"spec": {"template": [], "updateStrategy": "x"}}, id="apps-wrong"),
    pytest.param({"metadata": "x", "spec": {"template": {"spec": {"containers": [None, {"image": 5}]}}}},
                 id="template-wrong"),
    pytest.param({"status": [], "metadata": {"name": 3}, "spec": {"priorityClassName": ["x"]}}, id="status-wrong"),
])
@pytest.mark.parametrize("kind", ["Pod", "DaemonSet", "ReplicaSet", "Namespace", "Node", "Event",
                                  "ControllerRevision"])
def test_malformed_input_never_raises(kind: str, obj: Any) -> None:
    """Wrong JSON types are left for validation to report; defaulting must not crash on them."""
    default_object(kind, copy.deepcopy(obj))
