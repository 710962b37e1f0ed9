"""syncReplicaSet as a pure function, with replica_set_test.go's cases: what one sync of a cache decides."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import msgspec
import pytest

import kube.pods
from kube.apps import ReplicaSet
from kube.core import CONDITION_TRUE, POD_FAILED, POD_PENDING, POD_RUNNING, POD_SUCCEEDED, Pod
from kube.labels import SelectorError, selector_from_label_selector
from kube.meta import LabelSelector, LabelSelectorRequirement, OwnerReference
from kube.names import ALPHABET
from kube.testing import pod, replicaset
from kube.times import format_time
from messages.actions import IDEMPOTENCY_ANNOTATION
from messages.keys import ControllerKey, ControllerKind
from reconciler.core import ranking
from reconciler.core.expectations import EXPECTATIONS_TIMEOUT, Expectations, expect
from reconciler.core.podtemplate import NO_LABELS_ERROR
from reconciler.core.ranking import get_pods_to_delete
from reconciler.core.replicaset.status import FAILED_CREATE, FAILED_DELETE, REPLICA_FAILURE
from reconciler.core.replicaset.sync import (
    BURST_REPLICAS,
    ManageError,
    Plan,
    indirectly_related_pods,
    reported_error,
    sync_replicaset,
)
from reconciler.core.view import BadInput
from tests.reconciler.builders import NOW, cache_of, names, orphan_pod, owned_pod

KEY = ControllerKey(ControllerKind.REPLICA_SET, "default", "foobar")
LABELS = {"foo": "bar"}


def upstream_rs(replicas: int | None, labels: dict[str, str] | None = None, *, name: str = "foobar",
                owner_uid: str = "123") -> ReplicaSet:
    """newReplicaSet: controlled by uid 123, selecting `labels` (stamped on the template too)."""
    rs = replicaset(name).selector(labels or LABELS).replicas(replicas).build()
    rs.metadata.owner_references = [OwnerReference(uid=owner_uid, controller=True)]
    return rs


def running(name: str, rs: ReplicaSet) -> Pod:
    return owned_pod(name, rs).ready().build()


def sync(*objects: Any, expectations: Expectations | None = None, error: ManageError | None = None,
         burst: int = BURST_REPLICAS, terminating: bool = True, key: ControllerKey = KEY) -> Plan:
    return sync_replicaset(key, cache_of(*objects), expectations, error, NOW, "corr", burst, terminating)


def acts(plan: Plan) -> tuple[int, list[str], list[str], list[str]]:
    """What upstream's FakePodControl records: creates, deletes, and the two kinds of patches."""
    return len(plan.creates), names(plan.deletes), names(plan.adopt), names(plan.release)


NOTHING: tuple[int, list[str], list[str], list[str]] = (0, [], [], [])


def test_sync_does_nothing() -> None:
    """TestSyncReplicaSetDoesNothing: 2 running pods, 2 replicas."""
    rs = upstream_rs(2)
    plan = sync(rs, running("pod0", rs), running("pod1", rs))
    assert acts(plan) == NOTHING
    assert (plan.diff, plan.needs_sync, plan.expectations) == (0, True, None)
    assert plan.explain == {"reason": "replicas match", "replicas": 2, "active": 2, "diff": 0, "needs_sync": True}


def test_sync_creates_the_missing_pods() -> None:
    rs = upstream_rs(2)
    plan = sync(rs)
    assert [k for k, _ in plan.creates] == ["corr/create/0", "corr/create/1"]
    for pod_key, body in plan.creates:
        meta = body["metadata"]
        assert re.fullmatch(rf"foobar-[{ALPHABET}]{{5}}", meta["name"])
        assert meta["annotations"][IDEMPOTENCY_ANNOTATION] == pod_key
        assert meta["labels"] == LABELS
        assert meta["ownerReferences"][0]["uid"] == rs.metadata.uid
    assert len({body["metadata"]["name"] for _, body in plan.creates}) == 2
    assert plan.expectations == expect(2, 0, NOW)
    assert plan.diff == -2
    assert plan.explain["reason"] == "too few replicas: creating 2"


