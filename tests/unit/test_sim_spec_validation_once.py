"""The sim validates a pod spec once for the many pods that share it (issue 25).

A ReplicaSet's pods all carry its template's spec; kube-apiserver validates each, and so did the sim, at about a
quarter of its CPU per pod created. The errors are a function of the spec (and its path) alone, so the sim keeps
the last specs' errors by their JSON: the same spec is validated once, and still answers with the same errors.
"""

from __future__ import annotations

from typing import Any

import pytest

from sim import resources as R
from sim import status as errors
from sim import validation_apps
from sim.registry import Registry
from sim.store import ObjectStore


def _registry() -> Registry:
    registry = Registry(ObjectStore(), seed=1)
    registry.create(R.NAMESPACES, "", {"metadata": {"name": "default"}})
    return registry


def _pod(name: str, image: str = "busybox", port: int = 80) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": image, "ports": [{"containerPort": port}]}]}}


def test_pods_of_one_spec_are_validated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = _registry()
    validated: list[str] = []
    real = validation_apps._validate_container

    def counting(container: dict[str, Any], path: str, *args: Any) -> None:
        validated.append(path)
        real(container, path, *args)

    monkeypatch.setattr(validation_apps, "_validate_container", counting)
    for i in range(20):
        registry.create(R.PODS, "default", _pod(f"p-{i}"))
    assert validated == ["spec.containers[0]"]  # once, not 20 times
    registry.create(R.PODS, "default", _pod("other", image="nginx"))  # another spec: validated
    assert validated == ["spec.containers[0]"] * 2


def test_a_spec_validated_before_answers_with_the_same_errors() -> None:
    registry = _registry()
    answers = []
    for name in ("bad-1", "bad-2"):
        with pytest.raises(errors.ApiError) as raised:
            registry.create(R.PODS, "default", _pod(name, port=0))
        answers.append(raised.value.status())
    first, second = answers
    assert first["code"] == 422 and "containerPort" in first["message"], first
    assert first["message"].replace("bad-1", "bad-2") == second["message"]
    assert first["details"]["causes"] == second["details"]["causes"]
    registry.create(R.PODS, "default", _pod("good"))  # a valid spec is not answered with another's errors


def _daemon_pod_spec(node: str, toleration_key: str = "node.kubernetes.io/not-ready") -> dict[str, Any]:
    """A DaemonSet's pod spec (defaulted, with a bad volume name), with a toleration, pinned to `node` by a required
    node affinity."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"volumes": [{"name": "Bad_Volume", "emptyDir": {}}],
            "containers": [{"name": "c", "image": "busybox", "terminationMessagePolicy": "File",
                            "imagePullPolicy": "Always"}],
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [term]}}},
            "tolerations": [{"key": toleration_key, "operator": "Exists", "effect": "NoExecute"}]}


def _fields(spec: dict[str, Any]) -> list[str]:
    errs: list[validation_apps.ApiFieldError] = []
    validation_apps.validate_pod_spec(spec, "spec", errs)
    return [f"{e.field}: {e.body()}" for e in errs]


def test_pods_pinned_to_their_nodes_validate_the_rest_of_their_spec_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DaemonSet's pods differ only in their node affinity: the rest of the spec is validated once for them all,
    the affinity of each pod every time."""
    validated: list[str] = []
    real_toleration, real_affinity = validation_apps._validate_toleration, validation_apps._validate_node_affinity

    def toleration(toleration: dict[str, Any], path: str, errs: Any) -> None:
        validated.append(path)
        real_toleration(toleration, path, errs)

    def affinity(spec: dict[str, Any], path: str, errs: Any) -> None:
        validated.append(spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                         ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0])
        real_affinity(spec, path, errs)

    monkeypatch.setattr(validation_apps, "_validate_toleration", toleration)
    monkeypatch.setattr(validation_apps, "_validate_node_affinity", affinity)
    for node in ("node-a", "node-b", "node-c"):
        _fields(_daemon_pod_spec(node, toleration_key="example.com/once"))
    assert validated == ["spec.tolerations[0]", "node-a", "node-b", "node-c"]


def test_the_errors_of_a_pinned_pod_come_in_the_order_of_the_checks() -> None:
    """The node affinity's errors, its own for every pod, come between those of the fields checked before it and
    those checked after it, whether the rest of the spec was validated before or not."""
    before = ('spec.volumes[0].name: Invalid value: "Bad_Volume": a lowercase RFC 1123 label must consist of lower '
              "case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. "
              "'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
    after = ('spec.tolerations[0].key: Invalid value: "-bad-": name part must consist of alphanumeric characters, '
             "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',"
             "  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")

    def affinity(node: str) -> str:
        return ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
                f'.matchFields[0].values[0]: Invalid value: "{node}": a lowercase RFC 1123 subdomain must consist of '
                "lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                "character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]"
                "([-a-z0-9]*[a-z0-9])?)*')")

    for node in ("Node_A", "Node_B", "node-ok", "Node_A"):
        expected = [before, *([] if node == "node-ok" else [affinity(node)]), after]
        assert _fields(_daemon_pod_spec(node, toleration_key="-bad-")) == expected, node
