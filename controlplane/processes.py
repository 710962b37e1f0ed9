"""Start a real control plane on loopback, on free ports, under a data directory; stop every process of it.

    etcd                      one member, --unsafe-no-fsync (a test cluster), data in DIR/etcd
    kube-apiserver            TLS (our CA: certificates.py), Node,RBAC, ServiceAccount tokens, an audit log;
                              no Endpoints for the `kubernetes` Service (its address, 127.0.0.1, is invalid there)
    kube-controller-manager   every controller but the DaemonSet and ReplicaSet ones (kubus is those), unless
                              upstream_controllers; each controller under its own ServiceAccount; its client
                              limiter at its defaults (20 QPS, burst 30) or controller_manager_qps and _burst
    kube-scheduler            binds the pods to the nodes
    kwok                      the nodes' kubelets: N Node objects it keeps Ready (with a lease), their pods
                              Running and Ready, deleted once their deletion is asked for

Each process runs in a session (process group) of its own, logs to DIR/logs/<name>.log, and is sent SIGKILL
by the kernel if the thread that started it dies (PR_SET_PDEATHSIG): nothing outlives a killed parent. Every
wait is a condition polled with a deadline; a process that exits during the start fails it at once with its
log's tail, and a failed start stops what it started. The admin kubeconfig is written last, once the API
answers, every node is Ready and the `default` ServiceAccount exists (the controller-manager works).

The audit policy logs every write at Metadata level (who did what to which object, no bodies) and no reads, but
those of the user groups ``audit_reads_of`` names (e.g. ``system:serviceaccounts:kubus-system``: every request of
kubus's own ServiceAccounts, reads included, for a test of what they ask and are granted).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from controlplane.api import Api, ApiError, wait_for
from controlplane.building import Build
from controlplane.certificates import Identity, Pki, make
from runtime.ports import free_port

MARKER = ".kubus-controlplane"  # a data directory holding it is one of ours, wiped at the next start
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service's address: the first of the range
POD_CIDR = "10.244.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
STOP_GRACE_S = 15.0
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  verbs: ["get", "list", "watch"]
- level: Metadata
"""


def audit_policy(reads_of: tuple[str, ...] = ()) -> str:
    """AUDIT_POLICY, with a first rule logging the reads of the user groups ``reads_of`` too (rules are matched in
    order: the first that matches decides)."""
    if not reads_of:
        return AUDIT_POLICY
    head, rules = AUDIT_POLICY.split("rules:\n", 1)
    groups = ", ".join(json.dumps(group) for group in reads_of)
    return f"{head}rules:\n- level: Metadata\n  userGroups: [{groups}]\n{rules}"


class ControlPlaneError(RuntimeError):
    """The control plane cannot start: the message says which part and why (and where its log is)."""


@dataclass
class ControlPlaneConfig:
    nodes: int = 3
    data_dir: Path | None = None  # None: a fresh temporary directory, removed at stop
    kubeconfig: Path | None = None  # None: DATA_DIR/kubeconfig
    upstream_controllers: bool = False  # run kube-controller-manager's own DaemonSet and ReplicaSet controllers
    audit_reads_of: tuple[str, ...] = ()  # user groups whose reads (get, list, watch) the audit log has too
    # kube-controller-manager's --kube-api-qps and --kube-api-burst (its client-side limiter); None: its defaults,
    # 20 and 30 (bench/upstream_bench.py sets them, to run upstream's controllers at kubus's client settings)
    controller_manager_qps: float | None = None
    controller_manager_burst: int | None = None
    node_prefix: str = "kwok-node-"
    start_timeout: float = 120.0  # for each wait of the start

    def controller_manager_flags(self) -> list[str]:
        """The flags of kube-controller-manager that this configuration chooses (the rest are fixed)."""
        controllers = "*" if self.upstream_controllers else "*,-daemonset-controller,-replicaset-controller"
        out = [f"--controllers={controllers}"]
        if self.controller_manager_qps is not None:
            out.append(f"--kube-api-qps={self.controller_manager_qps:g}")
        if self.controller_manager_burst is not None:
            out.append(f"--kube-api-burst={self.controller_manager_burst}")
        return out

    def validate(self) -> None:
        if self.nodes < 0:
            raise ControlPlaneError(f"the control plane's nodes must be 0 or more, not {self.nodes}")
        if self.start_timeout <= 0:
            raise ControlPlaneError(f"the control plane's start_timeout must be positive, not {self.start_timeout}")
        if self.controller_manager_qps is not None and not self.controller_manager_qps > 0:
            raise ControlPlaneError("the control plane's controller_manager_qps must be more than 0 (or None for "
                                    f"kube-controller-manager's default), not {self.controller_manager_qps}")
        if self.controller_manager_burst is not None and (isinstance(self.controller_manager_burst, bool)
                                                          or not isinstance(self.controller_manager_burst, int)
                                                          or self.controller_manager_burst < 1):
            raise ControlPlaneError("the control plane's controller_manager_burst must be a whole number, 1 or more "
                                    "(or None for kube-controller-manager's default), not "
                                    f"{self.controller_manager_burst!r}")
        for group in self.audit_reads_of:
            if not isinstance(group, str) or not group.strip():
                raise ControlPlaneError(f"the control plane's audit_reads_of must be user group names, not {group!r}")


