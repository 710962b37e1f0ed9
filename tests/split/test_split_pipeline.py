"""The horizontal split end to end: three `kubus reconcile` and two `kubus execute` against one sim of
6 nodes with 20 namespaces, each holding a ReplicaSet and a DaemonSet, over one PostgreSQL database
and one nats-server (8 partitions, lease ttl 3 s, executors' ack wait 3 s).

One deployment serves the module, and the tests run in order, each building on the previous one's
cluster: (a) everything converges with the partitions split 3/3/2; (b) the reconciler holding the
most partitions is SIGKILLed in the middle of a rolling update of every DaemonSet and a scale-up of
every ReplicaSet, its partitions move to the other two within the lease time, and the rollout
finishes with no pod doubled or missing; (c) it comes back under the same name, the partitions
rebalance to three members, and a further scale still converges; (d) as (b), but only the dying
reconciler's DaemonSets roll, so that after the takeover nothing else in the cluster produces
events: the survivors must finish its rollouts from what they loaded. That is the case of a
reconciler loop that never considered itself caught up because the stream's newest event was another
partition's (seen intermittently in (b) before reconciler/consuming.py counted skipped messages).

Nothing here sleeps to synchronise: every wait is a condition polled with a deadline. The checks are
on outcomes: the pods the API has, every pod it ever had (a watch of the test's own,
harness.PodHistory), the controllers' status, the lease table, and the audit trail in SQL, where
every decision carries the partition and lease epoch it was committed under.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ingest.kinds import DEFAULT_KINDS
from tests.cluster import RealCluster
from tests.simulation import target_node
from tests.split.harness import Kubectl, PodHistory, PodRecord, SplitDeployment, fresh_database

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

NODES = 6
SIM_NODE_NAMES = frozenset(f"node-{i}" for i in range(NODES))
# the nodes the DaemonSets run on: the sim's 6, or 6 of the real control plane's 20 kwok nodes (labelled AGENT_LABEL
# there, as every sim node is, and selected by the DaemonSets' nodeSelector); the `deployment` fixture sets it, and
# pytest runs a module's tests of one kind together
NODE_NAMES = SIM_NODE_NAMES
AGENT_LABEL = "split.kubus.io/agent"
PARTITIONS = 8
LEASE_TTL = 3.0
NAMESPACE_COUNT = 20
REPLICAS = 3
OLD, NEW = "busybox:1", "busybox:2"
RS_IMAGE = "nginx:1.27"
HASH_LABEL = "controller-revision-hash"
DEADLINE = 150.0  # generous: the machine has two cores, and other suites may share them
# The keeper ticks every ttl/3: the dead member's leases expire at most ttl after its last renewal
# or commit, and the others take them at their next tick. The margin is for a contended machine.
FAILOVER_BOUND = LEASE_TTL + LEASE_TTL / 3 + 4.0


def partition_of(namespace: str) -> int:
    """messages.subjects.partition_of, written out: crc32 of the name modulo the partition count."""
    return zlib.crc32(namespace.encode()) % PARTITIONS


def pick_namespaces() -> list[str]:
    """20 names that spread over the 8 partitions 2 or 3 each, so whichever reconciler is killed
    holds namespaces that are mid-rollout."""
    per: Counter[int] = Counter()
    chosen: list[str] = []
    for cap in (NAMESPACE_COUNT // PARTITIONS, NAMESPACE_COUNT // PARTITIONS + 1):
        i = 0
        while len(chosen) < min(NAMESPACE_COUNT, cap * PARTITIONS):
            name = f"split-{i:03d}"
            i += 1
            if name not in chosen and per[partition_of(name)] < cap:
                per[partition_of(name)] += 1
                chosen.append(name)
    return sorted(chosen)


NAMESPACES = pick_namespaces()


# --- manifests ---------------------------------------------------------------------------------------
def replicaset(ns: str, replicas: int) -> dict[str, Any]:
    labels = {"app": "web"}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "main", "image": RS_IMAGE}]}}}}


def daemonset(ns: str, image: str) -> dict[str, Any]:
    labels = {"app": "agent"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": ns},
            "spec": {"selector": {"matchLabels": labels},
                     "updateStrategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"nodeSelector": {AGENT_LABEL: "yes"},
                                           "containers": [{"name": "agent", "image": image}]}}}}


Images = str | Mapping[str, str]  # one image for every DaemonSet, or one per namespace


def image_in(images: Images, ns: str) -> str:
    return images if isinstance(images, str) else images[ns]


def apply_all(kubectl: Kubectl, workdir: Path, replicas: int, images: Images, namespaces: bool = False) -> None:
    """One `kubectl apply` of every namespace's ReplicaSet and DaemonSet (and the namespaces)."""
    objects: list[dict[str, Any]] = []
    if namespaces:
        objects += [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in NAMESPACES]
    for ns in NAMESPACES:
        objects += [replicaset(ns, replicas), daemonset(ns, image_in(images, ns))]
    path = workdir / f"manifest-{time.monotonic_ns()}.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    kubectl("apply", "-f", str(path), timeout=120)


