"""The store's port (store/port.py), one contract for its three adapters: in memory, SQLite and PostgreSQL.

What a reconciler commits is what its next start loads; results count once; decision ids grow and travel in
the outbox payloads; the backoff's garbage collection and deleted expectations take; a transaction that
raises writes nothing (and on SQL, a lost lease is such a raise)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
import sqlalchemy as sa

from kube.testing import pod, replicaset
from messages import codec
from messages.actions import CreatePods, DeletePod, RecordEvent
from reconciler.core import batch
from reconciler.core.audit_targets import event_on
from reconciler.core.batch import CONSUMER, Commit, Stored, Sync
from reconciler.core.cache import Cache
from reconciler.core.controllers import Decided
from reconciler.core.daemonset.backoff import FailedPodBackoff
from reconciler.core.expectations import Expectations
from reconciler.core.ticks import BATCH, START, Tick
from store import leases
from store import ticks as tick_rows
from store.engine import Store
from store.memory import MemoryStore
from store.port import UNFENCED, Fence
from store.tables import action_targets
from tests.reconciler.builders import observed
from tests.store.builders import FakeClock, at, result

Adapter = MemoryStore | Store
SUBJECT = "kubus.actions.0"


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """Every adapter (this module's override of the store suite's SQL-only backends)."""
    return str(request.param)


@pytest.fixture
def port(backend: str, clock: FakeClock, request: pytest.FixtureRequest) -> Adapter:
    if backend == "memory":
        return MemoryStore(clock=clock)
    store: Store = request.getfixturevalue("store")  # the store suite's, on SQLite or PostgreSQL
    return store


# --- builders ---------------------------------------------------------------------------------------------
def delete_pod(correlation: str, name: str) -> DeletePod:
    return DeletePod(key=f"{correlation}/delete/uid-{name}", decision_id=0, controller="ReplicaSet/ns/web",
                     issued_at="2025-01-01T12:00:00.000000Z", namespace="ns", name=name, uid=f"uid-{name}")


def decided(n: int, *pods: str, key: str = "ReplicaSet/ns/web") -> Decided:
    correlation = f"{key}@{n}~{n}"
    return Decided(controller_key=key, controller_kind="ReplicaSet", namespace="ns", correlation_id=correlation,
                   stream_seq=n, trigger=None, summary={"deletes": list(pods)}, duration_ms=0.5,
                   actions=[delete_pod(correlation, p) for p in pods])


def sync(d: Decided) -> Sync:
    return Sync(d, 0, None, SUBJECT)


def pod_event(name: str, namespace: str) -> bytes:
    return codec.encode(observed(pod(name).ns(namespace).uid(f"uid-{name}").build()))


def commit(seconds: float = 1, **fields: object) -> Commit:
    return Commit(consumer=CONSUMER, at=at(seconds), empty=False, **fields)  # type: ignore[arg-type]


def expecting(adds: int, set_at: float = 0, *deleting: str) -> Expectations:
    return Expectations(adds, len(deleting), frozenset(deleting), at(set_at))


def entry(key: str, updated: float) -> FailedPodBackoff:
    return FailedPodBackoff(key=key, delay_seconds=2.0, last_update=at(updated))


async def write(port: Adapter, c: Commit, fence: Fence = UNFENCED) -> list[int]:
    async with port.transaction() as tx:
        return await tx.commit(c, fence)


async def recorded_targets(port: Adapter) -> list[tuple[str, str, str, str, str]]:
    """(effect key, action key, kind, namespace, name) of the audit targets written, by effect key."""
    if isinstance(port, MemoryStore):
        found = [(k, action_key, t.kind, t.namespace, t.name) for k, (action_key, t) in port.targets.items()]
    else:
        async with port.engine.connect() as conn:
            rows = await conn.execute(sa.select(action_targets.c.key, action_targets.c.action_key,
                                                action_targets.c.kind, action_targets.c.namespace,
                                                action_targets.c.name))
            found = [(str(k), str(a), str(kind), str(ns), str(name)) for k, a, kind, ns, name in rows]
    return sorted(found)


async def recorded_ticks(port: Adapter) -> list[Tick]:
    if isinstance(port, MemoryStore):
        return list(port.ticks)
    async with port.engine.connect() as conn:
        return list(await tick_rows.load(conn))


# --- the contract -----------------------------------------------------------------------------------------
async def test_what_a_commit_writes_the_next_start_loads(port: Adapter) -> None:
    """Positions (per consumer), expectations and backoff round-trip, field for field."""
    assert await port.load(CONSUMER) == Stored()
    wanted = Stored(positions={-1: 3, 0: 7},
                    expectations={"ReplicaSet/ns/web": expecting(2, 1, "ns/pod-1"), "DaemonSet/ns/agent": expecting(0)},
                    backoff={"ds-uid/1/node-1": entry("ds-uid/1/node-1", 5)})
    await write(port, commit(positions=wanted.positions, expectations=wanted.expectations,
                             backoff=list(wanted.backoff.values())))
    assert await port.load(CONSUMER) == wanted
    assert await port.load("someone-else") == replace(wanted, positions={})


async def test_positions_never_go_back(port: Adapter) -> None:
    """A commit moves each partition's position forward only, as a stale writer must not move it back."""
    await write(port, commit(positions={0: 9, 1: 2}))
    await write(port, commit(positions={0: 4, 1: 5, 2: 1}))
    assert (await port.load(CONSUMER)).positions == {0: 9, 1: 5, 2: 1}


