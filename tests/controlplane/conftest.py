"""One real control plane per test session (etcd, kube-apiserver, kube-controller-manager without its DaemonSet and
ReplicaSet controllers, kube-scheduler, kwok with NODES nodes), shared by tests that each take a namespace of
their own, as envtest users do. It is built beforehand (`kubus controlplane build`, which .ci/run runs): a cold
build takes tens of minutes and never happens inside pytest; without it the tests fail saying so."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.api import Api, ApiError
from controlplane.building import Build
from controlplane.processes import ControlPlane
from tests.cluster import KUBUS_SERVICE_ACCOUNTS, NODES
from tests.cluster import REAL_START_LIMIT_S as START_LIMIT_S
from tests.simulation import Kubectl, wait_for

# the session's control plane (tests/conftest.py) has NODES nodes
__all__ = ["KUBUS_SERVICE_ACCOUNTS", "NODES", "START_LIMIT_S"]

_namespaces = itertools.count()


@pytest.fixture(scope="session")
def api(controlplane: ControlPlane) -> Api:
    return controlplane.api()


@pytest.fixture(scope="session")
def kubectl(controlplane: ControlPlane, controlplane_build: Build) -> Kubectl:
    """kubectl of the same build (v1.36), with the admin kubeconfig."""
    return Kubectl(controlplane.kubeconfig, str(controlplane_build.binary("kubectl")))


def service_account_ready(api: Api, namespace: str) -> Any:
    try:
        return api.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


@pytest.fixture
def namespace(api: Api, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, once its `default` ServiceAccount exists (the ServiceAccount
    admission plugin refuses pods before: the controller-manager creates it); deleted when the test ends."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{next(_namespaces)}"
    api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(lambda: service_account_ready(api, name), timeout=60, interval=0.2,
             what=f"the default ServiceAccount of {name}")
    yield name
    api.request("DELETE", f"/api/v1/namespaces/{name}")


def pods(api: Api, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    query = f"?labelSelector={selector}" if selector else ""
    return list(api.get(f"/api/v1/namespaces/{namespace}/pods{query}")["items"])


def audited(plane: ControlPlane, namespace: str, resource: str, verb: str) -> list[dict[str, Any]]:
    """The audit log's entries (every write is logged, at Metadata level) for ``verb`` of ``resource`` in
    ``namespace``: who made them (``user.username``)."""
    entries = [json.loads(line) for line in plane.audit_log.read_text().splitlines() if line.strip()]
    return [e for e in entries if e["verb"] == verb and e.get("objectRef", {}).get("resource") == resource
            and e["objectRef"].get("namespace") == namespace and not e["objectRef"].get("subresource")
            and e["stage"] == "ResponseComplete"]


def running_and_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return (status.get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
            and any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here may be the first to ask for the control plane: its setup may start it."""
    for item in items:
        if "tests/controlplane/" in item.nodeid and item.get_closest_marker("hang_limit") is None:
            item.add_marker(pytest.mark.hang_limit(setup=START_LIMIT_S))