# --- reading the cluster -------------------------------------------------------------------------------
def is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def terminating(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def controller_of(pod: dict[str, Any]) -> str | None:
    ref = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    return f"{ref['kind']}/{ref['name']}" if ref else None



@dataclass
class World:
    """One look at the cluster: every pod, ReplicaSet and DaemonSet, by namespace."""

    pods: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    replicasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    daemonsets: dict[str, dict[str, Any]] = field(default_factory=dict)

    def rs_pods(self, ns: str) -> list[dict[str, Any]]:
        return [p for p in self.pods.get(ns, []) if controller_of(p) == "ReplicaSet/web"]

    def ds_pods(self, ns: str) -> list[dict[str, Any]]:
        return [p for p in self.pods.get(ns, []) if controller_of(p) == "DaemonSet/agent"]


def look(dep: SplitDeployment) -> World:
    world = World()
    for path, put in (("/api/v1/pods", None), ("/apis/apps/v1/replicasets", world.replicasets),
                      ("/apis/apps/v1/daemonsets", world.daemonsets)):
        code, body = dep.sim.request("GET", path)
        assert code == 200, body
        for item in body["items"]:
            ns = item["metadata"]["namespace"]
            if put is None:
                world.pods.setdefault(ns, []).append(item)
            else:
                put[ns] = item
    return world


def rs_problem(world: World, ns: str, replicas: int) -> str | None:
    """What keeps namespace `ns`'s ReplicaSet from being settled at `replicas`, or None."""
    rs = world.replicasets.get(ns)
    if rs is None:
        return "no ReplicaSet"
    pods = world.rs_pods(ns)
    active = [p for p in pods if not terminating(p)]
    status = rs.get("status") or {}
    if len(active) != replicas or len(pods) != replicas or not all(is_ready(p) for p in active):
        return f"{len(active)} active of {len(pods)} pods ({sum(map(is_ready, active))} ready), want {replicas}"
    if (status.get("observedGeneration") != rs["metadata"]["generation"] or status.get("replicas") != replicas
            or status.get("readyReplicas") != replicas or status.get("availableReplicas") != replicas):
        return f"status {status} for generation {rs['metadata']['generation']}"
    return None


def ds_problem(world: World, ns: str, image: str) -> str | None:
    """What keeps namespace `ns`'s DaemonSet from running `image` on every node, settled, or None."""
    ds = world.daemonsets.get(ns)
    if ds is None:
        return "no DaemonSet"
    pods = world.ds_pods(ns)
    status = ds.get("status") or {}
    if (len(pods) != NODES or {target_node(p) for p in pods} != NODE_NAMES or any(map(terminating, pods))
            or not all(map(is_ready, pods)) or {p["spec"]["containers"][0]["image"] for p in pods} != {image}):
        return "pods " + ", ".join(sorted(f"{target_node(p)}:{p['spec']['containers'][0]['image']}"
                                          f"{':ready' if is_ready(p) else ''}{':terminating' if terminating(p) else ''}"
                                          for p in pods))
    want = {"desiredNumberScheduled": NODES, "currentNumberScheduled": NODES, "numberReady": NODES,
            "numberAvailable": NODES, "updatedNumberScheduled": NODES, "numberMisscheduled": 0}
    if (status.get("observedGeneration") != ds["metadata"]["generation"]
            or {k: status.get(k, 0) for k in want} != want or status.get("numberUnavailable", 0) != 0):
        return f"status {status} for generation {ds['metadata']['generation']}"
    return None


class Invariants:
    """Checked on every look while the cluster changes: never two pods of a DaemonSet on one node
    (maxSurge 0, terminating pods included), never more active pods of a ReplicaSet than `ceiling`.
    A violation fails the test at once (wait_for retries only on AssertionError)."""

    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.looks = 0

    def __call__(self, world: World) -> None:
        self.looks += 1
        for ns in NAMESPACES:
            per_node = Counter(target_node(p) for p in world.ds_pods(ns))
            doubled = {n: c for n, c in per_node.items() if c > 1}
            if doubled:
                pytest.fail(f"look {self.looks}: {ns}/agent has two pods on a node: {doubled}: "
                            f"{[(p['metadata']['name'], target_node(p)) for p in world.ds_pods(ns)]}")
            active = [p for p in world.rs_pods(ns) if not terminating(p)]
            if len(active) > self.ceiling:
                pytest.fail(f"look {self.looks}: {ns}/web has {len(active)} active pods, more than {self.ceiling}")


def converge(dep: SplitDeployment, replicas: int, images: Images, invariants: Invariants | None = None,
             timeout: float = DEADLINE) -> World:
    """Waits until every ReplicaSet runs `replicas` pods and every DaemonSet its image on every node,
    with their status saying so; checks `invariants` on every look."""
    def done() -> World | None:
        world = look(dep)
        if invariants is not None:
            invariants(world)
        problems = {ns: p for ns in NAMESPACES
                    for p in [rs_problem(world, ns, replicas), ds_problem(world, ns, image_in(images, ns))] if p}
        assert not problems, f"{len(problems)} not settled, e.g. {sorted(problems.items())[:3]}"
        return world

    return dep.until(done, f"every ReplicaSet at {replicas} and every DaemonSet on {images}", timeout, interval=0.3)


# --- reading the store ----------------------------------------------------------------------------------
def balanced(dep: SplitDeployment, members: set[str]) -> dict[str, set[int]] | None:
    """The holdings, when all partitions are held by exactly `members`, all live, 2 or 3 each."""
    held = dep.holdings()
    live = dep.live_members()
    counts = {m: len(ps) for m, ps in held.items()}
    ok = (set(held) == members and members <= live and sum(counts.values()) == PARTITIONS
          and all(PARTITIONS // len(members) <= c <= -(-PARTITIONS // len(members)) for c in counts.values()))
    assert ok, f"held {counts}, live {sorted(live)}"
    return held


def actions_settled(dep: SplitDeployment, timeout: float = DEADLINE) -> None:
    """Every outbox row sent, and every effect of it (one per pod of a create) answered by a result."""
    def nothing_open() -> bool:
        pending = dep.sql("select count(*) from outbox where state != 'sent'")[0][0]
        unanswered = dep.sql("select t.key from action_targets t where not exists "
                             "(select 1 from action_results r where r.key = t.key) limit 5")
        assert pending == 0 and not unanswered, f"{pending} outbox rows pending; without a result: {unanswered}"
        return True

    dep.until(nothing_open, "every action sent and answered", timeout)


def check_fencing(dep: SplitDeployment) -> dict[str, Counter[int]]:
    """Every decision row carries its partition and a lease epoch; the reconciler that committed it
    (the tick that lists it) had logged acquiring exactly that (partition, epoch); and no tenure
    (partition, epoch) was held, or committed under, by two members. Decisions per member and partition."""
    acquired = dep.acquisitions()
    tenure: dict[tuple[int, int], str] = {}
    for member, held in acquired.items():
        for pe in held:
            assert tenure.setdefault(pe, member) == member, f"partition {pe[0]} epoch {pe[1]} acquired by " \
                                                            f"{tenure[pe]} and {member}"
    committed_by: dict[int, str] = {}
    for instance, ids in dep.sql("select instance, decision_ids from reconciler_ticks where kind = 'batch'"):
        for i in ids:
            assert committed_by.setdefault(int(i), instance) == instance, f"decision {i} in two ticks"
    rows = dep.sql("select id, partition, lease_epoch, controller_key from decisions order by id")
    assert rows, "no decisions at all"
    per_member: dict[str, Counter[int]] = {}
    committers: dict[tuple[int, int], set[str]] = {}
    for decision_id, partition, epoch, key in rows:
        assert epoch is not None, f"decision {decision_id} ({key}) without a lease epoch"
        assert partition == partition_of(key.split("/")[1]), f"decision {decision_id} ({key}) in partition {partition}"
        committer = committed_by.get(decision_id)
        assert committer is not None, f"decision {decision_id} ({key}) in no reconciler's tick"
        assert (partition, epoch) in acquired.get(committer, set()), \
            f"decision {decision_id} ({key}) committed by {committer} under partition {partition} epoch {epoch}, " \
            f"which it never acquired (it acquired {sorted(acquired.get(committer, set()))})"
        committers.setdefault((partition, epoch), set()).add(committer)
        per_member.setdefault(committer, Counter())[partition] += 1
    shared = {pe: ms for pe, ms in committers.items() if len(ms) > 1}
    assert not shared, f"tenures committed under by two members: {shared}"
    current = {lease.partition: lease.epoch for lease in dep.leases()}
    for (partition, epoch) in committers:
        assert epoch <= current[partition], f"partition {partition}: a decision under epoch {epoch}, " \
                                            f"the lease is at {current[partition]}"
    return per_member


def created(history: PodHistory) -> list[PodRecord]:
    return history.snapshot()[0]


def history_caught_up(dep: SplitDeployment, history: PodHistory) -> None:
    """Waits until the pod watch has seen every pod the API lists, and the deletion of every pod it
    saw that the API no longer lists."""
    def caught_up() -> bool:
        added, deleted = history.snapshot()
        code, body = dep.sim.request("GET", "/api/v1/pods")
        assert code == 200, body
        listed = {p["metadata"]["uid"] for p in body["items"]}
        seen, gone = {r.uid for r in added}, {r.uid for r in deleted}
        assert history.error is None, history.error
        assert listed <= seen and seen - listed <= gone, \
            f"watch behind: {len(listed - seen)} listed unseen, {len(seen - listed - gone)} deletions unseen"
        return True

    dep.until(caught_up, "the pod watch to catch up", 30)


def no_pod_created_twice(added: list[PodRecord]) -> None:
    names = Counter((r.namespace, r.name) for r in added)
    twice = [n for n, c in names.items() if c > 1]
    assert not twice, f"pod names created twice: {twice}"
    keys = Counter(r.idempotency_key for r in added if r.idempotency_key)
    reused = [k for k, c in keys.items() if c > 1]
    assert not reused, f"idempotency keys used twice: {reused}"
    assert len({r.uid for r in added}) == len(added)


# --- fixtures --------------------------------------------------------------------------------------------
class Deployment:
    """What the module's tests share: the processes, the pod history, and what earlier tests left."""

    def __init__(self, dep: SplitDeployment, history: PodHistory, kubectl: Kubectl) -> None:
        self.dep = dep
        self.history = history
        self.kubectl = kubectl
        self.expected_down: set[str] = set()
        self.victim: str | None = None  # the service test (b) killed
        self.victim_partitions: set[int] = set()
        self.failover_s: float | None = None
        self.replayed: dict[str, dict[str, Any]] = {}  # member -> the summary of its replay from the store


def label_agent_nodes(dep: SplitDeployment, nodes: frozenset[str], value: str | None) -> None:
    for node in sorted(nodes):
        code, body = dep.sim.request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {AGENT_LABEL: value}}},
                                     content_type="application/merge-patch+json")
        assert code == 200, body


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, pg_admin_url: str,
               cluster: RealCluster | None) -> Iterator[Deployment]:
    global NODE_NAMES
    NODE_NAMES = frozenset(cluster.nodes[:NODES]) if cluster else SIM_NODE_NAMES
    all_nodes = len(cluster.nodes) if cluster else NODES
    workdir = tmp_path_factory.mktemp("split")
    with fresh_database(pg_admin_url) as db_url:
        dep = SplitDeployment(workdir, db_url, nodes=NODES, partitions=PARTITIONS, lease_ttl=LEASE_TTL,
                              cluster=cluster)
        history: PodHistory | None = None
        try:
            label_agent_nodes(dep, NODE_NAMES, "yes")
            dep.migrate()
            history = PodHistory(dep.sim)
            dep.start("ingest", "ingest")
            for name in ("r1", "r2", "r3"):
                dep.start(name, "reconcile")
            for name in ("e1", "e2"):
                dep.start(name, "execute")

            def up() -> bool:
                """Ingest listed the nodes (and every kind), the executors consume, the partitions are split
                3/3/2 and each reconciler runs a loop for what it holds (the last `deciding for` of its log
                is followed by its bootstrap). Not observed_events: a reconciler's loop that starts after the
                first events were published bootstraps them from KUBUS_STATE and never records them."""
                assert not dep.dead(), f"services died: {dep.dead()}"
                balanced(dep, {"reconciler-r1", "reconciler-r2", "reconciler-r3"})
                ingest = (workdir / "ingest.log").read_text()
                listed = re.findall(r"INFO kubus\.ingest: (\w+): listed", ingest)
                assert f"Node: listed {all_nodes} objects" in ingest and set(listed) == set(DEFAULT_KINDS), \
                    f"ingest listed {listed}"
                consuming = [n for n in ("e1", "e2") if " consuming " in (workdir / f"{n}.log").read_text()]
                assert len(consuming) == 2, f"executors consuming: {consuming}"
                for name in ("r1", "r2", "r3"):
                    log = (workdir / f"{name}.log").read_text()
                    assert "cache bootstrapped" in log[log.rfind("deciding for"):], f"{name} has no loop running"
                return True

            started = time.monotonic()
            dep.until(up, "three reconcilers sharing the partitions and two executors consuming", 90)
            print(f"\nthe deployment was up (partitions 3/3/2) after {time.monotonic() - started:.1f}s")
            yield Deployment(dep, history, Kubectl(dep.sim.kubeconfig))
        finally:
            if history is not None:
                history.stop()
            if cluster is not None:  # the session's control plane: leave nothing for the next module
                for ns in NAMESPACES:
                    dep.sim.request("DELETE", f"/api/v1/namespaces/{ns}")
                label_agent_nodes(dep, NODE_NAMES, None)
            print(f"\nstopped: {dep.stop()}")