def _parent_death_signal() -> Callable[[], None] | None:
    """A preexec_fn asking the kernel to SIGKILL the child when the thread that forked it dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)

    return preexec


@dataclass
class Process:
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    stopped: bool = False

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"--- {' '.join(self.argv)}\n".encode())
            out.flush()
            try:
                self.popen = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out,
                                              stderr=subprocess.STDOUT, start_new_session=True, env=self.env,
                                              preexec_fn=_parent_death_signal())
            except OSError as exc:
                raise ControlPlaneError(f"{self.name} cannot be started ({self.argv[0]}: {exc.strerror}); "
                                        "run `kubus controlplane build`") from None

    def check(self) -> None:
        """Raise if the process has exited (during the start: nothing of ours exits on its own)."""
        if self.popen is not None and self.popen.poll() is not None:
            raise ControlPlaneError(f"{self.name} exited with code {self.popen.returncode} during the start; "
                                    f"its log is {self.log}:\n{self.tail()}")

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join("    " + line[:400] for line in text.splitlines()[-lines:])

    def terminate(self) -> None:
        if self.popen is not None and not self.stopped and self.popen.poll() is None:
            _signal_group(self.popen.pid, signal.SIGTERM)

    def wait_stopped(self, timeout: float) -> None:
        if self.popen is None or self.stopped:
            return
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal_group(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
        # anything else in its group (none of ours forks, but a leader's exit would orphan them)
        _signal_group(self.popen.pid, signal.SIGKILL)
        self.stopped = True

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)  # the process leads its own session: its group id is its pid


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig_document(server: str, ca: Path, user: Identity, name: str = "kubus-controlplane") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": _b64(ca)}}],
            "users": [{"name": name, "user": {"client-certificate-data": _b64(user.cert),
                                              "client-key-data": _b64(user.key)}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name}


def write_private(path: Path, text: str) -> None:
    """Write atomically (a reader never sees half a file), readable by the owner only: it holds a private key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _prepare(data_dir: Path) -> None:
    """An empty (or new) directory, or one a previous control plane left (its marker): wiped. Anything else is
    refused, so that a mistyped --data-dir never deletes someone's files."""
    if data_dir.exists():
        if not data_dir.is_dir():
            raise ControlPlaneError(f"the control plane's data directory {data_dir} is not a directory")
        entries = list(data_dir.iterdir())
        if entries and not (data_dir / MARKER).exists():
            raise ControlPlaneError(f"the control plane's data directory {data_dir} is not empty and is not a "
                                    f"previous control plane's (no {MARKER} in it): give an empty or new directory")
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / MARKER).write_text("a kubus control plane's data directory: wiped at its next start\n")


