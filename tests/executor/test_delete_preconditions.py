"""Issue 25: a delete costs one request when the object's last state on KUBUS_STATE (executor/laststate.py: a
JetStream direct get at the delete) vouches for it, without weakening issue 16's check (executor/ownership.py).
Against a fake API that records every request and answers deletes' preconditions as kube-apiserver's
rest.BeforeDelete does; KUBUS_STATE holds the messages ingest publishes (ObservedEvent JSON, copied to
`<prefix>.state.<partition>.<kind>.<uid>`). Every test runs on a stand-in of the direct get (`fake`) and on a
nats-server's KUBUS_STATE, fed through KUBUS_EVENTS as ingest feeds it (`jetstream`)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import msgspec
import nats
import nats.errors
import pytest
import pytest_asyncio
from nats.js.errors import NotFoundError

from executor import ownership
from executor.consuming import PROOFS, checked_apply
from executor.delivery import Delivery
from executor.errors import Reply
from executor.events import EventRecorder
from executor.kubeapi import KubeApi
from executor.laststate import DIRECT_GET, Controlled, LastStates, controlled_of
from executor.metrics import ExecutorMetrics
from kube.flowcontrol import TokenBucket
from kube.times import utcnow
from messages import codec, subjects
from messages.actions import FAILED, SUCCEEDED, ActionResult, DeleteControllerRevision, DeletePod
from messages.observed import DELETED, MODIFIED, ObservedEvent
from runtime.bus import ensure_streams
from tests.executor.builders import envelope
from tests.executor.conftest import eventually

NS = "test"
RS_UID = "rs-uid-web"
OTHER_UID = "rs-uid-other"
POD_PATH = "/api/v1/namespaces/test/pods/"
RS_PATH = "/apis/apps/v1/namespaces/test/replicasets/"
PARTITIONS = 4


def ref(name: str, uid: str, kind: str = "ReplicaSet") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": True}


def pod(name: str, rv: str, refs: list[dict[str, Any]], uid: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NS, "uid": uid or f"uid-{name}", "resourceVersion": rv,
        "labels": {"app": "web"}, "ownerReferences": refs}, "spec": {"containers": []}}


class FakeApi(KubeApi):
    """Objects by path; records every (method, path, body); deletes check preconditions as kube-apiserver."""

    def __init__(self) -> None:
        super().__init__(None, limiter=TokenBucket(0, 0), metrics=ExecutorMetrics(), stopping=asyncio.Event())
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.before_delete: Callable[[], None] | None = None  # runs as a DELETE arrives: a change racing it

    def put(self, path: str, obj: dict[str, Any]) -> None:
        self.objects[path] = obj

    async def call(self, method: str, path: str, *, body: bytes | None = None,
                   content_type: str = "application/json") -> Reply:
        self.requests.append((method, path, msgspec.json.decode(body) if body else None))
        obj = self.objects.get(path)
        if method == "GET":
            return Reply(200, msgspec.json.encode(obj)) if obj else _status(404, "NotFound", "not found")
        if method == "DELETE":
            if self.before_delete is not None:
                self.before_delete()
                obj = self.objects.get(path)
            if obj is None:
                return _status(404, "NotFound", "not found")
            meta = obj["metadata"]
            pre = (msgspec.json.decode(body) if body else {}).get("preconditions") or {}
            name = meta["name"]
            if "uid" in pre and pre["uid"] != meta["uid"]:
                return _status(409, "Conflict", f'Operation cannot be fulfilled on Pod "{name}": the UID in the '
                               f'precondition ({pre["uid"]}) does not match the UID in record ({meta["uid"]}). '
                               "The object might have been deleted and then recreated")
            if "resourceVersion" in pre and pre["resourceVersion"] != meta["resourceVersion"]:
                return _status(409, "Conflict", f'Operation cannot be fulfilled on Pod "{name}": the '
                               f'ResourceVersion in the precondition ({pre["resourceVersion"]}) does not match '
                               f'the ResourceVersion in record ({meta["resourceVersion"]}). The object might '
                               "have been modified")
            del self.objects[path]
            return Reply(200, msgspec.json.encode(obj))
        raise AssertionError(f"unexpected {method} {path}")

    def of(self, method: str, prefix: str = "") -> list[tuple[str, str, Any]]:
        return [r for r in self.requests if r[0] == method and r[1].startswith(prefix)]


def _status(code: int, reason: str, message: str) -> Reply:
    return Reply(code, msgspec.json.encode({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                            "code": code, "reason": reason, "message": message}))


def observed(obj: dict[str, Any], type: str = MODIFIED, kind: str = "Pod") -> bytes:
    """What ingest publishes for `obj`."""
    meta = obj["metadata"]
    event = ObservedEvent(kind=kind, type=type, namespace=meta["namespace"], name=meta["name"], uid=meta["uid"],
                          resource_version=meta["resourceVersion"], observed_at="2026-01-01T00:00:00Z",
                          ingest="ingest-0", object=msgspec.Raw(msgspec.json.encode(obj)))
    return codec.encode(event)


class DirectGets:
    """A stand-in for nats-server's direct gets of KUBUS_STATE (the one request of a NATS connection LastStates
    makes): the last message of each subject, or an answer without a message and its status (404: none); when
    `refusal` is set, it is raised (a timeout: a permission violation drops the request) or, a status, answered
    (503: no responders, a stream without allow_direct). `asked` records every subject asked."""

    def __init__(self) -> None:
        self.messages: dict[str, bytes] = {}
        self.asked: list[str] = []
        self.refusal: Exception | str | None = None

    async def _request_new_style(self, subject: str, payload: bytes, timeout: float) -> SimpleNamespace:
        self.asked.append(subject)
        if isinstance(self.refusal, Exception):
            raise self.refusal
        if self.refusal is not None:
            return SimpleNamespace(data=b"", headers={"Status": self.refusal, "Description": "No Responders"})
        data = self.messages.get(subject.removeprefix(f"{DIRECT_GET}.KUBUS_STATE."), b"")
        return SimpleNamespace(data=data, headers=None if data else {"Status": "404",
                                                                    "Description": "Message Not Found"})


class States:
    """KUBUS_STATE as the executor reads it (`reader`), and `record`: an object's event as ingest publishes it,
    returning once the executor can read it there."""

    def __init__(self, reader: LastStates, record: Callable[[bytes, str, str], Awaitable[None]]) -> None:
        self.reader = reader
        self._record = record

    async def record(self, obj: dict[str, Any], type: str = MODIFIED, kind: str = "Pod") -> None:
        await self._record(observed(obj, type, kind), kind, obj["metadata"]["uid"])


@pytest_asyncio.fixture(params=["fake", "jetstream"])
async def states(request: pytest.FixtureRequest, nats_url: str, prefix: str) -> AsyncIterator[States]:
    if request.param == "fake":
        gets = DirectGets()

        async def put(data: bytes, kind: str, uid: str) -> None:
            gets.messages[f"kubus.state.{subjects.partition_of(NS, PARTITIONS)}.{kind}.{uid}"] = data

        yield States(LastStates(gets, "KUBUS_STATE", "kubus", PARTITIONS), put)  # type: ignore[arg-type]
        return
    nc = await nats.connect(nats_url)
    bus = await ensure_streams(nc, prefix=prefix, partitions=PARTITIONS)
    state = bus.stream(subjects.STATE_STREAM)

    async def publish(data: bytes, kind: str, uid: str) -> None:
        partition = bus.partition_of(NS)
        await bus.js.publish(subjects.event_subject(partition, kind, uid, prefix), data)
        state_subject = f"{prefix}.state.{partition}.{kind}.{uid}"

        async def copied() -> bool:
            try:
                return (await bus.js.get_last_msg(state, state_subject)).data == data
            except NotFoundError:
                return False

        await eventually(copied, timeout=10, what=f"{state_subject} on {state}")

    yield States(LastStates.of(bus), publish)
    await nc.close()


def replicaset(name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": NS, "uid": uid},
            "spec": {"selector": {"matchLabels": {"app": "web"}}}}


@pytest.fixture
def api() -> FakeApi:
    fake = FakeApi()
    fake.put(RS_PATH + "web", replicaset("web", RS_UID))
    fake.put(RS_PATH + "other", replicaset("other", OTHER_UID))
    return fake


async def seen(api: FakeApi, states: States, obj: dict[str, Any], *, live: bool = True) -> dict[str, Any]:
    """`obj` as ingest saw it (its last state on KUBUS_STATE) and, when `live`, as the API has it now."""
    await states.record(obj)
    if live:
        api.put(POD_PATH + obj["metadata"]["name"], obj)
    return obj


async def delete(api: FakeApi, states: States | None, target: dict[str, Any],
                 controller: str = f"ReplicaSet/{NS}/web", metrics: ExecutorMetrics | None = None,
                 ) -> tuple[str | None, list[ActionResult]]:
    meta = target["metadata"]
    action = DeletePod(**envelope(f"del/{meta['name']}", controller), namespace=NS, name=meta["name"],
                       uid=meta["uid"])
    results: list[ActionResult] = []

    async def report(result: ActionResult) -> None:
        results.append(result)

    delivery = Delivery(api=api, action=action, number=1, final=False, executor="x", report=report, now=utcnow,
                        events=EventRecorder())
    refused = await checked_apply(delivery, ownership.Owners(api, None if states is None else states.reader,
                                                             metrics))
    return refused, results


async def test_a_pod_of_its_controller_on_kubus_state_is_deleted_with_one_request_and_no_get(
        api: FakeApi, states: States) -> None:
    pods = [await seen(api, states, pod(f"web-{i}", f"1{i}", [ref("web", RS_UID)])) for i in range(3)]
    owners = ownership.Owners(api, states.reader)
    for target in pods:
        meta = target["metadata"]
        action = DeletePod(**envelope(f"del/{meta['name']}"), namespace=NS, name=meta["name"], uid=meta["uid"])
        results: list[ActionResult] = []

        async def report(result: ActionResult, into: list[ActionResult] = results) -> None:
            into.append(result)

        delivery = Delivery(api=api, action=action, number=1, final=False, executor="x", report=report,
                            now=utcnow, events=EventRecorder())
        assert await checked_apply(delivery, owners) is None
        assert [r.outcome for r in results] == [SUCCEEDED]
    assert api.of("GET", POD_PATH) == []  # no pod read: KUBUS_STATE vouched for each
    assert [m for m, _, _ in api.requests] == ["GET", "DELETE", "DELETE", "DELETE"]  # the controller once
    assert api.requests[0][1] == RS_PATH + "web"


async def test_the_delete_carries_the_uid_and_resource_version_checked_on_kubus_state(
        api: FakeApi, states: States) -> None:
    target = await seen(api, states, pod("web-0", "42", [ref("web", RS_UID)]))
    metrics = ExecutorMetrics()
    refused, [result] = await delete(api, states, target, metrics=metrics)
    assert refused is None and result.outcome == SUCCEEDED
    [(_, path, body)] = api.of("DELETE")
    assert path == POD_PATH + "web-0"
    assert body == {"kind": "DeleteOptions", "apiVersion": "v1",
                    "preconditions": {"uid": "uid-web-0", "resourceVersion": "42"}}
    assert metrics.snapshot()["ownership_checks"] == {"index": 1}


async def test_a_conflict_on_the_version_of_kubus_state_falls_back_to_a_get_and_deletes_at_the_version_read(
        api: FakeApi, states: States) -> None:
    """The kubelet wrote the pod's status after ingest's event reached KUBUS_STATE (or a replica of it answered
    from behind): still the controller's."""
    target = await seen(api, states, pod("web-0", "5", [ref("web", RS_UID)]))
    api.put(POD_PATH + "web-0", pod("web-0", "7", [ref("web", RS_UID)]))
    metrics = ExecutorMetrics()
    refused, [result] = await delete(api, states, target, metrics=metrics)
    assert refused is None and result.outcome == SUCCEEDED, result
    assert [(m, p) for m, p, _ in api.requests if p.startswith(POD_PATH)] == [
        ("DELETE", POD_PATH + "web-0"), ("GET", POD_PATH + "web-0"), ("DELETE", POD_PATH + "web-0")]
    assert [b["preconditions"]["resourceVersion"] for _, _, b in api.of("DELETE")] == ["5", "7"]
    assert POD_PATH + "web-0" not in api.objects
    assert metrics.snapshot()["ownership_checks"] == {"index": 1, "read": 1, "stale": 1}


