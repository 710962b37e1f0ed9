"""Status writes as upstream's controllers make them, from the action the reconciler issues to the sim.

updateReplicaSetStatus (pkg/controller/replicaset/replica_set_utils.go) and storeDaemonSetStatus
(pkg/controller/daemon/daemon_controller.go) PUT /status of the informer's copy, at its
resourceVersion, with no GET first; after an error they GET the object and PUT once more
(statusUpdateRetries = 1): the ReplicaSet with the whole new status, the DaemonSet with only its seven
counts and (updateObservedGen) observedGeneration, so a collisionCount or conditions written since stay.
Requests are counted with the executor's own metrics.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import msgspec
import pytest

from kube import codec
from kube.apps import DaemonSet, ReplicaSet, ReplicaSetCondition, ReplicaSetStatus
from messages.actions import FAILED, SUCCEEDED, UpdateStatus
from messages.keys import ControllerKey, ControllerKind
from reconciler.core.daemonset import actions as daemonset_actions
from reconciler.core.daemonset.sync import DaemonSetPlan
from reconciler.core.replicaset import actions as replicaset_actions
from reconciler.core.replicaset.sync import Plan
from runtime.bus import Bus
from tests.executor.builders import envelope, raw
from tests.executor.conftest import Running, publish, results_for
from tests.simulation import SimProcess

Start = Callable[..., AbstractAsyncContextManager[Running]]
ISSUED = "2025-06-01T10:00:00Z"
FAILURE = ReplicaSetCondition(type="ReplicaFailure", status="True", last_transition_time="2025-06-01T10:00:00Z",
                              reason="FailedCreate", message='pods "web-x" is forbidden: exceeded quota')


async def _call(sim: SimProcess, method: str, path: str, body: Any = None) -> Any:
    code, got = await asyncio.to_thread(sim.request, method, path, body)
    assert 200 <= code < 300, (code, got)
    return got


def _path(namespace: str, kind: str, name: str = "web") -> str:
    return f"/apis/apps/v1/namespaces/{namespace}/{kind.lower()}s/{name}"


def _workload(kind: str) -> dict[str, Any]:
    labels = {"app": "web"}
    container = {"name": "app", "image": "registry.k8s.io/pause:3.9"}
    spec: dict[str, Any] = {"selector": {"matchLabels": labels},
                            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}
    if kind == "ReplicaSet":
        spec["replicas"] = 0
    return {"apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": "web", "labels": {"tier": "frontend"}, "annotations": {"team": "blue"},
                         "finalizers": ["example.com/audit"]},
            "spec": spec}


async def _created(sim: SimProcess, namespace: str, kind: str) -> dict[str, Any]:
    path = _path(namespace, kind).rsplit("/", 1)[0]
    created: dict[str, Any] = await _call(sim, "POST", path, _workload(kind))
    return created


def _rs_write(obj: dict[str, Any], status: ReplicaSetStatus) -> UpdateStatus:
    """The UpdateStatus a ReplicaSet sync of `obj` (as the cache holds it) issues for `status`."""
    rs = codec.decode(json.dumps(obj), ReplicaSet)
    plan = Plan(key=ControllerKey(ControllerKind.REPLICA_SET, rs.metadata.namespace, "web"), rs=rs, status=status)
    [write] = replicaset_actions.plan_actions(plan, "c1", ISSUED, write_status=True).actions
    assert isinstance(write, UpdateStatus)
    return write


def _ds_write(obj: dict[str, Any], *, managed: bool = True) -> UpdateStatus:
    """The UpdateStatus a DaemonSet sync of `obj` issues: its status with the counts of 2 nodes, 1 available;
    observedGeneration raised when the sync got past its expectations (`managed`)."""
    ds = codec.decode(json.dumps(obj), DaemonSet)
    status = msgspec.structs.replace(
        ds.status, desired_number_scheduled=2, current_number_scheduled=2, number_ready=1,
        updated_number_scheduled=2, number_available=1, number_unavailable=1,
        observed_generation=ds.metadata.generation if managed else ds.status.observed_generation)
    plan = DaemonSetPlan(key=ControllerKey(ControllerKind.DAEMON_SET, ds.metadata.namespace, "web"), ds=ds,
                         status=status, managed=managed)
    [write] = daemonset_actions.plan_actions(plan, "c1", ISSUED, write_status=True).actions
    assert isinstance(write, UpdateStatus)
    return write


DS_COUNTS = {"desiredNumberScheduled": 2, "currentNumberScheduled": 2, "numberMisscheduled": 0, "numberReady": 1,
             "updatedNumberScheduled": 2, "numberAvailable": 1, "numberUnavailable": 1}


def test_the_reconciler_issues_the_synced_object_with_its_write() -> None:
    """resourceVersion and metadata of the synced copy; the DaemonSet's fields for a fresh read."""
    rs_obj = {**_workload("ReplicaSet"), "metadata": {**_workload("ReplicaSet")["metadata"], "namespace": "ns",
                                                     "uid": "u-rs", "resourceVersion": "41", "generation": 3}}
    write = _rs_write(rs_obj, ReplicaSetStatus(observed_generation=3, conditions=[FAILURE]))
    assert (write.resource_version, write.uid, write.status_fields) == ("41", "u-rs", ())
    assert isinstance(write.metadata, msgspec.Raw)
    assert msgspec.json.decode(write.metadata) == rs_obj["metadata"]
    assert msgspec.json.decode(write.status)["conditions"][0]["reason"] == "FailedCreate"

    ds_obj = {**_workload("DaemonSet"), "metadata": {"name": "web", "namespace": "ns", "uid": "u-ds",
                                                    "resourceVersion": "42", "generation": 2}}
    assert _ds_write(ds_obj).status_fields == (*DS_COUNTS, "observedGeneration")
    assert _ds_write(ds_obj, managed=False).status_fields == tuple(DS_COUNTS)
    assert _ds_write(ds_obj).resource_version == "42"