class ControlPlane:
    """``start()`` it (blocking: well under a minute once built), use ``kubeconfig``, ``stop()`` it; or ``with``."""

    def __init__(self, build: Build, config: ControlPlaneConfig | None = None,
                 say: Callable[[str], None] | None = None) -> None:
        self.build = build
        self.config = config or ControlPlaneConfig()
        self.config.validate()
        self._say = say or (lambda line: None)
        self._temporary = self.config.data_dir is None
        self.data_dir = (self.config.data_dir or Path(tempfile.mkdtemp(prefix="kubus-controlplane-"))).absolute()
        self.kubeconfig = (self.config.kubeconfig or self.data_dir / "kubeconfig").absolute()
        self.processes: list[Process] = []
        self.server = ""
        self.pki: Pki | None = None
        self.node_names = [f"{self.config.node_prefix}{i}" for i in range(self.config.nodes)]

    # --- the parts

    @property
    def logs(self) -> dict[str, Path]:
        return {p.name: p.log for p in self.processes}

    @property
    def audit_log(self) -> Path:
        return self.data_dir / "logs" / "audit.log"

    def api(self) -> Api:
        assert self.pki is not None, "start() the control plane first"
        return Api(self.server, self.pki.ca.cert, self.pki.admin.cert, self.pki.admin.key)

    def _check_all(self) -> None:
        for process in self.processes:
            process.check()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        process = Process(name, argv, self.data_dir / "logs" / f"{name}.log", env)
        self.processes.append(process)
        process.start()
        return process

    def _wait(self, condition: Callable[[], Any], what: str) -> Any:
        try:
            return wait_for(condition, self.config.start_timeout, what, check=self._check_all)
        except TimeoutError as exc:
            logs = "; ".join(f"{p.name}: {p.log}" for p in self.processes)
            raise ControlPlaneError(f"{exc}; logs: {logs}") from None

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        build, data = self.build, self.data_dir
        _prepare(data)
        self.pki = pki = make(data / "pki", SERVICE_IP)
        (data / "audit-policy.yaml").write_text(audit_policy(tuple(self.config.audit_reads_of)))

        client, peer = free_port(), free_port()
        self._say(f"etcd on 127.0.0.1:{client}")
        self._spawn("etcd", [
            str(build.binary("etcd")), "--name=kubus", f"--data-dir={data / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{client}", f"--advertise-client-urls=http://127.0.0.1:{client}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=kubus=http://127.0.0.1:{peer}", "--unsafe-no-fsync"])
        etcd = Api(f"http://127.0.0.1:{client}")
        self._wait(lambda: etcd.get("/health").get("health") == "true", "etcd to be healthy")

        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        self._say(f"kube-apiserver on {self.server}")
        self._spawn("kube-apiserver", [
            str(build.binary("kube-apiserver")), f"--etcd-servers=http://127.0.0.1:{client}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={data / 'kube-apiserver'}", f"--tls-cert-file={pki.apiserver.cert}",
            f"--tls-private-key-file={pki.apiserver.key}", f"--client-ca-file={pki.ca.cert}",
            "--authorization-mode=Node,RBAC", f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
            f"--audit-policy-file={data / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log}",
            # the `kubernetes` Service gets no Endpoints: 127.0.0.1 is refused in one (loopback), every 10 s
            "--endpoint-reconciler-type=none", "--profiling=false"])
        api = self.api()
        self._wait(lambda: api.get("/readyz") == "ok", "kube-apiserver to be ready (/readyz)")

        kubeconfigs = data / "kubeconfigs"
        for name, user in (("kube-controller-manager", pki.controller_manager), ("kube-scheduler", pki.scheduler),
                           ("kwok", pki.kwok)):
            write_private(kubeconfigs / f"{name}.yaml",
                          yaml.safe_dump(kubeconfig_document(self.server, pki.ca.cert, user)))
        kcm = kubeconfigs / "kube-controller-manager.yaml"
        self._spawn("kube-controller-manager", [
            str(build.binary("kube-controller-manager")), f"--kubeconfig={kcm}",
            f"--authentication-kubeconfig={kcm}", f"--authorization-kubeconfig={kcm}",
            *self.config.controller_manager_flags(), "--use-service-account-credentials",
            f"--service-account-private-key-file={pki.service_account_key}", f"--root-ca-file={pki.ca.cert}",
            f"--cluster-signing-cert-file={pki.ca.cert}", f"--cluster-signing-key-file={pki.ca.key}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--cert-dir={data / 'kube-controller-manager'}", "--profiling=false"])
        scheduler = kubeconfigs / "kube-scheduler.yaml"
        self._spawn("kube-scheduler", [
            str(build.binary("kube-scheduler")), f"--kubeconfig={scheduler}",
            f"--authentication-kubeconfig={scheduler}", f"--authorization-kubeconfig={scheduler}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--cert-dir={data / 'kube-scheduler'}", "--profiling=false"])
        home = data / "kwok"
        home.mkdir(exist_ok=True)
        self._spawn("kwok", [
            str(build.binary("kwok")), f"--kubeconfig={kubeconfigs / 'kwok.yaml'}", "-c", str(build.stages),
            "--manage-all-nodes=true", "--node-lease-duration-seconds=40", f"--cidr={POD_CIDR}",
            "--node-ip=127.0.0.1"], env={**os.environ, "HOME": str(home)})

        for name in self.node_names:
            try:
                api.post("/api/v1/nodes", _node(name))
            except ApiError as exc:
                raise ControlPlaneError(f"creating the node {name} failed: {exc}") from None
        self._say(f"waiting for {len(self.node_names)} nodes to be Ready")
        self._wait(lambda: self._nodes_ready(api), f"the {len(self.node_names)} kwok nodes to be Ready")
        self._wait(lambda: api.get("/api/v1/namespaces/default/serviceaccounts/default"),
                   "the controller-manager to create the `default` ServiceAccount")
        write_private(self.kubeconfig, yaml.safe_dump(kubeconfig_document(self.server, pki.ca.cert, pki.admin)))

    def _nodes_ready(self, api: Api) -> bool:
        ready = set()
        for node in api.get("/api/v1/nodes").get("items") or []:
            conditions = (node.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                ready.add(node["metadata"]["name"])
        return set(self.node_names) <= ready

    def stop(self) -> None:
        """SIGTERM every process (etcd last, once the others are gone), SIGKILL what outlives STOP_GRACE_S."""
        others = [p for p in self.processes if p.name != "etcd"]
        for process in others:
            process.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for process in others:
            process.wait_stopped(max(0.1, deadline - time.monotonic()))
        for process in self.processes:
            if process.name == "etcd":
                process.terminate()
                process.wait_stopped(STOP_GRACE_S)
        if self._temporary:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _node(name: str) -> dict[str, Any]:
    """A Node for kwok to keep (kwok's node-initialize stage fills its conditions, capacity and addresses)."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name,
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "type": "kwok"},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"}},
            "spec": {}}
