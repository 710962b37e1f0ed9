"""Cutting a CreatePods to fit one bus message (reconciler/core/sizing.py, issue 15): the parts, their keys,
and what the controllers book for a cut action (the same expectations and round as for one)."""

from __future__ import annotations

import msgspec
import pytest

from kube.testing import replicaset
from kube.times import format_micro_time
from messages.actions import CreatePods, DeletePod, PodToCreate
from reconciler.core.cache import Cache
from reconciler.core.controllers import Controllers, Outcome, Settings
from reconciler.core.sizing import fit_actions, part_key, split_create_pods
from tests.reconciler.builders import NOW, Cluster

ISSUED = "2026-11-26T10:00:00.000000Z"  # an RFC 3339 issued_at, as the codec requires

KEY = "ReplicaSet/shop/web@1-2/create"


def create(*sizes: int) -> CreatePods:
    """A CreatePods of pods whose bodies are `sizes` bytes of JSON each."""
    pods = [PodToCreate(key=f"{KEY}/{i}", pod=msgspec.Raw(msgspec.json.encode({"x": "a" * (size - 8)})))
            for i, size in enumerate(sizes)]
    assert [len(p.pod) for p in pods] == list(sizes)
    return CreatePods(key=KEY, decision_id=0, controller="ReplicaSet/shop/web", issued_at=ISSUED,
                      namespace="shop", pods=pods, component="replicaset-controller")


def size(action: CreatePods) -> int:
    return len(msgspec.json.encode(action))


BASE = size(create())  # the envelope without a pod
POD = len(msgspec.json.encode(PodToCreate(key=f"{KEY}/0", pod=msgspec.Raw(b"{}")))) - 2  # a pod's JSON less its body


@pytest.mark.parametrize(("sizes", "room", "parts"), [
    pytest.param([100], 0, [[0]], id="one-pod-over-the-limit-is-a-part-alone"),
    pytest.param([100, 100, 100], 3 * 100 + 3 * POD + 2 + 10, [[0, 1, 2]], id="fits-uncut"),
    pytest.param([100, 100, 100], 2 * 100 + 2 * POD + 1 + 2, [[0, 1], [2]], id="two-fit-then-one"),
    pytest.param([100, 100, 100, 100], 2 * 100 + 2 * POD + 1 + 2, [[0, 1], [2, 3]], id="pairs"),
    pytest.param([100, 100, 100], 100 + POD + 2, [[0], [1], [2]], id="one-each"),
    pytest.param([50, 500, 50, 50], 100 + 2 * POD + 1 + 2, [[0], [1], [2, 3]], id="a-large-pod-alone-in-order"),
    pytest.param([100] * 10, 3 * 100 + 3 * POD + 2 + 3, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]], id="greedy"),
])
def test_a_create_is_cut_in_order_into_the_fewest_parts_that_fit(sizes: list[int], room: int,
                                                                 parts: list[list[int]]) -> None:
    action = create(*sizes)
    limit = BASE + room  # room for the pods (the envelope is counted with the longest part key: "/N" more)
    cut = split_create_pods(action, limit)
    assert [[action.pods.index(p) for p in part.pods] for part in cut] == parts
    assert [part.key for part in cut] == [part_key(KEY, n) for n in range(len(parts))]
    assert cut[0].key == KEY  # the first part keeps the action's key: an action that fits is what it was
    for part in cut:
        assert size(part) <= limit or len(part.pods) == 1  # only a pod too large alone goes over
        assert msgspec.structs.replace(part, key=KEY, pods=[]) == msgspec.structs.replace(action, pods=[])


def test_part_keys() -> None:
    assert [part_key("a/create", n) for n in range(3)] == ["a/create", "a/create/2", "a/create/3"]


def test_without_a_limit_or_within_it_nothing_changes() -> None:
    action = create(*[1000] * 50)
    other = DeletePod(key="k", decision_id=0, controller="ReplicaSet/shop/web", issued_at=ISSUED, namespace="shop",
                      name="p", uid="u")
    assert fit_actions([action, other], None) == [action, other]
    assert fit_actions([action, other], size(action)) == [action, other]
    cut = fit_actions([action, other], size(action) - 1)
    assert len(cut) == 3 and cut[-1] is other
    assert [p for a in cut[:2] for p in a.pods] == action.pods  # isinstance: CreatePods


def test_a_large_replicaset_is_created_in_parts_with_one_expectation() -> None:
    """500 replicas, each pod 3 KB larger than a bare one: one sync issues the 500 creates in several actions,
    each within the limit, and books what it books for one: 500 adds expected, a round of 500 results."""
    rs = replicaset("web").ns("shop").uid("rs-uid").replicas(500).build()
    rs.spec.template.metadata.annotations = {"example.com/padding": "p" * 3000}
    limit = 64 * 1024 - 4096
    cluster = Cluster(rs)
    controllers = Controllers(cluster.cache, settings=Settings(max_action_bytes=limit))
    controllers.take_changes(Outcome())
    controllers.resync_all()
    outcome = controllers.sync_ready(NOW, format_micro_time(NOW))
    creates = [a for d in outcome.decisions for a in d.actions if isinstance(a, CreatePods)]
    assert len(creates) > 1
    assert all(len(msgspec.json.encode(a)) <= limit for a in creates)
    assert sum(len(a.pods) for a in creates) == 500
    assert len({p.key for a in creates for p in a.pods}) == 500
    assert len({a.key for a in creates}) == len(creates)
    expectations = next(iter(outcome.expectations.values()))
    assert expectations.adds == 500
    assert next(iter(controllers.manage_pending.values())) == 500
    # and without a limit, the same sync issues the one action it always did
    uncut = Controllers(Cluster(rs).cache)
    uncut.take_changes(Outcome())
    uncut.resync_all()
    one = [a for d in uncut.sync_ready(NOW, format_micro_time(NOW)).decisions for a in d.actions
           if isinstance(a, CreatePods)]
    assert len(one) == 1 and one[0].key == creates[0].key and one[0].pods == [p for a in creates for p in a.pods]


def test_the_limit_is_recorded_with_every_start() -> None:
    settings = Settings(max_action_bytes=60_000)
    assert settings.start_state()["max_action_bytes"] == 60_000
    assert Settings.from_start_state({"positions": {}, **settings.start_state()}) == settings
    assert Settings.from_start_state({"positions": {}}).max_action_bytes is None  # recorded before: no limit
    assert Controllers(Cache()).settings.max_action_bytes is None
