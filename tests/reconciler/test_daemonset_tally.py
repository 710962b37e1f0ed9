"""The DaemonSet's StatusTally against the computation it stands for, after every step of random histories.

After `claim` and `count`, a tally kept across the steps must hold exactly what claim_facts,
nodes_to_daemon_facts and calculate_status_facts compute from scratch over the same cache: the claimed,
adopted and released pods, every node's pods oldest first, and the seven counts of the status.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pytest

from kube import codec
from kube.apps import DaemonSet
from kube.core import POD_FAILED, POD_PENDING, POD_RUNNING, POD_SUCCEEDED, Node, Pod
from kube.labels import selector_from_label_selector
from kube.testing import PodBuilder, daemonset, node, pod
from messages.observed import ADDED, DELETED, MODIFIED
from reconciler.core import cache as cache_module
from reconciler.core.claiming import claim_facts
from reconciler.core.daemonset.history import UNIQUE_LABEL_KEY
from reconciler.core.daemonset.manage import nodes_to_daemon_facts
from reconciler.core.daemonset.status import calculate_status_facts
from reconciler.core.daemonset.tally import StatusTally
from tests.reconciler.builders import NOW, Cluster, observed

HASHES = ("h1", "h2")
NODE_NAMES = [f"node-{i}" for i in range(8)]


class History:
    """A cluster changing at random: nodes come, go and change taints and labels; pods of the DaemonSet,
    orphans and another owner's come, go, bind, turn Ready, fail, are deleted and relabelled; the DaemonSet's
    template, minReadySeconds and selector change; the clock moves, now and then backwards."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.cluster = Cluster()
        self.version = 0
        self.now = NOW
        self.hash = HASHES[0]
        self.ds = self._daemonset(app="agent", min_ready=0, selector_nodes=False, generation=1)
        self.put(self.ds, ADDED)
        self.nodes: dict[str, Node] = {}
        self.pods: dict[str, Pod] = {}
        self.serial = 0

    def _daemonset(self, *, app: str, min_ready: int, selector_nodes: bool, generation: int) -> DaemonSet:
        builder = (daemonset("agent").uid("ds-uid").selector(app=app).template_labels(app=app)
                   .min_ready_seconds(min_ready).generation(generation))
        if selector_nodes:
            builder = builder.node_selector(role="worker")
        return builder.build()

    def put(self, obj: Any, event_type: str) -> None:
        self.version += 1
        obj.metadata.resource_version = str(self.version)
        self.cluster.apply(obj, event_type)

    def step(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.12:
            self._node()
        elif roll < 0.75:
            self._pod()
        elif roll < 0.82:
            self._template()
        elif roll < 0.87:
            self.hash = rng.choice(HASHES)
        else:
            self.now += timedelta(seconds=rng.choice((-3, 1, 2, 5, 20)))

    def _node(self) -> None:
        rng = self.rng
        name = rng.choice(NODE_NAMES)
        old = self.nodes.get(name)
        if old is not None and rng.random() < 0.3:
            self.put(old, DELETED)
            del self.nodes[name]
            return
        builder = node(name).uid(old.metadata.uid if old is not None else f"{name}-{self.version}").ready()
        if rng.random() < 0.5:
            builder = builder.labels(role="worker")
        taint = rng.random()
        if taint < 0.2:
            builder = builder.taint("dedicated", "x", "NoSchedule")
        elif taint < 0.3:
            builder = builder.taint("evict", "x", "NoExecute")
        new = builder.build()
        self.put(new, ADDED if old is None else MODIFIED)
        self.nodes[name] = new

    def _pod(self) -> None:
        rng = self.rng
        if self.pods and rng.random() < 0.6:
            name = rng.choice(sorted(self.pods))
            old = self.pods[name]
            if rng.random() < 0.25:
                self.put(old, DELETED)
                del self.pods[name]
                return
            self.put(self._changed(old), MODIFIED)
            return
        self.serial += 1
        name = f"pod-{self.serial}"
        builder = pod(name).uid(f"uid-{name}").created(self.now - timedelta(seconds=rng.randrange(0, 4)))
        owner = rng.random()
        if owner < 0.7:
            builder = builder.owned_by(self.ds)
        elif owner < 0.8:
            other = daemonset("other").uid("other-uid").build()
            builder = builder.owned_by(other)
        builder = builder.labels(app=rng.choice(("agent", "agent", "agent", "web")),
                                 **{UNIQUE_LABEL_KEY: rng.choice(HASHES)})
        where = rng.random()
        if where < 0.7:
            builder = builder.on_node(rng.choice(NODE_NAMES))
        elif where < 0.85:
            builder = builder.target_node(rng.choice(NODE_NAMES))
        new = builder.phase(POD_RUNNING if rng.random() < 0.7 else POD_PENDING).build()
        self.put(new, ADDED)
        self.pods[name] = new

    def _changed(self, old: Pod) -> Pod:
        rng = self.rng
        change = rng.random()
        builder = PodBuilder(codec.decode(codec.encode(old), Pod))  # a new version: the cached one is left as it is
        if change < 0.35:
            builder = builder.ready(self.now - timedelta(seconds=rng.randrange(0, 8)))
        elif change < 0.45:
            builder = builder.not_ready(self.now)
        elif change < 0.55:
            builder = builder.phase(rng.choice((POD_FAILED, POD_SUCCEEDED)))
        elif change < 0.7:
            builder = builder.deleting(self.now)
        elif change < 0.8:
            builder = builder.labels(app=rng.choice(("agent", "web")))
        elif change < 0.9:
            builder = builder.on_node(rng.choice(NODE_NAMES))
        else:
            builder = builder.labels({UNIQUE_LABEL_KEY: rng.choice(HASHES)})
        return builder.build()

    def _template(self) -> None:
        rng = self.rng
        ds = self.ds
        self.ds = self._daemonset(
            app="agent" if rng.random() < 0.9 else rng.choice(("agent", "web")),
            min_ready=rng.choice((0, 0, 5)), selector_nodes=rng.random() < 0.3,
            generation=ds.metadata.generation + 1)
        self.put(self.ds, MODIFIED)


def _fresh(history: History) -> tuple[set[str], list[str], list[str], dict[str, list[str]], Any]:
    cache, ds = history.cluster.cache, history.ds
    selector = selector_from_label_selector(ds.spec.selector)
    claim = claim_facts(ds.metadata, selector, cache.owned_or_orphan_pods(ds.metadata.namespace, ds.metadata.uid))
    by_node = nodes_to_daemon_facts(claim.claimed)
    nodes = sorted(cache.all("Node"), key=lambda n: n.metadata.name)
    status = calculate_status_facts(ds, nodes, by_node, history.hash, history.now, update_observed_generation=False)
    return ({f.uid for f in claim.claimed}, sorted(p.metadata.name for p in claim.adopt),
            sorted(p.metadata.name for p in claim.release),
            {name: [f.uid for f in pods] for name, pods in by_node.items()}, status)


def _kept(history: History, tally: StatusTally) -> tuple[set[str], list[str], list[str], dict[str, list[str]], Any]:
    cache, ds = history.cluster.cache, history.ds
    selector = selector_from_label_selector(ds.spec.selector)
    tally.claim(ds, selector, cache)
    tally.count(ds, history.hash, cache, history.now, comparison_operators=False)
    return ({f.uid for f in tally.claimed()}, sorted(p.metadata.name for p in tally.adopt()),
            sorted(p.metadata.name for p in tally.release()),
            {name: [f.uid for f in pods] for name, pods in tally.by_node.items()},
            tally.status(ds, update_observed_generation=False))


@pytest.mark.parametrize("seed", range(12))
def test_a_kept_tally_matches_the_computation_from_scratch_at_every_step(seed: int) -> None:
    history = History(seed)
    tally = StatusTally()
    for step in range(400):
        history.step()
        if history.rng.random() < 0.5:  # syncs come now and then: several changes between two
            assert _kept(history, tally) == _fresh(history), f"seed {seed}, step {step}"
    assert _kept(history, tally) == _fresh(history)


def test_a_reader_the_journal_forgot_reads_everything_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_module, "JOURNAL_LIMIT", 8)
    history = History(99)
    tally = StatusTally()
    _kept(history, tally)
    for step in range(300):
        history.step()
        if step % 40 == 39:  # dozens of changes: more than the journal keeps
            assert _kept(history, tally) == _fresh(history), f"step {step}"