async def test_a_forged_delete_of_another_controllers_pod_is_refused_and_nothing_deleted(
        api: FakeApi, states: States) -> None:
    """The publisher knows the pod's uid and resourceVersion (they are on the bus): KUBUS_STATE says whose it is."""
    target = await seen(api, states, pod("other-0", "9", [ref("other", OTHER_UID)]))
    refused, [result] = await delete(api, states, target)
    assert refused is not None and (result.outcome, result.reason) == (FAILED, ownership.NOT_OWNED), result
    assert "controlled by ReplicaSet 'other'" in result.message
    assert api.of("DELETE") == []
    assert POD_PATH + "other-0" in api.objects


async def test_a_stale_state_of_a_pod_now_anothers_deletes_nothing(api: FakeApi, states: States) -> None:
    """KUBUS_STATE still holds web's version; since, web released the pod and `other` adopted it: the DELETE at
    that version is refused by the API (409), and the GET's check refuses the action."""
    target = await seen(api, states, pod("web-0", "5", [ref("web", RS_UID)]))
    api.put(POD_PATH + "web-0", pod("web-0", "8", [ref("other", OTHER_UID)]))
    refused, [result] = await delete(api, states, target)
    assert refused is not None and result.reason == ownership.NOT_OWNED, result
    [(_, _, body)] = api.of("DELETE")
    assert body["preconditions"]["resourceVersion"] == "5"
    assert api.objects[POD_PATH + "web-0"]["metadata"]["resourceVersion"] == "8"  # not deleted


