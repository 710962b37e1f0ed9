"""The controllers engine: cache changes -> handlers -> work queue -> syncs -> actions, and the executors'
results back into expectations, errors and requeues. Cases after replica_set_test.go's TestSyncReplicaSetDormancy,
TestControllerBurstReplicas, TestDeleteControllerAndExpectations, TestExpectationsOnRecreate,
TestControllerUpdateRequeue and TestPatchPodFails, on an injected clock."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import msgspec
import pytest

from kube.apps import ReplicaSet
from kube.core import POD_PENDING, Pod
from kube.features import FeatureGates
from kube.meta import LabelSelector, LabelSelectorRequirement
from kube.names import ALPHABET
from kube.ownership import adopt_patch, release_patch
from kube.testing import daemonset, node, pod, replicaset
from kube.times import format_micro_time, format_time
from messages.actions import (
    FAILED,
    IDEMPOTENCY_ANNOTATION,
    NOT_ADOPTED,
    SKIPPED,
    SUCCEEDED,
    Action,
    ActionResult,
    Adoption,
    CreateControllerRevision,
    CreatePods,
    DeletePod,
    OwnerCheck,
    PatchPod,
    RecordEvent,
    UpdateStatus,
)
from messages.observed import ADDED, ObservedEvent
from reconciler.core.controllers import Controllers, Decided, Outcome, Settings
from reconciler.core.daemonset.backoff import FailedPodBackoff
from reconciler.core.daemonset.controller import REVISION_WRITE_WAIT
from reconciler.core.daemonset.handlers import controller_key as ds_controller_key
from reconciler.core.expectations import Expectations, expect
from reconciler.core.replicaset.handlers import controller_key
from reconciler.core.replicaset.sync import ManageError
from tests.reconciler.builders import NOW, Cluster, orphan_pod, owned_pod
from tests.reconciler.test_daemonset_sync import revision_of, rolled_cluster

KEY = controller_key("default", "web")
MS = timedelta(milliseconds=1)


def web(replicas: int = 3, **labels: str) -> ReplicaSet:
    return replicaset("web").selector(labels or {"app": "web"}).replicas(replicas).rv("1").build()


def engine(*objects: Any) -> tuple[Cluster, Controllers]:
    cluster = Cluster()
    controllers = Controllers(cluster.cache)
    controllers.observe([cluster.add(obj) for obj in objects], NOW)
    return cluster, controllers


def results_then_changes(controllers: Controllers, results: list[ActionResult], now: datetime) -> Outcome:
    controllers.results(results, now)
    return controllers.take_changes(Outcome())


def sync(controllers: Controllers, now: datetime = NOW) -> Outcome:
    return controllers.sync_ready(now, format_micro_time(now))


def only(outcome: Outcome) -> Decided:
    assert len(outcome.decisions) == 1, outcome.decisions
    return outcome.decisions[0]


def of_type(actions: list[Action], kind: type[Any]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def status_of(decided: Decided) -> dict[str, Any] | None:
    writes = of_type(decided.actions, UpdateStatus)
    assert len(writes) <= 1
    return msgspec.json.decode(writes[0].status) if writes else None


def result(action: Action, outcome: str, *, key: str | None = None, code: int = 0, reason: str = "",
           message: str = "", subject: str = "", rv: str = "") -> ActionResult:
    return ActionResult(key=key or action.key, action_key=action.key, action=_tag(action), decision_id=1,
                        controller=action.controller, outcome=outcome, code=code, reason=reason, message=message,
                        subject=subject, resource_version=rv, finished_at=format_micro_time(NOW))


def _tag(action: Action) -> str:
    return str(type(action).__struct_config__.tag)


def create_results(create: CreatePods, outcomes: list[tuple[str, int, str, str]]) -> list[ActionResult]:
    """One result per pod of a CreatePods: (outcome, code, reason, message)."""
    return [result(create, outcome, key=p.key, code=code, reason=reason, message=message,
                   subject=f"{create.namespace}/{msgspec.json.decode(p.pod)['metadata']['name']}")
            for p, (outcome, code, reason, message) in zip(create.pods, outcomes, strict=True)]


# --- creating ----------------------------------------------------------------------------------------------

def test_new_replicaset_is_synced_into_create_pods() -> None:
    """A ReplicaSet created in the cache syncs into one CreatePods of N pods and a status write."""
    rs = web(3)
    cluster = Cluster()
    controllers = Controllers(cluster.cache)
    added = cluster.add(rs)
    controllers.observe([added], NOW)
    assert len(controllers.queue) == 1
    outcome = sync(controllers)
    decided = only(outcome)
    assert (decided.controller_key, decided.controller_kind, decided.namespace) == (str(KEY), "ReplicaSet", "default")
    assert decided.trigger == added[2]
    assert decided.correlation_id == f"{KEY}@1~{int(NOW.timestamp() * 1_000_000)}"
    assert [type(a) for a in decided.actions] == [CreatePods, UpdateStatus]
    create = decided.actions[0]
    assert isinstance(create, CreatePods)
    assert (create.key, create.namespace, create.controller, create.component) == (
        f"{decided.correlation_id}/create", "default", str(KEY), "replicaset-controller")
    assert isinstance(create.owner, msgspec.Raw)
    assert msgspec.json.decode(create.owner) == {"kind": "ReplicaSet", "namespace": "default", "name": "web",
                                                 "uid": rs.metadata.uid, "apiVersion": "apps/v1",
                                                 "resourceVersion": "1"}
    assert [p.key for p in create.pods] == [f"{decided.correlation_id}/create/{i}" for i in range(3)]
    bodies = [msgspec.json.decode(p.pod) for p in create.pods]
    for p, body in zip(create.pods, bodies, strict=True):
        meta = body["metadata"]
        assert re.fullmatch(rf"web-[{ALPHABET}]{{5}}", meta["name"])
        assert meta["generateName"] == "web-"
        assert meta["annotations"] == {IDEMPOTENCY_ANNOTATION: p.key}
        assert meta["labels"] == {"app": "web"}
        assert meta["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                            "uid": rs.metadata.uid, "controller": True, "blockOwnerDeletion": True}]
    assert len({b["metadata"]["name"] for b in bodies}) == 3
    assert status_of(decided) == {"replicas": 0, "terminatingReplicas": 0, "observedGeneration": 1}
    assert outcome.expectations == {str(KEY): expect(3, 0, NOW)}
    assert decided.summary["creates"] == 3
    assert len(controllers.queue) == 0
    assert controllers.queue.next_ready_at() is None


def test_failed_create_is_retried_with_backoff_and_reported_in_status() -> None:
    """TestSyncReplicaSetCreateFailures / TestSyncReplicaSetDormancy: a failed batch lowers the expectations,
    the error requeues with backoff, and the next syncs create again and write ReplicaFailure."""
    _, controllers = engine(web(3))
    first = only(sync(controllers))
    create, write = first.actions
    assert isinstance(create, CreatePods) and isinstance(write, UpdateStatus)
    quota = 'pods "web-x" is forbidden: exceeded quota'
    outcome = results_then_changes(controllers, create_results(create, [(FAILED, 403, "Forbidden", quota),
                                                          (SKIPPED, 0, "SlowStartStopped", ""),
                                                          (SKIPPED, 0, "SlowStartStopped", "")]), NOW)
    assert outcome.expectations == {str(KEY): Expectations(0, 0, frozenset(), NOW)}
    assert controllers.errors == {KEY: ManageError(quota, creating=True)}
    assert controllers.queue.failures(KEY) == 1

    assert sync(controllers, NOW + 4 * MS).decisions == []  # the rate limiter's 5 ms
    later = NOW + 5 * MS
    second = only(sync(controllers, later))
    again = of_type(second.actions, CreatePods)
    assert [len(a.pods) for a in again] == [3]
    assert {p.key for p in again[0].pods}.isdisjoint({p.key for p in create.pods})
    assert of_type(second.actions, UpdateStatus) == []  # the first write is still in flight
    assert second.summary["manage_error"] == quota
    assert controllers.errors == {}  # a new round: its own results will tell
    # what syncs report while that round is in flight
    assert controllers.replicasets.reported == {KEY: ManageError(quota, creating=True)}
    assert controllers.queue.failures(KEY) == 1  # a sync with an error is not forgotten

    controllers.results([result(write, SUCCEEDED, rv="2")], later)
    third = only(sync(controllers, later))
    assert of_type(third.actions, CreatePods) == []  # the second batch is expected
    status = status_of(third)
    assert status is not None
    assert status["conditions"] == [{"type": "ReplicaFailure", "status": "True",
                                     "lastTransitionTime": format_time(later), "reason": "FailedCreate",
                                     "message": quota}]
    assert controllers.errors == {}


def test_a_decisions_errors_count_once_in_the_rate_limiter() -> None:
    """processNextWorkItem re-adds a key with the rate limiter once per error syncHandler returns, and a sync
    returns one error however many of its creates failed (slowStartBatch's first) and whether or not its status
    write failed too: the two failed creates of the second batch and the failed status write are one failure."""
    _, controllers = engine(web(3))
    first = only(sync(controllers))
    create, write = first.actions
    assert isinstance(create, CreatePods) and isinstance(write, UpdateStatus)
    quota = (FAILED, 403, "Forbidden", 'pods "web-x" is forbidden: exceeded quota')
    controllers.results(create_results(create, [(SUCCEEDED, 201, "", ""), quota, quota]), NOW)
    controllers.results([result(write, FAILED, code=500, message="failed to update status")], NOW)
    assert controllers.queue.failures(KEY) == 1
    assert controllers.queue.next_ready_at() == NOW + 5 * MS
    # (each decision's error is a failure of its own: see
    # test_a_daemonset_whose_rolling_update_fails_is_retried_with_growing_backoff)


QUOTA = 'pods "web-x" is forbidden: exceeded quota'


def failure_conditions(decided: Decided) -> list[tuple[str, str]]:
    """(reason, message) of the status's conditions this sync computed (None: unchanged, which had none)."""
    status = decided.summary["status"] or {}
    return [(c.get("reason", ""), c["message"]) for c in status.get("conditions", [])]

FAILED_QUOTA = (FAILED, 403, "Forbidden", QUOTA)
STOPPED = (SKIPPED, 0, "SlowStartStopped", "")
CREATED = (SUCCEEDED, 201, "", "")


FAILED_CREATE_QUOTA = [("FailedCreate", QUOTA)]


@pytest.mark.parametrize(
    ("outcomes", "replicas", "error", "conditions", "later"),
    [
        pytest.param([FAILED_QUOTA, STOPPED], 3, QUOTA, FAILED_CREATE_QUOTA, FAILED_CREATE_QUOTA,
                     id="still-short-the-round-error-is-reported"),
        pytest.param([FAILED_QUOTA, STOPPED], 1, None, [], [], id="scaled-to-the-size-it-has-nothing-to-report"),
        pytest.param([FAILED_QUOTA, STOPPED], 0, None, [], [], id="scaled-below-a-create-error-is-no-delete-error"),
        pytest.param([CREATED, FAILED_QUOTA], 3, None, [], FAILED_CREATE_QUOTA,
                     id="skipped-while-a-created-pod-is-expected-reports-nil-until-it-creates-again"),
    ],
)
def test_replica_failure_is_what_this_sync_has_to_report(outcomes: list[tuple[str, int, str, str]], replicas: int,
                                                         error: str | None, conditions: list[tuple[str, str]],
                                                         later: list[tuple[str, str]]) -> None:
    """syncReplicaSet computes manageReplicasErr in every sync: the last round's error stands only for a sync
    that would make calls of the same kind (so its reason, from the diff's sign, is never empty); a sync whose
    manageReplicas has nothing to do (diff 0) or is skipped (expectations unsatisfied) reports nil, and
    calculateStatus removes ReplicaFailure. `later`: the conditions of a sync 12 hours on (an informer's
    resync, the expectations long expired)."""
    rs = web(3)
    cluster, controllers = engine(rs, owned_pod("pod0", rs).ready(NOW).rv("1").build())
    create, write = only(sync(controllers)).actions
    assert isinstance(create, CreatePods) and isinstance(write, UpdateStatus)
    controllers.results([*create_results(create, outcomes), result(write, SUCCEEDED, rv="2")], NOW)
    if replicas != 3:
        controllers.observe([cluster.update(replicaset("web").selector(app="web").replicas(replicas).rv("3")
                                            .uid(rs.metadata.uid).build())], NOW)
    soon = NOW + 5 * MS
    decided = only(sync(controllers, soon))
    assert decided.summary["manage_error"] == error
    assert failure_conditions(decided) == conditions
    controllers.resync_all()
    again = only(sync(controllers, soon + timedelta(hours=12)))
    assert again.summary["manage_error"] == (QUOTA if later else None)
    assert (failure_conditions(again) if again.summary["status"] is not None else conditions) == later


def test_skipped_creates_lower_expectations_without_error() -> None:
    _, controllers = engine(web(2))
    create = of_type(only(sync(controllers)).actions, CreatePods)[0]
    outcome = results_then_changes(controllers, create_results(create, [(SUCCEEDED, 201, "", ""),
                                                          (SKIPPED, 0, "SlowStartStopped", "")]), NOW)
    assert outcome.expectations == {str(KEY): Expectations(1, 0, frozenset(), NOW)}
    assert controllers.errors == {}
    # the last result of the deletes is in: a sync now (no backoff: no error)
    assert controllers.queue.next_ready_at() is None and len(controllers.queue) == 1


def test_namespace_terminating_counts_as_created() -> None:
    """manageReplicas: a create refused because the namespace terminates is no failure and stays expected."""
    _, controllers = engine(web(1))
    create = of_type(only(sync(controllers)).actions, CreatePods)[0]
    terminating = create_results(create, [(FAILED, 403, "NamespaceTerminating", "terminating")])
    outcome = results_then_changes(controllers, terminating, NOW)
    assert outcome.expectations == {}
    assert controllers.expectations[KEY] == expect(1, 0, NOW)
    assert controllers.errors == {}
    assert controllers.queue.next_ready_at() is None


def test_expectations_gate_creates_until_observed_or_expired() -> None:
    """TestSyncReplicaSetDormancy: a sync while creations are pending creates nothing; expiry lifts it."""
    _, controllers = engine(web(2))
    only(sync(controllers))
    controllers.resync_all()
    assert of_type(only(sync(controllers, NOW + timedelta(minutes=5))).actions, CreatePods) == []
    controllers.resync_all()
    late = NOW + timedelta(minutes=5, seconds=1)
    decided = only(sync(controllers, late))
    assert [len(a.pods) for a in of_type(decided.actions, CreatePods)] == [2]
    assert controllers.expectations[KEY] == expect(2, 0, late)


# --- the burst --------------------------------------------------------------------------------------------

def test_burst_replicas() -> None:
    """TestControllerBurstReplicas with burstReplicas 500: 1000 replicas are created 500 at a time, each batch
    waiting for all of the previous one; scaling to 0 deletes 500 at a time, each deletion counted once."""
    rs = web(1000)
    cluster, controllers = engine(rs)
    pods = [owned_pod(f"pod{i:04}", rs, phase=POD_PENDING).rv("1").build() for i in range(1000)]

    for batch in (pods[:500], pods[500:]):
        decided = only(sync(controllers))
        assert [len(a.pods) for a in of_type(decided.actions, CreatePods)] == [500]
        assert controllers.expectations[KEY].adds == 500
        controllers.observe([cluster.add(p) for p in batch[:-1]], NOW)
        assert controllers.expectations[KEY].adds == 1
        assert of_type(only(sync(controllers)).actions, CreatePods) == []  # still waiting for one
        controllers.observe([cluster.add(batch[-1])], NOW)
        assert controllers.expectations[KEY].fulfilled()

    assert of_type(only(sync(controllers)).actions, CreatePods) == []  # 1000 pods: done
    controllers.observe([cluster.update(replicaset("web").selector(app="web").replicas(0).rv("2").uid(
        rs.metadata.uid).build())], NOW)
    for _ in range(2):
        decided = only(sync(controllers))
        deletes = of_type(decided.actions, DeletePod)
        assert len(deletes) == 500
        expected = controllers.expectations[KEY]
        assert (expected.dels, len(expected.deletion_keys)) == (500, 500)
        assert expected.deletion_keys == {f"default/{d.name}" for d in deletes}
        gone = {p.metadata.name: p for p in pods}
        doomed = [gone[d.name] for d in deletes]
        controllers.observe([cluster.delete(p) for p in doomed[1:]], NOW)
        controllers.observe([cluster.update(owned_pod(doomed[0].metadata.name, rs).uid(doomed[0].metadata.uid)
                                            .deleting(NOW).rv("9").build())], NOW)  # graceful: counted now
        assert controllers.expectations[KEY].fulfilled()
        controllers.observe([cluster.delete(doomed[0])], NOW)  # and not again
        assert controllers.expectations[KEY].dels == 0
    assert controllers.cache.in_namespace("Pod", "default") == []
    assert of_type(only(sync(controllers)).actions, DeletePod) == []


# --- deletions ---------------------------------------------------------------------------------------------

def scaled_down() -> tuple[Cluster, Controllers, ReplicaSet, list[Pod]]:
    rs = web(1)
    pods = [owned_pod(f"pod{i}", rs).ready(NOW).build() for i in range(3)]
    cluster, controllers = engine(rs, *pods)
    return cluster, controllers, rs, pods


def test_scale_down_issues_deletes_with_uid_preconditions() -> None:
    _, controllers, _, pods = scaled_down()
    decided = only(sync(controllers))
    deletes = of_type(decided.actions, DeletePod)
    by_name = {p.metadata.name: p for p in pods}
    assert [(d.key, d.namespace, d.uid, d.component) for d in deletes] == [
        (f"{decided.correlation_id}/delete/{by_name[d.name].metadata.uid}", "default", by_name[d.name].metadata.uid,
         "replicaset-controller") for d in deletes]
    assert len(deletes) == 2
    assert controllers.expectations[KEY] == expect(0, 2, NOW, frozenset(f"default/{d.name}" for d in deletes))


def test_failed_delete_is_observed_and_reported() -> None:
    """manageReplicas: a failed delete will never be observed (lowered now) and is the sync's error."""
    _, controllers, _, _ = scaled_down()
    first = only(sync(controllers))
    failed, ok = of_type(first.actions, DeletePod)
    controllers.results([result(failed, FAILED, code=500, message="etcd is sad", subject=f"default/{failed.name}"),
                         result(ok, SUCCEEDED, code=200, subject=f"default/{ok.name}")], NOW)
    expected = controllers.expectations[KEY]
    assert (expected.dels, expected.deletion_keys) == (1, frozenset({f"default/{ok.name}"}))
    assert controllers.errors == {KEY: ManageError("unable to delete pods: etcd is sad", creating=False)}
    assert controllers.queue.next_ready_at() == NOW + 5 * MS


def test_the_last_result_of_failed_creates_requeues_a_controller_no_backoff_holds() -> None:
    """The failed result's backoff may fire before the skipped results of the same action are in
    (that sync cannot act: creations still expected, and keeps the error); the last result then
    queues the ReplicaSet, whose expectations the results alone have met."""
    _, controllers = engine(web(3))
    create = of_type(only(sync(controllers)).actions, CreatePods)[0]
    results = create_results(create, [(FAILED, 409, "AlreadyExists", "taken")] + [(SKIPPED, 0, "", "")] * 2)
    controllers.results(results[:1], NOW)
    later = NOW + timedelta(seconds=1)
    waiting = only(sync(controllers, later))  # the backoff fired; two results still to come
    assert not of_type(waiting.actions, CreatePods)
    assert controllers.errors == {KEY: ManageError("taken", creating=True)}
    controllers.results(results[1:], later)
    retry = only(sync(controllers, later))
    assert len(of_type(retry.actions, CreatePods)[0].pods) == 3
    assert retry.summary["manage_error"] == "taken"


def test_delete_of_a_pod_already_gone_is_observed_without_error() -> None:
    """manageReplicas: DeletePod answered NotFound lowers the expectation (DeletionObserved) and is no error."""
    _, controllers, _, _ = scaled_down()
    first = only(sync(controllers))
    gone, ok = of_type(first.actions, DeletePod)
    controllers.results([result(gone, SUCCEEDED, code=404, reason="NotFound", subject=f"default/{gone.name}"),
                         result(ok, SUCCEEDED, code=200, subject=f"default/{ok.name}")], NOW)
    expected = controllers.expectations[KEY]
    assert (expected.dels, expected.deletion_keys) == (1, frozenset({f"default/{ok.name}"}))
    assert controllers.errors == {}
    # the last result of the deletes is in: a sync now (no backoff: no error)
    assert controllers.queue.next_ready_at() is None and len(controllers.queue) == 1


# --- the ReplicaSet's lifecycle ----------------------------------------------------------------------------

def test_delete_controller_and_expectations() -> None:
    """TestDeleteControllerAndExpectations: deleting the ReplicaSet drops its expectations; its sync is a no-op."""
    rs = web(1)
    cluster, controllers = engine(rs)
    only(sync(controllers))
    assert not controllers.expectations[KEY].fulfilled()
    controllers.observe([cluster.delete(rs)], NOW)
    assert KEY not in controllers.expectations
    assert controllers.take_changes(Outcome()).expectations_deleted == {str(KEY)}
    decided = only(sync(controllers))
    assert decided.actions == []
    assert decided.summary == {"reason": "deleted: expectations dropped"}
    # a late creation of its pod has nobody to lower
    controllers.observe([cluster.add(owned_pod("late", rs).build())], NOW)
    assert KEY not in controllers.expectations
    assert sync(controllers).decisions == []


def test_expectations_on_recreate() -> None:
    """TestExpectationsOnRecreate: a ReplicaSet re-created under the same name starts with fresh expectations."""
    old = web(1)
    cluster, controllers = engine(old)
    only(sync(controllers))
    assert controllers.expectations[KEY] == expect(1, 0, NOW)
    controllers.observe([cluster.delete(old)], NOW)
    assert KEY not in controllers.expectations
    assert only(sync(controllers)).actions == []
    new = replicaset("web").selector(app="web").replicas(1).uid("new-uid").rv("5").build()
    later = NOW + timedelta(seconds=1)
    controllers.observe([cluster.add(new)], later)
    decided = only(sync(controllers, later))
    create = of_type(decided.actions, CreatePods)
    assert [len(c.pods) for c in create] == [1]
    assert msgspec.json.decode(create[0].pods[0].pod)["metadata"]["ownerReferences"][0]["uid"] == "new-uid"
    assert controllers.expectations[KEY] == expect(1, 0, later)


def test_rs_sync_expectations() -> None:
    """TestRSSyncExpectations: the expectations and the pods a sync counts come from one state. A creation
    observed in the batch before the sync both satisfies the expectations and is counted: nothing is created."""
    rs = web(2)
    cluster, controllers = engine(rs, owned_pod("pod0", rs).build())
    controllers.queue.pop_ready(NOW)
    controllers.expectations[KEY] = expect(1, 0, NOW)
    controllers.observe([cluster.add(owned_pod("pod1", rs).build())], NOW)
    decided = only(sync(controllers))
    assert of_type(decided.actions, CreatePods) == []
    assert decided.summary["needs_sync"] is True
    assert (decided.summary["active"], decided.summary["diff"]) == (2, 0)


def test_replicaset_being_deleted_only_writes_status() -> None:
    """TestDoNotAdoptOrCreateIfBeingDeleted through the engine: no patch, no create."""
    rs = replicaset("web").selector(app="web").replicas(2).deleting(NOW).build()
    _, controllers = engine(rs, orphan_pod("pod1", rs).build())
    assert [type(a) for a in only(sync(controllers)).actions] == [UpdateStatus]


# --- status writes -----------------------------------------------------------------------------------------

def test_status_write_is_not_repeated_while_in_flight() -> None:
    rs = web(1)
    running = owned_pod("pod0", rs).ready(NOW).rv("1").build()
    cluster, controllers = engine(rs, running)
    first = only(sync(controllers))
    write = of_type(first.actions, UpdateStatus)[0]
    assert status_of(first) == {"replicas": 1, "fullyLabeledReplicas": 1, "readyReplicas": 1,
                                "availableReplicas": 1, "terminatingReplicas": 0, "observedGeneration": 1}

    controllers.observe([cluster.update(owned_pod("pod0", rs).not_ready(NOW).rv("2").build())], NOW)
    second = only(sync(controllers))
    assert second.actions == []
    assert second.summary["status_written"] is False
    assert second.summary["status"] == {"replicas": 1, "fullyLabeledReplicas": 1, "terminatingReplicas": 0,
                                      "observedGeneration": 1}

    stale = msgspec.structs.replace(result(write, SUCCEEDED, rv="3"), action_key="an-older-decision/status")
    controllers.results([stale], NOW)  # not the write in flight: ignored
    assert controllers.status_in_flight[KEY][0] == write.key
    assert len(controllers.queue) == 0
    controllers.results([result(write, SUCCEEDED, rv="3")], NOW)
    assert controllers.status_in_flight == {}
    assert controllers.written[KEY][0] == 3
    third = only(sync(controllers))
    assert status_of(third) == {"replicas": 1, "fullyLabeledReplicas": 1, "terminatingReplicas": 0,
                                "observedGeneration": 1}
    controllers.results([result(of_type(third.actions, UpdateStatus)[0], SUCCEEDED, rv="4")], NOW)

    # the watch has not shown the writes yet (the cached ReplicaSet is at resourceVersion 1): no third write
    assert only(sync(controllers)).actions == []


def test_failed_status_write_is_requeued() -> None:
    """TestControllerUpdateRequeue: a status update that fails requeues the ReplicaSet with backoff."""
    _, controllers = engine(web(0))
    write = of_type(only(sync(controllers)).actions, UpdateStatus)[0]
    controllers.results([result(write, FAILED, code=500, message="failed to update status")], NOW)
    assert len(controllers.queue) == 0
    assert controllers.queue.next_ready_at() == NOW + 5 * MS
    assert controllers.status_in_flight == {}
    again = only(sync(controllers, NOW + 5 * MS))
    assert [type(a) for a in again.actions] == [UpdateStatus]


# --- claims ------------------------------------------------------------------------------------------------

def test_adoption_and_release_patches() -> None:
    """ClaimPods through the engine: upstream's patch bytes, and the adoption's fresh owner check (canAdopt)."""
    rs = web(2)
    orphan = orphan_pod("orphan", rs).build()
    relabelled = pod("relabelled").labels(app="other").owned_by(rs).build()
    _, controllers = engine(rs, orphan, relabelled)
    decided = only(sync(controllers))
    adopt, release = of_type(decided.actions, PatchPod)
    r, o, x = rs.metadata.uid, orphan.metadata.uid, relabelled.metadata.uid
    assert (adopt.key, adopt.name, adopt.uid, adopt.patch_type) == (
        f"{decided.correlation_id}/adopt/{o}", "orphan", o, "strategic")
    assert bytes(adopt.patch) == adopt_patch(rs.metadata, "apps/v1", "ReplicaSet", o) == (
        '{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web",'
        f'"uid":"{r}","controller":true,"blockOwnerDeletion":true}}],"uid":"{o}"}}}}').encode()
    assert adopt.owner_check == OwnerCheck(kind="ReplicaSet", name="web", uid=r)
    assert (release.key, release.name, release.owner_check) == (
        f"{decided.correlation_id}/release/{x}", "relabelled", None)
    assert bytes(release.patch) == release_patch(r, x) == (
        f'{{"metadata":{{"uid":"{x}","ownerReferences":[{{"$patch":"delete","uid":"{r}"}}]}}}}').encode()
    assert [len(c.pods) for c in of_type(decided.actions, CreatePods)] == [1]  # the orphan counts, the other not


@pytest.mark.parametrize(
    ("code", "requeued"),
    [pytest.param(404, False, id="pod-gone"), pytest.param(422, True, id="another-controller-first"),
     pytest.param(409, True, id="conflict"), pytest.param(0, True, id="owner-check-refused")],
)
def test_failed_patch_requeues(code: int, requeued: bool) -> None:
    """TestPatchPodFails and ClaimObject: an adoption that failed is tried again later (someone else
    claimed the pod first: kube-apiserver refuses a second controller with 422); a pod gone is not."""
    rs = web(1)
    _, controllers = engine(rs, orphan_pod("orphan", rs).build())
    patch = of_type(only(sync(controllers)).actions, PatchPod)[0]
    controllers.results([result(patch, FAILED, code=code, message="nope")], NOW)
    assert (controllers.queue.next_ready_at() == NOW + 5 * MS) is requeued
    assert controllers.errors == {}


@pytest.mark.parametrize("namespace", [pytest.param("default", id="default"), pytest.param("adopt", id="adopt")])
def test_a_failed_release_is_not_retried(namespace: str) -> None:
    """ReleasePod ignores a pod gone or no longer ours (422), in a namespace of any name: a release is told from
    an adoption by its action key's step, not by the word "adopt" anywhere in the key."""
    rs = replicaset("web").ns(namespace).selector(app="web").replicas(1).rv("1").build()
    relabelled = pod("relabelled").ns(namespace).labels(app="other").owned_by(rs).build()
    _, controllers = engine(rs, relabelled)
    (release,) = of_type(only(sync(controllers)).actions, PatchPod)
    assert release.key.endswith(f"/release/{relabelled.metadata.uid}")
    controllers.results([result(release, FAILED, code=422, message="not ours")], NOW)
    assert controllers.queue.next_ready_at() is None and len(controllers.queue) == 0


def test_claimed_orphans_to_delete_are_adopted_by_their_delete() -> None:
    """Upstream adopts during the claim, before manageReplicas deletes: a claimed orphan that the same sync
    deletes is adopted by the DeletePod itself (adopt_first), never deleted while still an orphan."""
    rs = web(1)
    orphans = [orphan_pod(f"orphan-{i}", rs).build() for i in range(3)]
    _, controllers = engine(rs, *orphans)
    decided = only(sync(controllers))
    deletes = of_type(decided.actions, DeletePod)
    (adopt,) = of_type(decided.actions, PatchPod)  # the one kept is adopted on its own
    assert len(deletes) == 2 and adopt.name not in {d.name for d in deletes}
    for delete in deletes:
        assert delete.adopt_first == Adoption(
            owner_check=OwnerCheck(kind="ReplicaSet", name="web", uid=rs.metadata.uid), patch_type="strategic",
            patch=msgspec.Raw(adopt_patch(rs.metadata, "apps/v1", "ReplicaSet", delete.uid)))


@pytest.mark.parametrize(("code", "backoff"), [pytest.param(422, True, id="another-controller"),
                                                pytest.param(0, True, id="owner-check-refused"),
                                                pytest.param(404, False, id="pod-gone")])
def test_a_delete_whose_adoption_failed_lowers_the_expectation_and_retries_the_claim(code: int,
                                                                                      backoff: bool) -> None:
    """The pod was not ours, so it was not deleted: the deletion will never be observed (lowered now); no
    manage error (upstream's sync stopped at the claim); the sync is retried with the rate limiter, as a
    claim error is (a pod found gone is no error)."""
    rs = web(1)
    _, controllers = engine(rs, *[orphan_pod(f"orphan-{i}", rs).build() for i in range(2)])
    (delete,) = of_type(only(sync(controllers)).actions, DeletePod)
    controllers.results([result(delete, SKIPPED, code=code, reason=NOT_ADOPTED, message="not adopted",
                                subject=f"default/{delete.name}")], NOW)
    expected = controllers.expectations[KEY]
    assert (expected.dels, expected.deletion_keys) == (0, frozenset())
    assert controllers.errors == {}
    if backoff:
        assert controllers.queue.next_ready_at() == NOW + 5 * MS
    else:
        assert controllers.queue.next_ready_at() is None and len(controllers.queue) == 1


@pytest.mark.parametrize(("code", "requeued"), [(404, False), (422, False), (409, True)])
def test_failed_release_requeues_unless_the_pod_is_gone_or_no_longer_ours(code: int, requeued: bool) -> None:
    """ReleasePod ignores NotFound and Invalid (the pod has no owner reference of ours any more)."""
    rs = web(1)
    relabelled = pod("relabelled").labels(app="other").owned_by(rs).build()
    _, controllers = engine(rs, orphan_pod("kept", rs).owned_by(rs).build(), relabelled)
    (release,) = of_type(only(sync(controllers)).actions, PatchPod)
    assert "/release/" in release.key
    controllers.results([result(release, FAILED, code=code, message="nope")], NOW)
    assert (controllers.queue.next_ready_at() == NOW + 5 * MS) is requeued


# --- requeues and wake-ups -----------------------------------------------------------------------------------

def test_min_ready_seconds_requeue() -> None:
    """A pod Ready 10 s ago with minReadySeconds 30: the ReplicaSet looks again in 20 s."""
    rs = replicaset("web").selector(app="web").replicas(1).min_ready_seconds(30).build()
    _, controllers = engine(rs, owned_pod("pod0", rs).ready(NOW - timedelta(seconds=10)).build())
    only(sync(controllers))
    assert controllers.queue.next_ready_at() == NOW + timedelta(seconds=20)


def test_pod_turning_ready_wakes_the_replicaset_after_min_ready_seconds() -> None:
    rs = replicaset("web").selector(app="web").replicas(1).min_ready_seconds(30).build()
    cluster, controllers = engine(rs, owned_pod("pod0", rs).not_ready(NOW).rv("1").build())
    sync(controllers)
    controllers.queue = type(controllers.queue)()
    controllers.observe([cluster.update(owned_pod("pod0", rs).ready(NOW).rv("2").build())], NOW)
    assert controllers.queue.pop_ready(NOW) == [KEY]
    assert controllers.queue.next_ready_at() == NOW + timedelta(seconds=31)


def test_replayed_changes_only_observe_expectations() -> None:
    """A change the cache already reflected (a restart's replay) lowers expectations and wakes nobody."""
    rs = web(1)
    cluster, controllers = engine(rs)
    controllers.queue.pop_ready(NOW)
    controllers.take_changes(Outcome())
    controllers.expectations[KEY] = expect(1, 0, NOW)
    created = owned_pod("pod0", rs).build()
    _, seq, _ = cluster.add(created)
    replayed = cluster.apply(created, "ADDED", seq=seq)
    assert replayed[0].replayed
    controllers.observe([replayed], NOW)
    assert controllers.expectations[KEY].fulfilled()
    assert len(controllers.queue) == 0
    assert controllers.take_changes(Outcome()).expectations == {str(KEY): Expectations(0, 0, frozenset(), NOW)}
    replayed_rs = cluster.apply(rs, "MODIFIED", seq=1)
    controllers.observe([replayed_rs], NOW)
    assert len(controllers.queue) == 0


def test_a_namespace_annotated_for_the_removed_stand_in_creates_nothing() -> None:
    """Namespaces are not read: a Namespace event an older ingest published with the stand-in's annotation
    changes no cache and syncs nothing, nor does a stand-in's result still on the bus."""
    cluster, controllers = engine()
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "demo", "uid": "uid-demo", "resourceVersion": "7", "annotations": {"kubus.io/stand-in-pods": "3"}}}
    event = ObservedEvent(kind="Namespace", type=ADDED, name="demo", uid="uid-demo", resource_version="7",
                          observed_at="2026-03-15T12:00:00.000000Z", ingest="test",
                          object=msgspec.Raw(msgspec.json.encode(body)))
    assert cluster.cache.apply(event, 1) is None
    controllers.resync_all()
    controllers.results([ActionResult(key="StandIn/demo/1/0", action_key="StandIn/demo@1/create", action="create_pods",
                                      decision_id=1, controller="StandIn/demo", outcome=FAILED, code=500,
                                      finished_at=format_micro_time(NOW))], NOW)
    outcome = sync(controllers, NOW + timedelta(minutes=5))
    assert outcome.decisions == [] and outcome.expectations == {}


