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
