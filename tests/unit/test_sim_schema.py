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
