"""Issue 25: a delete costs one request when the executor's ownership index (executor/ownedindex.py) vouches for
the object, without weakening issue 16's check (executor/ownership.py). Against a fake API that records every
request and answers deletes' preconditions as kube-apiserver's rest.BeforeDelete does; the index is fed the
messages ingest publishes (ObservedEvent JSON on `<prefix>.state.<partition>.<kind>.<uid>`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from executor import ownership
from executor.consuming import PROOFS, checked_apply
from executor.delivery import Delivery
from executor.errors import Reply
from executor.events import EventRecorder
from executor.kubeapi import KubeApi
from executor.metrics import ExecutorMetrics
from executor.ownedindex import Controlled, OwnershipIndex
from kube.flowcontrol import TokenBucket
from kube.times import utcnow
from messages import codec
from messages.actions import FAILED, SUCCEEDED, ActionResult, DeleteControllerRevision, DeletePod
from messages.observed import DELETED, MODIFIED, ObservedEvent
from tests.executor.builders import envelope

NS = "test"
RS_UID = "rs-uid-web"
OTHER_UID = "rs-uid-other"
POD_PATH = "/api/v1/namespaces/test/pods/"
RS_PATH = "/apis/apps/v1/namespaces/test/replicasets/"


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


def observed(obj: dict[str, Any], type: str = MODIFIED, kind: str = "Pod") -> tuple[str, bytes]:
    """What ingest publishes for `obj`, and its KUBUS_STATE subject."""
    meta = obj["metadata"]
    event = ObservedEvent(kind=kind, type=type, namespace=meta["namespace"], name=meta["name"], uid=meta["uid"],
                          resource_version=meta["resourceVersion"], observed_at="2026-01-01T00:00:00Z",
                          ingest="ingest-0", object=msgspec.Raw(msgspec.json.encode(obj)))
    return f"kubus.state.1.{kind}.{meta['uid']}", codec.encode(event)


def replicaset(name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": NS, "uid": uid},
            "spec": {"selector": {"matchLabels": {"app": "web"}}}}


@pytest.fixture
def api() -> FakeApi:
    fake = FakeApi()
    fake.put(RS_PATH + "web", replicaset("web", RS_UID))
    fake.put(RS_PATH + "other", replicaset("other", OTHER_UID))
    return fake


@pytest.fixture
def index() -> OwnershipIndex:
    return OwnershipIndex()


def seen(api: FakeApi, index: OwnershipIndex, obj: dict[str, Any], *, live: bool = True) -> dict[str, Any]:
    """`obj` as ingest saw it (in the index) and, when `live`, as the API has it now."""
    index.apply(*observed(obj))
    if live:
        api.put(POD_PATH + obj["metadata"]["name"], obj)
    return obj


async def delete(api: FakeApi, index: OwnershipIndex | None, target: dict[str, Any],
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
    refused = await checked_apply(delivery, ownership.Owners(api, index, metrics))
    return refused, results


async def test_an_indexed_pod_of_its_controller_is_deleted_with_one_request_and_no_get(
        api: FakeApi, index: OwnershipIndex) -> None:
    pods = [seen(api, index, pod(f"web-{i}", f"1{i}", [ref("web", RS_UID)])) for i in range(3)]
    owners = ownership.Owners(api, index)
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
    assert api.of("GET", POD_PATH) == []  # no pod read: the index vouched for each
    assert [m for m, _, _ in api.requests] == ["GET", "DELETE", "DELETE", "DELETE"]  # the controller once
    assert api.requests[0][1] == RS_PATH + "web"


async def test_the_delete_carries_the_uid_and_resource_version_the_index_checked(
        api: FakeApi, index: OwnershipIndex) -> None:
    target = seen(api, index, pod("web-0", "42", [ref("web", RS_UID)]))
    metrics = ExecutorMetrics()
    refused, [result] = await delete(api, index, target, metrics=metrics)
    assert refused is None and result.outcome == SUCCEEDED
    [(_, path, body)] = api.of("DELETE")
    assert path == POD_PATH + "web-0"
    assert body == {"kind": "DeleteOptions", "apiVersion": "v1",
                    "preconditions": {"uid": "uid-web-0", "resourceVersion": "42"}}
    assert metrics.snapshot()["ownership_checks"] == {"index": 1}


async def test_a_conflict_on_the_indexed_version_falls_back_to_a_get_and_deletes_at_the_version_read(
        api: FakeApi, index: OwnershipIndex) -> None:
    """The kubelet wrote the pod's status after ingest's event reached the index: still the controller's."""
    target = seen(api, index, pod("web-0", "5", [ref("web", RS_UID)]))
    api.put(POD_PATH + "web-0", pod("web-0", "7", [ref("web", RS_UID)]))
    metrics = ExecutorMetrics()
    refused, [result] = await delete(api, index, target, metrics=metrics)
    assert refused is None and result.outcome == SUCCEEDED, result
    assert [(m, p) for m, p, _ in api.requests if p.startswith(POD_PATH)] == [
        ("DELETE", POD_PATH + "web-0"), ("GET", POD_PATH + "web-0"), ("DELETE", POD_PATH + "web-0")]
    assert [b["preconditions"]["resourceVersion"] for _, _, b in api.of("DELETE")] == ["5", "7"]
    assert POD_PATH + "web-0" not in api.objects
    assert metrics.snapshot()["ownership_checks"] == {"index": 1, "read": 1, "stale": 1}


