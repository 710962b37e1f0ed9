"""A bounded chaos run of the split deployment on a JetStream cluster (issue 15).

Everything runs as real processes: a 3-node JetStream cluster on loopback (tests/natscluster.py) with every
kubus stream R3, a PostgreSQL server of the test's own (tests/postgres.py's EmbeddedPostgres, so that it can
crash it) with a fresh database, `kubus sim` (4 nodes), one `kubus ingest`, two `kubus reconcile` sharing the
partitions through leases, and two `kubus execute` (tests/split/harness.py).

For KUBUS_CHAOS_SECONDS (default 120), while the DaemonSets of three namespaces roll (template changes) and
their ReplicaSets scale, a seeded RNG picks faults: SIGKILL of ingest, of a reconciler, of an executor, of one
nats-server, and a crash of PostgreSQL (`pg_ctl stop -m immediate`); each comes back after a random pause. The
faults come in rounds, each round every kind once in a random order, so a run of a minute or more has all five.
A service that exits on its own (say, while PostgreSQL is down) is started again, as systemd or the kubelet
would; the timeline says so.

On every look, during the run and after it, no node may have two pods of one DaemonSet revision (terminating
ones included) and no ReplicaSet more active pods than the largest count it was ever given. After the chaos
everything is started and the test waits (conditions with deadlines, no sleep) for: every DaemonSet on its last
template with one Ready pod per node and its status saying so, every ReplicaSet at its last count, and every
action of every decision with a result in the audit trail (`audit_actions`, docs/audit.md).

The seed is printed at the start; KUBUS_CHAOS_SEED=<seed> repeats the RNG's draws (what to do, to whom, the
pauses). Timing can still change a run: a fault whose victim is still down is skipped, and so is a nats-server
kill while the cluster has not caught up.
The timeline of what was killed and when is printed as it happens and again at the end (`pytest -s` shows it;
a failure shows it always), and written to `timeline.txt` in the run's directory.

    KUBUS_CHAOS_SECONDS=900 KUBUS_CHAOS_SEED=1234 .venv/bin/python -m pytest tests/chaos -s
"""

from __future__ import annotations

import os
import random
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import postgres
from tests.natscluster import NatsCluster
from tests.simulation import target_node, wait_for
from tests.split.harness import SplitDeployment

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("KUBUS_CHAOS_SECONDS") or 120)
SEED = int(os.environ.get("KUBUS_CHAOS_SEED") or secrets.randbelow(2**31))
NODES = 4
NODE_NAMES = frozenset(f"node-{i}" for i in range(NODES))
PARTITIONS = 4
NAMESPACES = ("chaos-a", "chaos-b", "chaos-c")
MAX_REPLICAS = 5
HASH_LABEL = "controller-revision-hash"
STEP = (1.0, 3.5)  # seconds between two choices of the chaos loop
PAUSE = (1.0, 8.0)  # how long a killed process stays down
QUIET_DEADLINE = 240.0  # after the chaos: a leader election, lease expiries and a rollout of 4 nodes on 2 busy cores
FAULTS = ("ingest", "reconciler", "executor", "nats", "postgres")
RECONCILERS, EXECUTORS = ("r1", "r2"), ("e1", "e2")


class Timeline:
    """What the run did and when (seconds since the chaos began), printed as it happens."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.began = time.monotonic()
        self.lines: list[str] = []

    def __call__(self, what: str) -> None:
        line = f"{time.monotonic() - self.began:7.1f}s  {what}"
        self.lines.append(line)
        print(line, flush=True)
        with self.path.open("a") as out:
            out.write(line + "\n")

    def __str__(self) -> str:
        return f"chaos seed {SEED}; timeline:\n" + "\n".join(self.lines)


# --- the workload --------------------------------------------------------------------------------------
def daemonset(image: str) -> dict[str, Any]:
    labels = {"app": "agent"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": labels},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "agent", "image": image}]}}}}


def replicaset(replicas: int) -> dict[str, Any]:
    labels = {"app": "web"}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}


@dataclass
class Wanted:
    """What the test last asked of each namespace's controllers."""

    images: dict[str, str] = field(default_factory=dict)
    replicas: dict[str, int] = field(default_factory=dict)


def request(dep: SplitDeployment, method: str, path: str, body: Any = None, **kw: Any) -> Any:
    code, answer = dep.sim.request(method, path, body, **kw)
    assert code in (200, 201), (method, path, code, answer)
    return answer


