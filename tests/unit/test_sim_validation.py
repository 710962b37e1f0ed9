"""sim.validation: kube-apiserver's 422 rules, with its exact messages, on defaulted objects."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sim.defaulting import default_object
from sim.validating import validate
from sim.validation import ApiFieldError, format_invalid_message

SUBDOMAIN_REGEX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    f"start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    f"'{SUBDOMAIN_REGEX}')"
)
LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
LABEL_NAME_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
UPDATABLE = (
    "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
    "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
    "previously negative)\n"
)


def pod(name: str = "web", **spec: Any) -> dict[str, Any]:
    spec.setdefault("containers", [{"name": "web", "image": "nginx"}])
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}
    return default_object("Pod", obj)


def daemonset(**spec: Any) -> dict[str, Any]:
    spec.setdefault("selector", {"matchLabels": {"app": "agent"}})
    spec.setdefault("template", {"metadata": {"labels": {"app": "agent"}},
                                 "spec": {"containers": [{"name": "agent", "image": "agent"}]}})
    obj = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
           "spec": spec}
    return default_object("DaemonSet", obj)


def replicaset(**spec: Any) -> dict[str, Any]:
    spec.setdefault("selector", {"matchLabels": {"app": "web"}})
    spec.setdefault("template", {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx"}]}})
    obj = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "namespace": "default"},
           "spec": spec}
    return default_object("ReplicaSet", obj)


def messages(kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    return [error.error() for error in validate(kind, obj, old)]


def with_meta(obj: dict[str, Any], **meta: Any) -> dict[str, Any]:
    obj["metadata"].update(meta)
    return obj


@pytest.mark.parametrize(("kind", "obj"), [
    pytest.param("Pod", pod(), id="pod"),
    pytest.param("DaemonSet", daemonset(), id="daemonset"),
    pytest.param("DaemonSet", daemonset(updateStrategy={"type": "OnDelete"}), id="daemonset-on-delete"),
    pytest.param("DaemonSet", daemonset(updateStrategy={"type": "RollingUpdate", "rollingUpdate": {
        "maxUnavailable": 0, "maxSurge": "25%"}}), id="daemonset-surge"),
    pytest.param("ReplicaSet", replicaset(replicas=0), id="replicaset"),
    pytest.param("Namespace", default_object("Namespace", {"metadata": {"name": "team-a"}}), id="namespace"),
    pytest.param("Node", default_object("Node", {"metadata": {"name": "node-1.example"}, "spec": {"taints": [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"}]}}),
        id="node"),
    pytest.param("Event", default_object("Event", {"metadata": {"name": "web.17a", "namespace": "default"},
                                                   "involvedObject": {"kind": "Pod", "namespace": "default"}}),
                 id="event"),
    pytest.param("ControllerRevision", {"metadata": {"name": "agent-5d4", "namespace": "kube-system"},
                                        "data": {"spec": {}}, "revision": 1}, id="controllerrevision"),
])
def test_valid_objects_pass(kind: str, obj: dict[str, Any]) -> None:
    """Ordinary, defaulted objects of every served kind validate cleanly."""
    assert messages(kind, obj) == []


@pytest.mark.parametrize(("kind", "obj", "expected"), [
    pytest.param("Pod", with_meta(pod(), name="a" * 254),
                 [f'metadata.name: Invalid value: "{"a" * 254}": must be no more than 253 bytes'], id="name-254"),
    pytest.param("Pod", with_meta(pod(), name="Foo_Bar"),
                 [f'metadata.name: Invalid value: "Foo_Bar": {SUBDOMAIN_MESSAGE}'], id="name-not-subdomain"),
    pytest.param("Pod", with_meta(pod(), name=""),
                 ["metadata.name: Required value: name or generateName is required"], id="name-missing"),
    pytest.param("Pod", with_meta(pod(), namespace=""), ["metadata.namespace: Required value"], id="no-namespace"),
    pytest.param("Namespace", {"metadata": {"name": "team.a"}},
                 ['metadata.name: Invalid value: "team.a": must not contain dots'], id="namespace-is-a-label"),
    pytest.param("Pod", with_meta(pod(), labels={"-app": "x"}),
                 [f'metadata.labels: Invalid value: "-app": {LABEL_NAME_MESSAGE}'], id="label-key"),
    pytest.param("Pod", with_meta(pod(), labels={"a/b/c": "x"}),
                 ["metadata.labels: Invalid value: \"a/b/c\": a valid label key must consist of alphanumeric "
                  "characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
                  "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
                  "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' "
                  "(e.g. 'example.com/MyName')"], id="label-key-two-slashes"),
    pytest.param("Pod", with_meta(pod(), labels={"app": "x" * 64}),
                 [f'metadata.labels: Invalid value: "{"x" * 64}": must be no more than 63 bytes'], id="label-long"),
    pytest.param("Pod", with_meta(pod(), labels={"app": "a b"}),
                 [f'metadata.labels: Invalid value: "a b": {LABEL_VALUE_MESSAGE}'], id="label-value"),
    pytest.param("Pod", with_meta(pod(), annotations={"a": "x" * 262144}),
                 ["metadata.annotations: Too long: may not be more than 262144 bytes"], id="annotations-size"),
    pytest.param("Pod", with_meta(pod(), finalizers=["custom"]),
                 ['metadata.finalizers: Invalid value: "custom": name is neither a standard finalizer name nor '
                  "is it fully qualified"], id="finalizer"),
])
def test_metadata_rules(kind: str, obj: dict[str, Any], expected: list[str]) -> None:
    """Names, namespaces, labels, annotations and finalizers follow ValidateObjectMeta word for word."""
    assert messages(kind, obj) == expected


@pytest.mark.parametrize(("spec", "expected"), [
    pytest.param({"containers": []}, ["spec.containers: Required value"], id="no-containers"),
    pytest.param({"containers": [{"name": "Web", "image": "x"}]},
                 ['spec.containers[0].name: Invalid value: "Web": a lowercase RFC 1123 label must consist of lower '
                  "case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. "
                  "'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"],
                 id="container-name"),
    pytest.param({"containers": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]},
                 ['spec.containers[1].name: Duplicate value: "a"'], id="duplicate-container"),
    pytest.param({"containers": [{"name": "a"}]}, ["spec.containers[0].image: Required value"], id="no-image"),
    pytest.param({"restartPolicy": "Sometimes"},
                 ['spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", '
                  '"Never"'], id="restart-policy"),
    pytest.param({"dnsPolicy": "Google"},
                 ['spec.dnsPolicy: Unsupported value: "Google": supported values: "ClusterFirst", '
                  '"ClusterFirstWithHostNet", "Default", "None"'], id="dns-policy"),
    pytest.param({"nodeSelector": {"disk": "ssd fast"}},
                 [f'spec.nodeSelector: Invalid value: "ssd fast": {LABEL_VALUE_MESSAGE}'], id="node-selector"),
    pytest.param({"containers": [{"name": "a", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]},
                 ['spec.containers[0].volumeMounts[0].name: Not found: "v"'], id="mount-without-volume"),
    pytest.param({"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 70000}]}]},
                 ["spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, "
                  "inclusive"], id="port-range"),
])
def test_pod_spec_rules(spec: dict[str, Any], expected: list[str]) -> None:
    """Containers, policies, node selectors, mounts and ports are checked as ValidatePodSpec does."""
    assert messages("Pod", pod(**spec)) == expected


@pytest.mark.parametrize(("toleration", "expected"), [
    pytest.param({"key": "a", "operator": "Exists"}, [], id="exists"),
    pytest.param({"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}, [], id="all-keys"),
    pytest.param({"key": "a", "operator": "Exists", "value": "b"},
                 ['spec.tolerations[0].operator: Invalid value: core.Toleration{Key:"a", Operator:"Exists", '
                  'Value:"b", Effect:"", TolerationSeconds:(*int64)(nil)}: value must be empty when `operator` is '
                  "'Exists'"], id="exists-with-value"),
    pytest.param({"operator": "Equal", "value": "b"},
                 ['spec.tolerations[0].operator: Invalid value: "Equal": operator must be Exists when `key` is '
                  'empty, which means "match all values and all keys"'], id="empty-key-needs-exists"),
    pytest.param({"key": "a", "operator": "Gt", "value": "1"},
                 ['spec.tolerations[0].operator: Unsupported value: "Gt": supported values: "Equal", "Exists"'],
                 id="operator"),
    pytest.param({"key": "a", "operator": "Exists", "effect": "NoRun"},
                 ['spec.tolerations[0].effect: Unsupported value: "NoRun": supported values: "NoSchedule", '
                  '"PreferNoSchedule", "NoExecute"'], id="effect"),
    pytest.param({"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5},
                 ['spec.tolerations[0].effect: Invalid value: "NoSchedule": effect must be \'NoExecute\' when '
                  "`tolerationSeconds` is set"], id="seconds-need-no-execute"),
])
def test_toleration_rules(toleration: dict[str, Any], expected: list[str]) -> None:
    """Tolerations are checked as ValidateTolerations does (keys, operators, values, effects, seconds)."""
    assert messages("Pod", pod(tolerations=[toleration])) == expected


AFFINITY_PATH = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def node_affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize(("terms", "expected"), [
    pytest.param([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                  {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}], [], id="valid"),
    pytest.param([], [f"{AFFINITY_PATH}: Required value: must have at least one node selector term"], id="no-terms"),
    pytest.param([{"matchExpressions": [{"key": "zone", "operator": "In"}]}],
                 [f"{AFFINITY_PATH}[0].matchExpressions[0].values: Required value: must be specified when "
                  "`operator` is 'In' or 'NotIn'"], id="in-without-values"),
    pytest.param([{"matchExpressions": [{"key": "zone", "operator": "Exists", "values": ["a"]}]}],
                 [f"{AFFINITY_PATH}[0].matchExpressions[0].values: Forbidden: may not be specified when "
                  "`operator` is 'Exists' or 'DoesNotExist'"], id="exists-with-values"),
    pytest.param([{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["1", "2"]}]}],
                 [f"{AFFINITY_PATH}[0].matchExpressions[0].values: Required value: must be specified single value "
                  "when `operator` is 'Lt' or 'Gt'"], id="gt-two-values"),
    pytest.param([{"matchExpressions": [{"key": "zone", "operator": "Near"}]}],
                 [f'{AFFINITY_PATH}[0].matchExpressions[0].operator: Invalid value: "Near": not a valid selector '
                  "operator"], id="bad-operator"),
    pytest.param([{"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["a"]}]}],
                 [f'{AFFINITY_PATH}[0].matchFields[0].key: Invalid value: "metadata.labels": not a valid field '
                  "selector key"], id="field-key"),
    pytest.param([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}],
                 [f"{AFFINITY_PATH}[0].matchFields[0].values: Required value: must be only one value when "
                  "`operator` is 'In' or 'NotIn' for node field selector"], id="field-two-values"),
    pytest.param([{"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}],
                 [f'{AFFINITY_PATH}[0].matchFields[0].operator: Invalid value: "Exists": not a valid selector '
                  "operator"], id="field-operator"),
])
def test_node_affinity_rules(terms: list[dict[str, Any]], expected: list[str]) -> None:
    """Required node affinity terms are checked as ValidateNodeSelector does."""
    assert messages("Pod", pod(affinity=node_affinity(*terms))) == expected


def rolling(max_unavailable: Any, max_surge: Any) -> dict[str, Any]:
    return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": max_unavailable, "maxSurge": max_surge}}


RU = "spec.updateStrategy.rollingUpdate"


@pytest.mark.parametrize(("ds", "expected"), [
    pytest.param(daemonset(updateStrategy=rolling("150%", 0)),
                 [f"{RU}.maxUnavailable: Invalid value: 150%: must not be greater than 100%"], id="over-100-percent"),
    pytest.param(daemonset(updateStrategy=rolling(0, 0)),
                 [f"{RU}.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"], id="both-zero"),
    pytest.param(daemonset(updateStrategy=rolling("0%", "0%")),
                 [f"{RU}.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"], id="both-zero-percent"),
    pytest.param(daemonset(updateStrategy=rolling(1, 1)),
                 [f"{RU}.maxSurge: Invalid value: 1: may not be set when maxUnavailable is non-zero"], id="both-set"),
    pytest.param(daemonset(updateStrategy=rolling("half", 0)),
                 [f"{RU}.maxUnavailable: Invalid value: half: a valid percent string must be a numeric string "
                  "followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                  f"{RU}.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"], id="not-a-percent"),
    pytest.param(daemonset(updateStrategy=rolling(-1, 0)),
                 [f"{RU}.maxUnavailable: Invalid value: -1: must be greater than or equal to 0"], id="negative"),
    pytest.param(daemonset(updateStrategy={"type": "Recreate"}),
                 ['spec.updateStrategy: Unsupported value: apps.DaemonSetUpdateStrategy{Type:"Recreate", '
                  'RollingUpdate:(*apps.RollingUpdateDaemonSet)(nil)}: supported values: "RollingUpdate", '
                  '"OnDelete"'], id="strategy-type"),
    pytest.param(daemonset(selector={"matchLabels": {"app": "other"}}),
                 ['spec.template.metadata.labels: Invalid value: map[string]string{"app":"agent"}: `selector` does '
                  "not match template `labels`"], id="selector-mismatch"),
    pytest.param(daemonset(selector=None),
                 ['spec.template.metadata.labels: Invalid value: map[string]string{"app":"agent"}: `selector` does '
                  "not match template `labels`"], id="selector-missing"),
    pytest.param(daemonset(selector={"matchExpressions": [{"key": "app", "operator": "Like", "values": ["a"]}]}),
                 ['spec.selector.matchExpressions[0].operator: Invalid value: "Like": not a valid selector operator'],
                 id="selector-operator"),
    pytest.param(daemonset(selector={"matchExpressions": [{"key": "app", "operator": "In"}]}),
                 ["spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is "
                  "'In' or 'NotIn'"], id="selector-in-without-values"),
    pytest.param(daemonset(selector={}),
                 ["spec.selector: Invalid value: &LabelSelector{MatchLabels:map[string]string{},MatchExpressions:"
                  "[]LabelSelectorRequirement{},}: empty selector is invalid for daemonset"], id="selector-empty"),
    pytest.param(daemonset(template={"metadata": {"labels": {"app": "agent"}}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "a", "image": "b"}]}}),
                 ['spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"'],
                 id="restart-policy"),
    pytest.param(daemonset(template={"metadata": {"labels": {"app": "agent", "bad": "a b"}}, "spec": {
        "containers": [{"name": "a"}]}}),
                 [f'spec.template.labels: Invalid value: "a b": {LABEL_VALUE_MESSAGE}',
                  "spec.template.spec.containers[0].image: Required value"], id="template-validated"),
    pytest.param(daemonset(revisionHistoryLimit=-1, minReadySeconds=-5),
                 ["spec.minReadySeconds: Invalid value: -5: must be greater than or equal to 0",
                  "spec.revisionHistoryLimit: Invalid value: -1: must be greater than or equal to 0"],
                 id="negative-counts"),
])
def test_daemonset_rules(ds: dict[str, Any], expected: list[str]) -> None:
    """DaemonSets are checked as ValidateDaemonSet does, including the rolling-update arithmetic."""
    assert messages("DaemonSet", ds) == expected


@pytest.mark.parametrize(("rs", "expected"), [
    pytest.param(replicaset(replicas=-1), ["spec.replicas: Invalid value: -1: must be greater than or equal to 0"],
                 id="negative-replicas"),
    pytest.param(replicaset(selector=None),
                 ["spec.selector: Required value",
                  'spec.template.metadata.labels: Invalid value: map[string]string{"app":"web"}: `selector` does '
                  "not match template `labels`"], id="selector-missing"),
    pytest.param(replicaset(selector={"matchLabels": {}}),
                 ["spec.selector: Invalid value: &LabelSelector{MatchLabels:map[string]string{},MatchExpressions:"
                  "[]LabelSelectorRequirement{},}: empty selector is invalid for deployment"], id="selector-empty"),
    pytest.param(replicaset(selector={"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]}),
                 ["spec.selector.matchExpressions[0].values: Forbidden: may not be specified when `operator` is "
                  "'Exists' or 'DoesNotExist'",
                  "spec.selector: Invalid value: &LabelSelector{MatchLabels:map[string]string{},MatchExpressions:"
                  "[]LabelSelectorRequirement{LabelSelectorRequirement{Key:app,Operator:Exists,Values:[x],},},}: "
                  "invalid label selector"], id="selector-invalid"),
])
def test_replicaset_rules(rs: dict[str, Any], expected: list[str]) -> None:
    """ReplicaSets require a selector and non-negative replicas, as ValidateReplicaSetSpec does."""
    assert messages("ReplicaSet", rs) == expected


@pytest.mark.parametrize(("kind", "make"), [
    pytest.param("DaemonSet", daemonset, id="daemonset"),
    pytest.param("ReplicaSet", replicaset, id="replicaset"),
])
def test_selector_is_immutable(kind: str, make: Any) -> None:
    """An apps/v1 selector may not change on update, even to one the template still matches."""
    old = make()
    new = copy.deepcopy(old)
    labels = new["spec"]["template"]["metadata"]["labels"]
    labels["tier"] = "x"
    new["spec"]["selector"] = {"matchLabels": dict(labels)}
    shown = ",".join(f"{k}: {v}" for k, v in sorted(labels.items()))
    assert messages(kind, new, old) == [
        f"spec.selector: Invalid value: &LabelSelector{{MatchLabels:map[string]string{{{shown},}},"
        "MatchExpressions:[]LabelSelectorRequirement{},}: field is immutable"]
    assert messages(kind, copy.deepcopy(old), old) == []


def updated_pod(change: Any) -> list[str]:
    old = pod(tolerations=[{"key": "a", "operator": "Exists"}])
    new = copy.deepcopy(old)
    change(new["spec"])
    return messages("Pod", default_object("Pod", new), old)  # the registry defaults before it validates


@pytest.mark.parametrize(("change", "expected"), [
    pytest.param(lambda s: s["containers"][0].update(image="nginx:2"), [], id="image"),
    pytest.param(lambda s: s["tolerations"].append({"key": "b", "operator": "Exists"}), [], id="add-toleration"),
    pytest.param(lambda s: s.update(activeDeadlineSeconds=30), [], id="set-deadline"),
    pytest.param(lambda s: s["tolerations"].pop(0),
                 ["spec.tolerations: Forbidden: existing toleration can not be modified except its "
                  "tolerationSeconds"], id="remove-toleration"),
    pytest.param(lambda s: s["containers"].append({"name": "b", "image": "x"}),
                 ["spec.containers: Forbidden: pod updates may not add or remove containers"], id="add-container"),
    pytest.param(lambda s: s.update(nodeSelector={"disk": "ssd"}),
                 [UPDATABLE + '  core.PodSpec{\n- \tNodeSelector: null,\n+ \tNodeSelector: {"disk": "ssd"},\n  }'],
                 id="node-selector"),
])
def test_pod_update_rules(change: Any, expected: list[str]) -> None:
    """Only images, activeDeadlineSeconds and added tolerations of a pod may change."""
    assert updated_pod(change) == expected


def test_pod_update_identity_fields_are_immutable() -> None:
    """metadata.name, namespace and uid may not change on update."""
    old = with_meta(pod(), uid="1")
    new = with_meta(copy.deepcopy(old), uid="2")
    assert messages("Pod", new, old) == ['metadata.uid: Invalid value: "2": field is immutable']


@pytest.mark.parametrize(("kind", "obj", "old", "expected"), [
    pytest.param("ControllerRevision", {"metadata": {"name": "r", "namespace": "d"}, "revision": -1}, None,
                 ["data: Required value: data is mandatory",
                  "revision: Invalid value: -1: must be greater than or equal to 0"], id="revision"),
    pytest.param("ControllerRevision", {"metadata": {"name": "r", "namespace": "d"}, "data": {"a": 2}},
                 {"metadata": {"name": "r", "namespace": "d"}, "data": {"a": 1}},
                 ["data: Invalid value: runtime.RawExtension{Raw:[]byte{0x7b, 0x22, 0x61, 0x22, 0x3a, 0x32, 0x7d}, "
                  "Object:runtime.Object(nil)}: field is immutable"], id="revision-data-immutable"),
    pytest.param("Event", default_object("Event", {"metadata": {"name": "e", "namespace": "default"},
                                                   "involvedObject": {"kind": "Pod", "namespace": "other"}}), None,
                 ['involvedObject.namespace: Invalid value: "other": does not match event.namespace'],
                 id="event-namespace"),
    pytest.param("Node", {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "a", "effect": "Sometimes"}]}},
                 None, ['spec.taints[0].effect: Unsupported value: "Sometimes": supported values: "NoSchedule", '
                        '"PreferNoSchedule", "NoExecute"'], id="node-taint"),
])
def test_other_kinds(kind: str, obj: dict[str, Any], old: dict[str, Any] | None, expected: list[str]) -> None:
    """ControllerRevisions, events and nodes get their upstream checks."""
    assert messages(kind, obj, old) == expected


@pytest.mark.parametrize(("errors", "expected"), [
    pytest.param([ApiFieldError.required("spec.selector")],
                 'DaemonSet.apps "foo" is invalid: spec.selector: Required value', id="one"),
    pytest.param([ApiFieldError.required("spec.selector"), ApiFieldError.invalid("spec.replicas", -1, "must be >= 0"),
                  ApiFieldError.required("spec.selector")],
                 'DaemonSet.apps "foo" is invalid: [spec.selector: Required value, spec.replicas: Invalid value: -1: '
                 "must be >= 0]", id="several-deduplicated"),
    pytest.param([], 'DaemonSet.apps "foo" is invalid', id="none"),
])
def test_format_invalid_message(errors: list[ApiFieldError], expected: str) -> None:
    """The Status message is errors.NewInvalid's: one error bare, several bracketed, duplicates dropped."""
    assert format_invalid_message("DaemonSet.apps", "foo", errors) == expected


