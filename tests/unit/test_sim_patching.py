"""sim.patching applies merge, JSON and strategic merge patches the way kube-apiserver does."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from sim.patching import PatchError, apply_json_patch, apply_merge_patch, apply_strategic_merge_patch

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _directives(value: Any) -> list[str]:
    if isinstance(value, dict):
        own = [key for key in value if key.startswith("$")]
        return own + [found for child in value.values() for found in _directives(child)]
    if isinstance(value, list):
        return [found for child in value for found in _directives(child)]
    return []


def _pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid"},
            "spec": spec}


def _ds(containers: list[dict[str, Any]], **template_spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "x", "namespace": "ns", "annotations": {LAST_APPLIED: "{}"}},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": containers, **template_spec}},
        },
    }


def _node(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "spec": spec, "status": {}}


def _with(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    result = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = result
    for key in parents:
        node = node.setdefault(key, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return result


OWNED = _with(_pod(containers=[{"name": "c", "image": "img:1"}]), "metadata.ownerReferences",
              [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u0"}])
RS_REF = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1", "controller": True,
          "blockOwnerDeletion": True}
CONTAINER_A = {"name": "a", "image": "img:1", "env": [{"name": "E1", "value": "1"}, {"name": "E2", "value": "2"}],
               "ports": [{"containerPort": 80, "protocol": "TCP"}], "volumeMounts": [{"name": "v", "mountPath": "/v"}],
               "args": ["--one", "--two"]}
CONTAINER_B = {"name": "b", "image": "img:1"}
CONDITIONS = [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]

STRATEGIC_CASES = [
    pytest.param("Pod", _pod(), {"metadata": {"labels": {"a": "b"}}},
                 _with(_pod(), "metadata.labels", {"a": "b"}), id="kubectl-label-add"),
    pytest.param("Pod", _with(_pod(), "metadata.labels", {"a": "b", "keep": "1"}),
                 {"metadata": {"labels": {"a": None}}},
                 _with(_pod(), "metadata.labels", {"keep": "1"}), id="kubectl-label-remove"),
    pytest.param("Pod", _pod(), {"metadata": {"annotations": {"note": "hi"}}},
                 _with(_pod(), "metadata.annotations", {"note": "hi"}), id="kubectl-annotate"),
    pytest.param(
        "DaemonSet", _ds([CONTAINER_B]),
        {"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "b"}],
                                        "containers": [{"image": "img:2", "name": "b"}]}}}},
        _ds([{"name": "b", "image": "img:2"}]), id="kubectl-set-image"),
    pytest.param(
        "DaemonSet", _ds([CONTAINER_A, CONTAINER_B]),
        {"metadata": {"annotations": {LAST_APPLIED: '{"changed":true}'}},
         "spec": {"template": {"spec": {
             "$setElementOrder/containers": [{"name": "a"}, {"name": "c"}],
             "containers": [{"$setElementOrder/env": [{"name": "E1"}, {"name": "E3"}],
                             "env": [{"name": "E3", "value": "3"}, {"$patch": "delete", "name": "E2"}],
                             "image": "img:2", "name": "a"},
                            {"image": "img:3", "name": "c"},
                            {"$patch": "delete", "name": "b"}]}}}},
        _with(_ds([{**CONTAINER_A, "image": "img:2",
                    "env": [{"name": "E1", "value": "1"}, {"name": "E3", "value": "3"}]},
                   {"name": "c", "image": "img:3"}]), "metadata.annotations", {LAST_APPLIED: '{"changed":true}'}),
        id="kubectl-apply-changed-containers"),
    pytest.param(
        "Node", _node(taints=[{"key": "a", "effect": "NoSchedule"}]),
        {"spec": {"taints": [{"effect": "NoExecute", "key": "b", "value": "v"}, {"effect": "NoSchedule", "key": "a"}]}},
        _node(taints=[{"effect": "NoExecute", "key": "b", "value": "v"}, {"effect": "NoSchedule", "key": "a"}]),
        id="kubectl-taint-replaces-all"),
    pytest.param("Node", _node(taints=[{"key": "a", "effect": "NoSchedule"}]), {"spec": {"taints": None}}, _node(),
                 id="kubectl-taint-remove-last"),
    pytest.param("Node", _node(podCIDR="10.0.0.0/24"), {"spec": {"unschedulable": True}},
                 _node(podCIDR="10.0.0.0/24", unschedulable=True), id="kubectl-cordon"),
    pytest.param("Node", _node(unschedulable=True), {"spec": {"unschedulable": None}}, _node(), id="kubectl-uncordon"),
    pytest.param("ReplicaSet", {"kind": "ReplicaSet", "spec": {"replicas": 1, "selector": {}}},
                 {"spec": {"replicas": 3}}, {"kind": "ReplicaSet", "spec": {"replicas": 3, "selector": {}}},
                 id="kubectl-scale"),
    pytest.param("Scale", {"kind": "Scale", "spec": {"replicas": 1}}, {"spec": {"replicas": 0}},
                 {"kind": "Scale", "spec": {"replicas": 0}}, id="scale-subresource-kind"),
    pytest.param(
        "DaemonSet", _ds([{**CONTAINER_A, "image": "img:2"}], nodeSelector={"disk": "ssd"}),
        {"spec": {"template": {"$patch": "replace", "metadata": {"labels": {"app": "x"}},
                               "spec": {"containers": [{"name": "a", "image": "img:1"}]}}}},
        _ds([{"name": "a", "image": "img:1"}]), id="kubectl-rollout-undo-replaces-template"),
    pytest.param("Pod", OWNED, {"metadata": {"ownerReferences": [RS_REF], "uid": "pod-uid"}},
                 # upstream puts patch items not in the live list ahead of server-only ones
                 _with(OWNED, "metadata.ownerReferences", [RS_REF, *OWNED["metadata"]["ownerReferences"]]),
                 id="adoption-merges-owner-reference"),
    pytest.param("Pod", _with(OWNED, "metadata.ownerReferences", [*OWNED["metadata"]["ownerReferences"], RS_REF]),
                 {"metadata": {"uid": "pod-uid", "ownerReferences": [{"$patch": "delete", "uid": "u1"}]}},
                 OWNED, id="release-deletes-owner-reference"),
    pytest.param("Pod", OWNED, {"metadata": {"uid": "pod-uid", "ownerReferences": [{"$patch": "delete", "uid": "u0"}]}},
                 _with(OWNED, "metadata.ownerReferences", None), id="release-last-owner-drops-empty-list"),
    pytest.param("Pod", _pod(), {"metadata": {"ownerReferences": [RS_REF, {"$patch": "delete", "uid": "zz"}]}},
                 _with(_pod(), "metadata.ownerReferences", [RS_REF]), id="directives-in-new-list-not-stored"),
    pytest.param("Pod", _with(_pod(), "metadata.finalizers", ["a", "b"]), {"metadata": {"finalizers": ["b", "c"]}},
                 _with(_pod(), "metadata.finalizers", ["a", "b", "c"]), id="finalizers-merge-as-set"),
    pytest.param("Pod", _with(_pod(), "metadata.finalizers", ["a", "b"]),
                 {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "$setElementOrder/finalizers": ["b"]}},
                 _with(_pod(), "metadata.finalizers", ["b"]), id="finalizers-delete-from-primitive-list"),
    pytest.param("Pod", _pod(containers=[CONTAINER_A]),
                 {"spec": {"containers": [{"name": "a", "env": [{"name": "E2", "value": "two"}],
                                           "ports": [{"containerPort": 80, "name": "http"}],
                                           "volumeMounts": [{"mountPath": "/w", "name": "w"}]}]}},
                 _pod(containers=[{**CONTAINER_A, "env": [{"name": "E1", "value": "1"}, {"name": "E2", "value": "two"}],
                                   "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}],
                                   "volumeMounts": [{"mountPath": "/w", "name": "w"},
                                                    {"name": "v", "mountPath": "/v"}]}]),
                 id="container-fields-merge-by-key"),
    pytest.param("Pod", _pod(containers=[CONTAINER_A]),
                 {"spec": {"containers": [{"name": "a", "args": ["--three"], "command": ["run"]}]}},
                 _pod(containers=[{**CONTAINER_A, "args": ["--three"], "command": ["run"]}]),
                 id="args-and-command-replaced"),
    pytest.param("Pod", _pod(volumes=[{"name": "v", "emptyDir": {}}], tolerations=[{"key": "a", "operator": "Exists"}]),
                 {"spec": {"volumes": [{"name": "w", "hostPath": {"path": "/w"}}],
                           "tolerations": [{"operator": "Exists"}]}},
                 _pod(volumes=[{"name": "w", "hostPath": {"path": "/w"}}, {"name": "v", "emptyDir": {}}],
                      tolerations=[{"operator": "Exists"}]),
                 id="volumes-merge-tolerations-replace"),
    pytest.param("Pod", _pod(affinity={"nodeAffinity": {"required": {"matchExpressions": [{"key": "a"}]}}}),
                 {"spec": {"affinity": {"nodeAffinity": {"required": {"matchExpressions": [{"key": "b"}]}}}}},
                 _pod(affinity={"nodeAffinity": {"required": {"matchExpressions": [{"key": "b"}]}}}),
                 id="match-expressions-replaced"),
    pytest.param("Pod", _with(_pod(), "status", {"phase": "Pending", "conditions": CONDITIONS}),
                 {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
                 _with(_pod(), "status", {"phase": "Running", "conditions": [
                     {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}),
                 id="pod-conditions-merge-by-type"),
    pytest.param("Node", _with(_node(), "status", {"conditions": CONDITIONS, "images": [{"names": ["a"]}],
                                                   "addresses": [{"type": "Hostname", "address": "n"}]}),
                 {"status": {"images": [{"names": ["b"]}], "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                             "conditions": [{"type": "PodScheduled", "status": "False"}]}},
                 _with(_node(), "status", {
                     "conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "False"}],
                     "images": [{"names": ["b"]}],
                     "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                                   {"type": "Hostname", "address": "n"}]}),
                 id="node-status-addresses-merge-images-replace"),
    pytest.param("Namespace", {"status": {"conditions": CONDITIONS}},
                 {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
                 {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}, CONDITIONS[1]]}},
                 id="namespace-conditions-merge"),
    pytest.param("Event", {"count": 1, "series": {"count": 1}}, {"count": 2, "series": {"lastObservedTime": "t"}},
                 {"count": 2, "series": {"count": 1, "lastObservedTime": "t"}}, id="event-count"),
    pytest.param("ControllerRevision", {"revision": 1, "data": {"old": True}},
                 {"data": {"spec": {"template": {"$patch": "replace"}}}},
                 {"revision": 1, "data": {"spec": {"template": {"$patch": "replace"}}}},
                 id="controller-revision-data-verbatim"),
    pytest.param("DaemonSet", _ds([CONTAINER_A, CONTAINER_B]),
                 {"spec": {"template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "z"}]}}}},
                 _ds([{"name": "z", "image": "z"}]), id="replace-directive-in-list"),
    pytest.param("Pod", _pod(nodeSelector={"a": "b"}, hostname="h"), {"spec": {"nodeSelector": {"$patch": "delete"}}},
                 _pod(hostname="h"), id="delete-directive-on-map"),
    pytest.param("Pod", _pod(nodeSelector={"a": "b"}), {"spec": {"nodeSelector": {"$patch": "replace", "c": "d"}}},
                 _pod(nodeSelector={"c": "d"}), id="replace-directive-on-map"),
    pytest.param("Pod", _pod(nodeSelector={"a": "b"}), {"spec": {"nodeSelector": {"$patch": "merge", "c": "d"}}},
                 _pod(nodeSelector={"a": "b", "c": "d"}), id="merge-directive-on-map"),
    pytest.param("DaemonSet", _ds([CONTAINER_B]),
                 {"spec": {"updateStrategy": {"$retainKeys": ["type"], "type": "OnDelete"}}},
                 _with(_ds([CONTAINER_B]), "spec.updateStrategy", {"type": "OnDelete"}), id="retain-keys"),
    pytest.param("DaemonSet", _ds([CONTAINER_A, CONTAINER_B]),
                 {"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}}}},
                 _ds([CONTAINER_B, CONTAINER_A]), id="set-element-order-reorders"),
    pytest.param("Pod", _pod(), {"spec": {"securityContext": {"runAsUser": None, "fsGroup": 2}}},
                 _pod(securityContext={"fsGroup": 2}), id="nulls-in-new-map-dropped"),
    pytest.param("Pod", _pod(priority=1), {"spec": {"priority": {"value": 2}}}, _pod(priority={"value": 2}),
                 id="type-change-replaces"),
]


@pytest.mark.parametrize(("kind", "target", "patch", "expected"), STRATEGIC_CASES)
def test_strategic_merge_patch(kind: str, target: dict[str, Any], patch: dict[str, Any], expected: Any) -> None:
    """Each patch shape yields exactly what kube-apiserver stores, with no directive left behind."""
    before = copy.deepcopy((target, patch))
    result = apply_strategic_merge_patch(target, patch, kind)
    assert result == expected
    if kind != "ControllerRevision":
        assert _directives(result) == []
    assert (target, patch) == before


@pytest.mark.parametrize(
    ("kind", "target", "patch", "message"),
    [
        pytest.param("Pod", _pod(containers=[CONTAINER_B]), {"spec": {"containers": [{"image": "x"}]}},
                     "merge key: name", id="element-missing-merge-key"),
        pytest.param("Pod", OWNED, {"metadata": {"ownerReferences": [{"$patch": "delete", "name": "ds"}]}},
                     "merge key: uid", id="delete-missing-merge-key"),
        pytest.param("Pod", _pod(), {"spec": {"$patch": "explode"}}, "unknown patch type", id="unknown-map-directive"),
        pytest.param("Pod", OWNED, {"metadata": {"ownerReferences": [{"$patch": "merge"}]}},
                     "cannot yet be specified", id="merge-directive-in-list"),
        pytest.param("Pod", _pod(), {"spec": {"$unknown": 1}}, "unknown strategic merge patch directive",
                     id="unknown-directive-key"),
        pytest.param("DaemonSet", _ds([CONTAINER_A]),
                     {"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "a"}],
                                                     "containers": [{"name": "a"}, {"name": "b"}]}}}},
                     "doesn't match", id="set-element-order-mismatch"),
        pytest.param("DaemonSet", _ds([CONTAINER_A]),
                     {"spec": {"updateStrategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}},
                     "does not list 'rollingUpdate'", id="retain-keys-missing-patched-key"),
        pytest.param("Pod", _with(_pod(), "metadata.finalizers", ["a"]), {"metadata": {"finalizers": [{"a": 1}]}},
                     "not identical", id="mixed-element-types"),
        pytest.param("Pod", _pod(), {"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}, "hold a list",
                     id="delete-from-primitive-list-not-a-list"),
        pytest.param("Pod", _pod(), ["not", "a", "map"], "JSON object", id="patch-not-an-object"),
    ],
)
def test_strategic_merge_patch_errors(kind: str, target: dict[str, Any], patch: Any, message: str) -> None:
    """Malformed strategic merge patches raise PatchError naming the problem."""
    with pytest.raises(PatchError, match=message):
        apply_strategic_merge_patch(target, patch, kind)


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        pytest.param({"a": "b"}, {"a": "c"}, {"a": "c"}, id="rfc7386-1"),
        pytest.param({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}, id="rfc7386-2"),
        pytest.param({"a": "b"}, {"a": None}, {}, id="rfc7386-3"),
        pytest.param({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}, id="rfc7386-4"),
        pytest.param({"a": ["b"]}, {"a": "c"}, {"a": "c"}, id="rfc7386-5"),
        pytest.param({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}, id="rfc7386-6"),
        pytest.param({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}, id="rfc7386-7"),
        pytest.param({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}, id="rfc7386-8"),
        pytest.param(["a", "b"], ["c", "d"], ["c", "d"], id="rfc7386-9"),
        pytest.param({"a": "b"}, ["c"], ["c"], id="rfc7386-10"),
        pytest.param({"a": "foo"}, None, None, id="rfc7386-11"),
        pytest.param({"a": "foo"}, "bar", "bar", id="rfc7386-12"),
        pytest.param({"e": None}, {"a": 1}, {"e": None, "a": 1}, id="rfc7386-13"),
        pytest.param([1, 2], {"a": "b", "c": None}, {"a": "b"}, id="rfc7386-14"),
        pytest.param({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}, id="rfc7386-15"),
        pytest.param({"metadata": {"labels": {"a": "b"}}}, {"metadata": {"labels": {"a": None, "c": "d"}}},
                     {"metadata": {"labels": {"c": "d"}}}, id="kubectl-patch-type-merge"),
    ],
)
def test_merge_patch(target: Any, patch: Any, expected: Any) -> None:
    """RFC 7386 appendix A examples give the documented results and leave the inputs alone."""
    before = copy.deepcopy((target, patch))
    assert apply_merge_patch(target, patch) == expected
    assert (target, patch) == before


@pytest.mark.parametrize(
    ("target", "ops", "expected"),
    [
        pytest.param({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"},
                     id="rfc6902-a1-add-member"),
        pytest.param({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}],
                     {"foo": ["bar", "qux", "baz"]}, id="rfc6902-a2-add-element"),
        pytest.param({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"},
                     id="rfc6902-a3-remove-member"),
        pytest.param({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]},
                     id="rfc6902-a4-remove-element"),
        pytest.param({"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}],
                     {"baz": "boo", "foo": "bar"}, id="rfc6902-a5-replace"),
        pytest.param({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
                     [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
                     {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}, id="rfc6902-a6-move"),
        pytest.param({"foo": ["all", "grass", "cows", "eat"]}, [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
                     {"foo": ["all", "cows", "eat", "grass"]}, id="rfc6902-a7-move-element"),
        pytest.param({"baz": "qux", "foo": ["a", 2, "c"]},
                     [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
                     {"baz": "qux", "foo": ["a", 2, "c"]}, id="rfc6902-a8-test"),
        pytest.param({"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
                     {"foo": "bar", "child": {"grandchild": {}}}, id="rfc6902-a10-add-nested"),
        pytest.param({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
                     {"foo": "bar", "baz": "qux"}, id="rfc6902-a11-ignore-unknown-members"),
        pytest.param({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10},
                     id="rfc6902-a14-escape-order"),
        pytest.param({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
                     {"foo": ["bar", ["abc", "def"]]}, id="rfc6902-a16-append"),
        pytest.param({"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/c"}], {"a": {"b": 1}, "c": {"b": 1}},
                     id="copy"),
        pytest.param({"metadata": {"labels": {"app.kubernetes.io/name": "x"}}},
                     [{"op": "remove", "path": "/metadata/labels/app.kubernetes.io~1name"}],
                     {"metadata": {"labels": {}}}, id="slash-escape-in-label-key"),
        pytest.param({"a": 1}, [{"op": "add", "path": "/b", "value": None}], {"a": 1, "b": None}, id="null-value"),
        pytest.param({"a": 1}, [{"op": "replace", "path": "", "value": [1]}], [1], id="replace-root"),
    ],
)
def test_json_patch(target: Any, ops: list[Any], expected: Any) -> None:
    """RFC 6902 appendix A examples give the documented results and leave the inputs alone."""
    before = copy.deepcopy((target, ops))
    assert apply_json_patch(target, ops) == expected
    assert (target, ops) == before


@pytest.mark.parametrize(
    ("target", "ops", "message"),
    [
        pytest.param({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}], "test operation 0 failed",
                     id="rfc6902-a9-test-fails"),
        pytest.param({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}], "does not exist",
                     id="rfc6902-a12-missing-parent"),
        pytest.param({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}], "failed",
                     id="rfc6902-a15-string-is-not-number"),
        pytest.param({"a": True}, [{"op": "test", "path": "/a", "value": 1}], "failed", id="bool-is-not-number"),
        pytest.param({"a": 1}, [{"op": "remove", "path": "/b"}], "'/b' does not exist", id="remove-missing"),
        pytest.param({"a": 1}, [{"op": "replace", "path": "/b", "value": 2}], "does not exist", id="replace-missing"),
        pytest.param({"a": [1]}, [{"op": "add", "path": "/a/01", "value": 2}], "index '01'", id="leading-zero-index"),
        pytest.param({"a": [1]}, [{"op": "remove", "path": "/a/-"}], "does not exist", id="remove-dash"),
        pytest.param({"a": {}}, [{"op": "move", "from": "/a", "path": "/a/b"}], "own child", id="move-into-child"),
        pytest.param({"a": 1}, [{"op": "add", "path": "/b"}], "missing 'value'", id="missing-value"),
        pytest.param({"a": 1}, [{"op": "copy", "path": "/b"}], "missing 'from'", id="missing-from"),
        pytest.param({"a": 1}, [{"op": "frob", "path": "/a"}], "unknown op 'frob'", id="unknown-op"),
        pytest.param({"a": 1}, [{"op": "remove", "path": "a"}], "not a JSON pointer", id="bad-pointer"),
        pytest.param({"a": 1}, [{"op": "remove", "path": "/~2"}], "invalid ~ escape", id="bad-escape"),
        pytest.param({"a": 1}, ["remove"], "must be an object", id="op-not-an-object"),
        pytest.param({"a": 1}, {"op": "remove"}, "list of operations", id="ops-not-a-list"),
    ],
)
def test_json_patch_errors(target: Any, ops: Any, message: str) -> None:
    """A failed test, a missing path or a malformed operation raises PatchError with a clear message."""
    with pytest.raises(PatchError, match=message):
        apply_json_patch(target, ops)


def test_json_patch_is_atomic() -> None:
    """A failing later operation leaves the caller's document unchanged."""
    target = {"a": 1}
    ops = [{"op": "add", "path": "/b", "value": 2}, {"op": "test", "path": "/a", "value": 2}]
    with pytest.raises(PatchError):
        apply_json_patch(target, ops)
    assert target == {"a": 1}


def test_strategic_result_does_not_alias_patch() -> None:
    """Values taken from the patch are copies, so later edits to the stored object cannot reach the request."""
    patch = json.loads('{"metadata": {"labels": {"a": "b"}}, "spec": {"tolerations": [{"key": "k"}]}}')
    result = apply_strategic_merge_patch({}, patch, "Pod")
    result["metadata"]["labels"]["a"] = "changed"
    result["spec"]["tolerations"][0]["key"] = "changed"
    assert patch == {"metadata": {"labels": {"a": "b"}}, "spec": {"tolerations": [{"key": "k"}]}}