@pytest.mark.parametrize("kind", ["ReplicaSet", "DaemonSet"])
async def test_the_first_write_is_one_put_and_no_get(bus: Bus, sim: SimProcess, namespace: str, executor: Start,
                                                    kind: str) -> None:
    """The synced copy is PUT as it is: nothing but the status changes (labels, annotations, finalizers,
    spec and generation stay), and no GET is made."""
    obj = await _created(sim, namespace, kind)
    if kind == "ReplicaSet":
        write = _rs_write(obj, ReplicaSetStatus(observed_generation=1, conditions=[FAILURE]))
        want = {"replicas": 0, "observedGeneration": 1, "conditions": [codec.to_builtins(FAILURE)]}
    else:
        write = _ds_write(obj)
        want = {**DS_COUNTS, "observedGeneration": 1}
    async with executor() as running:
        await publish(bus, write)
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert requests == {"PUT": {"200": 1}}
    assert (result.outcome, result.code, result.object_uid) == (SUCCEEDED, 200, obj["metadata"]["uid"])
    got = await _call(sim, "GET", _path(namespace, kind))
    assert got["status"] == want
    assert got["spec"] == obj["spec"]
    assert {k: v for k, v in got["metadata"].items() if k != "resourceVersion"} == \
        {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    assert result.resource_version == got["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]


async def test_a_conflict_reads_fresh_and_writes_the_replicaset_status_as_computed(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start) -> None:
    """The cache is behind (another writer moved the resourceVersion and set a condition): 409, one GET,
    one PUT of the whole computed status, conditions as computed."""
    obj = await _created(sim, namespace, "ReplicaSet")
    write = _rs_write(obj, ReplicaSetStatus(observed_generation=1, conditions=[FAILURE]))
    other = {"type": "Other", "status": "True", "reason": "SomeoneElse", "message": "m",
             "lastTransitionTime": "2025-06-01T09:00:00Z"}
    await _call(sim, "PUT", f"{_path(namespace, 'ReplicaSet')}/status",
                {**obj, "status": {"replicas": 0, "conditions": [other]}})
    async with executor() as running:
        await publish(bus, write)
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.code) == (SUCCEEDED, 200)
    assert requests == {"PUT": {"409": 1, "200": 1}, "GET": {"200": 1}}
    got = await _call(sim, "GET", _path(namespace, "ReplicaSet"))
    assert got["status"] == {"replicas": 0, "observedGeneration": 1, "conditions": [codec.to_builtins(FAILURE)]}
    assert got["metadata"]["labels"] == {"tier": "frontend"}


@pytest.mark.parametrize(("managed", "observed"), [
    pytest.param(True, 1, id="observed-generation-raised-to-the-synced-generation"),
    pytest.param(False, 2, id="observed-generation-left-as-the-server-has-it"),
])
async def test_a_daemonset_write_after_a_conflict_keeps_what_it_does_not_count(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, managed: bool, observed: int) -> None:
    """Since the sync, the spec moved to generation 2 and another writer set collisionCount, a condition and
    observedGeneration 2: the retry sets the seven counts (and observedGeneration only with updateObservedGen,
    to the synced generation, as upstream) on the fresh read; collisionCount and conditions stay the server's."""
    obj = await _created(sim, namespace, "DaemonSet")
    write = _ds_write(obj, managed=managed)
    path = _path(namespace, "DaemonSet")
    changed = {**obj, "spec": {**obj["spec"], "minReadySeconds": 5}}
    moved = await _call(sim, "PUT", path, changed)
    assert moved["metadata"]["generation"] == 2
    condition = {"type": "Paused", "status": "True", "reason": "Manual", "message": "m",
                 "lastTransitionTime": "2025-06-01T09:00:00Z"}
    await _call(sim, "PUT", f"{path}/status", {**moved, "status": {
        **moved["status"], "collisionCount": 1, "observedGeneration": 2, "conditions": [condition]}})
    async with executor() as running:
        await publish(bus, write)
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.code) == (SUCCEEDED, 200)
    assert requests == {"PUT": {"409": 1, "200": 1}, "GET": {"200": 1}}
    got = await _call(sim, "GET", path)
    assert got["status"] == {**DS_COUNTS, "collisionCount": 1, "observedGeneration": observed,
                             "conditions": [condition]}
    assert got["spec"]["minReadySeconds"] == 5 and got["metadata"]["generation"] == 2