@pytest.fixture(autouse=True)
def services(deployment: Deployment) -> Iterator[None]:
    """No service dies during a test but the ones it kills on purpose."""
    yield
    dead = {n: c for n, c in deployment.dep.dead().items() if n not in deployment.expected_down}
    assert not dead, f"services died: {dead}\n{deployment.dep.logs()}"


# --- the tests ---------------------------------------------------------------------------------------------
@pytest.mark.real
def test_three_reconcilers_and_two_executors_converge(deployment: Deployment, tmp_path: Path) -> None:
    """20 namespaces, each a ReplicaSet of 3 and a DaemonSet over 6 nodes: all converge; the 8
    partitions are held by the 3 live reconcilers, 2 or 3 each, and `kubus status` says the same;
    every decision was committed under a lease its committer held; every pod was created once."""
    assert sorted(Counter(map(partition_of, NAMESPACES)).values()) == [2] * 4 + [3] * 4
    dep, started = deployment.dep, time.monotonic()
    apply_all(deployment.kubectl, tmp_path, REPLICAS, OLD, namespaces=True)
    world = converge(dep, REPLICAS, OLD, Invariants(ceiling=REPLICAS))
    print(f"converged 20 ReplicaSets and 20 DaemonSets in {time.monotonic() - started:.1f}s")
    actions_settled(dep)

    members = {"reconciler-r1", "reconciler-r2", "reconciler-r3"}
    held = dep.until(lambda: balanced(dep, members), "the partitions held 3/3/2", 30)
    assert sorted(len(ps) for ps in held.values()) == [2, 3, 3]
    assert set().union(*held.values()) == set(range(PARTITIONS))
    status = dep.status()
    assert status["partition_count"] == PARTITIONS and status["nats"]["reachable"], status["nats"]
    live = {m["instance"]: set(map(int, m["partitions"])) for m in status["members"] if m["live"]}
    assert set(live) == members and sorted(map(len, live.values())) == [2, 3, 3], status["members"]
    assert {p["partition"]: p["owner"] for p in status["partitions"] if p["partition"] != "cluster"} == {
        str(p): m for m, ps in live.items() for p in ps}

    per_member = check_fencing(dep)
    assert set(per_member) == members, f"not every reconciler decided: {per_member}"
    for partitions in per_member.values():
        assert set(partitions) <= set(range(PARTITIONS)), partitions
    print(f"decisions per member and partition: { {m: dict(sorted(c.items())) for m, c in per_member.items()} }")

    history_caught_up(dep, deployment.history)
    added = created(deployment.history)
    no_pod_created_twice(added)
    for ns in NAMESPACES:
        ds = [r for r in added if r.namespace == ns and r.owner_kind == "DaemonSet"]
        assert sorted(r.node or "" for r in ds) == sorted(NODE_NAMES), f"{ns}: DaemonSet pods created: {ds}"
        rs = [r for r in added if r.namespace == ns and r.owner_kind == "ReplicaSet"]
        assert len(rs) == REPLICAS, f"{ns}: ReplicaSet pods created: {rs}"
        assert {p["metadata"]["uid"] for p in world.pods[ns]} == {r.uid for r in ds + rs}


