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
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from controlplane.api import Api
from controlplane.processes import ControlPlane

NODES = 20  # the real control plane's kwok nodes: as many as the DaemonSet suites' sims (`--nodes 20`)
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
        self.ssl: ssl.SSLContext = ssl.create_default_context(cafile=str(pki.ca.cert))
        self.ssl.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))
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
            with urllib.request.urlopen(req, timeout=10, context=self.ssl) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def stop(self) -> int:
        return 0


FAIL_AFTER = "sim.kubus.io/fail-after-seconds"


class FailingPods:
    """On the real control plane, what the sim's kubelet does for a pod annotated sim.kubus.io/fail-after-seconds:
    once the pod is Running, that many seconds later its status turns Failed (Ready False), written through the
    status subresource as a kubelet reports it. kwok leaves a Failed pod so (its stages move Pending pods only).
    Watches one namespace from a thread while the `with` block runs; a write refused fails the block."""

    def __init__(self, cluster: RealCluster, namespace: str, poll: float = 0.05) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.poll = poll
        self.failed: list[str] = []
        self.errors: list[str] = []
        self._running_since: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"failing-pods-{namespace}")

    def __enter__(self) -> FailingPods:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert not self.errors, f"making pods Failed: {self.errors}"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._once()
            except (OSError, ValueError) as exc:  # a lost connection: the next round tries again
                self.errors.append(f"{type(exc).__name__}: {exc}")
                if len(self.errors) > 20:
                    return
            self._stop.wait(self.poll)  # the pace of this emulated kubelet, not a synchronisation

    def _once(self) -> None:
        code, body = self.cluster.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")
        if code != 200:
            self.errors.append(f"listing pods: {code} {body}")
            return
        now = time.monotonic()
        for pod in body["items"]:
            meta, status = pod["metadata"], pod.get("status") or {}
            after = (meta.get("annotations") or {}).get(FAIL_AFTER)
            if after is None or meta.get("deletionTimestamp") or status.get("phase") != "Running":
                continue
            since = self._running_since.setdefault(meta["uid"], now)
            if now - since < float(after):
                continue
            patch = {"status": {"phase": "Failed", "reason": "Error",
                                "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed"}]}}
            code, answer = self.cluster.request(
                "PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{meta['name']}/status", patch,
                content_type="application/merge-patch+json")
            if code == 200:
                self.failed.append(meta["name"])
            elif code != 404:  # 404: deleted meanwhile
                self.errors.append(f"failing {meta['name']}: {code} {answer}")
