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
# the audit log has every request of kubus's own ServiceAccounts, reads too (tests/controlplane/test_install.py)
KUBUS_SERVICE_ACCOUNTS = "system:serviceaccounts:kubus-system"
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
TERMINATION = "sim.kubus.io/termination-seconds"
HOLD = "kubus.io/test-termination"  # the finalizer TerminatingPods holds a deleted pod by


class _Kubelet:
    """Does, on the real control plane, what the sim's kubelet does for one of its `sim.kubus.io/*` annotations:
    looks at one namespace's pods from a thread while the `with` block runs (`_pod` is given each), at the pace of
    `poll` seconds (the emulated kubelet's, not a synchronisation). A write refused fails the block at its end."""

    what = "emulating the sim's kubelet"

    def __init__(self, cluster: RealCluster, namespace: str, poll: float = 0.05) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.poll = poll
        self.errors: list[str] = []
        self._first_seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"{type(self).__name__}-{namespace}")

    def __enter__(self) -> _Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert not self.errors, f"{self.what}: {self.errors}"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._round()
            except (OSError, ValueError) as exc:  # a lost connection: the next round tries again
                self.errors.append(f"{type(exc).__name__}: {exc}")
                if len(self.errors) > 20:
                    return
            self._stop.wait(self.poll)

    def pods(self) -> list[dict[str, Any]]:
        code, body = self.cluster.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")
        if code != 200:
            raise ValueError(f"listing pods: {code} {body}")
        return list(body["items"])

    def _round(self) -> None:
        now = time.monotonic()
        for pod in self.pods():
            self._pod(pod, now)

    def since(self, pod: dict[str, Any], now: float) -> float:
        """Seconds since this round's condition was first seen on the pod."""
        return now - self._first_seen.setdefault(pod["metadata"]["uid"], now)

    def _pod(self, pod: dict[str, Any], now: float) -> None:
        raise NotImplementedError

    def _write(self, method: str, pod: dict[str, Any], suffix: str, patch: dict[str, Any]) -> bool:
        path = f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}{suffix}"
        code, answer = self.cluster.request(method, path, patch, content_type="application/merge-patch+json")
        if code in (404, 409):  # deleted meanwhile, or changed since this round's look: the next round sees
            return False
        if code != 200:
            self.errors.append(f"{method} {path}: {code} {answer}")
        return code == 200


class FailingPods(_Kubelet):
    """For a pod annotated sim.kubus.io/fail-after-seconds: once it is Running, that many seconds later its status
    turns Failed (Ready False), written through the status subresource as a kubelet reports it. kwok leaves a
    Failed pod so (its stages move Pending pods only)."""

    what = "making pods Failed"

    def __init__(self, cluster: RealCluster, namespace: str, poll: float = 0.05) -> None:
        super().__init__(cluster, namespace, poll)
        self.failed: list[str] = []

    def _pod(self, pod: dict[str, Any], now: float) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        after = (meta.get("annotations") or {}).get(FAIL_AFTER)
        if after is None or meta.get("deletionTimestamp") or status.get("phase") != "Running":
            return
        if self.since(pod, now) < float(after):
            return
        patch = {"status": {"phase": "Failed", "reason": "Error",
                            "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed"}]}}
        if self._write("PATCH", pod, "/status", patch):
            self.failed.append(meta["name"])


class TerminatingPods(_Kubelet):
    """For a pod annotated sim.kubus.io/termination-seconds: it stays Terminating that many seconds after its
    deletion was asked for, as a pod whose containers take that long to stop. kwok's fast pod-delete stage removes
    a pod at once, so such a pod must also carry the finalizer HOLD (its template's `metadata.finalizers`): this
    removes it that many seconds after it first sees the pod's deletionTimestamp. At the end of the block it
    deletes the namespace's DaemonSets and ReplicaSets and lets go of every pod it holds, so that nothing is left
    holding the namespace's deletion."""

    what = "holding deleted pods"

    def __init__(self, cluster: RealCluster, namespace: str, poll: float = 0.05) -> None:
        super().__init__(cluster, namespace, poll)
        self.released: list[str] = []

    def _pod(self, pod: dict[str, Any], now: float) -> None:
        meta = pod["metadata"]
        seconds = (meta.get("annotations") or {}).get(TERMINATION)
        if HOLD not in (meta.get("finalizers") or []) or not meta.get("deletionTimestamp"):
            return
        if seconds is not None and self.since(pod, now) < float(seconds):
            return
        self._release(pod)

    def _release(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        rest = [f for f in meta.get("finalizers") or [] if f != HOLD]
        patch = {"metadata": {"finalizers": rest or None, "resourceVersion": meta["resourceVersion"]}}
        if self._write("PATCH", pod, "", patch):
            self.released.append(meta["name"])

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for kind in ("daemonsets", "replicasets"):
            code, body = self.cluster.request("DELETE", f"/apis/apps/v1/namespaces/{self.namespace}/{kind}")
            if code != 200:
                self.errors.append(f"deleting the {kind}: {code} {body}")
        deadline = time.monotonic() + 30
        while held := [p for p in self.pods() if HOLD in (p["metadata"].get("finalizers") or [])]:
            if time.monotonic() > deadline:
                self.errors.append(f"still holding {[p['metadata']['name'] for p in held]} after 30 s")
                break
            for pod in held:
                self._release(pod)
            threading.Event().wait(self.poll)  # the next look, as the rounds above pace themselves
        assert not self.errors, f"{self.what}: {self.errors}"
