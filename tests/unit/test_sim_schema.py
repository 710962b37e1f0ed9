"""The sim drops fields a kind does not define, as kube-apiserver's decoder does."""

from __future__ import annotations

from typing import Any

import pytest

from sim import schema


@pytest.mark.parametrize(
    ("kind", "obj", "unknown", "kept"),
    [
        pytest.param("Pod", {"metadata": {"name": "p", "bogus": 1}}, ["metadata.bogus"],
                     {"metadata": {"name": "p"}}, id="unknown-metadata-field"),
        pytest.param("Pod", {"spec": {"containers": [{"name": "c", "image": "i", "foo": 2}]}},
                     ["spec.containers[0].foo"], {"spec": {"containers": [{"name": "c", "image": "i"}]}},
                     id="unknown-container-field"),
        pytest.param("DaemonSet", {"spec": {"template": {"spec": {"nodeSelecter": {"a": "b"}}}}},
                     ["spec.template.spec.nodeSelecter"], {"spec": {"template": {"spec": {}}}},
                     id="typo-in-template"),
        pytest.param("DaemonSet", {"spec": {"updateStrategy": {"rollingUpdate": {"maxSurge": "25%"}}}}, [],
                     {"spec": {"updateStrategy": {"rollingUpdate": {"maxSurge": "25%"}}}},
                     id="int-or-string-kept"),
        pytest.param("Pod", {"metadata": {"labels": {"any-key": "v"}, "annotations": {"x/y": "z"}}}, [],
                     {"metadata": {"labels": {"any-key": "v"}, "annotations": {"x/y": "z"}}}, id="maps-kept"),
        pytest.param("Pod", {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}}, [],
                     {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}},
                     id="quantities-kept"),
        pytest.param("ControllerRevision", {"data": {"spec": {"template": {"$patch": "replace", "x": 1}}},
                                            "revision": 3}, [],
                     {"data": {"spec": {"template": {"$patch": "replace", "x": 1}}}, "revision": 3},
                     id="raw-extension-kept"),
        pytest.param("Event", {"involvedObject": {"kind": "Pod", "nope": 1}, "reason": "R"},
                     ["involvedObject.nope"], {"involvedObject": {"kind": "Pod"}, "reason": "R"},
                     id="event-reference"),
        pytest.param("Node", {"spec": {"taints": [{"key": "k", "effect": "NoSchedule", "colour": "red"}]}},
                     ["spec.taints[0].colour"], {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}},
                     id="node-taint"),
    ],
)
def test_prune_drops_exactly_the_undefined_fields(kind: str, obj: dict[str, Any], unknown: list[str],
                                                  kept: dict[str, Any]) -> None:
    """prune() reports each undefined field by its path and removes only those."""
    assert schema.prune(kind, obj) == unknown
    assert obj == kept


def test_every_served_kind_has_a_schema() -> None:
    """Each kind the sim serves resolves to a schema with metadata."""
    for kind in ("Pod", "Node", "Namespace", "Event", "DaemonSet", "ReplicaSet", "ControllerRevision"):
        root = schema.root(kind)
        assert isinstance(root, dict) and "metadata" in root, kind


def _pod_with_unknown_fields_at_every_depth() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "colour": "top",
        "metadata": {"name": "p", "labels": {"app": "web"}, "ownerReferences": [{"uid": "u", "shade": 1}],
                     "finalizers": [], "annotations": None, "extra": {"deep": [1]}},
        "spec": {
            "$setElementOrder/containers": [{"name": "c"}],
            "containers": [{"name": "c", "image": "i", "env": [], "ports": None, "bogus": 0,
                            "resources": {"limits": {"cpu": "1"}, "requests": {}, "oops": "x"},
                            "securityContext": {"capabilities": {"add": ["NET_ADMIN"], "nope": True}}},
                           None, "not-an-object"],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"],
                                                             "typo": "x"}], "matchFields": []}],
                "extra": 1}}},
            "nodeSelectorTerms": [],
            "volumes": [],
            "tolerations": {"not": "a list"},
            "nodeSelector": {},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None, "why": "x"}],
                   "containerStatuses": [{"name": "c", "lastState": {}, "state": {"running": {"startedAt": "t",
                                                                                            "pid": 1}}}],
                   "hostIPs": [{"ip": "10.0.0.1", "family": "v4"}], "podIPs": None},
    }


def test_prune_of_a_pod_with_unknown_fields_at_every_depth() -> None:
    """The exact pruned body and unknown paths (in order) of a pod with unknown, null and empty fields from the top
    to five levels down, in lists, in objects in lists and beside strategic-merge directives: pinned from the
    recursive prune before issue 25's lazy paths, which must answer the same."""
    obj = _pod_with_unknown_fields_at_every_depth()
    assert schema.prune("Pod", obj) == [
        "colour", "metadata.extra", "metadata.ownerReferences[0].shade", "spec.nodeSelectorTerms",
        "spec.containers[0].bogus", "spec.containers[0].resources.oops",
        "spec.containers[0].securityContext.capabilities.nope",
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.extra",
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].typo",
        "status.conditions[0].why", "status.containerStatuses[0].state.running.pid", "status.hostIPs[0].family",
    ]
    assert obj == {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "web"}, "ownerReferences": [{"uid": "u"}]},
        "spec": {
            "$setElementOrder/containers": [{"name": "c"}],
            "containers": [{"name": "c", "image": "i",
                            "resources": {"limits": {"cpu": "1"}},
                            "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}},
                           None, "not-an-object"],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}}},
            "tolerations": {"not": "a list"},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None}],
                   "containerStatuses": [{"name": "c", "lastState": {}, "state": {"running": {"startedAt": "t"}}}],
                   "hostIPs": [{"ip": "10.0.0.1"}]},
    }


def test_prune_of_list_elements_with_only_fields_kept_as_written() -> None:
    """Elements of a list of objects whose every field is kept as written (a toleration, a condition, `{}`) come out
    as they went in; beside them, elements with an unknown field, a directive, or a null or empty list are pruned
    as ever (issue 25 skips the walk of the former)."""
    obj = {"spec": {"containers": [{"name": "c", "image": "i"}, {"name": "d", "ports": []}, {"name": "e", "env": None},
                                   {"name": "f", "env": [{"name": "E", "valueFrom": {"fieldRef": {}}, "x": 1}]}],
                    "tolerations": [{"key": "a", "operator": "Exists"}, {}, {"key": "b", "bogus": 1},
                                    {"$patch": "delete", "key": "c"}, {"key": "d", "tolerationSeconds": None}]},
           "status": {"conditions": [{"type": "Ready", "lastProbeTime": None}, {"type": "X", "why": 1}]}}
    assert schema.prune("Pod", obj) == [
        "spec.containers[3].env[0].x", "spec.tolerations[2].bogus", "status.conditions[1].why"]
    assert obj == {"spec": {"containers": [{"name": "c", "image": "i"}, {"name": "d"}, {"name": "e"},
                                           {"name": "f", "env": [{"name": "E", "valueFrom": {"fieldRef": {}}}]}],
                            "tolerations": [{"key": "a", "operator": "Exists"}, {}, {"key": "b"},
                                            {"$patch": "delete", "key": "c"}, {"key": "d", "tolerationSeconds": None}]},
                   "status": {"conditions": [{"type": "Ready", "lastProbeTime": None}, {"type": "X"}]}}