def test_resync_all_enqueues_every_replicaset() -> None:
    _, controllers = engine(replicaset("b").build(), replicaset("a").ns("z").build(), replicaset("a").build())
    controllers.queue.pop_ready(NOW)
    controllers.resync_all()
    assert controllers.queue.pop_ready(NOW) == [controller_key("default", "a"), controller_key("default", "b"),
                                                controller_key("z", "a")]


def test_a_clean_sync_forgets_the_backoff() -> None:
    _, controllers = engine(web(1))
    create, write = only(sync(controllers)).actions
    assert isinstance(create, CreatePods) and isinstance(write, UpdateStatus)
    controllers.results([*create_results(create, [(FAILED, 500, "InternalError", "boom")]),
                         result(write, SUCCEEDED, rv="2")], NOW)
    controllers.queue.pop_ready(NOW)  # the status write's requeue, not the backoff's
    errored = only(sync(controllers, NOW + 5 * MS))  # carries the error: the backoff stays
    assert errored.summary["manage_error"] == "boom"
    assert controllers.errors == {}
    assert controllers.queue.failures(KEY) == 1
    retried = of_type(errored.actions, CreatePods)[0]
    controllers.results(create_results(retried, [(SUCCEEDED, 201, "", "")]), NOW + 6 * MS)  # the round went well
    only(sync(controllers, NOW + 10 * MS))
    assert controllers.queue.failures(KEY) == 0