@pytest.mark.parametrize("case", ["no-message", "not-read", "anothers", "orphan", "by-a-deleted-controller-uid",
                                  "deleted", "another-namespace", "unreadable"])
async def test_without_the_word_of_kubus_state_the_pod_is_read_and_deleted_at_the_version_read(
        api: FakeApi, states: States, case: str) -> None:
    """KUBUS_STATE answers only "yes, at this version": anything else is read, and the read's check decides."""
    live = pod("web-0", "12", [ref("web", RS_UID)])
    api.put(POD_PATH + "web-0", live)
    if case == "anothers":  # KUBUS_STATE is behind: web adopted it since
        await states.record(pod("web-0", "10", [ref("other", OTHER_UID)]))
    elif case == "orphan":
        await states.record(pod("web-0", "10", []))
    elif case == "by-a-deleted-controller-uid":  # a controller of that name that is gone
        await states.record(pod("web-0", "10", [ref("web", "rs-uid-deleted")]))
    elif case == "deleted":  # a pod of that uid deleted: its last event
        await states.record(pod("web-0", "10", [ref("web", RS_UID)]), type=DELETED)
    elif case == "another-namespace":  # a message naming another namespace than the action's
        await states.record(pod("web-0", "10", [ref("web", RS_UID)]) | {"metadata": {
            "name": "web-0", "namespace": "elsewhere", "uid": "uid-web-0", "resourceVersion": "10",
            "ownerReferences": [ref("web", RS_UID)]}})
    elif case == "unreadable":
        await states._record(b"{not json", "Pod", "uid-web-0")
    refused, [result] = await delete(api, None if case == "not-read" else states, live)
    assert refused is None and result.outcome == SUCCEEDED, result
    assert [(m, p) for m, p, _ in api.requests if p.startswith(POD_PATH)] == [
        ("GET", POD_PATH + "web-0"), ("DELETE", POD_PATH + "web-0")]
    [(_, _, body)] = api.of("DELETE")
    assert body["preconditions"] == {"uid": "uid-web-0", "resourceVersion": "12"}