@pytest.mark.real
def test_kill_9_mid_rollout_moves_partitions_and_the_rollout_finishes(deployment: Deployment,
                                                                      tmp_path: Path) -> None:
    """Every DaemonSet's image is changed and every ReplicaSet scaled from 3 to 5; once the rollout
    is under way in its namespaces, the reconciler holding the most partitions is SIGKILLed. Its
    partitions are held by the other two within the lease time (plus a margin), 4 each; the rollout
    finishes with exactly one new pod per node per DaemonSet and 5 pods per ReplicaSet, never two pods
    of a DaemonSet on a node on the way; every pod ever created was created once (the old one and the
    new one per node, 5 per ReplicaSet), and the audit trail shows one create per node and revision."""
    dep, kubectl = deployment.dep, deployment.kubectl
    before = look(dep)
    old_hash = {ns: before.ds_pods(ns)[0]["metadata"]["labels"][HASH_LABEL] for ns in NAMESPACES}
    held = dep.holdings()
    victim_member = max(sorted(held), key=lambda m: len(held[m]))
    (victim,) = [s.name for s in dep.reconcilers() if s.member == victim_member]
    victim_partitions = held[victim_member]
    survivors = {s.member for s in dep.reconcilers() if s.name != victim}
    victim_namespaces = [ns for ns in NAMESPACES if partition_of(ns) in victim_partitions]
    assert len(victim_partitions) == 3 and len(victim_namespaces) >= 6, (victim_member, held)

    invariants = Invariants(ceiling=5)
    apply_all(kubectl, tmp_path, 5, NEW)

    def rolling() -> int | None:
        world = look(dep)
        invariants(world)
        new = [p for ns in victim_namespaces for p in world.ds_pods(ns) if p["spec"]["containers"][0]["image"] == NEW]
        return len(new) if len(new) >= 2 else None

    dep.until(rolling, f"the rollout to start in {victim}'s namespaces", DEADLINE, interval=0.1)
    killed_at = dep.kill(victim)
    deployment.expected_down.add(victim)
    deployment.victim, deployment.victim_partitions = victim, victim_partitions
    at_kill = look(dep)
    new_at_kill = sum(1 for ns in victim_namespaces for p in at_kill.ds_pods(ns)
                      if p["spec"]["containers"][0]["image"] == NEW and not terminating(p))
    assert new_at_kill < NODES * len(victim_namespaces), "the victim's rollouts were done before the kill"

    def moved() -> dict[int, str] | None:
        owners = {p: m for m, ps in dep.holdings().items() for p in ps}
        return owners if all(owners.get(p) in survivors for p in victim_partitions) else None

    owners = dep.until(moved, f"{victim}'s partitions {sorted(victim_partitions)} to move", 60, interval=0.05)
    failover = time.monotonic() - killed_at
    deployment.failover_s = failover
    print(f"\nkilled {victim} ({victim_member}, partitions {sorted(victim_partitions)}) with {new_at_kill} of "
          f"{NODES * len(victim_namespaces)} new pods in its namespaces; partitions re-acquired after "
          f"{failover:.2f}s by {owners}")
    assert failover <= FAILOVER_BOUND, f"the partitions took {failover:.1f}s to move (ttl {LEASE_TTL}s)"
    survivors_held = dep.until(lambda: balanced(dep, survivors), "the survivors to hold 4 each", 30)
    assert sorted(map(len, survivors_held.values())) == [4, 4]

    world = converge(dep, 5, NEW, invariants)
    print(f"rollout finished {time.monotonic() - killed_at:.1f}s after the kill ({invariants.looks} looks)")
    actions_settled(dep)
    for ns in NAMESPACES:
        hashes = {p["metadata"]["labels"][HASH_LABEL] for p in world.ds_pods(ns)}
        assert len(hashes) == 1 and hashes != {old_hash[ns]}, f"{ns}: revision hashes {hashes}"

    history_caught_up(dep, deployment.history)
    added, deleted = deployment.history.snapshot()
    no_pod_created_twice(added)
    gone = {r.uid for r in deleted}
    for ns in NAMESPACES:
        ds = [r for r in added if r.namespace == ns and r.owner_kind == "DaemonSet"]
        per = Counter((r.node, r.revision_hash) for r in ds)
        new_hash = next(iter({p["metadata"]["labels"][HASH_LABEL] for p in world.ds_pods(ns)}))
        assert per == Counter({(n, h): 1 for n in NODE_NAMES for h in (old_hash[ns], new_hash)}), \
            f"{ns}: DaemonSet pods created per (node, revision): {per}"
        assert {r.uid for r in ds if r.revision_hash == old_hash[ns]} <= gone
        rs = [r for r in added if r.namespace == ns and r.owner_kind == "ReplicaSet"]
        assert len(rs) == 5 and not {r.uid for r in rs} & gone, f"{ns}: ReplicaSet pods created {rs}"
        assert {p["metadata"]["uid"] for p in world.pods[ns]} == {r.uid for r in rs} | {
            r.uid for r in ds if r.revision_hash == new_hash}

    # the audit trail: one create per node and revision, 5 pod creates per ReplicaSet, whoever decided
    for ns in NAMESPACES:
        summaries = [s for (s,) in dep.sql("select summary from decisions where controller_key = $1 order by id",
                                           f"DaemonSet/{ns}/agent")]
        creates = Counter((node, s["hash"]) for s in summaries for node in s.get("creates") or [])
        assert set(creates.values()) == {1} and len(creates) == 2 * NODES, f"{ns}: creates decided {creates}"
        rs_creates = sum(s.get("creates", 0) for (s,) in dep.sql(
            "select summary from decisions where controller_key = $1", f"ReplicaSet/{ns}/web"))
        assert rs_creates == 5, f"{ns}: {rs_creates} ReplicaSet pod creates decided"
    per_member = check_fencing(dep)
    assert {m for m, c in per_member.items() if set(c) & victim_partitions} >= {victim_member}
    took_over = {m for m in survivors if set(per_member.get(m, Counter())) & victim_partitions}
    assert took_over, f"no survivor decided for the victim's partitions: {per_member}"