def test_invalid_selector_is_a_warning_event_only() -> None:
    selector = LabelSelector(match_expressions=[LabelSelectorRequirement(key="app", operator="Bogus")])
    rs = replicaset("web").raw_selector(selector).replicas(2).build()
    _, controllers = engine(rs)
    decided = only(sync(controllers))
    assert [type(a) for a in decided.actions] == [RecordEvent]
    event = decided.actions[0]
    assert isinstance(event, RecordEvent)
    assert (event.type, event.reason, event.component) == ("Warning", "InvalidSelector", "replicaset-controller")
    assert event.message.startswith("invalid selector: spec.selector.matchExpressions[0].operator")
    assert decided.summary["field"] == "spec.selector"
    assert decided.summary["error"] == event.message
    assert KEY not in controllers.expectations


def test_recreated_replicaset_seen_before_the_old_ones_tombstone() -> None:
    """updateRS with a new UID: a relist publishes the re-created ReplicaSet before the old one's tombstone.
    The old one's expectations go when the new one appears (upstream's informer sees one key change UID),
    and the late tombstone must not drop the new one's, or its next sync would create twice."""
    old = web(1)
    cluster, controllers = engine(old)
    only(sync(controllers))
    assert controllers.expectations[KEY] == expect(1, 0, NOW)  # never observed: the old one was deleted

    later = NOW + timedelta(seconds=1)
    new = replicaset("web").selector(app="web").replicas(1).uid("new-uid").rv("5").build()
    controllers.observe([cluster.add(new)], later)
    first = only(sync(controllers, later))
    assert [len(c.pods) for c in of_type(first.actions, CreatePods)] == [1]  # not blocked by the old one
    assert controllers.expectations[KEY] == expect(1, 0, later)

    controllers.observe([cluster.delete(old, "DELETED_FINAL_STATE_UNKNOWN")], later)
    assert controllers.expectations[KEY] == expect(1, 0, later)
    assert of_type(only(sync(controllers, later)).actions, CreatePods) == []