@pytest.mark.parametrize(("error", "cause"), [
    pytest.param(ApiFieldError.invalid("metadata.name", "x", "bad"),
                 {"reason": "FieldValueInvalid", "message": 'Invalid value: "x": bad', "field": "metadata.name"},
                 id="invalid"),
    pytest.param(ApiFieldError.not_supported("spec.x", "b", ["a"]),
                 {"reason": "FieldValueNotSupported", "message": 'Unsupported value: "b": supported values: "a"',
                  "field": "spec.x"}, id="not-supported"),
    pytest.param(ApiFieldError.too_long("metadata.annotations", 1),
                 {"reason": "FieldValueTooLong", "message": "Too long: may not be more than 1 byte",
                  "field": "metadata.annotations"}, id="too-long"),
    pytest.param(ApiFieldError.invalid("a", "tab\there\x01", "x"),
                 {"reason": "FieldValueInvalid", "message": 'Invalid value: "tab\\there\\x01": x', "field": "a"},
                 id="go-quoting"),
    pytest.param(ApiFieldError("a", "FieldValueDuplicate", "", None),
                 {"reason": "FieldValueDuplicate", "message": "Duplicate value: null", "field": "a"}, id="null"),
])
def test_cause(error: ApiFieldError, cause: dict[str, str]) -> None:
    """cause() is the StatusCause kube-apiserver sends: reason, the body without the path, and the path."""
    assert error.cause() == cause