# --- reading the cluster -------------------------------------------------------------------------------
def is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def terminating(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def owner(pod: dict[str, Any]) -> str | None:
    ref = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    return f"{ref['kind']}/{ref['name']}" if ref else None


@dataclass
class World:
    pods: dict[str, list[dict[str, Any]]]
    replicasets: dict[str, dict[str, Any]]
    daemonsets: dict[str, dict[str, Any]]

    def of(self, ns: str, controller: str) -> list[dict[str, Any]]:
        return [p for p in self.pods.get(ns, []) if owner(p) == controller]


def look(dep: SplitDeployment) -> World:
    world = World({}, {}, {})
    for item in request(dep, "GET", "/api/v1/pods")["items"]:
        world.pods.setdefault(item["metadata"]["namespace"], []).append(item)
    for item in request(dep, "GET", "/apis/apps/v1/replicasets")["items"]:
        world.replicasets[item["metadata"]["namespace"]] = item
    for item in request(dep, "GET", "/apis/apps/v1/daemonsets")["items"]:
        world.daemonsets[item["metadata"]["namespace"]] = item
    return world


def check_invariants(world: World, timeline: Timeline) -> None:
    """Fails the test at once (pytest.fail: wait_for retries only an AssertionError) on a node with two pods of one
    DaemonSet revision, or a ReplicaSet with more active pods than any count it was ever given."""
    for ns in NAMESPACES:
        pods = world.of(ns, "DaemonSet/agent")
        per = Counter((target_node(p), p["metadata"]["labels"].get(HASH_LABEL)) for p in pods)
        doubled = {k: n for k, n in per.items() if n > 1}
        if doubled:
            pytest.fail(f"{ns}/agent: two pods of one revision on a node (node, revision): {doubled}\n{timeline}")
        active = [p for p in world.of(ns, "ReplicaSet/web") if not terminating(p)]
        if len(active) > MAX_REPLICAS:
            pytest.fail(f"{ns}/web: {len(active)} active pods, more than any count it was given ({MAX_REPLICAS})"
                        f"\n{timeline}")


def ds_problem(world: World, ns: str, image: str) -> str | None:
    ds, pods = world.daemonsets[ns], world.of(ns, "DaemonSet/agent")
    status = ds.get("status") or {}
    if (sorted(target_node(p) for p in pods) != sorted(NODE_NAMES) or any(map(terminating, pods))
            or not all(map(is_ready, pods)) or {p["spec"]["containers"][0]["image"] for p in pods} != {image}):
        return "pods " + ", ".join(sorted(f"{target_node(p)}:{p['spec']['containers'][0]['image']}"
                                          f"{':ready' if is_ready(p) else ''}{':terminating' if terminating(p) else ''}"
                                          for p in pods))
    want = {"desiredNumberScheduled": NODES, "currentNumberScheduled": NODES, "numberReady": NODES,
            "numberAvailable": NODES, "updatedNumberScheduled": NODES, "numberMisscheduled": 0}
    if status.get("observedGeneration") != ds["metadata"]["generation"] or {k: status.get(k, 0) for k in want} != want:
        return f"status {status} for generation {ds['metadata']['generation']}"
    return None


def rs_problem(world: World, ns: str, replicas: int) -> str | None:
    rs, pods = world.replicasets[ns], world.of(ns, "ReplicaSet/web")
    active = [p for p in pods if not terminating(p)]
    status = rs.get("status") or {}
    if len(pods) != replicas or len(active) != replicas or not all(map(is_ready, active)):
        return f"{len(active)} active of {len(pods)} pods ({sum(map(is_ready, active))} ready), want {replicas}"
    if (rs["spec"]["replicas"] != replicas or status.get("observedGeneration") != rs["metadata"]["generation"]
            or status.get("replicas", 0) != replicas or status.get("availableReplicas", 0) != replicas):
        return f"status {status} for generation {rs['metadata']['generation']}"
    return None


# --- the run --------------------------------------------------------------------------------------------
class Chaos:
    def __init__(self, dep: SplitDeployment, cluster: NatsCluster, pg: postgres.EmbeddedPostgres,
                 timeline: Timeline) -> None:
        self.dep, self.cluster, self.pg, self.timeline = dep, cluster, pg, timeline
        self.rng = random.Random(SEED)
        self.down: dict[str, tuple[str, float]] = {}  # fault kind -> (what is down, when it comes back)
        self.round: list[str] = []
        self.wanted = Wanted()
        self.generation = 1  # of the DaemonSets' images: busybox:<n>
        self.counts: Counter[str] = Counter()
        self.exits: Counter[str] = Counter()  # services that exited without being killed

    # --- faults ---------------------------------------------------------------------------------------
    def next_fault(self) -> str | None:
        """The next kind of this round that is not already down (rounds: every kind once, shuffled)."""
        if not self.round:
            self.round = list(FAULTS)
            self.rng.shuffle(self.round)
        for kind in self.round:
            if kind not in self.down and (kind != "nats" or len(list(self.cluster.running())) == 3):
                self.round.remove(kind)
                return kind
        return None

    def inflict(self, kind: str) -> None:
        if kind == "nats":
            if not self.cluster.healthy():  # one server down at a time, and only once the last one caught up
                self.round.append(kind)
                return
            victim = self.rng.choice(sorted(self.cluster.nodes))
            self.cluster.kill(victim)
        elif kind == "postgres":
            victim = "postgresql"
            self.pg.crash()
        else:
            victim = {"ingest": "ingest", "reconciler": self.rng.choice(RECONCILERS),
                      "executor": self.rng.choice(EXECUTORS)}[kind]
            self.dep.kill(victim)
        pause = self.rng.uniform(*PAUSE)
        self.down[kind] = (victim, time.monotonic() + pause)
        self.counts[kind] += 1
        self.timeline(f"KILL {victim}" + (" (pg_ctl stop -m immediate)" if kind == "postgres" else " (SIGKILL)")
                      + f", back in {pause:.1f}s")

    def revive(self, kind: str) -> None:
        victim, _ = self.down.pop(kind)
        if kind == "nats":
            self.cluster.start(victim, wait=False)  # the next server kill waits until the cluster is healthy
        elif kind == "postgres":
            self.pg.start_server()
        else:
            self.dep.start(victim, self.dep.services[victim].kind)
        self.timeline(f"START {victim}")

    def revive_due(self, now: float) -> None:
        for kind, (_, at) in list(self.down.items()):
            if at <= now:
                self.revive(kind)

    def supervise(self) -> None:
        """Starts again a service that exited without being killed, as a supervisor would, saying so."""
        killed = {victim for victim, _ in self.down.values()}
        for name, code in self.dep.dead().items():
            if name not in killed:
                self.timeline(f"EXITED {name} on its own with code {code}: started again")
                self.exits[name] += 1
                self.dep.start(name, self.dep.services[name].kind)

    # --- the workload ---------------------------------------------------------------------------------
    def roll(self) -> None:
        ns = self.rng.choice(NAMESPACES)
        self.generation += 1
        image = f"busybox:{self.generation}"
        request(self.dep, "PATCH", f"/apis/apps/v1/namespaces/{ns}/daemonsets/agent",
                {"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": image}]}}}},
                content_type="application/strategic-merge-patch+json")
        self.wanted.images[ns] = image
        self.timeline(f"roll {ns}/agent to {image}")

    def scale(self) -> None:
        ns = self.rng.choice(NAMESPACES)
        replicas = self.rng.randint(0, MAX_REPLICAS)
        request(self.dep, "PATCH", f"/apis/apps/v1/namespaces/{ns}/replicasets/web", {"spec": {"replicas": replicas}},
                content_type="application/merge-patch+json")
        self.wanted.replicas[ns] = replicas
        self.timeline(f"scale {ns}/web to {replicas}")

    def create(self) -> None:
        for ns in NAMESPACES:
            request(self.dep, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
            request(self.dep, "POST", f"/apis/apps/v1/namespaces/{ns}/daemonsets", daemonset("busybox:1"))
            request(self.dep, "POST", f"/apis/apps/v1/namespaces/{ns}/replicasets", replicaset(2))
            self.wanted.images[ns], self.wanted.replicas[ns] = "busybox:1", 2

    # --- the loop ---------------------------------------------------------------------------------------
    def run(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        next_step = time.monotonic()
        while time.monotonic() < end:
            now = time.monotonic()
            self.revive_due(now)
            self.supervise()
            check_invariants(look(self.dep), self.timeline)
            if now >= next_step:
                choice = self.rng.random()
                if choice < 0.45:
                    kind = self.next_fault()
                    if kind is not None:
                        self.inflict(kind)
                elif choice < 0.75:
                    self.roll()
                else:
                    self.scale()
                next_step = now + self.rng.uniform(*STEP)
            # paces the loop (the chaos's own clock), it does not wait for anything
            time.sleep(max(0.0, min(0.3, next_step - time.monotonic())))
        for kind in list(self.down):
            self.revive(kind)
        self.timeline(f"chaos over: {dict(self.counts)} faults, {self.generation - 1} rolls; everything started")

    def settled(self) -> bool:
        self.supervise()
        world = look(self.dep)
        check_invariants(world, self.timeline)
        problems = {f"{ns}/{what}": p for ns in NAMESPACES
                    for what, p in (("agent", ds_problem(world, ns, self.wanted.images[ns])),
                                    ("web", rs_problem(world, ns, self.wanted.replicas[ns]))) if p}
        assert not problems, f"not settled: {problems}"
        return True


def every_action_answered(dep: SplitDeployment) -> bool:
    """Every outbox row published, and every effect of every decision's actions with a result (audit_actions)."""
    pending = dep.sql("select count(*) from outbox where state != 'sent'")[0][0]
    unanswered = dep.sql("select controller_key, action, target_name, idempotency_key from audit_actions "
                         "where outcome is null order by decided_at limit 5")
    assert pending == 0 and not unanswered, f"{pending} outbox rows pending; without a result: {unanswered}"
    return True


# --- the fixture and the test ----------------------------------------------------------------------------
@dataclass
class Stack:
    dep: SplitDeployment
    cluster: NatsCluster
    pg: postgres.EmbeddedPostgres
    workdir: Path


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    pg = postgres.EmbeddedPostgres()  # the test's own: it crashes it
    cluster = NatsCluster(tmp_path)
    dep: SplitDeployment | None = None
    try:
        admin = pg.start()
        cluster.start()
        with postgres.fresh_database(admin, "kubus_chaos") as db_url:
            dep = SplitDeployment(tmp_path, db_url, nodes=NODES, partitions=PARTITIONS, lease_ttl=3.0,
                                  nats_url=cluster.seeds, service_args=["--stream-replicas", "3"])
            try:
                dep.migrate()
                dep.start("ingest", "ingest")
                for name in RECONCILERS:
                    dep.start(name, "reconcile")
                for name in EXECUTORS:
                    dep.start(name, "execute")
                yield Stack(dep, cluster, pg, tmp_path)
            finally:
                print(f"\nstopped: {dep.stop()}")
                if not pg.running():  # a failure in the middle of a crash: the database is dropped next
                    pg.start_server()
    finally:
        cluster.stop()
        pg.stop()


def test_chaos(stack: Stack) -> None:
    """See the module's docstring."""
    dep, cluster = stack.dep, stack.cluster
    print(f"\nchaos seed {SEED} (KUBUS_CHAOS_SEED={SEED} repeats the draws), {SECONDS:g}s of chaos "
          f"(KUBUS_CHAOS_SECONDS), work directory {stack.workdir}", flush=True)
    timeline = Timeline(stack.workdir / "timeline.txt")
    chaos = Chaos(dep, cluster, stack.pg, timeline)

    def until(condition: Callable[[], Any], what: str, timeout: float) -> None:
        try:
            wait_for(condition, timeout=timeout, interval=0.5, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{dep.logs()}\n{cluster.logs()}\n{timeline}") from None

    def up() -> bool:
        assert not dep.dead(), f"services died: {dep.dead()}"
        held = dep.holdings()
        assert sum(map(len, held.values())) == PARTITIONS and len(held) == 2, f"leases {held}"
        assert all(" consuming " in (stack.workdir / f"{e}.log").read_text() for e in EXECUTORS)
        return f"Node: listed {NODES} objects" in (stack.workdir / "ingest.log").read_text()

    until(up, "ingest listing, both reconcilers holding partitions, both executors consuming", 90)
    chaos.create()
    until(chaos.settled, "the first DaemonSets and ReplicaSets to settle", 90)
    timeline("settled: the chaos begins")
    try:
        chaos.run(SECONDS)
        began = time.monotonic()
        until(chaos.settled, "every DaemonSet rolled and every ReplicaSet at its count after the chaos",
              QUIET_DEADLINE)
        until(lambda: every_action_answered(dep), "every decision's actions to have results", 60)
        timeline(f"settled {time.monotonic() - began:.1f}s after the chaos; every action has a result; services "
                 f"that exited on their own (and were started again): {dict(chaos.exits) or 'none'}")
        assert not dep.dead(), f"services died: {dep.dead()}\n{dep.logs()}"
    finally:
        print(f"\n{timeline}", flush=True)
    assert set(chaos.counts) == set(FAULTS) or SECONDS < 60, f"not every fault happened: {chaos.counts}\n{timeline}"