async def test_expectations_are_overwritten_and_deleted(port: Adapter) -> None:
    """A save replaces a controller's expectations; a deletion drops them (an unknown key is no error)."""
    await write(port, commit(expectations={"a": expecting(1), "b": expecting(2), "c": expecting(3)}))
    await write(port, commit(expectations={"a": expecting(5, 2)}, expectations_deleted=["b", "never-saved"]))
    assert (await port.load(CONSUMER)).expectations == {"a": expecting(5, 2), "c": expecting(3)}


async def test_the_gc_cutoff_drops_backoff_idle_before_it(port: Adapter) -> None:
    """Entries last updated before the cutoff go; newer ones and the ones the same commit saves stay."""
    await write(port, commit(backoff=[entry("old", 0), entry("recent", 60), entry("refreshed", 0)]))
    await write(port, commit(backoff=[entry("refreshed", 120)], backoff_gc_before=at(30)))
    assert sorted((await port.load(CONSUMER)).backoff) == ["recent", "refreshed"]


async def test_results_are_recorded_once(port: Adapter) -> None:
    """record_results says which keys are new: a redelivered result (in the same batch or a later one) is not."""
    async with port.transaction() as tx:
        assert await tx.record_results([result("r1"), result("r2"), result("r1")], at(1)) == ["r1", "r2"]
    async with port.transaction() as tx:
        assert await tx.record_results([result("r2"), result("r3")], at(2)) == ["r3"]
    assert [r.key for r in await port.results_for(1)] == ["r1", "r2", "r3"]