def test_the_killed_reconciler_comes_back_and_the_partitions_rebalance(deployment: Deployment,
                                                                         tmp_path: Path) -> None:
    """The killed reconciler starts again under its name: within a deadline the partitions are held
    by three live members again, 2 or 3 each, without a DaemonSet pod recreated; it decides for
    what it got under new epochs; and scaling every ReplicaSet from 5 to 2 converges with exactly 3
    deletions each and no creation anywhere."""
    dep, kubectl = deployment.dep, deployment.kubectl
    victim = deployment.victim
    assert victim is not None, "test (b) did not run"
    last_tick = dep.sql("select coalesce(max(id), 0) from reconciler_ticks")[0][0]
    added_before = len(created(deployment.history))
    ds_uids = {p["metadata"]["uid"] for ns in NAMESPACES for p in look(dep).ds_pods(ns)}

    started = time.monotonic()
    service = dep.start(victim, "reconcile")
    deployment.expected_down.discard(victim)
    members = {s.member for s in dep.reconcilers()}
    held = dep.until(lambda: balanced(dep, members), "the partitions to rebalance over 3 members", 60)
    print(f"\n{service.member} back: partitions rebalanced after {time.monotonic() - started:.2f}s: "
          f"{ {m: sorted(ps) for m, ps in sorted(held.items())} }")
    assert sorted(map(len, held.values())) == [2, 3, 3] and service.member in held

    scaled = time.monotonic()
    apply_all(kubectl, tmp_path, 2, NEW)
    world = converge(dep, 2, NEW, Invariants(ceiling=5))
    print(f"every ReplicaSet scaled down to 2 in {time.monotonic() - scaled:.1f}s")
    actions_settled(dep)
    assert {p["metadata"]["uid"] for ns in NAMESPACES for p in world.ds_pods(ns)} == ds_uids, \
        "a DaemonSet pod was replaced by the rebalance"
    history_caught_up(dep, deployment.history)
    added, deleted = deployment.history.snapshot()
    assert len(added) == added_before, f"pods created: {[r for r in added[added_before:]]}"
    for ns in NAMESPACES:
        assert len([r for r in deleted if r.namespace == ns and r.owner_kind == "ReplicaSet"]) == 3, ns

    still = dep.holdings()
    assert still[service.member] == held[service.member], f"the partitions moved again: {held} -> {still}"
    ticks = dep.sql("select decision_ids from reconciler_ticks where instance = $1 and id > $2",
                    service.member, last_tick)
    ours = [i for (ids,) in ticks for i in ids]
    assert ours, f"{service.member} committed no decision after coming back"
    epochs = dep.sql("select distinct partition, lease_epoch from decisions where id = any($1::bigint[])", ours)
    leases = {lease.partition: lease.epoch for lease in dep.leases()}
    assert {(p, e) for p, e in epochs} <= {(p, leases[p]) for p in held[service.member]}, epochs
    check_fencing(dep)
    status = dep.status()
    live = {m["instance"]: len(m["partitions"]) for m in status["members"] if m["live"]}
    assert live == {m: len(ps) for m, ps in held.items()}, status["members"]


