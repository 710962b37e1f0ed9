"""deploy/ as kubectl renders it, for the tests of this package."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.simulation import kubectl_binary

ROOT = Path(__file__).parent.parent.parent
DEPLOY = ROOT / "deploy"
RBAC = DEPLOY / "rbac"
NAMESPACE = "kubus-system"
WORKLOADS = ("Deployment", "StatefulSet", "Job")


def render(path: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize PATH`'s documents; fails the test with kubectl's error when it does not render."""
    result = subprocess.run([kubectl_binary(), "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"kubectl kustomize {path} failed:\n{result.stderr}"
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert docs, f"kubectl kustomize {path} rendered nothing"
    return docs


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def pod_specs(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind/name, pod spec) of every workload."""
    for doc in docs:
        if doc["kind"] in WORKLOADS:
            yield f"{doc['kind']}/{doc['metadata']['name']}", doc["spec"]["template"]["spec"]


def containers(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """("init"|"main", container) of a pod spec."""
    for c in spec.get("initContainers") or ():
        yield "init", c
    for c in spec["containers"]:
        yield "main", c
