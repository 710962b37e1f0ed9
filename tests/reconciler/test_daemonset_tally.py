"""The DaemonSet's StatusTally against the computation it stands for, after every step of random histories.

After `claim` and `count`, a tally kept across the steps must hold exactly what claim_facts,
nodes_to_daemon_facts and calculate_status_facts compute from scratch over the same cache: the claimed,
adopted and released pods, every node's pods oldest first, the seven counts of the status and whether every pod
is of the current revision; and manage over
the tally's inputs (manage_placed over the nodes it does not skip) must decide what manage_facts decides over
every node.
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
from reconciler.core.daemonset.manage import (
    ManageResult,
    is_settled,
    manage_facts,
    manage_placed,
    nodes_to_daemon_facts,
)
from reconciler.core.daemonset.rollout import daemon_facts_by_node, template_generation
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


def _fresh(history: History) -> tuple[set[str], list[str], list[str], dict[str, list[str]], Any, bool]:
    cache, ds = history.cluster.cache, history.ds
    selector = selector_from_label_selector(ds.spec.selector)
    claim = claim_facts(ds.metadata, selector, cache.owned_or_orphan_pods(ds.metadata.namespace, ds.metadata.uid))
    by_node = nodes_to_daemon_facts(claim.claimed)
    nodes = sorted(cache.all("Node"), key=lambda n: n.metadata.name)
    status = calculate_status_facts(ds, nodes, by_node, history.hash, history.now, update_observed_generation=False)
    view = daemon_facts_by_node(by_node, history.hash, template_generation(ds))
    return ({f.uid for f in claim.claimed}, sorted(p.metadata.name for p in claim.adopt),
            sorted(p.metadata.name for p in claim.release),
            {name: [f.uid for f in pods] for name, pods in by_node.items()}, status,
            all(view.updated(facts) for pods in by_node.values() for facts in pods))


def _kept(history: History, tally: StatusTally
          ) -> tuple[set[str], list[str], list[str], dict[str, list[str]], Any, bool]:
    cache, ds = history.cluster.cache, history.ds
    selector = selector_from_label_selector(ds.spec.selector)
    tally.claim(ds, selector, cache)
    tally.count(ds, history.hash, cache, history.now, comparison_operators=False)
    return ({f.uid for f in tally.claimed()}, sorted(p.metadata.name for p in tally.adopt()),
            sorted(p.metadata.name for p in tally.release()),
            {name: [f.uid for f in pods] for name, pods in tally.by_node.items()},
            tally.status(ds, update_observed_generation=False), tally.all_updated())


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


def _decided(result: ManageResult) -> tuple[Any, ...]:
    """Everything of manage's result, pods by uid, the placements with their order."""
    return (result.nodes_needing_pods, [p.metadata.uid for p in result.pods_to_delete], result.events,
            result.requeue_after, dict(result.backoff), result.backoff_updates, list(result.placements.items()),
            result.unusual_nodes)


def _managed_from_scratch(history: History, max_surge: int) -> tuple[Any, ...]:
    cache, ds = history.cluster.cache, history.ds
    selector = selector_from_label_selector(ds.spec.selector)
    claim = claim_facts(ds.metadata, selector, cache.owned_or_orphan_pods(ds.metadata.namespace, ds.metadata.uid))
    nodes = sorted(cache.all("Node"), key=lambda n: n.metadata.name)
    return _decided(manage_facts(ds, nodes, nodes_to_daemon_facts(claim.claimed), history.hash,
                                 max_surge=max_surge, backoff_entries={}, now=history.now))


def _managed_kept(history: History, tally: StatusTally, max_surge: int) -> tuple[Any, ...]:
    _kept(history, tally)
    inputs = tally.manage_inputs()
    assert inputs is not None  # the histories never give two nodes one name
    placements, visits = inputs
    # the work is the unsettled nodes' only: not every node, not a node left over from a former state
    assert [name for name, _ in visits] == [name for name, placement in placements.items()
                                            if not is_settled(placement, tally.by_node.get(name))]
    return _decided(manage_placed(history.ds, *inputs, tally.by_node, history.hash, max_surge=max_surge,
                                  backoff_entries={}, now=history.now))


