"""Split deployment (docs/split.md): throughput of 1 vs 2 reconcilers, CPU time per event, failover time.

    .venv/bin/python -m bench.split_bench                       # both parts, default sizes
    .venv/bin/python -m bench.split_bench throughput [--events 50000] [--reconcilers 1 2] [--runs 1]
                                                     [--mode backlog live skewed]
    .venv/bin/python -m bench.split_bench failover [--ttl 3 10] [--rounds 2] [--clean-rounds 1]
                                                   [--repeat 10 --load 1]

Both parts run the services as processes, the way they are deployed: a nats-server of their own, a
fresh PostgreSQL database (created on the server of KUBUS_TEST_PG_URL, default
postgresql://postgres@127.0.0.1:5432/test, migrated, dropped at the end), and `kubus reconcile`
processes with distinct `--instance`s, one `--prefix`, `--partitions 16`.

throughput: N reconcilers (N = 1, then 2) start on empty streams and share the partitions; once every
lease is held, the partitions are balanced and every reconciler answers /readyz, a burst of events is
published to KUBUS_EVENTS as ingest would publish it (pre-encoded, as fast as this process can), and
the time from the first publish until every partition's committed position (table consumer_positions)
has reached the burst's last event in that partition is measured. The burst is a scale-up as ingest
sees it, namespace after namespace: 10 nodes, then per namespace 10 pods (Pending, bound, owned by the
ReplicaSet), the ReplicaSet (10 replicas), the 10 pods Running and Ready, the ReplicaSet's status; so
the reconcilers fold every event into their cache, sync the ReplicaSets they own after each batch,
decide status updates (their outbox rows are relayed to KUBUS_ACTIONS; no executor runs) and commit
every event, decision and position to PostgreSQL. The CPU time of each process (utime + stime from
/proc: the reconcilers, nats-server, the PostgreSQL backends serving the database as pg_stat_activity
lists them, this process publishing) over the burst, divided by the burst's events, is the CPU per
event that lets a reader extrapolate beyond this machine (events/s per core = 1000 / CPU ms per event).
Two ways to time it: `backlog`, the burst published while the reconcilers are paused (SIGSTOP) and
timed from their SIGCONT, so the publisher does not compete with them; `live`, published while they
run, timed from the first publish (what a burst from ingest looks like). A third, `skewed`, is backlog
with every namespace of the burst in the first reconciler's partitions: the other one receives every
event and skips it, and its CPU is what skipping costs: every reconciler of a split deployment receives
every event of KUBUS_EVENTS (reconciler.consuming subscribes to `<prefix>.events.>`) and skips those of
the partitions it does not own. From the CPU per owned event (backlog, 1 reconciler) and per skipped
event (skewed) the run prints an estimate of M reconcilers on M cores of their own.

failover: a `kubus sim` (4 nodes, kubelet delay 0), `kubus ingest`, `kubus execute` (--qps 0) and two
`kubus reconcile --lease-ttl TTL`, one namespace with a ReplicaSet of 1 replica in each of the 16
partitions. Each round SIGKILLs one reconciler, scales every ReplicaSet up by one at that moment, and
measures from the kill: the dead one's leases running out (their expires_at), all of its partitions
acquired by the survivor (acquired_at), the survivor's first decision for one of them and for each
scaled ReplicaSet there (decided_at), and the scaled ReplicaSets' new pods existing in the sim, in the
dead one's partitions and, as a control, in the survivor's. The bound docs/split.md gives for a crash is
ttl + ttl/3 (the last renewal + ttl, then the survivor's next round). The dead one is restarted under a
new name before the next round, and the rounds alternate between the two. Then `--clean-rounds` rounds
stop one with SIGTERM instead: it releases its leases as it leaves, and the times count from its exit
(the bound is then one round of the survivor, ttl/3).

`--repeat N` runs the failover part N times, each on a fresh deployment (the first round after a start is
where a takeover meets the least committed state), and `--load K` keeps K processes spinning on the CPU
meanwhile (the machine's other core busy, as under a test suite): it counts the rounds done, the stalls (a
round whose pods did not appear within its deadline) and the deaths (a service that exited on its own),
and fails when there is one. Every service stopped at the end must exit 0 (a SIGTERM is a clean stop).

BENCH_KEEP=1 keeps the work directory (the services' logs); a failed run keeps it anyway.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import resource
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import msgspec
import nats
import sqlalchemy as sa

from bench.loadgen import Process, machine, start_sim
from kube import codec
from kube.testing import node, pod, replicaset
from messages import codec as bus_codec
from messages import subjects
from messages.observed import ADDED, MODIFIED, ObservedEvent
from reconciler.leases import DEFAULT_TTL
from runtime.bus import ensure_streams
from runtime.natsserver import binary as nats_binary
from runtime.ports import free_port
from store.engine import upgrade

PARTITIONS = 16
PG_ADMIN_URL = os.environ.get("KUBUS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
NODES = 10
REPLICAS = 10  # pods per ReplicaSet in the throughput burst
CONSUMER = "reconciler"  # reconciler.consuming.CONSUMER
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- processes and CPU ------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux); nan once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


async def backend_pids(db: Any) -> list[int]:
    """The PostgreSQL backends serving the bench's database (the reconcilers' connections), but the bench's."""
    rows = await db.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                          "AND pid <> pg_backend_pid()")
    return [int(r["pid"]) for r in rows]


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores, every process), from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / CLK_TCK


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class CpuSample:
    """CPU seconds so far of the named processes, of the database's backends, of this process and of the
    whole machine; `since` gives the difference to an earlier sample."""

    def __init__(self, pids: dict[str, int], backends: list[int]):
        self.named = {k: cpu_seconds(pid) for k, pid in pids.items()}
        self.backends = {pid: cpu_seconds(pid) for pid in backends}
        self.bench = own_cpu_seconds()
        self.machine = machine_busy_seconds()

    def since(self, earlier: CpuSample) -> dict[str, float]:
        """Per named process, "postgres" (the database's backends; those that appeared meanwhile count from 0,
        those that ended are missing), "bench" and "machine"."""
        out = {k: v - earlier.named[k] for k, v in self.named.items()}
        out["postgres"] = sum(v - earlier.backends.get(pid, 0.0) for pid, v in self.backends.items()
                              if not math.isnan(v))
        out["bench"] = self.bench - earlier.bench
        out["machine"] = self.machine - earlier.machine
        return out


