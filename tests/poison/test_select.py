"""The pure core's part (issue 15): a batch sets unusable messages aside with their reasons, counted as consumed,
and stops before a newer kubus's message without consuming it; nothing in it raises on what a bus can carry."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from kube.testing import replicaset
from messages import codec
from messages.observed import SCHEMA_VERSION
from reconciler.core import batch, stepping
from reconciler.core.batch import Stored
from reconciler.core.cache import Cache
from tests.reconciler.builders import observed

NOW = datetime(2026, 3, 15, 12, 0, tzinfo=UTC)
PARTITIONS = 4


def rs_event(namespace: str, **fields: Any) -> bytes:
    rs = replicaset("web").ns(namespace).rv("10").selector(app="web").replicas(1).build()
    return msgspec.json.encode({**msgspec.json.decode(codec.encode(observed(rs))), **fields})


def subject(namespace: str, uid: str = "u") -> str:
    from messages.subjects import event_subject, partition_of
    return event_subject(partition_of(namespace, PARTITIONS), "ReplicaSet", uid)


def part(namespace: str) -> int:
    from messages.subjects import partition_of
    return stepping.partition_number(partition_of(namespace, PARTITIONS))


def fresh(partitions: frozenset[int] | None = None) -> batch.State:
    return batch.start(batch.Loaded(stored=Stored(), partition_count=PARTITIONS, partitions=partitions,
                                    instance="r", at=NOW), Cache())


@pytest.mark.parametrize(("subject_", "why"), [
    ("kubus.events.notapartition.Pod.x", "'notapartition'"),  # the crash: int('foo')
    ("kubus.events.4.Pod.x", "'4'"),  # a number, but not one of the 4 partitions
    ("kubus.events.-1.Pod.x", "'-1'"),
    ("kubus.events.0.Pod", "not <prefix>.events"),
    ("kubus.events.0.Pod.x.y", "not <prefix>.events"),
])
def test_a_subject_that_names_no_partition_is_unusable_and_counts_in_partition_0(subject_: str, why: str) -> None:
    state = fresh()
    commit = batch.run_batch(state, [(7, subject_, rs_event("a"))], [], NOW, True)
    [bad] = commit.unusable
    assert (bad.seq, bad.subject, bad.reason) == (7, subject_, codec.BAD_SUBJECT) and why in bad.error
    assert commit.positions[stepping.MALFORMED_SUBJECT_PARTITION] == 7 and not commit.events
    assert state.cache.all("ReplicaSet") == []


def test_in_a_split_deployment_only_partition_0s_owner_takes_a_malformed_subject() -> None:
    messages = [(3, "kubus.events.notapartition.Pod.x", b"{}")]
    assert [u.seq for u in batch.run_batch(fresh(frozenset({0})), messages, [], NOW, True).unusable] == [3]
    other = batch.run_batch(fresh(frozenset({1, 2})), messages, [], NOW, True)
    assert other.unusable == [] and 0 not in other.positions


def test_each_unusable_event_is_set_aside_and_the_good_ones_around_it_are_applied() -> None:
    ns = "shop"
    messages = [
        (1, subject(ns, "a"), rs_event(ns, uid="a", name="a")),
        (2, subject(ns, "b"), b"not json at all"),
        (3, subject(ns, "c"), rs_event(ns, uid="c", name="c", observed_at="yesterday")),
        (4, subject(ns, "d"), rs_event(ns, uid="d", name="d", object={"metadata": "nope"})),
        (5, subject(ns, "e"), rs_event(ns, uid="e", name="e", msg="result")),
        (6, subject(ns, "f"), rs_event(ns, uid="f", name="f")),
    ]
    state = fresh()
    commit = batch.run_batch(state, messages, [], NOW, True)
    assert [(u.seq, u.reason) for u in commit.unusable] == [
        (2, codec.UNDECODABLE), (3, codec.BAD_TIMESTAMP), (4, codec.BAD_OBJECT), (5, codec.WRONG_KIND)]
    assert sorted(state.cache.objects["ReplicaSet"]) == ["a", "f"]
    assert commit.positions[part(ns)] == 6  # consumed, all of them
    assert commit.batch is not None and (commit.batch.first_seq, commit.batch.last_seq) == (1, 6)
    # the same messages again (a restart before the commit, or a replay) decide the same
    again = batch.run_batch(fresh(), messages, [], NOW, True)
    assert again.unusable == commit.unusable
    assert [d.decided.summary for d in again.decisions] == [d.decided.summary for d in commit.decisions]


def test_a_newer_event_ends_the_batch_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    ns, other = "shop", "elsewhere"
    newer = rs_event(ns, uid="n", name="n", v=SCHEMA_VERSION + 1)
    messages = [
        (1, subject(ns, "a"), rs_event(ns, uid="a", name="a")),
        (2, subject(other, "b"), rs_event(other, uid="b", name="b")),
        (3, subject(ns, "n"), newer),
        (4, subject(other, "c"), rs_event(other, uid="c", name="c")),
        (5, subject(ns, "d"), b"not json"),
    ]
    state = fresh()
    commit = batch.run_batch(state, messages, [], NOW, True)
    assert commit.halted is not None and commit.halted.seq == 3
    assert "upgrade this process" in commit.halted.error
    assert commit.unusable == []  # what follows the newer message is not looked at
    assert commit.positions == {part(ns): 1, part(other): 2}
    assert commit.batch is not None and commit.batch.last_seq == 2  # the tick records what was consumed
    assert sorted(state.cache.objects["ReplicaSet"]) == ["a", "b"]
    # a halted batch that consumed nothing still says so
    nothing = batch.run_batch(fresh(), messages[2:], [], NOW, False)
    assert nothing.halted is not None and nothing.halted.seq == 3 and nothing.positions == {}

    monkeypatch.setattr(codec, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    upgraded = batch.run_batch(state, messages[2:], [], NOW, True)
    assert upgraded.halted is None and [u.seq for u in upgraded.unusable] == [5]
    assert sorted(state.cache.objects["ReplicaSet"]) == ["a", "b", "c", "n"]


def test_a_message_of_another_partition_is_not_decoded_so_it_halts_no_one_else() -> None:
    ns = "shop"
    commit = batch.run_batch(fresh(frozenset({part(ns) + 1 if part(ns) < 3 else 0})),
                             [(1, subject(ns, "n"), rs_event(ns, v=SCHEMA_VERSION + 1))], [], NOW, True)
    assert commit.halted is None


@pytest.mark.parametrize(("subject_", "payload", "reason"), [
    ("kubus.state.x.ReplicaSet.u", rs_event("a"), codec.BAD_SUBJECT),
    ("kubus.state.0.ReplicaSet.u", b"[]", codec.UNDECODABLE),
    ("kubus.state.0.ReplicaSet.u", rs_event("a", object={"metadata": 5}), codec.BAD_OBJECT),
])
def test_the_bootstrap_raises_bad_message_and_nothing_else(subject_: str, payload: bytes, reason: str) -> None:
    with pytest.raises(codec.BadMessage) as caught:
        stepping.bootstrap_one(Cache(), subject_, payload, 1, PARTITIONS)
    assert caught.value.reason == reason


def test_the_bootstrap_raises_newer_schema_for_a_newer_message() -> None:
    with pytest.raises(codec.NewerSchema):
        stepping.bootstrap_one(Cache(), "kubus.state.0.ReplicaSet.u", rs_event("a", v=SCHEMA_VERSION + 1), 1)