@pytest.mark.parametrize("max_surge", [0, 1])
@pytest.mark.parametrize("seed", range(8))
def test_manage_over_a_kept_tally_decides_as_over_every_node(seed: int, max_surge: int) -> None:
    history = History(seed)
    tally = StatusTally()
    for step in range(400):
        history.step()
        sync = history.rng.random()
        if sync < 0.3:  # a managing sync
            assert _kept(history, tally) == _fresh(history), f"seed {seed}, step {step}"
            assert _managed_kept(history, tally, max_surge) == _managed_from_scratch(history, max_surge), \
                f"seed {seed}, step {step}"
        elif sync < 0.6:  # a status-only sync: what only manage and the rolling update read is left for later
            ds = history.ds
            tally.claim(ds, selector_from_label_selector(ds.spec.selector), history.cluster.cache)
            tally.count(ds, history.hash, history.cluster.cache, history.now, comparison_operators=False)


def _settled_history() -> History:
    """Four untainted nodes, each running one Ready pod of the DaemonSet."""
    history = History(0)
    for name in NODE_NAMES[:4]:
        history.nodes[name] = new = node(name).uid(f"{name}-uid").ready().build()
        history.put(new, ADDED)
        history.pods[name] = running = (pod(f"agent-{name}").uid(f"uid-agent-{name}").owned_by(history.ds)
                                        .labels(app="agent", **{UNIQUE_LABEL_KEY: "h1"}).on_node(name)
                                        .created(NOW).ready(NOW).phase(POD_RUNNING).build())
        history.put(running, ADDED)
    return history


def _changed_pod(history: History, name: str, change: Any) -> None:
    history.pods[name] = new = change(PodBuilder(codec.decode(codec.encode(history.pods[name]), Pod))).build()
    history.put(new, MODIFIED)


def _changed_node(history: History, name: str, change: Any) -> None:
    old = history.nodes[name]
    history.nodes[name] = new = change(node(name).uid(old.metadata.uid).ready()).build()
    history.put(new, MODIFIED)


def _new_template(history: History, *, selector_nodes: bool) -> None:
    history.ds = history._daemonset(app="agent", min_ready=0, selector_nodes=selector_nodes,
                                    generation=history.ds.metadata.generation + 1)
    history.put(history.ds, MODIFIED)


ONE_CHANGE = [
    pytest.param(lambda h: _changed_node(h, "node-1", lambda b: b.taint("evict", "x", "NoExecute")), 0,
                 id="node-tainted-noexecute"),
    pytest.param(lambda h: _changed_node(h, "node-1", lambda b: b.taint("dedicated", "x", "NoSchedule")), 0,
                 id="node-tainted-noschedule"),
    pytest.param(lambda h: (h.put(h.nodes.pop("node-3"), DELETED)), 0, id="node-deleted"),
    pytest.param(lambda h: h.put(node("node-9").uid("node-9-uid").ready().build(), ADDED), 0, id="node-added"),
    pytest.param(lambda h: _changed_pod(h, "node-0", lambda b: b.phase(POD_FAILED)), 0, id="pod-failed"),
    pytest.param(lambda h: _changed_pod(h, "node-0", lambda b: b.phase(POD_SUCCEEDED)), 0, id="pod-succeeded"),
    # with surge a pod being deleted gets a successor beside it (without, manage waits: nothing to tell apart)
    pytest.param(lambda h: _changed_pod(h, "node-0", lambda b: b.deleting(h.now)), 1, id="pod-being-deleted"),
    pytest.param(lambda h: h.put(h.pods.pop("node-0"), DELETED), 0, id="pod-deleted"),
    pytest.param(lambda h: _changed_pod(h, "node-0", lambda b: b.labels(app="web")), 0, id="pod-relabelled-away"),
    pytest.param(lambda h: _changed_pod(h, "node-0", lambda b: b.on_node("node-1")), 0, id="pod-moved-to-a-busy-node"),
    pytest.param(lambda h: h.put(pod("extra").uid("uid-extra").owned_by(h.ds).labels(app="agent").on_node("node-2")
                                 .created(NOW).phase(POD_RUNNING).build(), ADDED), 0, id="second-pod-on-a-node"),
    pytest.param(lambda h: _new_template(h, selector_nodes=True), 0, id="template-node-selector"),
]