def test_kill_9_while_only_its_own_namespaces_roll(deployment: Deployment, tmp_path: Path) -> None:
    """(b) again, on a cluster where nothing else changes: only the DaemonSets in the namespaces of the
    reconciler that is about to die are rolled (to busybox:3). It is SIGKILLed once its rollouts are
    under way; the other two hold its partitions within the lease time, and must finish its rollouts
    although, once the actions it left in flight are done, nothing in the cluster changes any more
    but what their own decisions cause. Exactly one pod of the new revision is created per node of
    each rolled DaemonSet, and no other pod anywhere."""
    dep, kubectl = deployment.dep, deployment.kubectl
    held = dep.holdings()
    assert len(held) == 3, held
    victim_member = max(sorted(held), key=lambda m: len(held[m]))
    (victim,) = [s.name for s in dep.reconcilers() if s.member == victim_member]
    victim_partitions = held[victim_member]
    survivors = {s.member for s in dep.reconcilers() if s.name != victim}
    victim_namespaces = [ns for ns in NAMESPACES if partition_of(ns) in victim_partitions]
    third = "busybox:3"
    images = {ns: third if ns in victim_namespaces else NEW for ns in NAMESPACES}
    before = look(dep)
    old_hash = {ns: before.ds_pods(ns)[0]["metadata"]["labels"][HASH_LABEL] for ns in victim_namespaces}
    added_before = len(created(deployment.history))

    invariants = Invariants(ceiling=2)
    apply_all(kubectl, tmp_path, 2, images)

    def rolling() -> int | None:
        world = look(dep)
        invariants(world)
        new = [p for ns in victim_namespaces for p in world.ds_pods(ns) if p["spec"]["containers"][0]["image"] == third]
        return len(new) if len(new) >= 2 else None

    dep.until(rolling, f"the rollout to start in {victim}'s namespaces", DEADLINE, interval=0.1)
    killed_at = dep.kill(victim)
    deployment.expected_down.add(victim)
    new_at_kill = sum(1 for ns in victim_namespaces for p in look(dep).ds_pods(ns)
                      if p["spec"]["containers"][0]["image"] == third and not terminating(p))
    assert new_at_kill < NODES * len(victim_namespaces), "the rollouts were done before the kill"

    def moved() -> dict[int, str] | None:
        owners = {p: m for m, ps in dep.holdings().items() for p in ps}
        return owners if all(owners.get(p) in survivors for p in victim_partitions) else None

    owners = dep.until(moved, f"{victim}'s partitions {sorted(victim_partitions)} to move", 60, interval=0.05)
    failover = time.monotonic() - killed_at
    print(f"\nkilled {victim} ({victim_member}, partitions {sorted(victim_partitions)}, namespaces "
          f"{victim_namespaces}) with {new_at_kill} of {NODES * len(victim_namespaces)} new pods; "
          f"partitions re-acquired after {failover:.2f}s by {owners}")
    assert failover <= FAILOVER_BOUND, f"the partitions took {failover:.1f}s to move (ttl {LEASE_TTL}s)"

    world = converge(dep, 2, images, invariants, timeout=90)
    print(f"rollout finished {time.monotonic() - killed_at:.1f}s after the kill ({invariants.looks} looks)")
    actions_settled(dep)
    history_caught_up(dep, deployment.history)
    added = created(deployment.history)
    no_pod_created_twice(added)
    fresh = added[added_before:]
    elsewhere = [r for r in fresh if r.namespace not in victim_namespaces]
    assert not elsewhere, f"pods created outside the rolled namespaces: {elsewhere}"
    for ns in victim_namespaces:
        (new_hash,) = {p["metadata"]["labels"][HASH_LABEL] for p in world.ds_pods(ns)}
        assert new_hash != old_hash[ns]
        per = Counter((r.node, r.revision_hash) for r in fresh if r.namespace == ns)
        assert per == Counter({(n, new_hash): 1 for n in NODE_NAMES}), f"{ns}: pods created per (node, revision): {per}"
    check_fencing(dep)


