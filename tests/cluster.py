"""The cluster a suite runs on: `kubus sim` or the real control plane (kube-apiserver v1.36 with etcd,
kube-scheduler, kube-controller-manager without its DaemonSet and ReplicaSet controllers, kwok's nodes).

Tests marked `real` take the `cluster` fixture parametrised `sim`/`real` (tests/conftest.py): the same test, the
same assertions, on both. The sim is each module's own (its harness starts it with the module's flags); the real
control plane is one per test session, shared by every test in a namespace of its own, as envtest users do.
Where the two differ by design (kwok runs a pod at once and deletes it at once; the sim's kubelet has a delay and
fault injection), a `Cluster` method does the same thing the way each can: see docs/sim-vs-real.md.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from controlplane.api import Api
from controlplane.processes import ControlPlane

NODES = 4  # the real control plane's kwok nodes: as many as the pipeline harness's sim (`--nodes 4`)
REAL_START_LIMIT_S = 240  # the hang guard's limit for the setup that starts it (well under a minute once built)


class RealCluster:
    """The session's real control plane, as a pipeline harness uses a SimProcess: `kubeconfig`, `request` (the
    admin's, answering (status, body)), `stop` (a no-op: the session owns it)."""

    name = "real"

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.kubeconfig: Path = plane.kubeconfig
        self.api: Api = plane.api()
        pki = plane.pki
        assert pki is not None, "start() the control plane first"
        self._ssl = ssl.create_default_context(cafile=str(pki.ca.cert))
        self._ssl.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))
        self.log_path = plane.audit_log  # what a failing test's logs point at besides the services'

    @property
    def url(self) -> str:
        return self.plane.server

    @property
    def nodes(self) -> list[str]:
        return list(self.plane.node_names)

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.plane.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10, context=self._ssl) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def stop(self) -> int:
        return 0


def fail_pod(kubectl_binary: str, kubeconfig: Path, namespace: str, name: str) -> None:
    """Makes a running pod Failed as its kubelet would report it (the status subresource)."""
    patch = {"status": {"phase": "Failed", "conditions": [{"type": "Ready", "status": "False"}]}}
    subprocess.run([kubectl_binary, "--kubeconfig", str(kubeconfig), "patch", "pod", name, "-n", namespace,
                    "--subresource=status", "--type=merge", "-p", json.dumps(patch)],
                   check=True, capture_output=True, text=True, timeout=30)