async def test_a_forged_delete_of_another_controllers_indexed_pod_is_refused_and_nothing_deleted(
        api: FakeApi, index: OwnershipIndex) -> None:
    """The publisher knows the pod's uid and resourceVersion (they are on the bus): the index says whose it is."""
    target = seen(api, index, pod("other-0", "9", [ref("other", OTHER_UID)]))
    refused, [result] = await delete(api, index, target)
    assert refused is not None and (result.outcome, result.reason) == (FAILED, ownership.NOT_OWNED), result
    assert "controlled by ReplicaSet 'other'" in result.message
    assert api.of("DELETE") == []
    assert POD_PATH + "other-0" in api.objects


async def test_a_stale_index_entry_of_a_pod_now_anothers_deletes_nothing(
        api: FakeApi, index: OwnershipIndex) -> None:
    """The index still holds web's version; since, web released the pod and `other` adopted it: the DELETE at the
    indexed version is refused by the API (409), and the GET's check refuses the action."""
    target = seen(api, index, pod("web-0", "5", [ref("web", RS_UID)]))
    api.put(POD_PATH + "web-0", pod("web-0", "8", [ref("other", OTHER_UID)]))
    refused, [result] = await delete(api, index, target)
    assert refused is not None and result.reason == ownership.NOT_OWNED, result
    [(_, _, body)] = api.of("DELETE")
    assert body["preconditions"]["resourceVersion"] == "5"
    assert api.objects[POD_PATH + "web-0"]["metadata"]["resourceVersion"] == "8"  # not deleted


@pytest.mark.parametrize("case", ["not-indexed", "no-index", "indexed-as-anothers", "indexed-as-orphan",
                                  "indexed-by-a-deleted-controller-uid"])
async def test_without_the_index_s_word_the_pod_is_read_and_deleted_at_the_version_read(
        api: FakeApi, index: OwnershipIndex, case: str) -> None:
    """The index answers only "yes, at this version": anything else is read, and the read's check decides."""
    live = pod("web-0", "12", [ref("web", RS_UID)])
    api.put(POD_PATH + "web-0", live)
    if case == "indexed-as-anothers":  # the index is behind: web adopted it since
        index.apply(*observed(pod("web-0", "10", [ref("other", OTHER_UID)])))
    elif case == "indexed-as-orphan":
        index.apply(*observed(pod("web-0", "10", [])))
    elif case == "indexed-by-a-deleted-controller-uid":  # a controller of that name that is gone
        index.apply(*observed(pod("web-0", "10", [ref("web", "rs-uid-deleted")])))
    refused, [result] = await delete(api, None if case == "no-index" else index, live)
    assert refused is None and result.outcome == SUCCEEDED, result
    assert [(m, p) for m, p, _ in api.requests if p.startswith(POD_PATH)] == [
        ("GET", POD_PATH + "web-0"), ("DELETE", POD_PATH + "web-0")]
    [(_, _, body)] = api.of("DELETE")
    assert body["preconditions"] == {"uid": "uid-web-0", "resourceVersion": "12"}


async def test_a_pod_changing_between_the_get_and_the_delete_is_checked_again(
        api: FakeApi, index: OwnershipIndex) -> None:
    """The GET path's delete carries the version it read: a change in between (here: adopted by another) is
    caught by the API, and the next read refuses."""
    api.put(POD_PATH + "web-0", pod("web-0", "3", [ref("web", RS_UID)]))

    def adopted_by_other() -> None:
        api.put(POD_PATH + "web-0", pod("web-0", "4", [ref("other", OTHER_UID)]))
        api.before_delete = None

    api.before_delete = adopted_by_other
    refused, [result] = await delete(api, index, api.objects[POD_PATH + "web-0"])
    assert refused is not None and result.reason == ownership.NOT_OWNED, result
    assert POD_PATH + "web-0" in api.objects


async def test_a_pod_that_keeps_changing_is_reported_a_conflict_after_the_last_check(
        api: FakeApi, index: OwnershipIndex) -> None:
    target = seen(api, index, pod("web-0", "100", [ref("web", RS_UID)]))
    versions = iter(range(101, 200))

    def kubelet_writes() -> None:
        api.put(POD_PATH + "web-0", pod("web-0", str(next(versions)), [ref("web", RS_UID)]))

    api.before_delete = kubelet_writes
    refused, [result] = await delete(api, index, target)
    assert refused is None
    assert (result.outcome, result.code, result.reason) == (FAILED, 409, "Conflict"), result
    assert len(api.of("DELETE")) == PROOFS and len(api.of("GET", POD_PATH)) == PROOFS - 1