async def test_any_failed_first_write_is_retried_once_on_a_fresh_read(
        bus: Bus, sim: SimProcess, namespace: str, executor: Start, faults: Callable[..., None]) -> None:
    """Upstream retries after any error, not only a conflict: a 500 gets the GET and second PUT too, and the
    second answer is the result."""
    obj = await _created(sim, namespace, "ReplicaSet")
    faults("replicasets/status:update:1.0:500")
    async with executor() as running:
        await publish(bus, _rs_write(obj, ReplicaSetStatus(observed_generation=1)))
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.code) == (FAILED, 500)
    assert requests == {"PUT": {"500": 2}, "GET": {"200": 1}}


async def test_a_write_for_a_replaced_object_is_not_made(bus: Bus, sim: SimProcess, namespace: str,
                                                        executor: Start) -> None:
    """The object was deleted and made again under the same name: the first PUT is refused (a stale
    resourceVersion, another uid), the fresh read shows another uid, and nothing is written."""
    obj = await _created(sim, namespace, "ReplicaSet")
    write = _rs_write(obj, ReplicaSetStatus(replicas=0, observed_generation=1, conditions=[FAILURE]))
    deleting = await _call(sim, "DELETE", _path(namespace, "ReplicaSet"), {"propagationPolicy": "Orphan"})
    assert deleting["metadata"]["deletionTimestamp"]  # its finalizer holds it: let it go
    await _call(sim, "PUT", _path(namespace, "ReplicaSet"),
                {**deleting, "metadata": {**deleting["metadata"], "finalizers": []}})
    again = await _created(sim, namespace, "ReplicaSet")
    async with executor() as running:
        await publish(bus, write)
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.reason) == (FAILED, "Gone")
    assert requests == {"PUT": {"409": 1}, "GET": {"200": 1}}
    got = await _call(sim, "GET", _path(namespace, "ReplicaSet"))
    assert got["metadata"]["uid"] == again["metadata"]["uid"] != obj["metadata"]["uid"]
    assert "conditions" not in got["status"]


async def test_an_action_without_the_synced_object_reads_first(bus: Bus, sim: SimProcess, namespace: str,
                                                               executor: Start) -> None:
    """A message issued before resource_version and metadata were carried still decodes, and is written as it
    was then: GET, then PUT of the fresh object with the whole status."""
    obj = await _created(sim, namespace, "ReplicaSet")
    old = UpdateStatus(**envelope("st-old"), kind="ReplicaSet", namespace=namespace, name="web",
                       uid=obj["metadata"]["uid"], status=raw({"replicas": 0, "observedGeneration": 1}))
    wire = msgspec.json.decode(msgspec.json.encode(old))
    for added in ("resource_version", "status_fields"):
        del wire[added]
    assert msgspec.json.decode(msgspec.json.encode(wire), type=UpdateStatus) == old
    async with executor() as running:
        await publish(bus, old)
        [result] = await results_for(bus, 1, (running,))
        requests = running.metrics.snapshot()["api_requests"]
    assert (result.outcome, result.code) == (SUCCEEDED, 200)
    assert requests == {"GET": {"200": 1}, "PUT": {"200": 1}}
    got = await _call(sim, "GET", _path(namespace, "ReplicaSet"))
    assert got["status"] == {"replicas": 0, "observedGeneration": 1}
    assert got["metadata"]["labels"] == {"tier": "frontend"}