async def test_a_pod_changing_between_the_get_and_the_delete_is_checked_again(
        api: FakeApi, states: States) -> None:
    """The GET path's delete carries the version it read: a change in between (here: adopted by another) is
    caught by the API, and the next read refuses."""
    api.put(POD_PATH + "web-0", pod("web-0", "3", [ref("web", RS_UID)]))

    def adopted_by_other() -> None:
        api.put(POD_PATH + "web-0", pod("web-0", "4", [ref("other", OTHER_UID)]))
        api.before_delete = None

    api.before_delete = adopted_by_other
    refused, [result] = await delete(api, states, api.objects[POD_PATH + "web-0"])
    assert refused is not None and result.reason == ownership.NOT_OWNED, result
    assert POD_PATH + "web-0" in api.objects


async def test_a_pod_that_keeps_changing_is_reported_a_conflict_after_the_last_check(
        api: FakeApi, states: States) -> None:
    target = await seen(api, states, pod("web-0", "100", [ref("web", RS_UID)]))
    versions = iter(range(101, 200))

    def kubelet_writes() -> None:
        api.put(POD_PATH + "web-0", pod("web-0", str(next(versions)), [ref("web", RS_UID)]))

    api.before_delete = kubelet_writes
    refused, [result] = await delete(api, states, target)
    assert refused is None
    assert (result.outcome, result.code, result.reason) == (FAILED, 409, "Conflict"), result
    assert len(api.of("DELETE")) == PROOFS and len(api.of("GET", POD_PATH)) == PROOFS - 1