def test_each_member_replays_without_divergence(deployment: Deployment) -> None:
    """`kubus replay --diff --instance NAME` on every reconciler of the history above, takeovers, kills
    and rebalances included: each one's decisions replay byte for byte from the recorded events."""
    dep = deployment.dep
    members = [m for (m,) in dep.sql("select distinct instance from reconciler_ticks order by instance")]
    assert len(members) >= 3, members
    for member in members:
        result = subprocess.run([sys.executable, "-m", "kubus", "replay", "--diff", "--instance", member,
                                 "--format", "json", "--db-url", dep.db_url, "--nats-url", dep.nats_url,
                                 "--prefix", dep.prefix], capture_output=True, text=True, timeout=120)
        assert result.stdout.strip(), f"{member}: kubus replay exited {result.returncode}: {result.stderr}"
        summary = json.loads(result.stdout.strip().splitlines()[-1])["summary"]
        assert result.returncode == 0, f"{member}: {summary}"
        assert summary.get("divergence") is None, f"{member}: {summary}"
        assert summary["starts"] >= 1 and summary["compared"] == summary["decisions"], f"{member}: {summary}"
        deployment.replayed[member] = summary


def replay_file(path: Path, member: str) -> dict[str, Any]:
    """`kubus replay --from-file PATH --instance MEMBER --diff`: its summary, checked to be without divergence."""
    result = subprocess.run([sys.executable, "-m", "kubus", "replay", "--from-file", str(path), "--instance", member,
                             "--diff", "--format", "json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip(), \
        f"{member} from {path.name}: kubus replay exited {result.returncode}: {result.stderr}{result.stdout[-2000:]}"
    summary: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])["summary"]
    assert summary.get("divergence") is None, f"{member} from {path.name}: {summary}"
    return summary