def test_create_failure_reaches_the_next_syncs_status() -> None:
    """TestSyncReplicaSetCreateFailures: the executor stops after a failed slow-start batch; the error it
    reports comes back with the next sync, which creates again and sets ReplicaFailure."""
    rs = upstream_rs(100)
    plan = sync(rs, error=ManageError("fake Error", creating=True))
    assert len(plan.creates) == 100  # one CreatePods action; the executor runs it in batches of 1, 2, 4, ...
    assert plan.manage_error == "fake Error"
    assert plan.status is not None
    assert [(c.type, c.status, c.reason, c.message, c.last_transition_time) for c in plan.status.conditions] == [
        (REPLICA_FAILURE, CONDITION_TRUE, FAILED_CREATE, "fake Error", format_time(NOW))]


CREATE_ERROR = ManageError("quota exceeded", creating=True)
DELETE_ERROR = ManageError("unable to delete pods: etcd is sad", creating=False)
NO_LABELS = ManageError(NO_LABELS_ERROR, creating=True)


@pytest.mark.parametrize(
    ("diff", "own", "carried", "deleting", "expected"),
    [
        pytest.param(-2, None, CREATE_ERROR, False, CREATE_ERROR, id="short-a-create-error-stands"),
        pytest.param(2, None, DELETE_ERROR, False, DELETE_ERROR, id="over-a-delete-error-stands"),
        pytest.param(0, None, CREATE_ERROR, False, None, id="diff-0-no-call-nil"),
        pytest.param(0, None, DELETE_ERROR, False, None, id="diff-0-after-deletes-nil"),
        pytest.param(2, None, CREATE_ERROR, False, None, id="deleting-now-a-create-error-is-not-a-delete-error"),
        pytest.param(-2, None, DELETE_ERROR, False, None, id="creating-now-a-delete-error-is-not-a-create-error"),
        pytest.param(-2, None, None, False, None, id="nothing-failed"),
        pytest.param(-2, NO_LABELS, DELETE_ERROR, False, NO_LABELS, id="an-error-of-this-sync-comes-first"),
        pytest.param(-2, None, CREATE_ERROR, True, None, id="being-deleted-manage-does-not-run"),
    ],
)
def test_reported_error(diff: int, own: ManageError | None, carried: ManageError | None, deleting: bool,
                        expected: ManageError | None) -> None:
    """manageReplicasErr, afresh in every sync: a carried error only where this sync would make calls of its kind."""
    assert reported_error(diff, own, carried, deleting=deleting) == expected


@pytest.mark.parametrize(
    ("replicas", "pods", "expectations", "carried", "conditions"),
    [
        pytest.param(3, 1, None, CREATE_ERROR, [(FAILED_CREATE, CREATE_ERROR.message)], id="short-failed-create"),
        pytest.param(1, 3, None, DELETE_ERROR, [(FAILED_DELETE, DELETE_ERROR.message)], id="over-failed-delete"),
        pytest.param(1, 1, None, CREATE_ERROR, [], id="scaled-to-the-size-it-has-no-empty-reason"),
        pytest.param(1, 3, None, CREATE_ERROR, [], id="scaled-below-no-failed-delete-for-a-create-error"),
        pytest.param(3, 1, expect(1, 0, NOW), CREATE_ERROR,
                     [(FAILED_CREATE, CREATE_ERROR.message)], id="skipped-in-flight-repeats-when-still-short"),
        pytest.param(1, 1, expect(1, 0, NOW), CREATE_ERROR, [], id="skipped-at-diff-0-reports-nil"),
    ],
)
def test_replica_failure_reason_follows_the_diff(replicas: int, pods: int, expectations: Expectations | None,
                                                 carried: ManageError, conditions: list[tuple[str, str]]) -> None:
    """calculateStatus sets ReplicaFailure with FailedCreate below the replica count and FailedDelete above it;
    a carried error never reaches a sync that would make no call of its kind, so the reason is never empty."""
    rs = upstream_rs(replicas)
    plan = sync(rs, *(running(f"pod{i}", rs) for i in range(pods)), expectations=expectations, error=carried)
    assert plan.status is not None
    assert [(c.reason, c.message) for c in plan.status.conditions] == conditions
    assert plan.manage_error == (conditions[0][1] if conditions else None)


PENDING_ADD = expect(1, 0, NOW)