async def test_a_pod_gone_or_replaced_is_still_a_success(api: FakeApi, states: States) -> None:
    target = await seen(api, states, pod("web-0", "5", [ref("web", RS_UID)]))
    api.put(POD_PATH + "web-0", pod("web-0", "9", [ref("web", RS_UID)], uid="uid-new"))  # same name, new pod
    refused, [result] = await delete(api, states, target)
    assert refused is None and (result.outcome, result.reason) == (SUCCEEDED, "Gone"), result
    del api.objects[POD_PATH + "web-0"]
    refused, [result] = await delete(api, states, target)
    assert refused is None and (result.outcome, result.code) == (SUCCEEDED, 404), result


async def test_a_controller_revision_on_kubus_state_is_deleted_with_one_request(
        api: FakeApi, states: States) -> None:
    api.put("/apis/apps/v1/namespaces/test/daemonsets/ds",
            {"metadata": {"name": "ds", "namespace": NS, "uid": "ds-uid"},
             "spec": {"selector": {"matchLabels": {"app": "web"}}}})
    rev = {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {
        "name": "ds-1", "namespace": NS, "uid": "rev-uid", "resourceVersion": "31",
        "ownerReferences": [ref("ds", "ds-uid", "DaemonSet")]}}
    await states.record(rev, kind="ControllerRevision")
    api.put("/apis/apps/v1/namespaces/test/controllerrevisions/ds-1", rev)
    action = DeleteControllerRevision(**envelope("rev", f"DaemonSet/{NS}/ds"), namespace=NS, name="ds-1",
                                      uid="rev-uid")
    results: list[ActionResult] = []

    async def report(result: ActionResult) -> None:
        results.append(result)

    delivery = Delivery(api=api, action=action, number=1, final=False, executor="x", report=report, now=utcnow,
                        events=EventRecorder())
    assert await checked_apply(delivery, ownership.Owners(api, states.reader)) is None
    assert [r.outcome for r in results] == [SUCCEEDED]
    assert [m for m, _, _ in api.requests] == ["GET", "DELETE"]  # the DaemonSet, then the revision
    assert api.requests[1][2]["preconditions"] == {"uid": "rev-uid", "resourceVersion": "31"}


