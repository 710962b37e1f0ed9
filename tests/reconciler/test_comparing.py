"""The shadow's comparator (reconciler.core.comparing), as tables: what agrees, what is equivalent (upstream's
tie classes), what diverges, per owner and window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reconciler.core.comparing import AGREED, EQUIVALENT, KUBUS_ONLY, UPSTREAM_ONLY, Timed, compare, summary
from reconciler.core.shadow import (
    ADOPT_POD,
    CREATE_POD,
    DELETE_POD,
    KEEP_STATUS,
    KUBUS,
    OWNER_DELETED,
    RELEASE_POD,
    UPDATE_STATUS,
    UPSTREAM,
    Act,
)

T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
WINDOW = timedelta(seconds=30)
RS = "ReplicaSet/default/web"
DS = "DaemonSet/default/agent"


def k(verb: str, target: str = "", hash_: str = "", *, at: float = 0, seq: int = 1, key: str = RS,
      ties: tuple[str, ...] = (), fields: dict[str, object] | None = None) -> Timed:
    return Timed(Act(KUBUS, key, f"uid-{key}", verb, target, hash_, seq, "", ties, fields or {}),
                 T0 + timedelta(seconds=at))


def u(verb: str, target: str = "", hash_: str = "", *, at: float = 0, seq: int = 2, key: str = RS,
      fields: dict[str, object] | None = None, early: bool = False, awaited: bool = False) -> Timed:
    return Timed(Act(UPSTREAM, key, f"uid-{key}", verb, target, hash_, seq, "", (), fields or {}, early, awaited),
                 T0 + timedelta(seconds=at))


def counts(acts: list[Timed]) -> dict[str, int]:
    judged = compare(acts, WINDOW)
    return {kind: sum(c[kind] for c in summary(judged).values())
            for kind in (AGREED, EQUIVALENT, KUBUS_ONLY, UPSTREAM_ONLY)}


CASES = {
    # a ReplicaSet's creates are counted: generated names are no part of the key
    "creates counted": ([k(CREATE_POD), k(CREATE_POD), u(CREATE_POD), u(CREATE_POD)], (2, 0, 0, 0)),
    "one create more": ([k(CREATE_POD), k(CREATE_POD), k(CREATE_POD), u(CREATE_POD), u(CREATE_POD)], (2, 0, 1, 0)),
    "one create fewer": ([k(CREATE_POD), u(CREATE_POD), u(CREATE_POD)], (1, 0, 0, 1)),
    # a DaemonSet's creates by node and revision
    "daemon pods by node": ([k(CREATE_POD, "n1", "h", key=DS), k(CREATE_POD, "n2", "h", key=DS),
                             u(CREATE_POD, "n2", "h", key=DS), u(CREATE_POD, "n1", "h", key=DS)], (2, 0, 0, 0)),
    "daemon pod on another node": ([k(CREATE_POD, "n1", "h", key=DS), u(CREATE_POD, "n2", "h", key=DS)],
                                   (0, 0, 1, 1)),
    "daemon pod of another revision": ([k(CREATE_POD, "n1", "h1", key=DS), u(CREATE_POD, "n1", "h2", key=DS)],
                                       (0, 0, 1, 1)),
    # scale-down: the pod picked, or one of its tie class
    "same pod deleted": ([k(DELETE_POD, "default/a", ties=("default/a", "default/b")), u(DELETE_POD, "default/a")],
                         (1, 0, 0, 0)),
    "equal pod deleted": ([k(DELETE_POD, "default/a", ties=("default/a", "default/b")), u(DELETE_POD, "default/b")],
                          (0, 1, 0, 0)),
    "pod ranked otherwise deleted": ([k(DELETE_POD, "default/a", ties=("default/a",)), u(DELETE_POD, "default/c")],
                                     (0, 0, 1, 1)),
    "rolling step in map order": ([k(DELETE_POD, "n1", "old", key=DS, ties=("n1", "n2", "n3")),
                                   u(DELETE_POD, "n3", "old", key=DS)], (0, 1, 0, 0)),
    "rolling step, one node more": ([k(DELETE_POD, "n1", "old", key=DS, ties=("n1", "n2", "n3")),
                                     u(DELETE_POD, "n3", "old", key=DS), u(DELETE_POD, "n1", "old", key=DS)],
                                    (1, 0, 0, 1)),
    # a rolling update's steps, each picked in map order upstream and by name by kubus: each step's pick pairs with
    # upstream's of the same step, not the first exact key (the shadow's node-0 of the last step, whose class is
    # that one node, would be left over; seen on kube-controller-manager, DaemonSet/shadowed/agent)
    "rolling steps in map order": ([k(DELETE_POD, "n0", "old", key=DS, seq=1, ties=("n0", "n1", "n2", "n3")),
                                    u(DELETE_POD, "n3", "old", key=DS, seq=2),
                                    k(DELETE_POD, "n0", "old", key=DS, seq=3, ties=("n0", "n1", "n2")),
                                    u(DELETE_POD, "n2", "old", key=DS, seq=4),
                                    k(DELETE_POD, "n0", "old", key=DS, seq=5, ties=("n0", "n1")),
                                    u(DELETE_POD, "n1", "old", key=DS, seq=6),
                                    k(DELETE_POD, "n0", "old", key=DS, seq=7, ties=("n0",)),
                                    u(DELETE_POD, "n0", "old", key=DS, seq=8)], (1, 3, 0, 0)),
    # ... but a pick outside every class stays a divergence, however the others pair
    "rolling steps, one pick outside": ([k(DELETE_POD, "n0", "old", key=DS, seq=1, ties=("n0", "n1")),
                                         u(DELETE_POD, "n1", "old", key=DS, seq=2),
                                         k(DELETE_POD, "n0", "old", key=DS, seq=3, ties=("n0",)),
                                         u(DELETE_POD, "n2", "old", key=DS, seq=4)], (0, 1, 1, 1)),
    "a tie of another revision": ([k(DELETE_POD, "n0", "old", key=DS, ties=("n0", "n1")),
                                   u(DELETE_POD, "n1", "other", key=DS)], (0, 0, 1, 1)),
    # maxSurge: upstream starts the surge pods on nodes of an old, available pod and no new one, in map order
    # (seen on kube-controller-manager, DaemonSet/shadowed/surge: kubus node-1 at every step, upstream 3, 2, 1)
    "surge creates in map order": ([k(CREATE_POD, "n1", "new", key=DS, seq=1, ties=("n1", "n2", "n3")),
                                    u(CREATE_POD, "n3", "new", key=DS, seq=2),
                                    k(CREATE_POD, "n1", "new", key=DS, seq=3, ties=("n1", "n2")),
                                    u(CREATE_POD, "n2", "new", key=DS, seq=4),
                                    k(CREATE_POD, "n1", "new", key=DS, seq=5, ties=("n1",)),
                                    u(CREATE_POD, "n1", "new", key=DS, seq=6)], (1, 2, 0, 0)),
    "surge create outside the class": ([k(CREATE_POD, "n1", "new", key=DS, ties=("n1", "n2")),
                                        u(CREATE_POD, "n3", "new", key=DS)], (0, 0, 1, 1)),
    "surge create of another revision": ([k(CREATE_POD, "n1", "new", key=DS, ties=("n1", "n2")),
                                          u(CREATE_POD, "n2", "old", key=DS)], (0, 0, 1, 1)),
    "a create is no deletion's tie": ([k(DELETE_POD, "n1", "old", key=DS, ties=("n1", "n2")),
                                       u(CREATE_POD, "n2", "old", key=DS)], (0, 0, 1, 1)),
    # an act the watch showed before its cause (reconciler.core.shadow_order): the shadow decided after it
    "a scale-up's pods before the scale": ([u(CREATE_POD, early=True), u(CREATE_POD, early=True),
                                            k(CREATE_POD), u(CREATE_POD)], (1, 2, 0, 0)),
    "a first pod before its revision": ([u(CREATE_POD, "n2", "new", key=DS, early=True),
                                         k(CREATE_POD, "n0", "new", key=DS), u(CREATE_POD, "n0", "new", key=DS)],
                                        (1, 1, 0, 0)),
    "an early act the shadow decided too": ([u(DELETE_POD, "n1", "old", key=DS, early=True),
                                             k(DELETE_POD, "n1", "old", key=DS, ties=("n1",))], (1, 0, 0, 0)),
    "an act that was not early": ([u(DELETE_POD, "n1", "old", key=DS)], (0, 0, 0, 1)),
    "an early act leaves the shadow's own to diverge": ([u(CREATE_POD, early=True), k(DELETE_POD, "default/a")],
                                                        (0, 1, 1, 0)),
    # a surge deletion upstream made while the shadow awaited its own round (reconciler.core.shadow: awaited); seen
    # on kube-controller-manager, DaemonSet/shadowed/surge: the shadow's four creates of one sync, upstream's in
    # four syncs with the old pods' deletions between them
    "surge deletions while the shadow awaited its round": ([k(CREATE_POD, "n0", "new", key=DS),
                                                            u(CREATE_POD, "n0", "new", key=DS),
                                                            u(DELETE_POD, "n0", "old", key=DS, awaited=True)],
                                                           (1, 1, 0, 0)),
    "an awaited deletion the shadow decided too": ([u(DELETE_POD, "n1", "old", key=DS, awaited=True),
                                                    k(DELETE_POD, "n1", "old", key=DS, ties=("n1",))], (1, 0, 0, 0)),
    "a deletion not awaited": ([u(DELETE_POD, "n1", "old", key=DS)], (0, 0, 0, 1)),
    # windows: acts more than a window apart are judged apart
    "a window apart": ([k(CREATE_POD, at=0), u(CREATE_POD, at=31)], (0, 0, 1, 1)),
    "within a window": ([k(CREATE_POD, at=0), u(CREATE_POD, at=29)], (1, 0, 0, 0)),
    # an adoption the shadow repeats until it sees upstream's is one decision
    "adoption repeated": ([k(ADOPT_POD, "default/a", seq=1), k(ADOPT_POD, "default/a", seq=3),
                           u(ADOPT_POD, "default/a", seq=2)], (1, 0, 0, 0)),
    # the owner deleted with --cascade=orphan: the garbage collector releases, upstream's fresh read refuses
    "orphaned by the garbage collector": ([u(RELEASE_POD, "default/a"), k(ADOPT_POD, "default/a"),
                                           u(OWNER_DELETED, seq=3)], (0, 2, 0, 0)),
    "a release without the owner's deletion": ([u(RELEASE_POD, "default/a")], (0, 0, 0, 1)),
    # status: by its last value in the window
    "same status": ([k(UPDATE_STATUS, fields={"replicas": 3}, seq=5), u(UPDATE_STATUS, fields={"replicas": 3}, seq=6)],
                    (1, 0, 0, 0)),
    "upstream's status accepted": ([u(UPDATE_STATUS, fields={"replicas": 3}, seq=6)], (0, 0, 0, 0)),
    "status decided before upstream's": ([k(UPDATE_STATUS, fields={"replicas": 2}, seq=5),
                                          u(UPDATE_STATUS, fields={"replicas": 3}, seq=6)], (0, 1, 0, 0)),
    "another status after upstream's": ([u(UPDATE_STATUS, fields={"replicas": 3}, seq=6),
                                         k(UPDATE_STATUS, fields={"replicas": 4}, seq=7)], (0, 0, 1, 1)),
    "a status upstream never wrote": ([k(UPDATE_STATUS, fields={"replicas": 4}, seq=7)], (0, 0, 1, 0)),
    # the shadow's last decision counts, written or not: a decision that writes no status kept the one it saw
    # (KEEP_STATUS). Seen on the real control plane: the shadow decided after upstream's last write but before
    # the last pod events (terminatingReplicas 1 where upstream wrote 0), then, seeing them, wrote nothing
    "a later decision kept upstream's status": ([u(UPDATE_STATUS, fields={"replicas": 3}, seq=6),
                                                 k(UPDATE_STATUS, fields={"replicas": 4}, seq=7),
                                                 k(KEEP_STATUS, fields={"replicas": 3}, seq=9)], (1, 0, 0, 0)),
    "a later decision kept another status": ([u(UPDATE_STATUS, fields={"replicas": 3}, seq=6),
                                              k(KEEP_STATUS, fields={"replicas": 2}, seq=9)], (0, 0, 1, 1)),
    "its write, then a decision keeping upstream's older status": (
        [k(UPDATE_STATUS, fields={"replicas": 4}, seq=7), k(KEEP_STATUS, fields={"replicas": 3}, seq=9)],
        (0, 0, 0, 0)),
    "a keep before upstream's write is not the last decision": (
        [k(KEEP_STATUS, fields={"replicas": 2}, seq=5), u(UPDATE_STATUS, fields={"replicas": 3}, seq=6),
         k(UPDATE_STATUS, fields={"replicas": 4}, seq=7)], (0, 0, 1, 1)),
    "keeps alone are no act": ([k(KEEP_STATUS, fields={"replicas": 3}, seq=5),
                                k(KEEP_STATUS, fields={"replicas": 3}, seq=6)], (0, 0, 0, 0)),
}


@pytest.mark.parametrize("acts,expected", list(CASES.values()), ids=list(CASES))
def test_compare(acts: list[Timed], expected: tuple[int, int, int, int]) -> None:
    assert tuple(counts(acts).values()) == expected


def test_an_open_window_is_not_judged() -> None:
    acts = [k(CREATE_POD, at=0), u(CREATE_POD, at=10)]
    assert compare(acts, WINDOW, now=T0 + timedelta(seconds=39)) == []  # 29 s after the last act: still open
    (judged,) = compare(acts, WINDOW, now=T0 + timedelta(seconds=40))
    assert (judged.controller_key, len(judged.agreed), judged.diverges) == (RS, 1, False)


def test_owners_are_compared_apart() -> None:
    """The same act of two owners never matches across them."""
    judged = compare([k(CREATE_POD, key=RS), u(CREATE_POD, key="ReplicaSet/default/api")], WINDOW)
    assert sorted((w.controller_key, len(w.kubus_only), len(w.upstream_only)) for w in judged) == [
        ("ReplicaSet/default/api", 0, 1), (RS, 1, 0)]


def test_a_kept_status_neither_opens_nor_stretches_a_window() -> None:
    """A decision that writes no status is recorded at every sync (a resync included): it joins the window it
    falls in or closes (a window after its last act), and never makes one of its own nor keeps one open."""
    keep = k(KEEP_STATUS, fields={"replicas": 3}, at=100, seq=20)
    assert compare([keep], WINDOW) == []
    acts = [u(UPDATE_STATUS, fields={"replicas": 3}, at=0, seq=6),
            k(UPDATE_STATUS, fields={"replicas": 4}, at=1, seq=7), k(KEEP_STATUS, fields={"replicas": 3}, at=20, seq=9)]
    (judged,) = compare(acts, WINDOW, now=T0 + timedelta(seconds=31))  # closed a window after the last write
    assert (len(judged.agreed), judged.diverges, judged.end) == (1, False, T0 + timedelta(seconds=1))
    assert compare([*acts, keep], WINDOW, now=T0 + timedelta(seconds=31)) == [judged]