def test_syncs_that_can_only_refresh_status_are_spaced_while_a_round_is_observed() -> None:
    """With a status-only interval, a ReplicaSet waiting for its creates to be observed syncs at most
    once per interval; the sync that can act again (expectations met) is never held back."""
    cluster = Cluster()
    controllers = Controllers(cluster.cache, status_only_interval=timedelta(milliseconds=250))
    rs = web(2)
    controllers.observe([cluster.add(rs)], NOW)
    create = of_type(only(sync(controllers)).actions, CreatePods)[0]
    bodies = [msgspec.json.decode(p.pod) for p in create.pods]
    first = owned_pod(bodies[0]["metadata"]["name"], rs).build()
    controllers.observe([cluster.add(first)], NOW + 10 * MS)
    assert sync(controllers, NOW + 10 * MS).decisions == []  # one creation still expected: held back
    assert controllers.next_ready_at() == NOW + 250 * MS
    second = owned_pod(bodies[1]["metadata"]["name"], rs).build()
    controllers.observe([cluster.add(second)], NOW + 20 * MS)
    acted = only(sync(controllers, NOW + 20 * MS))  # expectations met: synced at once
    assert acted.summary["active"] == 2


def test_a_held_back_key_keeps_a_later_requeue() -> None:
    """Holding a key back while its round is observed must not swallow a later delayed re-add (a pod's
    minReadySeconds + 1 s): the queue keeps only a key's earliest re-add, so holds live beside it."""
    cluster = Cluster()
    controllers = Controllers(cluster.cache, status_only_interval=timedelta(milliseconds=250))
    rs = web(2)
    controllers.observe([cluster.add(rs)], NOW)
    create = of_type(only(sync(controllers)).actions, CreatePods)[0]
    first = owned_pod(msgspec.json.decode(create.pods[0].pod)["metadata"]["name"], rs).build()
    controllers.observe([cluster.add(first)], NOW + 10 * MS)
    assert sync(controllers, NOW + 10 * MS).decisions == []  # held back until +250 ms
    key = controller_key("default", "web")
    controllers.queue.add_after(key, timedelta(seconds=3), NOW + 20 * MS)  # as the Ready re-check asks
    assert only(sync(controllers, NOW + 250 * MS)).controller_key == str(key)  # the held sync runs
    assert sync(controllers, NOW + timedelta(seconds=1)).decisions == []
    assert controllers.next_ready_at() == NOW + 20 * MS + timedelta(seconds=3)
    assert only(sync(controllers, NOW + 20 * MS + timedelta(seconds=3))).controller_key == str(key)