async def test_a_refused_direct_get_reads_the_object_and_pauses_the_gets(api: FakeApi) -> None:
    """No responders (a KUBUS_STATE without allow_direct), a timeout (a permission violation drops the request):
    the delete reads its object, and the gets pause for a while rather than cost every delete the timeout."""
    gets = DirectGets()
    reader = LastStates(gets, "KUBUS_STATE", "kubus", PARTITIONS, refused_pause=3600)  # type: ignore[arg-type]
    states = States(reader, lambda *_: asyncio.sleep(0))
    target = pod("web-0", "5", [ref("web", RS_UID)])
    gets.messages[f"kubus.state.{subjects.partition_of(NS, PARTITIONS)}.Pod.uid-web-0"] = observed(target)
    for refusal in ("503", nats.errors.TimeoutError()):
        api.put(POD_PATH + "web-0", target)
        gets.refusal, gets.asked, api.requests = refusal, [], []
        reader._refused_until = 0.0
        for _ in range(2):
            api.put(POD_PATH + "web-0", target)
            refused, [result] = await delete(api, states, target)
            assert refused is None and result.outcome == SUCCEEDED, result
        assert len(gets.asked) == 1  # the second delete did not ask: the gets pause
        assert [(m, p) for m, p, _ in api.requests if p.startswith(POD_PATH)] == [
            ("GET", POD_PATH + "web-0"), ("DELETE", POD_PATH + "web-0")] * 2
    gets.refusal, gets.asked, reader._refused_until = None, [], 0.0  # the pause over: asked, and believed again
    api.put(POD_PATH + "web-0", target)
    api.requests = []
    refused, [result] = await delete(api, states, target)
    assert refused is None and result.outcome == SUCCEEDED, result
    assert len(gets.asked) == 1 and api.of("GET", POD_PATH) == []


async def test_an_object_without_a_message_on_kubus_state_does_not_pause_the_gets(
        api: FakeApi, states: States) -> None:
    """404 is an answer: an object ingest has not seen yet is read, and the next delete still asks KUBUS_STATE."""
    unseen = pod("web-0", "5", [ref("web", RS_UID)])
    api.put(POD_PATH + "web-0", unseen)
    await seen(api, states, pod("web-1", "6", [ref("web", RS_UID)]))
    for target in (unseen, api.objects[POD_PATH + "web-1"]):
        refused, [result] = await delete(api, states, target)
        assert refused is None and result.outcome == SUCCEEDED, result
    assert [(m, p) for m, p, _ in api.requests if p.startswith(POD_PATH)] == [
        ("GET", POD_PATH + "web-0"), ("DELETE", POD_PATH + "web-0"), ("DELETE", POD_PATH + "web-1")]