@pytest.mark.parametrize("obj", [
    pytest.param("not an object", id="string"),
    pytest.param({"metadata": [], "spec": 3}, id="top-level-types"),
    pytest.param({"metadata": {"name": 5, "labels": {"a": 1}, "annotations": "x", "finalizers": [1],
                               "ownerReferences": [None]}}, id="metadata-types"),
    pytest.param({"metadata": {"name": "x"}, "spec": {"containers": [None, {"name": 1, "ports": [3]}],
                                                      "tolerations": [5], "volumes": "x", "affinity": []}},
                 id="pod-types"),
    pytest.param({"metadata": {"name": "x"}, "spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [None, {"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [1]}]}]}}}}}, id="affinity-types"),
    pytest.param({"metadata": {"name": "x"}, "spec": {"selector": "app", "template": [],
                                                      "updateStrategy": {"type": "RollingUpdate",
                                                                         "rollingUpdate": {"maxSurge": [1]}}}},
                 id="apps-types"),
    pytest.param({"metadata": {"name": "x"}, "spec": {"selector": {"matchLabels": [], "matchExpressions": [
        None, {"key": 1, "values": "x"}]}, "replicas": "3"}}, id="selector-types"),
    pytest.param({"metadata": {"name": "x"}, "spec": {"taints": [{"key": 1}], "finalizers": {}},
                  "involvedObject": "x", "status": []}, id="other-types"),
    pytest.param({"metadata": {"name": "x", "namespace": ["a"]}, "involvedObject": {"kind": ["Pod"], "namespace": 1},
                  "eventTime": "now", "data": None, "revision": "1"}, id="event-types"),
])
@pytest.mark.parametrize("kind", ["Pod", "DaemonSet", "ReplicaSet", "Namespace", "Node", "Event",
                                  "ControllerRevision"])