def test_the_journal_lists_each_change_after_a_position() -> None:
    cluster = Cluster()
    journal = cluster.cache.journal("Node", "")
    start = journal.end
    a = node("a").uid("a-uid").rv("1").build()
    cluster.add(a)
    cluster.add(node("b").uid("b-uid").rv("5").build())
    cluster.update(node("a").uid("a-uid").rv("2").build())
    assert journal.since(start) == ["a-uid", "b-uid", "a-uid"]
    assert journal.since(journal.end) == []
    assert cluster.cache.apply(observed(node("b").uid("b-uid").rv("4").build(), MODIFIED), 99) is None  # stale
    assert journal.since(start) == ["a-uid", "b-uid", "a-uid"]


def test_only_asked_for_journals_are_kept() -> None:
    cluster = Cluster(pod("p").uid("p-uid").build())
    assert cluster.cache.journals == {}
    journal = cluster.cache.journal("Pod", "default")
    cluster.add(pod("q").uid("q-uid").build())
    cluster.add(pod("r").uid("r-uid").ns("elsewhere").build())
    assert journal.since(0) == ["q-uid"]
    assert list(cluster.cache.journals) == [("Pod", "default")]


def test_a_journal_past_its_limit_forgets_the_older_half(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_module, "JOURNAL_LIMIT", 4)
    journal = cache_module.Journal()
    for i in range(5):
        journal.append(f"u{i}")
    assert (journal.base, journal.end) == (2, 5)
    assert journal.since(1) is None
    assert journal.since(2) == ["u2", "u3", "u4"]


def test_a_status_only_sync_recounts_only_what_changed() -> None:
    """The point of the tally: between two syncs, a change to one pod recounts one node."""
    history = History(3)
    for _ in range(200):
        history.step()
    tally = StatusTally()
    _kept(history, tally)
    counted: list[str] = []
    original = tally._count

    def spy(uid: str, now: datetime) -> None:
        counted.append(uid)
        original(uid, now)

    tally._count = spy  # type: ignore[method-assign]
    history.now += timedelta(seconds=1)  # no minReadySeconds wait is due at this step's clock
    _kept(history, tally)
    waiting = len(counted)
    history._pod()
    assert _kept(history, tally) == _fresh(history)
    assert len(counted) - waiting <= 2  # the pod's old node and its new one