class Services:
    """The processes a run starts: each stopped (SIGTERM, then SIGKILL) by its own Popen at the end."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        self.stopped: set[str] = set()  # stopped on purpose: their exit is no failure
        self.exit_codes: dict[str, int] = {}  # of the services `stop()` ended with SIGTERM

    def unclean(self) -> dict[str, int]:
        """The services that did not exit 0 on the SIGTERM of `stop()`."""
        return {name: code for name, code in self.exit_codes.items() if code != 0}

    def start_nats(self) -> str:
        port = free_port()
        self.procs["nats-server"] = subprocess.Popen(
            [nats_binary(), "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(self.workdir / "nats")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while True:  # the services fail fast when NATS does not answer: start them once it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return f"nats://127.0.0.1:{port}"
            except OSError:
                self.check()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nats-server did not listen on {port} within 15 s") from None
                time.sleep(0.02)

    def start_kubus(self, name: str, service: str, *args: str) -> subprocess.Popen[bytes]:
        """`kubus <service> --instance <name> ...`, serving /readyz on a port of its own."""
        port = free_port()
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen([sys.executable, "-m", "kubus", service, "--instance", name,
                                 "--metrics-port", str(port), *args], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs[name] = proc
        self.ports[name] = port
        return proc

    def check(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None and name not in self.stopped:
                raise RuntimeError(f"{name} exited with {proc.returncode}; see {self.workdir / name}.log")

    def kill(self, name: str) -> None:
        self.stopped.add(name)
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(timeout=10)

    def terminate(self, name: str) -> None:
        self.stopped.add(name)
        self.procs[name].terminate()
        self.procs[name].wait(timeout=30)

    def log_lines(self, needle: str) -> int:
        return sum(p.read_text(errors="replace").count(needle) for p in self.workdir.glob("*.log"))

    def stop(self) -> None:
        running = [(n, p) for n, p in self.procs.items() if p.poll() is None]
        for _, proc in running:
            proc.send_signal(signal.SIGCONT)  # a paused one must run to handle SIGTERM
        for name, proc in running:  # nats-server last: the services close their connections first
            if name != "nats-server":
                proc.terminate()
        for name, proc in running:
            if name == "nats-server":
                continue
            try:
                self.exit_codes[name] = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGUSR1)  # what it is waiting on, into its log
                try:
                    self.exit_codes[name] = proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    self.exit_codes[name] = -9  # did not stop within 20 s of its SIGTERM
        server = self.procs.get("nats-server")
        if server is not None and server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


@contextlib.asynccontextmanager
async def fresh_database(workdir: Path) -> AsyncIterator[str]:
    """A new PostgreSQL database, migrated as `kubus db upgrade` does; dropped afterwards."""
    name = f"kubus_bench_split_{secrets.token_hex(5)}"
    await _admin(f'CREATE DATABASE "{name}"')
    url = sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        await upgrade(url, str(workdir))
        yield url
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _admin(statement: str) -> None:
    try:
        conn = await asyncpg.connect(PG_ADMIN_URL, timeout=10)
    except (OSError, asyncpg.PostgresError) as exc:
        raise RuntimeError(f"the split benchmark needs PostgreSQL at {PG_ADMIN_URL} (set KUBUS_TEST_PG_URL): "
                           f"{exc}") from None
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextlib.contextmanager
def workdir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    except BaseException:
        print(f"work directory with the services' logs kept: {path}", flush=True)
        raise
    else:
        if os.environ.get("BENCH_KEEP"):
            print(f"work directory kept: {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


# --- the store, as the bench reads it ----------------------------------------------------------------
@dataclass
class Lease:
    owner: str | None
    epoch: int
    expires_at: datetime | None
    acquired_at: datetime | None


async def leases(db: Any) -> dict[int, Lease]:
    rows = await db.fetch("SELECT partition, owner, epoch, expires_at, acquired_at FROM partition_leases")
    return {int(r["partition"]): Lease(r["owner"], int(r["epoch"]), r["expires_at"], r["acquired_at"]) for r in rows}


async def positions(db: Any) -> dict[int, int]:
    rows = await db.fetch("SELECT partition, stream_seq FROM consumer_positions WHERE consumer = $1", CONSUMER)
    return {int(r["partition"]): int(r["stream_seq"]) for r in rows}


def holdings(table: dict[int, Lease], at: datetime) -> dict[str, set[int]]:
    """Who holds which partition, unexpired, at `at`."""
    held: dict[str, set[int]] = {}
    for p, lease in table.items():
        if lease.owner is not None and lease.expires_at is not None and lease.expires_at > at:
            held.setdefault(lease.owner, set()).add(p)
    return held


async def ready(session: aiohttp.ClientSession, port: int) -> bool:
    try:
        async with session.get(f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=2)) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def wait_balanced(db: Any, services: Services, members: list[str], timeout: float,
                        session: aiohttp.ClientSession | None = None) -> float:
    """Until every partition is held, each member holds its share (16 / members), and (with `session`)
    every member answers /readyz; the seconds it took."""
    started = time.monotonic()
    names = {f"reconciler-{m}" for m in members}
    share = {PARTITIONS // len(members), -(-PARTITIONS // len(members))}
    last: Any = None
    while time.monotonic() - started < timeout:
        services.check()
        held = holdings(await leases(db), datetime.now(UTC))
        last = {k: sorted(v) for k, v in held.items()}
        if (set(held) == names and sum(map(len, held.values())) == PARTITIONS
                and all(len(v) in share for v in held.values())
                and (session is None or all([await ready(session, services.ports[m]) for m in members]))):
            return time.monotonic() - started
        await asyncio.sleep(0.1)  # polling the lease table the reconcilers write
    raise RuntimeError(f"the partitions were not balanced among {members} within {timeout:.0f} s: {last}; "
                       f"logs in {services.workdir}")


def reconcile_args(nats_url: str, db_url: str, prefix: str, ttl: float) -> list[str]:
    return ["--nats-url", nats_url, "--db-url", db_url, "--prefix", prefix, "--partitions", str(PARTITIONS),
            "--lease-ttl", f"{ttl:g}", "--retention", "off", "--log-level", "info"]


# --- throughput ---------------------------------------------------------------------------------------
@dataclass
class Message:
    subject: str
    payload: bytes
    msg_id: str
    partition: int  # -1: the cluster partition


def _observed(obj: Any, kind: str, event_type: str, rv: int) -> ObservedEvent:
    return ObservedEvent(kind=kind, type=event_type, namespace=obj.metadata.namespace or "", name=obj.metadata.name,
                         uid=obj.metadata.uid, resource_version=str(rv), observed_at="2026-11-22T12:00:00.000000Z",
                         ingest="bench", object=msgspec.Raw(codec.encode(obj)))


def burst(events: int, prefix: str, partitions: Collection[int] | None = None) -> list[Message]:
    """At least `events` events of a scale-up as ingest sees it (see the module's docstring); with
    `partitions`, only in namespaces of those partitions (and the nodes)."""
    out: list[Message] = []
    rv = 1000

    def add(obj: Any, kind: str, event_type: str) -> None:
        nonlocal rv
        rv += 1
        event = _observed(obj, kind, event_type, rv)
        partition = subjects.partition_of(event.namespace, PARTITIONS)
        out.append(Message(subjects.event_subject(partition, kind, event.uid, prefix), bus_codec.encode(event),
                           event.msg_id, -1 if partition == subjects.CLUSTER else int(partition)))

    for i in range(NODES):
        add(node(f"node-{i}").ready().build(), "Node", ADDED)
    ns_index = 0
    while len(out) < events:
        ns = f"ns-{ns_index:05d}"
        ns_index += 1
        if partitions is not None and int(subjects.partition_of(ns, PARTITIONS)) not in partitions:
            continue
        rs = (replicaset("web").ns(ns).selector(app="web").template_labels(app="web").replicas(REPLICAS).build())
        pods = [pod(f"web-{j:02d}").ns(ns).labels(app="web").owned_by(rs).on_node(f"node-{(ns_index + j) % NODES}")
                .created(NOW) for j in range(REPLICAS)]
        for p in pods:
            add(p.build(), "Pod", ADDED)
        add(rs, "ReplicaSet", ADDED)
        for p in pods:
            add(p.phase("Running").ready(NOW + timedelta(seconds=1)).build(), "Pod", MODIFIED)
        done = (replicaset("web").ns(ns).selector(app="web").template_labels(app="web").replicas(REPLICAS)
                .status(replicas=REPLICAS, ready=REPLICAS, available=REPLICAS, fully_labeled=REPLICAS)
                .observed_generation(1).build())
        add(done, "ReplicaSet", MODIFIED)
    return out


@dataclass
class ThroughputRun:
    mode: str
    reconcilers: int
    events: int
    seconds: float  # first publish (live) or SIGCONT (backlog, skewed) -> every position at the burst's end
    published: float  # seconds publishing took
    cpu: dict[str, float]  # reconciler instance (and nats-server, postgres, bench, machine) -> CPU s over the burst
    own_events: dict[str, int]  # reconciler instance -> the burst's events in its partitions
    partitions: dict[str, list[int]]
    decisions: int
    lost: int  # "lost partition" lines in the reconcilers' logs (should be 0)

    @property
    def rate(self) -> float:
        return self.events / self.seconds

    def reconciler_cpu(self) -> float:
        return sum(self.cpu[m] for m in self.own_events)

    def cpu_ms_per_event(self, name: str) -> float:
        return 1000 * self.cpu[name] / self.events


async def throughput_run(count: int, events: int, mode: str = "backlog") -> ThroughputRun:
    with workdir(f"kubus-bench-split-{count}-") as wd:
        services = Services(wd)
        try:
            async with fresh_database(wd) as db_url:
                return await _throughput(services, db_url, count, events, mode)
        finally:
            services.stop()


async def _throughput(services: Services, db_url: str, count: int, events: int, mode: str) -> ThroughputRun:
    paused = mode in ("backlog", "skewed")
    nats_url = services.start_nats()
    nc = await _connect(nats_url)
    prefix = "bench"
    bus = await ensure_streams(nc, prefix=prefix, partitions=PARTITIONS)
    last_seq_base = (await bus.js.stream_info(bus.stream(subjects.EVENTS_STREAM))).state.last_seq
    members = [f"r{i}" for i in range(count)]
    db = await asyncpg.connect(db_url)
    try:
        for m in members:
            services.start_kubus(m, "reconcile", *reconcile_args(nats_url, db_url, prefix, DEFAULT_TTL))
        async with aiohttp.ClientSession() as session:
            await wait_balanced(db, services, members, timeout=120, session=session)
        await asyncio.sleep(0.5)  # the generation that holds the final share has started
        table = await leases(db)
        owner_of = {p: str(lease.owner).removeprefix("reconciler-") for p, lease in table.items()}
        partitions = {m: sorted(p for p, o in owner_of.items() if o == m) for m in members}
        messages = burst(events, prefix, partitions[members[0]] if mode == "skewed" else None)
        pids = {m: services.procs[m].pid for m in members} | {"nats-server": services.procs["nats-server"].pid}
        if paused:
            for m in members:
                services.procs[m].send_signal(signal.SIGSTOP)
        else:
            before = CpuSample(pids, await backend_pids(db))
        started = time.perf_counter()
        pending = []
        for msg in messages:
            pending.append(await bus.js.publish_async(msg.subject, msg.payload, headers={"Nats-Msg-Id": msg.msg_id}))
            if len(pending) >= 2000:
                await asyncio.gather(*pending)
                pending.clear()
        acks = await asyncio.gather(*pending)
        published = time.perf_counter() - started
        if paused and published > DEFAULT_TTL / 2:
            print(f"warning: publishing took {published:.1f} s while the reconcilers were paused; near the lease ttl "
                  f"({DEFAULT_TTL:g} s) they lose their leases: use fewer --events", flush=True)
        if paused:  # the backlog is in the stream: the clock starts when the reconcilers resume
            before = CpuSample(pids, await backend_pids(db))
            started = time.perf_counter()
            for m in members:
                services.procs[m].send_signal(signal.SIGCONT)
        # the burst's last sequence in each partition: where each partition's position must get to
        last_in: dict[int, int] = {}
        for seq, msg in enumerate(messages, last_seq_base + 1):
            last_in[msg.partition] = seq
        assert not acks or acks[-1].seq == last_seq_base + len(messages), (acks[-1].seq, len(messages))
        while True:
            at = await positions(db)
            if all(at.get(p, 0) >= seq for p, seq in last_in.items()):
                break
            services.check()
            await asyncio.sleep(0.02)  # polling the positions the reconcilers commit
        seconds = time.perf_counter() - started
        after = CpuSample(pids, await backend_pids(db))
        decisions = int(await db.fetchval("SELECT count(*) FROM decisions"))
    finally:
        await db.close()
        await nc.close()
    per_partition = Counter(m.partition for m in messages)
    return ThroughputRun(
        mode=mode, reconcilers=count, events=len(messages), seconds=seconds, published=published,
        cpu=after.since(before),
        own_events={m: sum(per_partition[p] for p in partitions[m]) + per_partition[-1] for m in members},
        partitions=partitions, decisions=decisions, lost=services.log_lines("lost partition"))


async def _connect(nats_url: str) -> Any:
    return await nats.connect(nats_url, name="bench-split", allow_reconnect=False, connect_timeout=2)


MODES = ("backlog", "live", "skewed")
MODE_TEXT = {
    "backlog": "the burst published while the reconcilers were paused (SIGSTOP), timed from their SIGCONT",
    "live": "the burst published while the reconcilers run, timed from the first publish",
    "skewed": "as backlog, but the burst only in the first reconciler's partitions: the others receive every "
              "event and skip it (what that costs, measured alone)",
}


def bench_throughput(events: int, counts: list[int], runs: int, modes: tuple[str, ...] = MODES
                     ) -> dict[tuple[str, int], list[ThroughputRun]]:
    """Prints and returns the runs, by (mode, reconciler count). The skewed mode runs only with 2 or more."""
    print(f"machine: {machine()}", flush=True)
    results: dict[tuple[str, int], list[ThroughputRun]] = {}
    for mode in modes:
        sizes = [n for n in counts if n > 1] if mode == "skewed" else counts
        if not sizes:
            continue
        print(f"{mode}: {MODE_TEXT[mode]}", flush=True)
        for run in range(runs):
            for n in sizes:
                r = asyncio.run(throughput_run(n, events, mode))
                results.setdefault((mode, n), []).append(r)
                _print_throughput(run + 1, r)
        if mode != "skewed" and 1 in sizes and len(sizes) > 1:
            _print_ratios(mode, {n: results[(mode, n)] for n in sizes})
    _print_estimate(results)
    return results


def _print_ratios(mode: str, results: dict[int, list[ThroughputRun]]) -> None:
    base = statistics.median(r.rate for r in results[1])
    base_cpu = statistics.median(r.reconciler_cpu() / r.events * 1000 for r in results[1])
    for n, rs in results.items():
        if n == 1:
            continue
        rate = statistics.median(r.rate for r in rs)
        cpu = statistics.median(r.reconciler_cpu() / r.events * 1000 for r in rs)
        print(f"{mode}: ratio {n} reconcilers / 1 (median events/s): {rate / base:.2f} ({rate:,.0f} vs "
              f"{base:,.0f} events/s); reconciler CPU per event, all reconcilers together: {cpu:.3f} vs "
              f"{base_cpu:.3f} ms ({cpu / base_cpu:.2f}x)", flush=True)


def skip_cost(runs: list[ThroughputRun]) -> float:
    """ms of CPU a reconciler spends per event of a partition it does not own, from skewed runs: the
    reconcilers other than the first own none of the burst's events (only the few node events)."""
    return statistics.median(1000 * r.cpu[m] / r.events for r in runs for m in sorted(r.own_events)[1:])


def _print_estimate(results: dict[tuple[str, int], list[ThroughputRun]]) -> None:
    """M reconcilers on M cores of their own: each takes 1/M of the events at the cost one reconciler
    pays per event, and receives and skips the rest."""
    if ("backlog", 1) not in results:
        return
    own = statistics.median(r.reconciler_cpu() / r.events * 1000 for r in results[("backlog", 1)])
    skewed = [r for (mode, _), rs in results.items() if mode == "skewed" for r in rs]
    if not skewed:
        print(f"estimate: one reconciler spends {own:.3f} ms of CPU per event: {1000 / own:,.0f} events/s per core",
              flush=True)
        return
    skip = skip_cost(skewed)
    print(f"estimate: one reconciler spends {own:.3f} ms of CPU per event it owns (backlog, 1 reconciler) and "
          f"{skip:.3f} ms per event it receives and skips (skewed); M reconcilers on M cores of their own would "
          f"take about M x 1000 / ({own:.3f} + (M-1) x {skip:.3f}) events/s: "
          + ", ".join(f"M={m} {_ceiling(own, skip, m):,.0f}" for m in (1, 2, 4, 8, 16))
          + f"; never more than {1000 / skip if skip > 0 else float('inf'):,.0f} however many (every reconciler "
          f"receives the whole stream; NATS and PostgreSQL not counted)", flush=True)


def _ceiling(own_ms: float, skip_ms: float, m: int) -> float:
    return m * 1000 / (own_ms + (m - 1) * max(skip_ms, 0.0))


def _print_throughput(run: int, r: ThroughputRun) -> None:
    members = sorted(r.own_events)
    print(f"{r.mode} run {run}, {r.reconcilers} reconciler(s): {r.events:,} events caught up in {r.seconds:.2f} s = "
          f"{r.rate:,.0f} events/s (published in {r.published:.2f} s, {r.events / r.published:,.0f} events/s; "
          f"{r.decisions:,} decisions committed; leases lost: {r.lost})", flush=True)
    for m in members:
        own = r.own_events[m]
        print(f"  {m}: partitions {_ranges(r.partitions[m])}, {own:,} events of its own; CPU {r.cpu[m]:.2f} s "
              f"(busy {r.cpu[m] / r.seconds:.0%} of the run) = {r.cpu_ms_per_event(m):.3f} ms per stream event, "
              f"{1000 * r.cpu[m] / max(own, 1):.3f} ms per own event", flush=True)
    total = r.reconciler_cpu()
    print(f"  CPU ms per event: reconcilers {1000 * total / r.events:.3f} (events/s per reconciler core "
          f"{r.events / total if total else float('inf'):,.0f}), nats-server {r.cpu_ms_per_event('nats-server'):.3f}, "
          f"postgres {r.cpu_ms_per_event('postgres'):.3f} (the database's backends), publisher "
          f"{r.cpu_ms_per_event('bench'):.3f}; the machine (every process, other users' too) busy "
          f"{r.cpu['machine'] / r.seconds:.2f} of {os.cpu_count()} cores over the run", flush=True)


def _ranges(ps: list[int]) -> str:
    return ",".join(map(str, ps)) or "-"


# --- failover -------------------------------------------------------------------------------------------
def namespaces_per_partition() -> dict[int, str]:
    """One namespace name in each partition."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < PARTITIONS:
        name = f"split-{i}"
        found.setdefault(int(subjects.partition_of(name, PARTITIONS)), name)
        i += 1
    return dict(sorted(found.items()))


@dataclass
class FailoverRound:
    ttl: float
    how: str  # "kill -9" or "SIGTERM"
    exiting: float  # SIGTERM: seconds the process took to exit (the times below count from its exit)
    victim: str
    survivor: str
    partitions: list[int]
    expired: float  # kill -> the last of the victim's leases ran out (its expires_at); nan: released
    taken: float  # kill -> the last of them acquired by the survivor (acquired_at)
    first_decision: float  # kill -> the survivor's first decision for one of them (decided_at)
    all_decided: float  # kill -> every ReplicaSet scaled there has a decision
    pods: float  # kill -> the new pods of the ReplicaSets scaled there exist
    control: float  # kill -> the new pods of the ReplicaSets scaled in the survivor's partitions exist
    ready_before: dict[str, bool] = field(default_factory=dict)  # /readyz of each reconciler before the kill

    @property
    def bound(self) -> float:
        return self.ttl + self.ttl / 3


async def _request(session: aiohttp.ClientSession, method: str, url: str, body: Any = None,
                   content_type: str = "application/json") -> Any:
    data = None if body is None else msgspec.json.encode(body)
    async with session.request(method, url, data=data, headers={"Content-Type": content_type}) as resp:
        text = await resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {url}: {resp.status} {text[:300]!r}")
        return msgspec.json.decode(text) if text else None


async def _pod_counts(session: aiohttp.ClientSession, sim: Process) -> Counter[str]:
    body = await _request(session, "GET", f"{sim.url}/api/v1/pods")
    return Counter(p["metadata"]["namespace"] for p in body["items"]
                   if not p["metadata"].get("deletionTimestamp"))


async def failover(ttl: float, rounds: int, clean_rounds: int = 0) -> list[FailoverRound]:
    with workdir("kubus-bench-split-failover-") as wd:
        services = Services(wd)
        sim = start_sim("--nodes", "4", "--kubelet-delay", "0")
        try:
            async with fresh_database(wd) as db_url:
                try:
                    done = await _failover(services, sim, db_url, ttl,
                                           ["kill -9"] * rounds + ["SIGTERM"] * clean_rounds)
                finally:
                    services.stop()  # before the database goes
        finally:
            services.stop()
            sim.stop()
        if services.unclean():  # a service that died meanwhile, or failed its clean stop
            raise RuntimeError(f"services exited with {services.unclean()} on SIGTERM; see the logs in {wd}")
        return done


async def _failover(services: Services, sim: Process, db_url: str, ttl: float, rounds: list[str]
                    ) -> list[FailoverRound]:
    nats_url = services.start_nats()
    prefix = "bench"
    common = ["--nats-url", nats_url, "--db-url", db_url, "--prefix", prefix, "--partitions", str(PARTITIONS),
              "--kubeconfig", str(sim.kubeconfig), "--log-level", "info"]
    services.start_kubus("ingest", "ingest", *common)
    services.start_kubus("execute", "execute", *common, "--qps", "0", "--ack-wait", "5")
    members = ["a", "b"]
    for m in members:
        services.start_kubus(m, "reconcile", *reconcile_args(nats_url, db_url, prefix, ttl))
    spaces = namespaces_per_partition()
    out: list[FailoverRound] = []
    db = await asyncpg.connect(db_url)
    try:
        async with aiohttp.ClientSession() as session:
            apps = f"{sim.url}/apis/apps/v1/namespaces"
            for ns in spaces.values():
                await _request(session, "POST", f"{sim.url}/api/v1/namespaces", {"metadata": {"name": ns}})
                rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
                      "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                               "template": {"metadata": {"labels": {"app": "web"}},
                                            "spec": {"containers": [{"name": "web", "image": "web:1"}]}}}}
                await _request(session, "POST", f"{apps}/{ns}/replicasets", rs)
            await _wait_pods(session, sim, services, dict.fromkeys(spaces.values(), 1), 120)
            # not /readyz here: after a rebalance a reconciler may answer 503 until an event arrives in one of
            # its partitions (printed before each kill)
            await wait_balanced(db, services, members, timeout=60 + 4 * ttl)
            replicas = 1
            for number, how in enumerate(rounds):
                victim, survivor = members[number % 2], members[1 - number % 2]
                held = holdings(await leases(db), datetime.now(UTC))
                ready_before = {m: await ready(session, services.ports[m]) for m in members}
                replicas += 1
                result = await _failover_round(db, session, services, sim, spaces, victim, survivor, held, ttl,
                                               replicas, how)
                result.ready_before = ready_before
                out.append(result)
                _print_round(number + 1, result)
                if number + 1 < len(rounds):  # the dead one comes back under a new name, and the split rebalances
                    fresh = f"{victim}{number + 2}"
                    services.start_kubus(fresh, "reconcile", *reconcile_args(nats_url, db_url, prefix, ttl))
                    members[number % 2] = fresh
                    await wait_balanced(db, services, members, timeout=60 + 4 * ttl)
    finally:
        await db.close()
    return out


async def _wait_pods(session: aiohttp.ClientSession, sim: Process, services: Services, want: dict[str, int],
                     timeout: float) -> None:
    started = time.monotonic()
    while True:
        counts = await _pod_counts(session, sim)
        if all(counts[ns] >= n for ns, n in want.items()):
            return
        services.check()
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"pods not created within {timeout:.0f} s: have {dict(counts)}, want {want}; "
                               f"logs in {services.workdir}")
        await asyncio.sleep(0.1)  # polling the sim for the pods the executor creates


async def _failover_round(db: Any, session: aiohttp.ClientSession, services: Services, sim: Process,
                          spaces: dict[int, str], victim: str, survivor: str, held: dict[str, set[int]], ttl: float,
                          replicas: int, how: str) -> FailoverRound:
    """`how`: "kill -9", or "SIGTERM" (a clean stop; timed from the moment the process has exited, so that
    the scaled ReplicaSets are not decided by the leaving reconciler itself)."""
    theirs = sorted(held.get(f"reconciler-{victim}", set()))
    ours = sorted(held.get(f"reconciler-{survivor}", set()))
    assert theirs and ours, held
    exiting = 0.0
    if how == "SIGTERM":
        signalled = time.monotonic()
        services.terminate(victim)
        exiting = time.monotonic() - signalled
    killed = datetime.now(UTC)
    t0 = time.monotonic()
    if how != "SIGTERM":
        services.kill(victim)
    apps = f"{sim.url}/apis/apps/v1/namespaces"
    for ns in spaces.values():
        await _request(session, "PATCH", f"{apps}/{ns}/replicasets/web", {"spec": {"replicas": replicas}},
                       "application/merge-patch+json")
    after_kill = await leases(db)  # the victim is dead: its rows change no more until taken over
    expired = max(((_at(after_kill[p].expires_at) - killed).total_seconds()
                   for p in theirs if after_kill[p].owner == f"reconciler-{victim}"), default=float("nan"))
    pods_at: dict[str, float] = {}
    want = {spaces[p]: replicas for p in spaces}
    deadline = 3 * ttl + 120
    while len(pods_at) < len(want):
        counts = await _pod_counts(session, sim)
        for ns, n in want.items():
            if ns not in pods_at and counts[ns] >= n:
                pods_at[ns] = time.monotonic() - t0
        if time.monotonic() - t0 > deadline:
            raise RuntimeError(f"round not done within {deadline:.0f} s: pods {dict(counts)}; "
                               f"logs in {services.workdir}")
        services.check()
        await asyncio.sleep(0.05)  # polling the sim for the new pods
    table = await leases(db)
    new_owner = f"reconciler-{survivor}"
    assert all(table[p].owner == new_owner for p in theirs), {p: table[p] for p in theirs}
    taken = max((_at(table[p].acquired_at) - killed).total_seconds() for p in theirs)
    rows = await db.fetch("SELECT controller_key, partition, decided_at, lease_epoch FROM decisions "
                          "WHERE decided_at > $1 AND partition = ANY($2::int[]) ORDER BY decided_at",
                          killed, theirs)
    assert all(r["lease_epoch"] == table[r["partition"]].epoch for r in rows), "a decision under an old epoch"
    first: dict[str, float] = {}
    for r in rows:
        first.setdefault(r["controller_key"], (_at(r["decided_at"]) - killed).total_seconds())
    scaled = {f"ReplicaSet/{spaces[p]}/web" for p in theirs}
    assert scaled <= set(first), sorted(scaled - set(first))
    return FailoverRound(
        ttl=ttl, how=how, exiting=exiting, victim=victim, survivor=survivor, partitions=theirs, expired=expired,
        taken=taken,
        first_decision=min(first.values()), all_decided=max(first[k] for k in scaled),
        pods=max(pods_at[spaces[p]] for p in theirs), control=max(pods_at[spaces[p]] for p in ours))


def _at(value: datetime | None) -> datetime:
    assert value is not None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _print_round(number: int, r: FailoverRound) -> None:
    print(f"ttl {r.ttl:g} s, round {number}: {r.how} of reconciler-{r.victim} holding partitions "
          f"{_ranges(r.partitions)} (/readyz before: {', '.join(f'{k} {v}' for k, v in r.ready_before.items())})",
          flush=True)
    if r.how == "SIGTERM":
        print(f"  it exited {r.exiting:.2f} s after SIGTERM, releasing its leases; from its exit: all "
              f"{len(r.partitions)} taken by reconciler-{r.survivor} after {r.taken:.2f} s (docs/split.md: at most one "
              f"round, ttl/3 = {r.ttl / 3:.2f} s); ", end="")
    else:
        print(f"  from the kill: its leases ran out after {r.expired:.2f} s; all {len(r.partitions)} taken by "
              f"reconciler-{r.survivor} after {r.taken:.2f} s (bound ttl + ttl/3 = {r.bound:.2f} s); ", end="")
    print(f"its first decision "
          f"for one of them {r.first_decision:.2f} s, for every ReplicaSet scaled there {r.all_decided:.2f} s; "
          f"their new pods exist after {r.pods:.2f} s (in the survivor's own partitions: {r.control:.2f} s)",
          flush=True)


def bench_failover(ttls: list[float], rounds: int, clean_rounds: int = 0) -> dict[float, list[FailoverRound]]:
    """`rounds` kill -9 rounds, then `clean_rounds` SIGTERM rounds, per ttl."""
    print(f"machine: {machine()}", flush=True)
    results: dict[float, list[FailoverRound]] = {}
    for ttl in ttls:
        results[ttl] = asyncio.run(failover(ttl, rounds, clean_rounds))
        rs = [r for r in results[ttl] if r.how == "kill -9"]
        clean = [r for r in results[ttl] if r.how == "SIGTERM"]
        if rs:
            bound = ttl + ttl / 3
            print(f"ttl {ttl:g} s, kill -9 over {len(rs)} round(s): partitions taken over "
                  f"{_span(r.taken for r in rs)} s after the kill (bound {bound:.2f} s, worst / bound "
                  f"{max(r.taken for r in rs) / bound:.2f}); first decision {_span(r.first_decision for r in rs)} s; "
                  f"all scaled ReplicaSets decided {_span(r.all_decided for r in rs)} s; their pods "
                  f"{_span(r.pods for r in rs)} s (survivor's own: {_span(r.control for r in rs)} s)", flush=True)
        if clean:
            print(f"ttl {ttl:g} s, SIGTERM over {len(clean)} round(s): partitions taken over "
                  f"{_span(r.taken for r in clean)} s after the exit (bound ttl/3 = {ttl / 3:.2f} s); the scaled "
                  f"ReplicaSets' pods {_span(r.pods for r in clean)} s", flush=True)
    return results


@dataclass
class Tally:
    deployments: int = 0
    rounds: list[FailoverRound] = field(default_factory=list)
    stalls: list[str] = field(default_factory=list)
    deaths: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)


@contextlib.contextmanager
def cpu_load(processes: int, seconds: float = 3600.0) -> Iterator[None]:
    """`processes` busy loops (each a process of its own, bounded to `seconds`), stopped on exit."""
    spin = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    burners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(processes)]
    try:
        yield
    finally:
        for proc in burners:
            proc.kill()
            proc.wait()


def bench_failover_repeated(ttl: float, repeat: int, rounds: int, clean_rounds: int, load: int) -> Tally:
    """`repeat` fresh deployments, each through `rounds` kill -9 and `clean_rounds` SIGTERM rounds, with
    `load` busy processes beside them: what went wrong, counted."""
    print(f"machine: {machine()}; {load} busy process(es) beside the services", flush=True)
    tally = Tally()
    with cpu_load(load):
        for run in range(1, repeat + 1):
            tally.deployments += 1
            try:
                done = asyncio.run(failover(ttl, rounds, clean_rounds))
            except Exception as exc:  # counted and reported; the next deployment goes on
                text = " ".join(str(exc).split())
                where = tally.stalls if "round not done" in text or "pods not created" in text else (
                    tally.deaths if " exited with " in text else tally.other)
                where.append(f"deployment {run}: {text}")
                print(f"deployment {run}: FAILED: {text}", flush=True)
                continue
            tally.rounds += done
            killed = [r for r in done if r.how == "kill -9"]
            print(f"deployment {run}: {len(done)} rounds; kill -9 takeover {_span(r.taken for r in killed)} s, "
                  f"pods {_span(r.pods for r in killed)} s", flush=True)
    killed = [r for r in tally.rounds if r.how == "kill -9"]
    clean = [r for r in tally.rounds if r.how == "SIGTERM"]
    print(f"ttl {ttl:g} s, {tally.deployments} deployments with {load} busy process(es): {len(killed)} kill -9 and "
          f"{len(clean)} SIGTERM rounds done; stalls {len(tally.stalls)}, deaths {len(tally.deaths)}, other failures "
          f"{len(tally.other)}", flush=True)
    if killed:
        bound = ttl + ttl / 3
        print(f"  kill -9: partitions taken over {_span(r.taken for r in killed)} s after the kill (bound "
              f"{bound:.2f} s, worst / bound {max(r.taken for r in killed) / bound:.2f}); the scaled ReplicaSets' "
              f"pods {_span(r.pods for r in killed)} s", flush=True)
    if clean:
        print(f"  SIGTERM: taken over {_span(r.taken for r in clean)} s after the exit; pods "
              f"{_span(r.pods for r in clean)} s", flush=True)
    return tally


def _span(values: Any) -> str:
    vs = sorted(values)
    return f"{vs[0]:.2f}" if len(vs) == 1 or vs[0] == vs[-1] else f"{vs[0]:.2f} - {vs[-1]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", nargs="?", choices=("throughput", "failover", "all"), default="all")
    parser.add_argument("--events", type=int, default=50_000, help="throughput: events in the burst")
    parser.add_argument("--reconcilers", type=int, nargs="+", default=[1, 2], help="throughput: reconciler counts")
    parser.add_argument("--runs", type=int, default=1, help="throughput: runs of each count")
    parser.add_argument("--mode", nargs="+", choices=MODES, default=list(MODES),
                        help="throughput: backlog (published while the reconcilers are paused), live (while they "
                             "run), skewed (backlog, every event in the first reconciler's partitions)")
    parser.add_argument("--ttl", type=float, nargs="+", default=[3.0, DEFAULT_TTL], help="failover: lease ttls")
    parser.add_argument("--rounds", type=int, default=2, help="failover: kill -9 rounds per ttl")
    parser.add_argument("--clean-rounds", type=int, default=1, help="failover: then SIGTERM rounds per ttl")
    parser.add_argument("--repeat", type=int, default=0,
                        help="failover: this many fresh deployments, counting stalls and deaths")
    parser.add_argument("--load", type=int, default=0, help="failover --repeat: busy processes beside the services")
    args = parser.parse_args()
    if args.part == "failover" and args.repeat:
        tallies = [bench_failover_repeated(ttl, args.repeat, args.rounds, args.clean_rounds, args.load)
                   for ttl in args.ttl]
        failures = [f for t in tallies for f in (*t.stalls, *t.deaths, *t.other)]
        for failure in failures:
            print(f"FAILED {failure}", flush=True)
        sys.exit(1 if failures else 0)
    if args.part in ("throughput", "all"):
        bench_throughput(args.events, args.reconcilers, args.runs, tuple(args.mode))
    if args.part in ("failover", "all"):
        bench_failover(args.ttl, args.rounds, args.clean_rounds)


if __name__ == "__main__":
    main()