@pytest.mark.parametrize(("change", "max_surge"), ONE_CHANGE)
def test_one_changed_input_reaches_manage_over_a_kept_tally(change: Any, max_surge: int) -> None:
    """A settled cluster synced once, one input changed: the kept tally's manage decides as one from scratch."""
    history = _settled_history()
    tally = StatusTally()
    before = _managed_kept(history, tally, max_surge)
    assert before == _managed_from_scratch(history, max_surge)
    change(history)
    after = _managed_from_scratch(history, max_surge)
    assert after != before  # the change matters to manage
    assert _managed_kept(history, tally, max_surge) == after


def test_an_old_pod_turning_unready_beside_a_new_one_reaches_manage_over_a_kept_tally() -> None:
    """With surge, a node running an old Ready pod and a new unready one keeps both; the old one turning unready
    (one input changed) is deleted by the kept tally's manage as by one from scratch."""
    history = _settled_history()
    history.hash = "h2"
    history.put(pod("agent-node-0-new").uid("uid-agent-node-0-new").owned_by(history.ds)
                .labels(app="agent", **{UNIQUE_LABEL_KEY: "h2"}).on_node("node-0").created(NOW).phase(POD_RUNNING)
                .not_ready(NOW).build(), ADDED)
    tally = StatusTally()
    before = _managed_kept(history, tally, 1)
    assert before == _managed_from_scratch(history, 1)
    _changed_pod(history, "node-0", lambda b: b.not_ready(history.now))
    after = _managed_from_scratch(history, 1)
    assert after != before
    assert _managed_kept(history, tally, 1) == after


def test_two_nodes_of_one_name_leave_manage_to_the_walk_over_every_node() -> None:
    """Two cached nodes bearing one name: the tally gives no inputs, manage_facts visits both."""
    history = _settled_history()
    tally = StatusTally()
    _kept(history, tally)
    assert tally.manage_inputs() is not None
    twin = node("node-1").uid("node-1-twin").ready().build()
    history.put(twin, ADDED)
    _kept(history, tally)
    assert tally.manage_inputs() is None
    history.put(twin, DELETED)
    assert _managed_kept(history, tally, 0) == _managed_from_scratch(history, 0)


def _held(history: History, tally: StatusTally) -> tuple[list[str], list[str], list[str], dict[str, list[str]]]:
    """The tally's claimed, adopted and released pods and each node's pods, in the order it holds them (the nodes
    themselves in no particular order: every reader of by_node looks a node up)."""
    ds = history.ds
    tally.claim(ds, selector_from_label_selector(ds.spec.selector), history.cluster.cache)
    return ([f.uid for f in tally.claimed()], [p.metadata.uid for p in tally.adopt()],
            [p.metadata.uid for p in tally.release()],
            {name: [f.uid for f in pods] for name, pods in tally.by_node.items()})


@pytest.mark.parametrize("seed", range(6))
def test_a_claim_of_many_changes_at_once_holds_what_one_claim_per_change_holds(seed: int) -> None:
    """A tally claiming after dozens of changes (pods changed several times among them) holds the same pods, in the
    same orders, as one that claimed after every change. (The DaemonSet stays as it is: a new selector has both read
    everything again, the one claiming now and then perhaps not, had the selector come back meanwhile.)"""
    history = History(seed)
    history._template = lambda: None  # type: ignore[method-assign]
    every_change, now_and_then = StatusTally(), StatusTally()
    assert _held(history, every_change) == _held(history, now_and_then)  # both read everything once, the same
    for step in range(400):
        history.step()
        held = _held(history, every_change)
        if step % 25 == 24:
            assert _held(history, now_and_then) == held, f"seed {seed}, step {step}"