def test_malformed_input_yields_errors_not_exceptions(kind: str, obj: Any) -> None:
    """Wrong JSON types become ApiFieldErrors (on create and update); validation never raises."""
    errors = validate(kind, copy.deepcopy(obj), None) + validate(kind, copy.deepcopy(obj), copy.deepcopy(obj))
    assert all(isinstance(error.error(), str) and error.cause()["reason"] for error in errors)


@pytest.mark.parametrize(
    ("kind", "obj", "field"),
    [
        pytest.param("Role", {"metadata": {"name": "r", "namespace": "d"}, "rules": [{"apiGroups": [""],
                                                                               "resources": ["pods"]}]},
                     "rules[0].verbs", id="role"),
        pytest.param("ClusterRole", {"metadata": {"name": "r"}, "rules": [{"verbs": ["get"]}]}, "rules[0].apiGroups",
                     id="cluster-role"),
        pytest.param("RoleBinding", {"metadata": {"name": "b", "namespace": "d"},
                                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role"}},
                     "roleRef.name", id="role-binding"),
        pytest.param("ClusterRoleBinding", {"metadata": {"name": "b"},
                                            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                        "name": "r"}},
                     "roleRef.kind", id="cluster-role-binding-names-no-role"),
        pytest.param("Node", {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "k", "effect": "Never"}]}},
                     "spec.taints[0].effect", id="node"),
        pytest.param("Namespace", {"metadata": {"name": "Upper"}}, "metadata.name", id="namespace"),
    ],
)
def test_each_kind_gets_its_own_rules_on_every_write(kind: str, obj: dict[str, Any], field: str) -> None:
    """validate() picks the kind's rules (built once, issue 25) for each write: a rule only that kind has finds
    its error, the second time as the first."""
    for _ in range(2):
        assert field in [e.field for e in validate(kind, copy.deepcopy(obj))], kind