async def test_decision_ids_grow_and_are_in_the_outbox_payloads(port: Adapter, clock: FakeClock) -> None:
    """Each decision gets the next id; its actions go to the outbox with that id in their payloads, pending
    until the relay marks them sent."""
    first = await write(port, commit(decisions=[sync(decided(1, "a", "b")), sync(decided(2, key="DaemonSet/ns/d"))]))
    second = await write(port, commit(2, decisions=[sync(decided(3, "c"))]))
    assert first[0] < first[1] < second[0]
    rows = await port.outbox_for(first[0])
    assert [r.key for r in rows] == ["ReplicaSet/ns/web@1~1/delete/uid-a", "ReplicaSet/ns/web@1~1/delete/uid-b"]
    for row in rows:
        action = codec.decode_action(row.payload)
        assert isinstance(action, DeletePod) and action.decision_id == first[0]
        assert (row.subject, row.created_at, row.state) == (SUBJECT, at(1), "pending")
    assert await port.outbox_for(first[1]) == []  # a decision without actions
    [newest] = await port.decisions_for("ReplicaSet/ns/web", limit=1)
    assert (newest.id, newest.correlation_id, newest.decided_at, newest.summary) == (
        second[0], "ReplicaSet/ns/web@3~3", at(2), {"deletes": ["c"]})
    pending = await port.pending(10)
    assert [r.key for r in pending] == [*(r.key for r in rows), "ReplicaSet/ns/web@3~3/delete/uid-c"]
    assert await port.pending(10, subjects=["kubus.actions.1"]) == []
    assert await port.mark_sent([rows[0].key, "unknown"]) == 1
    assert [r.key for r in await port.pending(1)] == [rows[1].key]


async def test_each_action_is_written_with_its_audit_targets(port: Adapter) -> None:
    """The objects an action acts on go with its outbox row (as the planner named them, no decoding)."""
    d = decided(1, "a")
    d.actions.append(RecordEvent(key=f"{d.correlation_id}/event/0", decision_id=0, controller=d.controller_key,
                                 issued_at="2025-01-01T12:00:00.000000Z", namespace="ns", involved=msgspec.Raw(b"{}"),
                                 type="Normal", reason="Test", message="", component="test"))
    d.known.targets[f"{d.correlation_id}/event/0"] = event_on(f"{d.correlation_id}/event/0", "ns", "ReplicaSet",
                                                              "ns", "web", "rs-1")
    await write(port, commit(decisions=[sync(d)]))
    assert await recorded_targets(port) == [
        (f"{d.correlation_id}/delete/uid-a", f"{d.correlation_id}/delete/uid-a", "Pod", "ns", "a"),
        (f"{d.correlation_id}/event/0", f"{d.correlation_id}/event/0", "ReplicaSet", "ns", "web")]


async def test_an_action_committed_twice_is_queued_once(port: Adapter) -> None:
    """Insert-or-ignore by key: a row the relay already sent stays sent."""
    [first] = await write(port, commit(decisions=[sync(decided(1, "a"))]))
    [row] = await port.outbox_for(first)
    await port.mark_sent([row.key])
    again = replace(decided(1, "a"), correlation_id="another-correlation")
    await write(port, commit(2, decisions=[sync(again)]))
    assert await port.pending(10) == []


async def test_a_transaction_keeps_the_outbox_rows_it_queued_as_the_table_holds_them(port: Adapter) -> None:
    """`queued`, what the relay publishes without a scan (reconciler/outgoing.py): the rows a scan would find, byte
    for byte, in order; not a row whose key was already queued (sent or not), in this transaction or before."""
    async with port.transaction() as tx:
        [first] = await tx.commit(commit(decisions=[sync(decided(1, "a", "b"))]), UNFENCED)
        queued = list(tx.queued)
    scanned = await port.pending(10)
    assert [(r.key, r.decision_id, r.subject, r.created_at, r.payload) for r in queued] == [
        (r.key, r.decision_id, r.subject, r.created_at, r.payload) for r in scanned]
    assert [r.key for r in queued] == [f"ReplicaSet/ns/web@1~1/delete/uid-{n}" for n in "ab"] and first > 0
    await port.mark_sent([queued[0].key])
    again = replace(decided(1, "a", "b"), correlation_id="another-correlation")
    async with port.transaction() as tx:
        await tx.commit(commit(2, decisions=[sync(again), sync(decided(3, "c"))]), UNFENCED)
        await tx.commit(commit(3, decisions=[sync(replace(decided(3, "c"), correlation_id="a-third-one"))]), UNFENCED)
        assert [r.key for r in tx.queued] == ["ReplicaSet/ns/web@3~3/delete/uid-c"]