def test_the_failed_pods_backoff_is_collected_once_a_minute() -> None:
    """BackoffGCInterval: entries idle for more than twice the 15-minute maximum go, checked every minute."""
    controllers = Controllers(Cluster().cache, backoff={
        "old": FailedPodBackoff(key="old", delay_seconds=1.0, last_update=NOW - timedelta(minutes=31)),
        "recent": FailedPodBackoff(key="recent", delay_seconds=8.0, last_update=NOW - timedelta(minutes=29))})
    assert controllers.collect_backoff(NOW) is True
    assert list(controllers.backoff) == ["recent"]
    assert controllers.collect_backoff(NOW + timedelta(seconds=30)) is False  # not due: within the minute
    assert list(controllers.backoff) == ["recent"]
    assert controllers.collect_backoff(NOW + timedelta(minutes=2)) is True  # due, and "recent" is 31 min idle
    assert controllers.backoff == {}


def test_a_daemonset_whose_rolling_update_fails_is_retried_with_growing_backoff() -> None:
    """processNextWorkItem: syncDaemonSet's error (here a maxUnavailable that cannot be scaled) re-adds
    the key with the rate limiter, so each retry waits longer, and the status is still written."""
    cluster, _, _ = rolled_cluster(daemonset("foo").uid("ds-uid").rolling_update(max_unavailable="abc"))
    controllers = Controllers(cluster.cache)
    key = ds_controller_key("default", "foo")
    controllers.queue.add(key)
    now = NOW
    for failures in (1, 2, 3):
        decided = only(sync(controllers, now))
        assert decided.summary["warnings"][0]["field"] == "spec.updateStrategy.rollingUpdate.maxUnavailable"
        assert (decided.summary["deletes"], controllers.queue.failures(key)) == ([], failures)
        assert decided.summary["status_written"] == (failures == 1)  # then in flight: one write at a time
        assert sync(controllers, now).decisions == []  # not before its backoff has passed
        now += timedelta(seconds=1)