async def test_a_kubus_state_without_direct_gets_costs_a_get_per_delete(
        api: FakeApi, nats_url: str, prefix: str) -> None:
    """A KUBUS_STATE an earlier kubus made, and an identity that may not turn allow_direct on (here: a stream of
    that config): nats-server answers no direct get, and every delete reads its object."""
    nc = await nats.connect(nats_url)
    try:
        bus = await ensure_streams(nc, prefix=prefix, partitions=PARTITIONS)
        state = bus.stream(subjects.STATE_STREAM)
        info = await bus.js.stream_info(state)
        await bus.js.update_stream(dataclasses.replace(info.config, allow_direct=False))
        assert not (await bus.js.stream_info(state)).config.allow_direct
        target = pod("web-0", "5", [ref("web", RS_UID)])
        await bus.js.publish(subjects.event_subject(bus.partition_of(NS), "Pod", "uid-web-0", prefix), observed(target))
        api.put(POD_PATH + "web-0", target)
        refused, [result] = await delete(api, States(LastStates.of(bus), lambda *_: asyncio.sleep(0)), target)
        assert refused is None and result.outcome == SUCCEEDED, result
        assert [(m, p) for m, p, _ in api.requests if p.startswith(POD_PATH)] == [
            ("GET", POD_PATH + "web-0"), ("DELETE", POD_PATH + "web-0")]
    finally:
        await nc.close()


@pytest.mark.parametrize("uid", ["*", ">", "uid-web-0.>"])
async def test_a_uid_with_a_wildcard_is_vouched_for_by_nothing(nats_url: str, prefix: str, uid: str) -> None:
    """The uid comes from the action, whose publisher the check distrusts, and becomes a subject token: a
    wildcard's direct get answers some object's last event (here web-0's), never one of that uid."""
    nc = await nats.connect(nats_url)
    try:
        bus = await ensure_streams(nc, prefix=prefix, partitions=PARTITIONS)
        target = pod("web-0", "5", [ref("web", RS_UID)])
        await bus.js.publish(subjects.event_subject(bus.partition_of(NS), "Pod", "uid-web-0", prefix), observed(target))
        reader = LastStates.of(bus)
        assert await eventually(lambda: reader.controlled("Pod", NS, "uid-web-0"), timeout=10, what="web-0's state")
        assert await reader.controlled("Pod", NS, uid) is None
    finally:
        await nc.close()


def test_only_a_version_controlled_by_a_replicaset_or_daemonset_is_vouched_for() -> None:
    mine = pod("web-0", "1", [ref("web", RS_UID)])
    assert controlled_of("Pod", "uid-web-0", observed(mine)) is not None
    assert controlled_of("Pod", "uid-web-0", observed(pod("web-0", "3", []))) is None  # an orphan
    assert controlled_of("Pod", "uid-web-0", observed(mine, type=DELETED)) is None
    assert controlled_of("Pod", "uid-job-0", observed(pod("job-0", "6", [ref("batch", "job-uid", kind="Job")]))) is None
    assert controlled_of("Pod", "uid-web-0", b"{not json") is None
    assert controlled_of("Pod", "uid-web-1", observed(mine)) is None  # another object's message
    assert controlled_of("ControllerRevision", "uid-web-0", observed(mine)) is None  # another kind's
    newer = msgspec.json.decode(observed(mine)) | {"v": 99}
    assert controlled_of("Pod", "uid-web-0", msgspec.json.encode(newer)) is None


def test_what_kubus_state_vouches_for_holds_the_object_and_its_controller_and_cannot_be_changed() -> None:
    data = observed(pod("web-0", "12", [ref("other", OTHER_UID, kind="DaemonSet") | {"controller": False},
                                        ref("web", RS_UID)]))
    entry = controlled_of("Pod", "uid-web-0", data)
    assert entry == Controlled(namespace=NS, name="web-0", uid="uid-web-0", resource_version="12",
                               controller_kind="ReplicaSet", controller_name="web", controller_uid=RS_UID)
    assert entry is not None and (entry.namespace, entry.name, entry.uid, entry.resource_version,
                                  entry.controller_kind, entry.controller_name, entry.controller_uid) == (
        NS, "web-0", "uid-web-0", "12", "ReplicaSet", "web", RS_UID)
    with pytest.raises(AttributeError):  # shared by every check that reads it
        entry.resource_version = "13"  # type: ignore[misc]