async def test_ticks_are_the_start_once_then_each_batch_with_its_decisions(port: Adapter) -> None:
    """The start tick is written by the first commit (before its batch's), batch ticks carry the ids the store
    assigned, in order."""
    loaded = batch.Loaded(stored=await port.load(CONSUMER), partition_count=2, instance="r", at=at(0))
    state = batch.start(loaded, Cache())
    c = batch.run_batch(state, [(1, "kubus.events.0.Pod.uid-a", pod_event("a", "ns"))], [], at(1), False)
    ids = await write(port, replace(c, decisions=[sync(decided(1, "a")), sync(decided(2, "b"))]))
    await write(port, batch.run_batch(state, [(2, "kubus.events.1.Pod.uid-b", pod_event("b", "other"))], [], at(2),
                                      False))
    ticks = await recorded_ticks(port)
    assert [(t.kind, t.at, t.first_seq, t.last_seq, t.decision_ids) for t in ticks] == [
        (START, at(0), 1, None, []), (BATCH, at(1), 1, 1, ids), (BATCH, at(2), 2, 2, [])]
    assert [t.id for t in ticks] == sorted({t.id for t in ticks})
    assert (await port.load(CONSUMER)).positions == {0: 1, 1: 2}


async def test_a_transaction_that_raises_writes_nothing(port: Adapter) -> None:
    """Results and commit go together or not at all: after a raise, the results are new again."""
    class Crash(Exception):
        pass

    with pytest.raises(Crash):
        async with port.transaction() as tx:
            await tx.record_results([result("r1")], at(1))
            await tx.commit(commit(positions={0: 5}, expectations={"a": expecting(1)},
                                   decisions=[sync(decided(1, "a"))]), UNFENCED)
            raise Crash
    assert await port.load(CONSUMER) == Stored()
    assert await port.pending(10) == []
    assert await recorded_ticks(port) == []
    async with port.transaction() as tx:
        assert await tx.record_results([result("r1")], at(2)) == ["r1"]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
async def test_a_lost_lease_rolls_the_whole_commit_back(port: Adapter) -> None:
    """The fence is checked last: a reconciler whose lease moved on commits neither its results nor its batch;
    one that holds its lease commits, and its lease is extended from the lease clock's now."""
    assert isinstance(port, Store)
    async with port.transaction() as tx:
        epochs = await leases.acquire(tx.conn, "a", [0], now=await tx.lease_now(at(0)), ttl=10)
    c = commit(positions={0: 5}, expectations={"a": expecting(1)}, decisions=[sync(decided(1, "a"))],
               start_tick=Tick(instance="a", kind=START, at=at(0), caught_up=False, state={}))
    with pytest.raises(leases.LeaseLost):
        async with port.transaction() as tx:
            assert await tx.record_results([result("r1")], at(1)) == ["r1"]
            await tx.commit(c, Fence("a", {0: epochs[0] - 1}))
    assert await port.load(CONSUMER) == Stored()
    assert await port.pending(10) == [] and await recorded_ticks(port) == []
    async with port.transaction() as tx:
        assert await tx.record_results([result("r1")], at(2)) == ["r1"]
        before = await tx.lease_now(c.at)
        await tx.commit(c, Fence("a", epochs, ttl=60))
        after = await tx.lease_now(c.at)
    assert (await port.load(CONSUMER)).positions == {0: 5}
    async with port.engine.connect() as conn:
        [lease] = await leases.leases(conn)
    assert lease.expires_at is not None
    assert before + timedelta(seconds=60) <= lease.expires_at <= after + timedelta(seconds=60)