def test_a_revision_reported_created_is_not_posted_again_before_the_cache_shows_it() -> None:
    """The executor reported the new revision created; until its watch event arrives, a sync (here woken by
    the result itself) would find no revision and POST it again (409 AlreadyExists): the DaemonSet waits
    for the cache instead, and carries on once the revision is seen."""
    ds = daemonset("foo").uid("ds-uid").build()
    cluster = Cluster(*[node(n).ready().build() for n in ("node-0", "node-1")], ds)
    controllers = Controllers(cluster.cache)
    key = ds_controller_key("default", "foo")
    controllers.queue.add(key)
    first = only(sync(controllers))
    (create,) = of_type(first.actions, CreateControllerRevision)
    name = msgspec.json.decode(create.revision)["metadata"]["name"]
    controllers.results([result(create, SUCCEEDED, code=201, subject=f"default/{name}", rv="7")], NOW)
    assert sync(controllers).decisions == []  # not before the revision is seen
    revision = revision_of(ds)
    revision.metadata.resource_version = "7"
    controllers.observe([cluster.add(revision)], NOW)
    later = only(sync(controllers))
    assert not of_type(later.actions, CreateControllerRevision)
    assert len(of_type(later.actions, CreatePods)) == 1  # the pods of the revision now in the cache


def test_a_revision_write_never_seen_is_waited_for_a_bounded_time() -> None:
    ds = daemonset("foo").uid("ds-uid").build()
    cluster = Cluster(node("node-0").ready().build(), ds)
    controllers = Controllers(cluster.cache)
    key = ds_controller_key("default", "foo")
    controllers.queue.add(key)
    (create,) = of_type(only(sync(controllers)).actions, CreateControllerRevision)
    name = msgspec.json.decode(create.revision)["metadata"]["name"]
    controllers.results([result(create, SUCCEEDED, code=201, subject=f"default/{name}", rv="7")], NOW)
    assert sync(controllers).decisions == []
    assert controllers.next_ready_at() == NOW + REVISION_WRITE_WAIT
    retried = only(sync(controllers, NOW + REVISION_WRITE_WAIT))  # given up waiting: synced as upstream would
    assert of_type(retried.actions, CreateControllerRevision)


def test_with_the_terminating_replicas_gate_off_the_status_leaves_the_field_out() -> None:
    """DeploymentReplicaSetTerminatingReplicas=false (an API server older than 1.33 has no such field): the same sync
    as test_new_replicaset_is_synced_into_create_pods writes no terminatingReplicas."""
    cluster = Cluster()
    controllers = Controllers(cluster.cache, settings=Settings(
        feature_gates=FeatureGates(deployment_replica_set_terminating_replicas=False)))
    controllers.observe([cluster.add(web(3))], NOW)
    assert status_of(only(sync(controllers))) == {"replicas": 0, "observedGeneration": 1}
