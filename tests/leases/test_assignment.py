"""Who should own which partition: balanced, deterministic, and moving as little as possible."""

from __future__ import annotations

import random

import pytest

from reconciler.leases import desired_partitions


def members(n: int, seed: int = 0) -> list[str]:
    rnd = random.Random(seed)
    return [f"reconciler-host{rnd.randrange(10**6)}-{i}" for i in range(n)]


def owners(assignment: dict[str, set[int]]) -> dict[int, str]:
    return {p: m for m, ps in assignment.items() for p in ps}


@pytest.mark.parametrize("partitions", [1, 7, 16, 64])
@pytest.mark.parametrize("count", [1, 2, 3, 5, 9, 20])
def test_every_partition_once_and_balanced(partitions: int, count: int) -> None:
    """Each partition has exactly one owner; each member gets floor(P/M) or ceil(P/M)."""
    assignment = desired_partitions(members(count), partitions)
    assert set(assignment) == set(members(count))
    taken = [p for ps in assignment.values() for p in ps]
    assert sorted(taken) == list(range(partitions))
    loads = [len(ps) for ps in assignment.values()]
    assert max(loads) - min(loads) <= 1
    assert min(loads) == partitions // count


def test_one_member_owns_everything() -> None:
    assert desired_partitions(["reconciler-a"], 16) == {"reconciler-a": set(range(16))}


def test_no_members_no_assignment() -> None:
    assert desired_partitions([], 16) == {}


def test_deterministic_whatever_the_order() -> None:
    """Order and duplicates of the member list do not matter, and the answer does not depend on the
    process (rendezvous scores use blake2b, not the salted hash())."""
    names = members(4)
    shuffled = [*reversed(names), names[0]]
    assert desired_partitions(names, 16) == desired_partitions(shuffled, 16)
    assert desired_partitions(["a", "b", "c"], 6) == {"a": {0, 4}, "b": {3, 5}, "c": {1, 2}}


@pytest.mark.parametrize("partitions", [7, 16, 64])
@pytest.mark.parametrize("count", [1, 2, 3, 6])
def test_join_moves_only_what_the_newcomer_gets(partitions: int, count: int) -> None:
    """Given the current owners, a join moves exactly the newcomer's share, nothing between others."""
    for seed in range(10):
        names = members(count, seed)
        before = owners(desired_partitions(names, partitions))
        after = owners(desired_partitions([*names, "reconciler-new"], partitions, before))
        moved = {p for p in range(partitions) if before[p] != after[p]}
        assert moved == {p for p, m in after.items() if m == "reconciler-new"}
        assert len(moved) == partitions // (count + 1) or len(moved) == -(-partitions // (count + 1))


@pytest.mark.parametrize("partitions", [7, 16, 64])
@pytest.mark.parametrize("count", [2, 3, 6])
def test_leave_moves_only_what_the_leaver_had(partitions: int, count: int) -> None:
    """A member that leaves (or whose leases are held by a non-member) hands over exactly its own."""
    for seed in range(10):
        names = members(count, seed)
        before = owners(desired_partitions(names, partitions))
        gone = names[seed % count]
        after = owners(desired_partitions([m for m in names if m != gone], partitions, before))
        assert {p for p in range(partitions) if before[p] != after[p]} == {p for p, m in before.items() if m == gone}
        loads = [sum(1 for m in after.values() if m == n) for n in names if n != gone]
        assert max(loads) - min(loads) <= 1


def test_current_assignment_is_a_fixed_point() -> None:
    """Members that already hold a balanced assignment keep it exactly, whoever computes it."""
    names = members(3)
    current = {p: names[p % 3] for p in range(16)}  # balanced, but not what the scores would pick
    assert owners(desired_partitions(names, 16, current)) == current


def test_unbalanced_current_is_evened_out_with_fewest_moves() -> None:
    """One member holding everything gives up exactly the others' shares."""
    current = dict.fromkeys(range(16), "a")
    after = owners(desired_partitions(["a", "b"], 16, current))
    assert sum(1 for p in range(16) if after[p] != "a") == 8


def test_stale_entries_of_current_are_ignored() -> None:
    """Partitions out of range and owners that are not members do not count."""
    current = {0: "a", 1: "gone", 99: "a"}
    result = desired_partitions(["a", "b"], 4, current)
    assert 0 in result["a"]
    assert sorted(p for ps in result.values() for p in ps) == [0, 1, 2, 3]


def test_more_members_than_partitions() -> None:
    result = desired_partitions(members(5), 3)
    assert sorted(len(ps) for ps in result.values()) == [0, 0, 1, 1, 1]


def test_protocol_converges_without_extra_moves() -> None:
    """Members acting on the shared lease table one at a time, in any order (give up what is not
    desired, take what is desired and free), reach a balanced table within two rounds of each
    membership change, and only the partitions that had to move ever change hands."""
    for seed in range(25):
        rnd = random.Random(seed)
        table = dict.fromkeys(range(16), "a")
        live = ["a"]
        for change, name in [("join", "b"), ("join", "c"), ("join", "d"), ("leave", "b"), ("join", "e"),
                             ("leave", "a"), ("join", "a2")]:
            if change == "join":
                live.append(name)
            else:
                live.remove(name)
                table = {p: m for p, m in table.items() if m != name}  # its leases expire
            start = dict(table)
            rounds = 0
            while True:
                changed = False
                for me in rnd.sample(live, len(live)):
                    mine = desired_partitions(live, 16, table)[me]
                    for p in [p for p, m in table.items() if m == me and p not in mine]:
                        del table[p]
                        changed = True
                    for p in mine - set(table):
                        table[p] = me
                        changed = True
                if not changed:
                    break
                rounds += 1
            assert rounds <= 2
            loads = [sum(1 for m in table.values() if m == n) for n in live]
            assert len(table) == 16 and max(loads) - min(loads) <= 1
            moved = {p for p in range(16) if start.get(p) != table[p]}
            if change == "join":
                assert moved == {p for p, m in table.items() if m == name}
            else:
                assert moved == set(range(16)) - set(start)