@pytest.mark.parametrize(
    ("expectations", "creates"),
    [
        pytest.param(None, 1, id="never-set"),
        pytest.param(PENDING_ADD, 0, id="waiting-for-a-creation"),
        pytest.param(PENDING_ADD.creation_observed(), 1, id="creation-observed"),
        pytest.param(PENDING_ADD.lowered(adds=1), 1, id="failed-create-lowered"),
        pytest.param(expect(0, 1, NOW, frozenset({"default/x"})), 0, id="waiting-for-a-deletion"),
        pytest.param(expect(1, 0, NOW - EXPECTATIONS_TIMEOUT), 0, id="not-expired-at-exactly-5-minutes"),
        pytest.param(expect(1, 0, NOW - EXPECTATIONS_TIMEOUT - timedelta(microseconds=1)), 1, id="expired"),
    ],
)
def test_sync_dormancy(expectations: Expectations | None, creates: int) -> None:
    """TestSyncReplicaSetDormancy: no creates while adds are pending; fulfilled or expired ones let it act."""
    rs = upstream_rs(2)
    plan = sync(rs, running("pod0", rs), expectations=expectations)
    assert len(plan.creates) == creates
    assert plan.needs_sync is (creates > 0)
    assert plan.expectations == (expect(1, 0, NOW) if creates else None)


def test_dormant_sync_still_updates_status() -> None:
    """TestSyncReplicaSetDormancy: expectations prevent replicas, not a status update."""
    rs = replicaset("foobar").selector(LABELS).replicas(2).status(replicas=0).build()
    plan = sync(rs, running("pod0", rs), expectations=PENDING_ADD)
    assert plan.creates == []
    assert plan.status is not None
    assert (plan.status.replicas, plan.status.ready_replicas, plan.status.observed_generation) == (1, 1, 1)


def test_a_held_back_sync_says_why() -> None:
    """The decision's reason was empty (issue 21, 7): it names the expectations that hold the sync back, and since
    when (reconciler.core.expectations.held_back; tests/reconciler/test_expectations_reason.py has the wording)."""
    rs = upstream_rs(1)
    expectations = expect(0, 2, NOW - timedelta(seconds=12), frozenset({"default/pod1", "default/pod2"}))
    plan = sync(rs, running("pod0", rs), running("pod1", rs), running("pod2", rs), expectations=expectations)
    assert acts(plan) == NOTHING
    assert plan.explain == {
        "reason": "expectations not satisfied: waiting to observe 2 deletes (default/pod1, default/pod2), expected "
                  "since 2026-03-15T11:59:48.000Z (12s ago; they expire after 5m0s): status only",
        "replicas": 1, "active": 3, "diff": 2, "needs_sync": False}


@pytest.mark.parametrize(
    ("replicas", "burst", "creates"),
    [
        pytest.param(1000, BURST_REPLICAS, 500, id="burst-500"),
        pytest.param(2**31 - 1, BURST_REPLICAS, 500, id="huge-replicas"),
        pytest.param(30, 5, 5, id="burst-5-of-30"),
        pytest.param(2, 3, 2, id="below-burst"),
    ],
)
def test_creates_are_capped_at_burst(replicas: int, burst: int, creates: int) -> None:
    """TestControllerBurstReplicas: at most burstReplicas creates per sync, and as many expected."""
    plan = sync(upstream_rs(replicas), burst=burst)
    assert len(plan.creates) == creates
    assert plan.expectations == expect(creates, 0, NOW)


@pytest.mark.parametrize(("pods", "burst", "deletes"), [(1000, BURST_REPLICAS, 500), (12, 5, 5), (2, 3, 2)])
def test_deletes_are_capped_at_burst(pods: int, burst: int, deletes: int) -> None:
    rs = upstream_rs(0)
    plan = sync(rs, *(owned_pod(f"pod{i:04}", rs, phase=POD_PENDING).build() for i in range(pods)), burst=burst)
    assert len(plan.deletes) == deletes
    assert plan.expectations == expect(0, deletes, NOW, frozenset(f"default/{p.metadata.name}" for p in plan.deletes))
    assert len(plan.expectations.deletion_keys) == deletes