async def test_the_lease_clock_is_the_databases_where_hosts_share_one(port: Adapter) -> None:
    """`lease_now`: PostgreSQL's clock, whatever the caller's says (a host 30 s ahead, or a test's fake time);
    one host's own clock on SQLite and in memory, where there is only one host."""
    for local in (at(0), datetime.now(UTC) + timedelta(seconds=30)):
        async with port.transaction() as tx:
            got = await tx.lease_now(local)
        if isinstance(port, Store) and port.backend == "postgresql":
            assert abs(got - datetime.now(UTC)) < timedelta(seconds=5), f"{got} is not the database's clock"
        else:
            assert got == local


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_a_fence_is_checked_on_the_databases_clock(port: Adapter) -> None:
    """PostgreSQL: a reconciler whose clock runs 30 s ahead (three ttls) commits under the lease it holds,
    and extends it to the database's now + ttl, not its own; one whose clock runs 30 s behind does not
    commit under a lease that expired on the database's clock."""
    assert isinstance(port, Store)
    ttl = 10.0
    async with port.transaction() as tx:
        epochs = await leases.acquire(tx.conn, "a", [0, 1], now=await tx.lease_now(at(0)), ttl=ttl)
    ahead = datetime.now(UTC) + timedelta(seconds=30)
    async with port.transaction() as tx:
        before = await tx.lease_now(ahead)
        await tx.commit(replace(commit(positions={0: 5}), at=ahead), Fence("a", {0: epochs[0]}, ttl=ttl))
    async with port.engine.connect() as conn:
        expiry = {lease.partition: lease.expires_at for lease in await leases.leases(conn)}
    assert expiry[0] is not None and expiry[1] is not None
    assert before + timedelta(seconds=ttl) <= expiry[0] < ahead, "extended from the database's clock"
    async with port.engine.begin() as conn:  # partition 1's lease ran out on the database's clock
        await conn.execute(sa.update(leases.t).where(leases.t.c.partition == 1)
                           .values(expires_at=before - timedelta(seconds=1)))
    behind = datetime.now(UTC) - timedelta(seconds=30)
    with pytest.raises(leases.LeaseLost) as lost:
        async with port.transaction() as tx:
            await tx.commit(replace(commit(positions={1: 7}), at=behind), Fence("a", {1: epochs[1]}, ttl=ttl))
    assert lost.value.partitions == {1}
    assert (await port.load(CONSUMER)).positions == {0: 5}


async def test_a_batch_through_the_core_commits_the_same_everywhere(port: Adapter) -> None:
    """start and run_batch over an adapter: a ReplicaSet that wants a pod creates it, its expectations and
    the stream positions land in the store, and a restart loads them back."""
    rs = codec.encode(observed(replicaset("web").ns("ns").uid("rs-1").replicas(1).rv("1").build()))
    loaded = batch.Loaded(stored=await port.load(CONSUMER), partition_count=1, instance="r", at=at(0))
    state = batch.start(loaded, Cache())
    assert await write(port, batch.run_batch(state, [(1, "kubus.events.0.ReplicaSet.rs-1", rs)], [], at(1),
                                             caught_up=False)) == []  # not caught up yet: no syncs
    [decision_id] = await write(port, batch.run_batch(state, [], [], at(2), caught_up=True))
    rows = {r.key.rsplit("/", 1)[1]: r for r in await port.outbox_for(decision_id)}
    assert sorted(rows) == ["create", "status"]
    create = codec.decode_action(rows["create"].payload)
    assert isinstance(create, CreatePods) and create.decision_id == decision_id and len(create.pods) == 1
    stored = await port.load(CONSUMER)
    assert stored.positions == {0: 1}
    assert stored.expectations["ReplicaSet/ns/web"].adds == 1
    assert stored.expectations["ReplicaSet/ns/web"].set_at == at(2)
    # (a bootstrap that reflects the event committed: KUBUS_STATE copied it)
    restarted = batch.start(replace(loaded, stored=stored, at=at(3), consistent=1), Cache())
    held = {str(key): value for key, value in restarted.controllers.expectations.items()}
    assert held == stored.expectations and restarted.first_seq == 2