async def test_a_pod_gone_or_replaced_is_still_a_success(api: FakeApi, index: OwnershipIndex) -> None:
    target = seen(api, index, pod("web-0", "5", [ref("web", RS_UID)]))
    api.put(POD_PATH + "web-0", pod("web-0", "9", [ref("web", RS_UID)], uid="uid-new"))  # same name, new pod
    refused, [result] = await delete(api, index, target)
    assert refused is None and (result.outcome, result.reason) == (SUCCEEDED, "Gone"), result
    del api.objects[POD_PATH + "web-0"]
    refused, [result] = await delete(api, index, target)
    assert refused is None and (result.outcome, result.code) == (SUCCEEDED, 404), result


async def test_an_indexed_controller_revision_is_deleted_with_one_request(
        api: FakeApi, index: OwnershipIndex) -> None:
    api.put("/apis/apps/v1/namespaces/test/daemonsets/ds",
            {"metadata": {"name": "ds", "namespace": NS, "uid": "ds-uid"},
             "spec": {"selector": {"matchLabels": {"app": "web"}}}})
    rev = {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {
        "name": "ds-1", "namespace": NS, "uid": "rev-uid", "resourceVersion": "31",
        "ownerReferences": [ref("ds", "ds-uid", "DaemonSet")]}}
    index.apply(*observed(rev, kind="ControllerRevision"))
    api.put("/apis/apps/v1/namespaces/test/controllerrevisions/ds-1", rev)
    action = DeleteControllerRevision(**envelope("rev", f"DaemonSet/{NS}/ds"), namespace=NS, name="ds-1",
                                      uid="rev-uid")
    results: list[ActionResult] = []

    async def report(result: ActionResult) -> None:
        results.append(result)

    delivery = Delivery(api=api, action=action, number=1, final=False, executor="x", report=report, now=utcnow,
                        events=EventRecorder())
    assert await checked_apply(delivery, ownership.Owners(api, index)) is None
    assert [r.outcome for r in results] == [SUCCEEDED]
    assert [m for m, _, _ in api.requests] == ["GET", "DELETE"]  # the DaemonSet, then the revision
    assert api.requests[1][2]["preconditions"] == {"uid": "rev-uid", "resourceVersion": "31"}


def test_the_index_keeps_only_controlled_objects_at_their_last_version() -> None:
    index = OwnershipIndex()
    mine = pod("web-0", "1", [ref("web", RS_UID)])
    index.apply(*observed(mine))
    assert index.lookup("Pod", "uid-web-0") is not None
    index.apply(*observed(pod("web-0", "2", [ref("web", RS_UID)])))
    entry = index.lookup("Pod", "uid-web-0")
    assert entry is not None and (entry.resource_version, entry.controller_uid) == ("2", RS_UID)
    index.apply(*observed(pod("web-0", "3", [])))  # released: an orphan is not vouched for
    assert index.lookup("Pod", "uid-web-0") is None
    index.apply(*observed(pod("web-0", "4", [ref("web", RS_UID)])))
    index.apply(*observed(pod("web-0", "5", [ref("web", RS_UID)]), type=DELETED))
    assert index.lookup("Pod", "uid-web-0") is None and len(index) == 0
    index.apply(*observed(pod("job-0", "6", [ref("batch", "job-uid", kind="Job")])))  # not a ReplicaSet's
    assert len(index) == 0
    index.apply(*observed(pod("web-1", "7", [ref("web", RS_UID)])))
    subject, _ = observed(pod("web-1", "8", [ref("web", RS_UID)]))
    index.apply(subject, b"{not json")  # unreadable: the uid's entry goes, its delete reads the pod
    assert index.lookup("Pod", "uid-web-1") is None
    index.apply(*observed(pod("web-2", "9", [ref("web", RS_UID)]), kind="Node"))  # not an indexed kind
    assert len(index) == 0


def test_an_index_entry_holds_the_object_and_its_controller_and_cannot_be_changed() -> None:
    index = OwnershipIndex()
    index.apply(*observed(pod("web-0", "12", [ref("other", OTHER_UID, kind="DaemonSet") | {"controller": False},
                                               ref("web", RS_UID)])))
    entry = index.lookup("Pod", "uid-web-0")
    assert entry == Controlled(namespace=NS, name="web-0", uid="uid-web-0", resource_version="12",
                               controller_kind="ReplicaSet", controller_name="web", controller_uid=RS_UID)
    assert entry is not None and (entry.namespace, entry.name, entry.uid, entry.resource_version,
                                  entry.controller_kind, entry.controller_name, entry.controller_uid) == (
        NS, "web-0", "uid-web-0", "12", "ReplicaSet", "web", RS_UID)
    with pytest.raises(AttributeError):  # shared by every check that reads it
        entry.resource_version = "13"  # type: ignore[misc]
    assert index.lookup("Pod", "uid-web-0") == entry and index.lookup("ControllerRevision", "uid-web-0") is None
