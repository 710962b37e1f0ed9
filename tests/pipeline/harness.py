"""The whole pipeline as separate processes, the way it is deployed: nats-server, `kubus sim`,
`kubus ingest`, `kubus reconcile` and `kubus execute`, each of which a test may kill and restart.

By default the pipeline runs its own nats-server; given `nats_url` (e.g. a cluster's seed URLs,
tests/natscluster.py) it uses that one, and `service_args` are added to every service's command line
(e.g. `--stream-replicas 3`). With `nats_config` its own nats-server runs with that configuration file
(e.g. docs/nats-permissions.conf, with `nats_env` in the server's environment) and logs to nats.log;
`env_for` adds environment variables to one service's (its NATS identity).

Given `cluster` (tests/cluster.py's RealCluster: the session's real control plane), the services run against it
instead of a `kubus sim` of their own (`sim_args` are then unused); `sim` stands for whichever serves the API."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from runtime.natsserver import binary as nats_binary
from runtime.ports import free_port
from tests.cluster import HOLD, FailingPods, RealCluster, TerminatingPods
from tests.simulation import SimProcess, wait_for

SERVICES = ("ingest", "reconcile", "execute")


class Pipeline:
    def __init__(self, workdir: Path, *sim_args: str, nats_url: str | None = None,
                 service_args: Sequence[str] = (), args_for: dict[str, Sequence[str]] | None = None,
                 metrics: bool = False, max_payload: int | None = None, nats_config: Path | None = None,
                 nats_env: dict[str, str] | None = None, env_for: dict[str, dict[str, str]] | None = None,
                 prefix: str | None = None, cluster: RealCluster | None = None):
        self.workdir = workdir
        self.prefix = prefix or f"p{uuid.uuid4().hex[:8]}"
        self.nats_config = nats_config
        self.nats_env = dict(nats_env or {})
        self.env_for = {service: dict(env) for service, env in (env_for or {}).items()}
        self.nats_port = free_port()
        self.nats_url = nats_url or f"nats://127.0.0.1:{self.nats_port}"
        self.nats: subprocess.Popen[bytes] | None = None
        self.service_args = tuple(service_args)
        self.args_for = {service: tuple(args) for service, args in (args_for or {}).items()}
        # with `metrics`, each service serves /metrics on a port of its own (`metric` reads it)
        self.metrics_ports = {service: free_port() for service in SERVICES} if metrics else {}
        self.max_payload = max_payload  # the own nats-server's, when not its default (1 MiB)
        if nats_url is None:
            self.start_nats()
        self.real = cluster
        self.sim: SimProcess | RealCluster = cluster or SimProcess(workdir, "--nodes", "4", "--kubelet-delay", "0.05",
                                                                   *sim_args)
        self.namespaces: list[str] = []  # those create_namespace made: deleted at stop on the real control plane
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts: dict[str, int] = dict.fromkeys(SERVICES, 0)

    # --- processes --------------------------------------------------------------------------------
    def start_nats(self) -> None:
        config: list[str] = []
        if self.max_payload is not None:  # only a configuration file sets it
            path = self.workdir / "nats.conf"
            path.write_text(f"max_payload: {self.max_payload}\n")
            config = ["-c", str(path)]
        if self.nats_config is not None:
            config = ["-c", str(self.nats_config)]
        log = open(self.workdir / "nats.log", "ab") if self.nats_config else subprocess.DEVNULL  # noqa: SIM115
        self.nats = subprocess.Popen([nats_binary(), *config, "-js", "-a", "127.0.0.1", "-p", str(self.nats_port),
                                      "-sd", str(self.workdir / "nats")],
                                     stdout=log, stderr=log, env={**os.environ, **self.nats_env})
        if log is not subprocess.DEVNULL:
            log.close()

    def stop_nats(self) -> None:
        assert self.nats is not None
        self.nats.terminate()
        self.nats.wait(timeout=10)

    def start(self, service: str, failpoint: str | None = None) -> None:
        env = {**os.environ}
        env.pop("KUBUS_FAILPOINT", None)
        if failpoint:
            env["KUBUS_FAILPOINT"] = failpoint
        env.update(self.env_for.get(service, {}))
        log = open(self.workdir / f"{service}.log", "ab")  # noqa: SIM115 - owned by the child
        self.procs[service] = subprocess.Popen(
            [sys.executable, "-m", "kubus", service, "--nats-url", self.nats_url, "--prefix", self.prefix,
             "--partitions", "4", "--data-dir", str(self.workdir / "data"),
             *([] if service == "reconcile" else ["--kubeconfig", str(self.sim.kubeconfig)]),  # it takes none
             "--metrics-port", str(self.metrics_ports.get(service, 0)),
             "--instance", f"{service}-{self.restarts[service]}",
             *(["--ack-wait", "3"] if service == "execute" else []),
             *(["--lease-ttl", "3"] if service == "reconcile" else []), *self.service_args,
             *self.args_for.get(service, ())],
            stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()

    def start_all(self, failpoints: dict[str, str] | None = None) -> None:
        for service in SERVICES:
            self.start(service, (failpoints or {}).get(service))

    def supervise(self) -> list[str]:
        """Restarts (without failpoints) any service that died, as a process supervisor would."""
        restarted = []
        for service, proc in self.procs.items():
            if proc.poll() is not None:
                self.restarts[service] += 1
                self.start(service)
                restarted.append(service)
        return restarted

    def kill(self, service: str) -> None:
        self.procs[service].send_signal(signal.SIGKILL)
        self.procs[service].wait(timeout=10)

    def terminate(self, service: str, timeout: float = 15) -> int:
        """SIGTERM to `service`, and its exit code once it has stopped. One that has not stopped within `timeout`
        fails the test with what it was waiting on: its tasks' and threads' stacks (SIGUSR1, runtime/running.py)
        and the end of its log."""
        proc = self.procs[service]
        proc.terminate()
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        log = self.workdir / f"{service}.log"
        self._dump(service)
        raise AssertionError(f"{service} did not stop within {timeout:g} s of SIGTERM; its log ends:\n"
                             f"{log.read_text()[-12000:]}")

    def _dump(self, service: str) -> None:
        """A service that does not stop: its task and thread dump, in its log (waited for, a few seconds)."""
        proc, log = self.procs[service], self.workdir / f"{service}.log"
        if proc.poll() is not None:
            return
        proc.send_signal(signal.SIGUSR1)
        with contextlib.suppress(AssertionError):  # a loop that no longer runs cannot dump
            wait_for(lambda: "asyncio tasks:" in log.read_text(), timeout=5, interval=0.1, what="the dump")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for service, proc in self.procs.items():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._dump(service)  # what it waited on, in the log a failed test shows
                proc.kill()
        for namespace in self.namespaces if self.real else ():  # the session's: leave nothing for the next module
            self.sim.request("DELETE", f"/api/v1/namespaces/{namespace}")
        self.sim.stop()
        if self.nats is not None and self.nats.poll() is None:
            self.stop_nats()

    def metric(self, process: str, name: str, **labels: str) -> float:
        """The sum of the samples of metric `name` with `labels` that `process` (a service) serves (0: none yet)."""
        url = f"http://127.0.0.1:{self.metrics_ports[process]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.workdir.glob("*.log")))

    # --- the cluster and the store -------------------------------------------------------------------
    def expected_nodes(self, sim_nodes: int = 4) -> int:
        """How many nodes the cluster has: the sim's (`sim_nodes`, as its flags made it), or the real one's."""
        return len(self.real.nodes) if self.real else sim_nodes

    def create_namespace(self, namespace: str) -> None:
        """A new namespace; on the real control plane, once its `default` ServiceAccount exists (the ServiceAccount
        admission plugin refuses pods before; kube-controller-manager makes it), and deleted at stop()."""
        code, body = self.sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        assert code == 201, body
        if self.real is None:
            return
        self.namespaces.append(namespace)
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        wait_for(lambda: self.sim.request("GET", path)[0] == 200, timeout=60, interval=0.1,
                 what=f"the default ServiceAccount of {namespace}")

    @contextlib.contextmanager
    def failing_pods(self, namespace: str) -> Iterator[None]:
        """The sim's kubelet fails the pods annotated sim.kubus.io/fail-after-seconds; on the real control plane,
        tests/cluster.py's FailingPods does the same while the block runs."""
        if self.real is None:
            yield
            return
        with FailingPods(self.real, namespace):
            yield

    @contextlib.contextmanager
    def terminating_pods(self, namespace: str) -> Iterator[None]:
        """The sim's kubelet keeps a deleted pod annotated sim.kubus.io/termination-seconds Terminating that long; on
        the real control plane tests/cluster.py's TerminatingPods does the same while the block runs, for the pods
        that carry its finalizer (`hold_finalizers` gives the templates to put it in)."""
        if self.real is None:
            yield
            return
        with TerminatingPods(self.real, namespace):
            yield

    def hold_finalizers(self) -> list[str]:
        """The template finalizers TerminatingPods needs on the real control plane (none on the sim)."""
        return [HOLD] if self.real else []

    def ask_for_pods(self, namespace: str, count: int) -> None:
        """A new namespace with a ReplicaSet `web` (controller key `ReplicaSet/<namespace>/web`) of `count` pods."""
        self.create_namespace(namespace)
        labels = {"app": "web"}
        code, body = self.sim.request("POST", f"/apis/apps/v1/namespaces/{namespace}/replicasets", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
            "spec": {"replicas": count, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9"}]}}}})
        assert code == 201, body

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        code, body = self.sim.request("GET", f"/api/v1/namespaces/{namespace}/pods")
        assert code == 200, body
        return list(body["items"])

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.workdir / "data" / "kubus.db") as conn:
            return conn.execute(query, params).fetchall()

    def wait_for_pods(self, namespace: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        def enough() -> list[dict[str, Any]] | None:
            self.supervise()
            pods = self.pods(namespace)
            assert len(pods) <= count, f"{len(pods)} pods, more than the {count} asked for"
            return pods if len(pods) == count else None

        try:
            return wait_for(enough, timeout=timeout, interval=0.2, what=f"{count} pods in {namespace}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None
