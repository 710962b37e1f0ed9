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
from controlplane.building import Build, BuildError, find_or_fail
from controlplane.processes import ControlPlane, ControlPlaneConfig
from tests.simulation import Kubectl, wait_for

NODES = 3
# the audit log has every request of kubus's own ServiceAccounts, reads too (tests/controlplane/test_install.py)
KUBUS_SERVICE_ACCOUNTS = "system:serviceaccounts:kubus-system"
START_LIMIT_S = 240  # the hang guard's limit for the setup that starts it (well under a minute once built)

_namespaces = itertools.count()


@pytest.fixture(scope="session")
def controlplane_build() -> Build:
    try:
        return find_or_fail()
    except BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def controlplane(controlplane_build: Build, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(controlplane_build, ControlPlaneConfig(nodes=NODES,
                                                                data_dir=tmp_path_factory.mktemp("controlplane"),
                                                                audit_reads_of=(KUBUS_SERVICE_ACCOUNTS,)))
    plane.start()  # a failed start has stopped what it started, and says why
    yield plane
    plane.stop()


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