def test_a_scale_down_reads_the_times_the_cache_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25: the ranking's times come from the pods' facts, parsed once per pod version when the cache
    stores the pod, not again in every sync (10,000 pods: most of a scale-down's time). A sync that parses
    a timestamp fails here; the order is the tuple keys' own."""
    rs = upstream_rs(2)
    pods = [owned_pod(f"pod{i}", rs).on_node(f"node-{i % 3}").ready(NOW - timedelta(seconds=7 * i + 1))
            .created(NOW - timedelta(seconds=60 + i)).build() for i in range(8)]
    cache = cache_of(rs, *pods)
    expected = get_pods_to_delete(pods, pods, 6, NOW)  # related: the pods of every ReplicaSet of its owner

    def no_parsing(text: str) -> None:
        raise AssertionError(f"a timestamp parsed during the sync: {text}")

    monkeypatch.setattr(ranking, "parse_time", no_parsing)
    monkeypatch.setattr(kube.pods, "parse_time", no_parsing)
    plan = sync_replicaset(KEY, cache, None, None, NOW, "corr")
    assert names(plan.deletes) == names(expected)


def test_replicaset_gone() -> None:
    """syncReplicaSet of a deleted ReplicaSet: nothing to do, its expectations are dropped by the caller."""
    plan = sync(running("pod0", upstream_rs(1)))
    assert plan.rs is None
    assert acts(plan) == NOTHING
    assert plan.explain == {"reason": "deleted: expectations dropped"}


def test_pods_controlled_by_another_are_not_patched() -> None:
    """TestDoNotPatchPodWithOtherControlRef: a matching pod with another controller is left alone."""
    rs = upstream_rs(2)
    other = upstream_rs(1, name="AnotherRS")
    plan = sync(rs, other, running("pod", other))
    assert acts(plan) == (2, [], [], [])


def test_matching_orphans_are_adopted_and_counted() -> None:
    """TestPatchPodFails' setup: two matching orphans are adopted (two patches) and counted: nothing created. The
    status counting them waits for the sync after the adoption: upstream's claimPods adopts before
    updateReplicaSetStatus, and a failed adoption ends the sync before it."""
    rs = upstream_rs(2)
    plan = sync(rs, orphan_pod("pod1", rs).build(), orphan_pod("pod2", rs).build())
    assert acts(plan) == (0, [], ["pod1", "pod2"], [])
    assert plan.status is None
    adopted = sync(rs, owned_pod("pod1", rs).build(), owned_pod("pod2", rs).build())
    assert acts(adopted) == NOTHING
    assert adopted.status is not None and adopted.status.replicas == 2


def test_no_status_counts_an_orphan_another_replicaset_took() -> None:
    """Two ReplicaSets selecting one orphan both adopt it; the API lets one in. The loser's adopting sync writes no
    status (none of upstream's counts a pod whose adoption failed); its retry, seeing the pod taken, creates its own
    pod and writes a status that does not count the orphan."""
    rs = upstream_rs(1)
    other = upstream_rs(1, name="other")
    plan = sync(rs, other, orphan_pod("stray", rs).build())
    assert acts(plan) == (0, [], ["stray"], [])
    assert plan.status is None
    retry = sync(rs, other, owned_pod("stray", other).build())
    assert acts(retry) == (1, [], [], [])
    assert retry.status is not None and retry.status.replicas == 0


def test_pods_whose_labels_no_longer_match_are_released_and_replaced() -> None:
    """TestPodsAreRemovedBeforeRS' release: an owned pod not selected any more is released, not counted."""
    rs = upstream_rs(1)
    relabelled = pod("pod1").labels(other="x").owned_by(rs).phase(POD_RUNNING).build()
    plan = sync(rs, relabelled)
    assert acts(plan) == (1, [], [], ["pod1"])


def test_pods_of_another_namespace_are_not_counted() -> None:
    """The pod lister is the ReplicaSet's namespace: a pod elsewhere naming it as controller is not its pod."""
    rs = upstream_rs(1)
    elsewhere = owned_pod("pod1", rs).ns("other").build()
    plan = sync(rs, elsewhere)
    assert acts(plan) == (1, [], [], [])
    assert plan.status is not None and plan.status.replicas == 0
    cache = cache_of(rs, elsewhere, orphan_pod("orphan", rs).build(), orphan_pod("orphan", rs).ns("other").build())
    assert names(cache.owned_or_orphans("Pod", "default", rs.metadata.uid)) == ["orphan"]
    assert names(cache.owned_or_orphans("Pod", "other", rs.metadata.uid)) == ["pod1", "orphan"]


def test_no_adoption_or_creation_while_being_deleted() -> None:
    """TestDoNotAdoptOrCreateIfBeingDeleted: no patch, no create; its own pods still show in status."""
    rs = replicaset("foobar").selector(LABELS).replicas(3).deleting(NOW).build()
    plan = sync(rs, orphan_pod("pod1", rs).build(), running("mine", rs))
    assert acts(plan) == NOTHING
    assert plan.expectations is None
    assert plan.explain["reason"] == "being deleted: no creates or deletes, status only"
    assert plan.status is not None and plan.status.replicas == 1


def test_adoption_race_is_left_to_the_owner_check() -> None:
    """TestDoNotAdoptOrCreateIfBeingDeletedRace: the cache says the ReplicaSet is alive, so the sync plans
    the adoption; the fresh read (the PatchPod's owner check) is the executor's, as canAdopt is upstream's."""
    rs = upstream_rs(2)
    plan = sync(rs, orphan_pod("pod1", rs).build())
    assert acts(plan) == (1, [], ["pod1"], [])


def test_invalid_selector_is_bad_input() -> None:
    """An invalid selector: a warning naming spec.selector, and nothing else (upstream logs and returns)."""
    selector = LabelSelector(match_expressions=[LabelSelectorRequirement(key="foo", operator="Bogus", values=["x"])])
    rs = replicaset("foobar").raw_selector(selector).replicas(2).build()
    with pytest.raises(SelectorError) as raised:
        selector_from_label_selector(selector)
    plan = sync(rs, orphan_pod("pod1", upstream_rs(1)).build())
    assert plan.warnings == [BadInput("InvalidSelector", f"invalid selector: {raised.value}", "spec.selector")]
    assert "spec.selector.matchExpressions[0].operator" in plan.warnings[0].message
    assert acts(plan) == NOTHING
    assert (plan.status, plan.expectations, plan.requeue_after) == (None, None, None)


def test_nil_selector_selects_nothing() -> None:
    """LabelSelectorAsSelector(nil) is Nothing: owned pods are released and never counted."""
    rs = replicaset("foobar").raw_selector(None).replicas(1).build()
    plan = sync(rs, owned_pod("pod1", rs).labels(LABELS).build())
    assert acts(plan) == (1, [], [], ["pod1"])


def test_template_without_labels_cannot_create() -> None:
    """createPods refuses a template without labels before any call: nothing is expected, the error is the
    status's ReplicaFailure."""
    rs = upstream_rs(2)
    rs.spec.template.metadata.labels = {}
    plan = sync(rs)
    assert plan.creates == []
    assert plan.manage_error == NO_LABELS_ERROR == "unable to create pods, no labels"
    assert plan.expectations == expect(0, 0, NOW)
    assert plan.status is not None
    assert [(c.reason, c.message) for c in plan.status.conditions] == [(FAILED_CREATE, NO_LABELS_ERROR)]


def test_scale_down_deletes_the_least_ready_and_expects_their_keys() -> None:
    """getPodsToDelete (various phases, diff < len) and getPodKeys: the expected deletions are ns/name keys."""
    rs = upstream_rs(2)
    pods = [
        owned_pod("ready-1", rs).on_node("node-1").ready().build(),
        owned_pod("ready-2", rs).on_node("node-2").ready().build(),
        owned_pod("not-ready", rs).on_node("node-1").not_ready().build(),
        owned_pod("scheduled-pending", rs, phase=POD_PENDING).on_node("node-1").build(),
        owned_pod("unscheduled-pending", rs, phase=POD_PENDING).build(),
    ]
    plan = sync(rs, *pods)
    assert names(plan.deletes) == ["unscheduled-pending", "scheduled-pending", "not-ready"]
    assert plan.expectations == expect(0, 3, NOW, frozenset(
        {"default/unscheduled-pending", "default/scheduled-pending", "default/not-ready"}))
    assert plan.explain["deleting"] == names(plan.deletes)


def test_terminating_and_terminal_pods() -> None:
    """Terminating pods are reported, not counted; terminal ones are neither; both are replaced."""
    rs = upstream_rs(3)
    pods = [running("active", rs), owned_pod("terminating", rs).deleting(NOW).build(),
            owned_pod("succeeded", rs, phase=POD_SUCCEEDED).build(), owned_pod("failed", rs, phase=POD_FAILED).build(),
            owned_pod("failed-and-deleting", rs, phase=POD_FAILED).deleting(NOW).build()]
    plan = sync(*pods, rs)
    assert acts(plan) == (2, [], [], [])
    assert plan.status is not None
    assert (plan.status.replicas, plan.status.terminating_replicas) == (1, 1)
    off = sync(*pods, rs, terminating=False)
    assert off.status is not None and off.status.terminating_replicas is None


def test_status_is_written_only_when_it_changes() -> None:
    rs = replicaset("foobar").selector(LABELS).replicas(1).generation(4).observed_generation(4).status(
        replicas=1, ready=1, available=1, fully_labeled=1).build()
    rs.status.terminating_replicas = 0
    assert sync(rs, running("pod0", rs)).status is None
    stale = msgspec.structs.replace(rs, metadata=msgspec.structs.replace(rs.metadata, generation=5))
    plan = sync(stale, running("pod0", rs))
    assert plan.status is not None and plan.status.observed_generation == 5


@pytest.mark.parametrize(
    ("ready_at", "error", "requeue"),
    [
        pytest.param(NOW - timedelta(seconds=10), None, timedelta(seconds=20), id="ready-10s-ago-of-30s"),
        pytest.param(NOW - timedelta(seconds=30), None, None, id="available"),
        pytest.param(None, None, timedelta(seconds=30), id="no-transition-time-falls-back-to-min-ready"),
        pytest.param(NOW - timedelta(seconds=10), "boom", timedelta(seconds=20), id="even-after-an-error"),
    ],
)
def test_min_ready_seconds_requeue(ready_at: Any, error: str | None, requeue: timedelta | None) -> None:
    """A last line of defence against clock skew: sync again when the next Ready pod turns available."""
    rs = replicaset("foobar").selector(LABELS).replicas(1).min_ready_seconds(30).build()
    carried = None if error is None else ManageError(error, creating=True)
    plan = sync(rs, owned_pod("pod0", rs).ready(ready_at).build(), error=carried)
    assert plan.requeue_after == requeue


def test_no_requeue_without_ready_pods() -> None:
    rs = replicaset("foobar").selector(LABELS).replicas(1).min_ready_seconds(30).build()
    assert sync(rs, owned_pod("pod0", rs, phase=POD_PENDING).build()).requeue_after is None


def test_idempotency_keys_come_from_the_key_base() -> None:
    rs = upstream_rs(1)
    first = sync_replicaset(KEY, cache_of(rs), None, None, NOW, "a")
    second = sync_replicaset(KEY, cache_of(rs), None, None, NOW, "b")
    assert [k for k, _ in first.creates] == ["a/create/0"]
    assert first.creates[0][1]["metadata"]["name"] != second.creates[0][1]["metadata"]["name"]


# --- getIndirectlyRelatedPods ----------------------------------------------------------------------------

SOME = upstream_rs(1, {"foo": "bar"}, name="foo1")
RELATED = upstream_rs(1, {"foo": "baz"}, name="foo2")
UNRELATED = upstream_rs(1, {"foo": "quux"}, name="bar1", owner_uid="456")
PENDING_DELETION = replicaset("foo3").selector(foo="xyzzy").deleting(NOW).build()
PENDING_DELETION.metadata.owner_references = [OwnerReference(uid="789", controller=True)]


@pytest.mark.parametrize(
    ("rss", "pods", "rs", "expected"),
    [
        pytest.param([PENDING_DELETION, UNRELATED], [running("pod", PENDING_DELETION)], PENDING_DELETION, ["pod"],
                     id="owner-pending-deletion"),
        pytest.param([SOME, UNRELATED], [running("pod1", SOME), running("pod2", SOME), running("pod4", UNRELATED)],
                     SOME, ["pod1", "pod2"], id="no-related-replicaset"),
        pytest.param([SOME, RELATED, UNRELATED], [running("pod1", SOME), running("pod2", SOME),
                                                  running("pod3", RELATED), running("pod4", UNRELATED)],
                     SOME, ["pod1", "pod2", "pod3"], id="own-and-related-not-unrelated"),
        pytest.param([replicaset("solo").selector(foo="bar").build()], [running("pod1", SOME)],
                     replicaset("solo").selector(foo="bar").build(), [], id="no-controller-no-related-pods"),
    ],
)
def test_related_pods_lookup(rss: list[ReplicaSet], pods: list[Pod], rs: ReplicaSet, expected: list[str]) -> None:
    """TestRelatedPodsLookup (and TestGetReplicaSetsWithSameController): pods of every ReplicaSet with the
    same controller, each once."""
    assert sorted(names(indirectly_related_pods(rs, cache_of(*rss, *pods)))) == expected


# --- getPodsToDelete -------------------------------------------------------------------------------------

RS1 = upstream_rs(1, {"name": "foo"})
UNSCHEDULED_PENDING = owned_pod("unscheduled-pending-pod", RS1, phase=POD_PENDING).build()
SCHEDULED_PENDING = owned_pod("scheduled-pending-pod", RS1, phase=POD_PENDING).on_node("fake-node").build()
NOT_READY = owned_pod("scheduled-running-not-ready-pod", RS1).on_node("fake-node").not_ready().build()
READY_NODE1 = owned_pod("scheduled-running-ready-pod-on-node-1", RS1).on_node("fake-node-1").ready().build()
READY_NODE2 = owned_pod("scheduled-running-ready-pod-on-node-2", RS1).on_node("fake-node-2").ready().build()


@pytest.mark.parametrize(
    ("pods", "related", "diff", "expected"),
    [
        pytest.param([], None, 0, [], id="no-pods"),
        pytest.param([NOT_READY, READY_NODE1], None, 2, [NOT_READY, READY_NODE1], id="diff-equals-len"),
        pytest.param([READY_NODE1, NOT_READY], None, 1, [NOT_READY], id="diff-below-len"),
        pytest.param([READY_NODE1, READY_NODE1, READY_NODE2, NOT_READY, SCHEDULED_PENDING, UNSCHEDULED_PENDING], None,
                     6, [READY_NODE1, READY_NODE1, READY_NODE2, NOT_READY, SCHEDULED_PENDING, UNSCHEDULED_PENDING],
                     id="all-go-unsorted"),
        pytest.param([READY_NODE1, READY_NODE1, READY_NODE2, NOT_READY, SCHEDULED_PENDING, UNSCHEDULED_PENDING], [],
                     6, [READY_NODE1, READY_NODE1, READY_NODE2, NOT_READY, SCHEDULED_PENDING, UNSCHEDULED_PENDING],
                     id="all-go-no-related"),
        pytest.param([SCHEDULED_PENDING, UNSCHEDULED_PENDING], None, 1, [UNSCHEDULED_PENDING],
                     id="unscheduled-before-scheduled"),
        pytest.param([READY_NODE1, NOT_READY, NOT_READY], None, 2, [NOT_READY, NOT_READY], id="not-ready-before-ready"),
        pytest.param([READY_NODE1, READY_NODE2], [READY_NODE1, READY_NODE2, READY_NODE2], 1, [READY_NODE2],
                     id="colocated-before-alone"),
        pytest.param([SCHEDULED_PENDING, NOT_READY], None, 1, [SCHEDULED_PENDING], id="pending-before-running"),
        pytest.param([READY_NODE1, READY_NODE2, NOT_READY, SCHEDULED_PENDING, UNSCHEDULED_PENDING], None, 3,
                     [UNSCHEDULED_PENDING, SCHEDULED_PENDING, NOT_READY], id="various-diff-below-len"),
    ],
)
def test_get_pods_to_delete(pods: list[Pod], related: list[Pod] | None, diff: int, expected: list[Pod]) -> None:
    """TestGetPodsToDelete: related defaults to the pods themselves."""
    assert get_pods_to_delete(pods, pods if related is None else related, diff, NOW) == expected
