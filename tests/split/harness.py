"""A split deployment as separate processes: one nats-server, one `kubus sim`, one `kubus ingest`,
several `kubus reconcile` (each with its own `--instance`, sharing the partitions through leases)
and several `kubus execute`, all with the same prefix and partition count, over one fresh
PostgreSQL database. A test may SIGKILL any of them and start it again, under the same or a new
instance name; every launch appends to `<name>.log` in the work directory.

`PodHistory` records every pod the sim ever had, through a watch of its own, so a test can tell
a pod created twice from one created once, whatever happened in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]
import sqlalchemy as sa

from runtime.natsserver import binary as nats_binary
from runtime.ports import free_port
from tests import postgres
from tests.cluster import RealCluster
from tests.simulation import Kubectl, wait_for
from tests.simulation import SimProcess as Sim

__all__ = ["Kubectl", "PodHistory", "PodRecord", "SplitDeployment", "fresh_database", "wait_for"]

T = TypeVar("T")


KINDS = ("ingest", "reconcile", "execute")


# --- the database ----------------------------------------------------------------------------------
@contextlib.contextmanager
def fresh_database(admin_url: str) -> Iterator[str]:
    """A PostgreSQL database of its own (on the server of `admin_url`, the `pg_admin_url` fixture), dropped
    afterwards; its URL."""
    with postgres.fresh_database(admin_url, "kubus_split") as url:
        yield url
        began = time.monotonic()  # the drop (FORCE, after services were killed) is what the print times
    print(f"dropped database {sa.make_url(url).database} in {time.monotonic() - began:.1f}s")


def _plain(value: Any) -> Any:
    """asyncpg hands JSON/JSONB columns back as text: decode them, leave the rest."""
    if isinstance(value, str) and value[:1] in ("[", "{"):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


# --- the processes -----------------------------------------------------------------------------------
@dataclass
class Service:
    name: str  # the test's handle, and the log file's stem: "r1", "e2", "ingest"
    kind: str  # ingest | reconcile | execute
    instance: str  # --instance
    proc: subprocess.Popen[bytes]
    launches: int = 1

    @property
    def member(self) -> str:
        """The name a reconciler holds leases and commits decisions under."""
        return f"reconciler-{self.instance}"


@dataclass(frozen=True)
class LeaseRow:
    partition: int
    owner: str | None
    epoch: int
    held: bool  # owned and unexpired by the database's clock


class SplitDeployment:
    def __init__(self, workdir: Path, db_url: str, *, nodes: int = 6, partitions: int = 8, lease_ttl: float = 3.0,
                 ack_wait: float = 3.0, qps: float = 100.0, burst: int = 200, nats_url: str | None = None,
                 service_args: Sequence[str] = (), cluster: RealCluster | None = None) -> None:
        """`nats_url` (e.g. a cluster's seed URLs, tests/natscluster.py) is used instead of a nats-server of the
        deployment's own; `service_args` are added to every service's command line (e.g. `--stream-replicas 3`).
        Given `cluster` (the session's real control plane, tests/cluster.py), the services run against it instead
        of a `kubus sim` of the deployment's own (`nodes` is then the sim's that is not started)."""
        self.workdir = workdir
        self.db_url = db_url
        self.partitions = partitions
        self.lease_ttl = lease_ttl
        self.ack_wait = ack_wait
        self.qps, self.burst = qps, burst
        self.prefix = f"s{uuid.uuid4().hex[:8]}"
        self.nats_port = free_port()
        self.nats_url = nats_url or f"nats://127.0.0.1:{self.nats_port}"
        self.service_args = tuple(service_args)
        self.services: dict[str, Service] = {}
        self.nats: subprocess.Popen[bytes] | None = None
        if nats_url is None:
            self.nats = subprocess.Popen([nats_binary(), "-js", "-a", "127.0.0.1", "-p", str(self.nats_port),
                                          "-sd", str(workdir / "nats")],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if self.nats is not None:
                wait_for(self._nats_listening, 15, what="nats-server to listen")
            self.sim: Sim | RealCluster = cluster or Sim(workdir, "--nodes", str(nodes), "--kubelet-delay", "0.05",
                                                         "--termination-seconds", "0.2", "--seed", "11")
        except BaseException:
            if self.nats is not None:
                self.nats.kill()
                self.nats.wait()
            raise
        self.nodes = nodes

    def _nats_listening(self) -> bool:
        assert self.nats is not None
        assert self.nats.poll() is None, f"nats-server exited with {self.nats.returncode}"
        try:
            socket.create_connection(("127.0.0.1", self.nats_port), timeout=1).close()
        except OSError:
            return False
        return True

    # --- lifecycle ---------------------------------------------------------------------------------
    def kubus(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A one-shot `kubus` command (db upgrade, status), failing the test on a non-zero exit."""
        result = subprocess.run([sys.executable, "-m", "kubus", *args], capture_output=True, text=True,
                                timeout=timeout)
        assert result.returncode == 0, f"kubus {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
        return result

    def migrate(self) -> None:
        """`kubus db upgrade`: the services only check a PostgreSQL schema, they never create it."""
        self.kubus("db", "upgrade", "--db-url", self.db_url)

    def start(self, name: str, kind: str, instance: str | None = None) -> Service:
        """Starts (or starts again, under `instance` or its previous one) the service `name`."""
        assert kind in KINDS, kind
        previous = self.services.get(name)
        if previous is not None:
            assert previous.proc.poll() is not None, f"{name} is still running"
        instance = instance or (previous.instance if previous is not None else name)
        args = [sys.executable, "-m", "kubus", kind, "--nats-url", self.nats_url, "--prefix", self.prefix,
                "--partitions", str(self.partitions), "--db-url", self.db_url,
                "--data-dir", str(self.workdir / f"data-{name}"),
                *([] if kind == "reconcile" else ["--kubeconfig", str(self.sim.kubeconfig)]),  # it takes none
                "--metrics-port", "0", "--instance", instance, *self.service_args]
        if kind == "reconcile":
            args += ["--lease-ttl", f"{self.lease_ttl:g}"]
        if kind == "execute":
            args += ["--ack-wait", f"{self.ack_wait:g}", "--qps", f"{self.qps:g}", "--burst", str(self.burst)]
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        log.write(f"=== {time.strftime('%H:%M:%S')} launch of {name} as --instance {instance}\n".encode())
        log.flush()
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        service = Service(name, kind, instance, proc, launches=(previous.launches + 1) if previous else 1)
        self.services[name] = service
        return service

    def kill(self, name: str) -> float:
        """SIGKILL: no lease released, no membership row removed. The monotonic time of the kill."""
        proc = self.services[name].proc
        proc.send_signal(signal.SIGKILL)
        at = time.monotonic()
        proc.wait(timeout=10)
        return at

    def dead(self) -> dict[str, int]:
        """Services that exited, with their exit codes."""
        return {n: s.proc.returncode for n, s in self.services.items() if s.proc.poll() is not None}

    def reconcilers(self) -> list[Service]:
        return [s for s in self.services.values() if s.kind == "reconcile"]

    def stop(self) -> dict[str, str]:
        """SIGTERM to every service, SIGKILL to those still running 15 s later; how each one ended."""
        running = [s for s in self.services.values() if s.proc.poll() is None]
        for service in running:
            service.proc.terminate()
        started, ended = time.monotonic(), {}
        for service in running:
            try:
                service.proc.wait(timeout=max(0.1, started + 15 - time.monotonic()))
                ended[service.name] = f"exited {service.proc.returncode} after {time.monotonic() - started:.1f}s"
            except subprocess.TimeoutExpired:
                service.proc.kill()
                service.proc.wait()
                ended[service.name] = "killed: still running 15s after SIGTERM"
        began = time.monotonic()
        code = self.sim.stop()
        ended["sim"] = f"exited {code} after {time.monotonic() - began:.1f}s"
        began = time.monotonic()
        if self.nats is None:
            return ended
        if self.nats.poll() is None:
            self.nats.terminate()
            try:
                self.nats.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.nats.kill()
                self.nats.wait()
        ended["nats"] = f"exited {self.nats.returncode} after {time.monotonic() - began:.1f}s"
        return ended

    def logs(self, tail: int = 4000) -> str:
        """The tail of every service's log, and what `kubus status` says now."""
        text = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}"
                          for p in sorted(self.workdir.glob("*.log")))
        try:
            status = subprocess.run([sys.executable, "-m", "kubus", "status", "--db-url", self.db_url,
                                     "--nats-url", self.nats_url, "--prefix", self.prefix,
                                     "--partitions", str(self.partitions), "--lease-ttl", f"{self.lease_ttl:g}"],
                                    capture_output=True, text=True, timeout=30)
            text += f"\n--- kubus status\n{status.stdout}{status.stderr}"
        except subprocess.TimeoutExpired:
            text += "\n--- kubus status did not answer within 30s"
        return text

    # --- the store -----------------------------------------------------------------------------------
    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """One query on the deployment's database (asyncpg: $1, $2 ... placeholders)."""
        async def run() -> list[tuple[Any, ...]]:
            conn = await asyncpg.connect(self.db_url, timeout=10)
            try:
                return [tuple(_plain(v) for v in row.values()) for row in await conn.fetch(query, *params)]
            finally:
                await conn.close()

        return asyncio.run(run())

    def leases(self) -> list[LeaseRow]:
        rows = self.sql("select partition, owner, epoch, owner is not null and expires_at > now() "
                        "from partition_leases order by partition")
        return [LeaseRow(int(p), o, int(e), bool(h)) for p, o, e, h in rows]

    def live_members(self) -> set[str]:
        rows = self.sql("select instance from reconciler_members "
                        "where heartbeat_at > now() - make_interval(secs => $1)", self.lease_ttl)
        return {str(i) for (i,) in rows}

    def holdings(self) -> dict[str, set[int]]:
        """member -> the partitions it holds unexpired."""
        held: dict[str, set[int]] = {}
        for lease in self.leases():
            if lease.held and lease.owner is not None:
                held.setdefault(lease.owner, set()).add(lease.partition)
        return held

    def status(self) -> dict[str, Any]:
        """`kubus status --json`."""
        out = self.kubus("status", "--db-url", self.db_url, "--nats-url", self.nats_url, "--prefix", self.prefix,
                         "--partitions", str(self.partitions), "--lease-ttl", f"{self.lease_ttl:g}", "--json").stdout
        result: dict[str, Any] = json.loads(out)
        return result

    # --- what the reconcilers' logs say ------------------------------------------------------------
    ACQUIRED = re.compile(r"kubus\.leases: acquired partition\(s\) (.+)$")

    def acquisitions(self) -> dict[str, set[tuple[int, int]]]:
        """member -> every (partition, epoch) it logged acquiring, over all its launches."""
        held: dict[str, set[tuple[int, int]]] = {}
        for service in self.reconcilers():
            text = (self.workdir / f"{service.name}.log").read_text(errors="replace")
            member = None
            for line in text.splitlines():
                launch = re.match(r"=== \S+ launch of \S+ as --instance (\S+)$", line)
                if launch:
                    member = f"reconciler-{launch.group(1)}"
                    continue
                found = self.ACQUIRED.search(line)
                if found and member is not None:
                    for token in found.group(1).split(", "):
                        partition, epoch = token.split("@")
                        held.setdefault(member, set()).add((int(partition), int(epoch)))
        return held

    # --- waiting -------------------------------------------------------------------------------------
    def until(self, condition: Callable[[], T | None], what: str, timeout: float, interval: float = 0.2) -> T:
        """wait_for, with every service's log tail on a timeout."""
        try:
            result = wait_for(condition, timeout=timeout, interval=interval, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None
        assert result is not None
        return result


# --- every pod the cluster ever had -------------------------------------------------------------------
@dataclass(frozen=True)
class PodRecord:
    namespace: str
    name: str
    uid: str
    owner_kind: str | None
    owner: str | None
    node: str | None  # the DaemonSet pod's pinned node (or spec.nodeName)
    image: str
    revision_hash: str | None
    idempotency_key: str | None


def pod_record(pod: dict[str, Any]) -> PodRecord:
    meta = pod["metadata"]
    ref = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    spec = pod["spec"]
    node = spec.get("nodeName")
    with contextlib.suppress(KeyError, IndexError, TypeError):
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        node = terms[0]["matchFields"][0]["values"][0]
    return PodRecord(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"],
                     owner_kind=ref["kind"] if ref else None, owner=ref["name"] if ref else None, node=node,
                     image=spec["containers"][0]["image"],
                     revision_hash=(meta.get("labels") or {}).get("controller-revision-hash"),
                     idempotency_key=(meta.get("annotations") or {}).get("kubus.io/idempotency-key"))


class PodHistory:
    """Watches every namespace's pods from before the test created any, and keeps each ADDED and
    DELETED it sees (resuming after the last resourceVersion when the stream ends)."""

    def __init__(self, sim: Sim | RealCluster) -> None:
        self.sim = sim
        self.added: list[PodRecord] = []
        self.deleted: list[PodRecord] = []
        self.error: str | None = None  # the history is incomplete: the test cannot trust it
        self.broken: str | None = None  # the last time the stream ended early (resumed where it was)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        code, body = sim.request("GET", "/api/v1/pods")
        assert code == 200, body
        self._rv = str(body["metadata"]["resourceVersion"])
        for pod in body["items"]:
            self.added.append(pod_record(pod))
        self._thread = threading.Thread(target=self._run, name="pod-history", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                url = (f"{self.sim.url}/api/v1/pods?watch=true&allowWatchBookmarks=true&timeoutSeconds=30"
                       f"&resourceVersion={self._rv}")
                try:
                    with urllib.request.urlopen(url, timeout=60, context=self.sim.ssl) as response:
                        for line in response:
                            if self._stop.is_set():
                                return
                            self._event(json.loads(line))
                # AttributeError: http.client's readline at the end of a chunked stream that was closed
                except (OSError, AttributeError, urllib.error.URLError) as exc:
                    if self._stop.is_set():
                        return
                    self.broken = f"watch broke, resumed: {exc!r}"
        except Exception as exc:  # a thread must not raise: the test reads `error`
            self.error = f"the pod watch failed: {exc!r}"

    def _event(self, event: dict[str, Any]) -> None:
        obj = event["object"]
        if event["type"] == "ERROR":
            self.error = f"{obj.get('code')} {obj.get('message')}"
            self._stop.set()
            return
        self._rv = str(obj["metadata"]["resourceVersion"])
        if event["type"] == "ADDED":
            with self._lock:
                self.added.append(pod_record(obj))
        elif event["type"] == "DELETED":
            with self._lock:
                self.deleted.append(pod_record(obj))

    def snapshot(self) -> tuple[list[PodRecord], list[PodRecord]]:
        with self._lock:
            return list(self.added), list(self.deleted)

    def stop(self) -> None:
        """Stops recording. The stream itself ends with the sim (closing the response from here would
        wait for the reading thread's lock, that is, for the next event or the watch's timeout)."""
        self._stop.set()