def test_each_member_replays_from_a_file_as_from_the_store(deployment: Deployment, tmp_path: Path) -> None:
    """A file is how a history is handed to someone else: `kubus events export --instance NAME -o FILE`, then
    `kubus replay --from-file FILE --instance NAME --diff`, replays every member (the survivors that took the
    killed reconciler's partitions over included: their events go back to the positions they took over from)
    with no divergence and the very decisions the replay from the store compared; and so does `--instance NAME`
    on one export of the whole history."""
    dep = deployment.dep
    from_store = deployment.replayed
    assert from_store, "test_each_member_replays_without_divergence did not run"
    source = ("--db-url", dep.db_url, "--nats-url", dep.nats_url, "--prefix", dep.prefix)
    # the members that took partitions over: a start tick of theirs after their first one
    took_over = {m for (m,) in dep.sql("select instance from reconciler_ticks where kind = 'start' "
                                       "group by instance having count(*) > 1")}
    assert took_over & set(from_store), f"no member took partitions over: {sorted(from_store)}"
    full = tmp_path / "history.jsonl"
    dep.kubus("events", "export", *source, "-o", str(full), timeout=300)
    for member, stored in sorted(from_store.items()):
        own = tmp_path / f"{member}.jsonl"
        dep.kubus("events", "export", *source, "--instance", member, "-o", str(own), timeout=300)
        for path in (own, full):
            summary = replay_file(path, member)
            counts = {k: summary[k] for k in ("ticks", "starts", "events", "bootstrap_events", "decisions", "compared")}
            assert counts == {k: stored[k] for k in counts}, f"{member} from {path.name}: {counts}, from the " \
                                                             f"store {stored}"
    print(f"\nreplayed from files, as from the store: { {m: s['compared'] for m, s in sorted(from_store.items())} }")
