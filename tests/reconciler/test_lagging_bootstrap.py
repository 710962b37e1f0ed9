"""A bootstrap whose KUBUS_STATE copy lagged behind the committed positions (issue 15's chaos run).

KUBUS_STATE copies KUBUS_EVENTS asynchronously; a starting reconciler waits for the copy (up to STATE_WAIT) and
then bootstraps with what is there. Its cache then reflects the events up to `consistent` only, and the positions
it committed before lie further on. Before, the loop resumed after the positions and skipped the events between:
they never reached the cache (a ReplicaSet saw pods that were gone, or missed new ones, for good). Now it resumes
after `consistent`, folds the events up to each partition's position into the cache (they were decided on and
recorded before: no handler sees them, the audit trail does not record them again), and goes on from there."""

from __future__ import annotations

from datetime import UTC, datetime

from kube.testing import pod, replicaset
from messages import codec
from messages.observed import DELETED
from reconciler.core import batch, stepping
from reconciler.core.batch import Stored
from reconciler.core.cache import Cache
from tests.poison.test_select import PARTITIONS, part, subject
from tests.reconciler.builders import observed

NOW = datetime(2026, 3, 15, 12, 0, tzinfo=UTC)


def lagging(positions: dict[int, int], consistent: int, partitions: frozenset[int] | None = None) -> batch.State:
    return batch.start(batch.Loaded(stored=Stored(positions=positions), partition_count=PARTITIONS,
                                    partitions=partitions, consistent=consistent, newest=consistent, instance="r",
                                    at=NOW), Cache())


def test_the_events_between_the_bootstrap_and_the_positions_reach_the_cache_and_nothing_else() -> None:
    rs = replicaset("web").ns("a").uid("rs-1").rv("10").selector(app="web").replicas(2).build()
    gone = pod("gone").ns("a").uid("p-gone").rv("11").labels(app="web").owned_by(rs).build()
    late = pod("late").ns("a").uid("p-late").rv("13").labels(app="web").owned_by(rs).build()
    p = part("a")
    state = lagging({p: 9}, consistent=5)
    assert state.first_seq == 6  # after what the bootstrap reflects, not after the position
    commit = batch.run_batch(state, [
        (6, subject("a", "rs-1"), codec.encode(observed(rs))),
        (7, subject("a", "p-gone"), codec.encode(observed(gone))),
        (8, subject("a", "p-gone"), codec.encode(observed(gone, DELETED))),
        (10, subject("a", "p-late"), codec.encode(observed(late))),
    ], [], NOW, True)
    # the cache holds what the events up to the position left, and the new event
    assert {x.metadata.name for x in state.cache.all("ReplicaSet")} == {"web"}
    assert {x.metadata.name for x in state.cache.all("Pod")} == {"late"}
    # only the new event is the batch's: recorded in the audit trail, seen by the handlers
    assert [seq for _, seq in commit.events] == [10]
    assert commit.positions[p] == 10
    # the ReplicaSet (known from the caught-up events) is synced once, and sees the one pod it has
    [sync] = commit.decisions
    assert sync.decided.controller_key.endswith("a/web"), sync.decided.controller_key
    [create] = [a for a in sync.decided.actions if type(a).__name__ == "CreatePods"]
    assert len(create.pods) == 1  # 2 wanted, "late" is there, "gone" is gone


def test_a_split_reconciler_catches_up_its_own_partitions_only() -> None:
    rs = replicaset("web").ns("a").uid("rs-1").rv("10").selector(app="web").replicas(1).build()
    other = replicaset("web").ns("b").uid("rs-2").rv("10").selector(app="web").replicas(1).build()
    assert part("a") != part("b")
    state = lagging({part("a"): 9, part("b"): 9}, consistent=5, partitions=frozenset({part("a")}))
    batch.run_batch(state, [(6, subject("a", "rs-1"), codec.encode(observed(rs))),
                            (7, subject("b", "rs-2"), codec.encode(observed(other)))], [], NOW, False)
    assert [x.metadata.namespace for x in state.cache.all("ReplicaSet")] == ["a"]


def test_a_position_the_bootstrap_covers_skips_as_before() -> None:
    rs = replicaset("web").ns("a").uid("rs-1").rv("10").selector(app="web").replicas(1).build()
    state = lagging({part("a"): 9}, consistent=12)
    assert state.first_seq == 10
    commit = batch.run_batch(state, [(8, subject("a", "rs-1"), codec.encode(observed(rs)))], [], NOW, False)
    assert state.cache.all("ReplicaSet") == [] and not commit.events


def test_select_sets_the_catch_up_apart() -> None:
    rs = replicaset("web").ns("a").uid("rs-1").rv("10").build()
    p = part("a")
    picked = stepping.select([(4, subject("a"), codec.encode(observed(rs))),
                              (6, subject("a"), codec.encode(observed(rs))),
                              (11, subject("a"), codec.encode(observed(rs)))], {p: 9}, consistent=5)
    assert [seq for _, seq in picked.catch_up] == [6]
    assert [seq for _, seq in picked.events] == [11]
    assert picked.last_seq == {p: 11}
