"""The sim refuses bad ownerReferences as kube-apiserver v1.32 does, on every write path and kind.

apimachinery's ValidateOwnerReferences (pkg/api/validation/objectmeta.go): apiVersion, kind, name
and uid are required, a core/v1 Event may not be an owner, at most one reference is the
controller. Its errors carry the list's path (`metadata.ownerReferences.uid`, no index) and are
checked on the object as it would be stored: after a create's defaults, a PUT, or any patch.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from sim import resources as R
from sim.resources import ApiResource
from sim.validating import validate

Client = TestClient[Any, Any]
Refs = list[dict[str, Any]]
Causes = list[tuple[str, str]]
REFS = "metadata.ownerReferences"
TRUE = "(*bool)(0xc000000000)"  # how %#v shows a set *bool; the sim stands in one address
NIL = "(*bool)(nil)"


@pytest.fixture
def client(sim_client: Client) -> Client:
    return sim_client


# --- builders --------------------------------------------------------------------------------------


def owner(kind: str = "ReplicaSet", name: str = "web", uid: str = "u1", api_version: str = "apps/v1",
          **extra: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, **extra}


def controller(kind: str = "ReplicaSet", name: str = "web", uid: str = "u1") -> dict[str, Any]:
    return owner(kind, name, uid, controller=True, blockOwnerDeletion=True)


def shown(ref: dict[str, Any]) -> str:
    """%#v of the metav1.OwnerReference, as field.Error prints it."""
    pointer = {True: TRUE, False: TRUE, None: NIL}
    return (f'v1.OwnerReference{{APIVersion:"{ref.get("apiVersion", "")}", Kind:"{ref.get("kind", "")}", '
            f'Name:"{ref.get("name", "")}", UID:"{ref.get("uid", "")}", '
            f'Controller:{pointer[ref.get("controller")]}, '
            f'BlockOwnerDeletion:{pointer[ref.get("blockOwnerDeletion")]}}}')


def shown_list(refs: Refs) -> str:
    return "[]v1.OwnerReference{" + ", ".join(shown(r) for r in refs) + "}"


def pod_body(name: str = "web-1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]}}


def template(app: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": app, "image": "nginx"}]}}


def replicaset_body(name: str = "web") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template("web")}}


def daemonset_body(name: str = "agent") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template("agent")}}


BODIES: dict[ApiResource, Any] = {
    R.PODS: pod_body,
    R.REPLICASETS: replicaset_body,
    R.DAEMONSETS: daemonset_body,
    R.CONTROLLERREVISIONS: lambda: {"apiVersion": "apps/v1", "kind": "ControllerRevision",
                                    "metadata": {"name": "agent-5d4f8"}, "data": {"spec": {}}, "revision": 1},
    R.EVENTS: lambda: {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "web-1.17f"},
                       "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-1"},
                       "reason": "Started", "message": "started", "type": "Normal"},
    R.NODES: lambda: {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-x"}},
    R.NAMESPACES: lambda: {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
}


def collection(resource: ApiResource) -> str:
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
    return f"{base}/namespaces/default/{resource.plural}" if resource.namespaced else f"{base}/{resource.plural}"


async def call(client: Client, method: str, path: str, body: Any = None,
               content_type: str = "application/json") -> tuple[int, Any]:
    data = None if body is None else json.dumps(body)
    response = await client.request(method, path, data=data, headers={"Content-Type": content_type})
    return response.status, await response.json()


def with_refs(body: dict[str, Any], refs: Refs) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["metadata"]["ownerReferences"] = refs
    return body


# --- the rules ---------------------------------------------------------------------------------------

TWO = [controller("ReplicaSet", "web", "u1"), controller("DaemonSet", "agent", "u2")]
THREE = [controller("ReplicaSet", "a", "u1"), owner("ReplicaSet", "b", "u2"), controller("ReplicaSet", "c", "u3"),
         controller("ReplicaSet", "d", "u4")]
EVENT = owner("Event", "web-1.17f", "u9", api_version="v1")


def only_one(refs: Refs, first: str, second: str) -> tuple[str, str]:
    return (REFS, f"Invalid value: {shown_list(refs)}: Only one reference can have Controller set to true. "
                  f'Found "true" in references for {first} and {second}')


BLANK_CONTROLLER = {"apiVersion": "", "kind": "", "name": "", "uid": "", "controller": True}
# id -> (owner references, the causes of the 422 as (field, message) in kube-apiserver's order)
RULES: dict[str, tuple[Refs, Causes]] = {
    "no-apiVersion": ([{k: v for k, v in owner().items() if k != "apiVersion"}],
                      [(f"{REFS}.apiVersion", 'Invalid value: "": version must not be empty')]),
    "apiVersion-without-a-version": ([owner(api_version="apps/")],
                                     [(f"{REFS}.apiVersion", 'Invalid value: "apps/": version must not be empty')]),
    "apiVersion-with-two-slashes": ([owner(api_version="apps/v1/extra")], [
        (f"{REFS}.apiVersion", 'Invalid value: "apps/v1/extra": version must not be empty')]),
    "no-kind": ([owner(kind="")], [(f"{REFS}.kind", 'Invalid value: "": kind must not be empty')]),
    "no-name": ([owner(name="")], [(f"{REFS}.name", 'Invalid value: "": name must not be empty')]),
    "no-uid": ([owner(uid="")], [(f"{REFS}.uid", 'Invalid value: "": uid must not be empty')]),
    "an-event-as-owner": ([owner(), EVENT], [
        (REFS, f"Invalid value: {shown(EVENT)}: /v1, Kind=Event is disallowed from being an owner")]),
    "two-controllers": (TWO, [only_one(TWO, "ReplicaSet/web", "DaemonSet/agent")]),
    "three-controllers": (THREE, [only_one(THREE, "ReplicaSet/a", "ReplicaSet/c"),
                                  only_one(THREE, "ReplicaSet/a", "ReplicaSet/d")]),
    "everything-wrong-at-once": ([BLANK_CONTROLLER, controller()], [
        (f"{REFS}.apiVersion", 'Invalid value: "": version must not be empty'),
        (f"{REFS}.kind", 'Invalid value: "": kind must not be empty'),
        (f"{REFS}.name", 'Invalid value: "": name must not be empty'),
        (f"{REFS}.uid", 'Invalid value: "": uid must not be empty'),
        only_one([BLANK_CONTROLLER, controller()], "/", "ReplicaSet/web")]),
}
VALID = [
    pytest.param([owner("DaemonSet", "agent", "u0"), controller(), owner("ReplicaSet", "old", "u2", controller=False)],
                 id="one-controller-among-owners"),
    pytest.param([owner(api_version="v1", kind="Node", name="node-1")], id="a-core-owner"),
    pytest.param([owner(api_version="example.com/v1alpha1", kind="Widget", name="w")], id="a-custom-resource-owner"),
    pytest.param([owner(api_version="events.k8s.io/v1", kind="Event", name="e")], id="an-events-k8s-io-event"),
]
KINDS = {"pod": R.PODS, "replicaset": R.REPLICASETS}


def expected_status(resource: ApiResource, name: str, causes: Causes) -> dict[str, Any]:
    messages = list(dict.fromkeys(f"{field}: {message}" for field, message in causes))
    text = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    details: dict[str, Any] = {"name": name, "kind": resource.kind,
                               "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}
                                          for field, message in causes]}
    if resource.group:
        details["group"] = resource.group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f'{resource.qualified_kind} "{name}" is invalid: {text}', "reason": "Invalid",
            "code": 422, "details": details}


# --- one way to write each: create, PUT and the three patch types -----------------------------------

Write = Callable[[Client, ApiResource, Refs], Awaitable[tuple[int, Any]]]


async def create(client: Client, resource: ApiResource, refs: Refs) -> tuple[int, Any]:
    return await call(client, "POST", collection(resource), with_refs(BODIES[resource](), refs))


async def put(client: Client, resource: ApiResource, refs: Refs) -> tuple[int, Any]:
    stored = await stored_object(client, resource)
    return await call(client, "PUT", item(resource, stored), with_refs(stored, refs))


async def merge_patch(client: Client, resource: ApiResource, refs: Refs) -> tuple[int, Any]:
    stored = await stored_object(client, resource)
    return await call(client, "PATCH", item(resource, stored), {"metadata": {"ownerReferences": refs}},
                      "application/merge-patch+json")


async def json_patch(client: Client, resource: ApiResource, refs: Refs) -> tuple[int, Any]:
    stored = await stored_object(client, resource)
    return await call(client, "PATCH", item(resource, stored),
                      [{"op": "add", "path": "/metadata/ownerReferences", "value": refs}],
                      "application/json-patch+json")


async def strategic_merge_patch(client: Client, resource: ApiResource, refs: Refs) -> tuple[int, Any]:
    stored = await stored_object(client, resource)
    return await call(client, "PATCH", item(resource, stored), {"metadata": {"ownerReferences": refs}},
                      "application/strategic-merge-patch+json")


WRITES: dict[str, Write] = {"create": create, "put": put, "merge-patch": merge_patch, "json-patch": json_patch,
                            "strategic-merge-patch": strategic_merge_patch}


def item(resource: ApiResource, obj: dict[str, Any]) -> str:
    return f"{collection(resource)}/{obj['metadata']['name']}"


async def stored_object(client: Client, resource: ApiResource) -> dict[str, Any]:
    """The object the update paths write to, created once without owners."""
    name = BODIES[resource]()["metadata"]["name"]
    code, obj = await call(client, "GET", f"{collection(resource)}/{name}")
    if code == 404:
        code, obj = await call(client, "POST", collection(resource), BODIES[resource]())
    assert code in (200, 201), obj
    return dict(obj)


def refusals() -> list[Any]:
    """Every rule through every write, for a pod and a ReplicaSet."""
    return [pytest.param(write, kind, refs, causes, id=f"{rule}-{kind_id}-{write_id}")
            for rule, (refs, causes) in RULES.items() for kind_id, kind in KINDS.items()
            for write_id, write in WRITES.items()]


@pytest.mark.parametrize(("write", "resource", "refs", "causes"), refusals())
async def test_a_bad_owner_reference_is_refused_with_kube_apiservers_status(
        client: Client, write: Write, resource: ApiResource, refs: Refs, causes: Causes) -> None:
    """Each rule answers 422 with kube-apiserver's message and causes; an update leaves the object as it was."""
    before = None if write is create else await stored_object(client, resource)

    code, status = await write(client, resource, refs)

    name = BODIES[resource]()["metadata"]["name"]
    assert (code, status) == (422, expected_status(resource, name, causes))
    after_code, after = await call(client, "GET", f"{collection(resource)}/{name}")
    if before is None:
        assert after_code == 404, after
    else:
        assert (after_code, after) == (200, before)


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
@pytest.mark.parametrize("resource", KINDS.values(), ids=KINDS.keys())
@pytest.mark.parametrize("refs", VALID)
async def test_good_owner_references_are_stored(client: Client, write: Write, resource: ApiResource,
                                                refs: Refs) -> None:
    """References kube-apiserver accepts are stored as sent, whichever way they are written."""
    code, stored = await write(client, resource, refs)
    assert code in (200, 201), stored
    assert stored["metadata"]["ownerReferences"] == refs


async def test_a_strategic_merge_adding_a_second_controller_changes_nothing(client: Client) -> None:
    """The issue's case: the patch merges by uid into a list that already has a controller, and is refused."""
    first = controller("ReplicaSet", "web", "u1")
    code, pod = await call(client, "POST", collection(R.PODS), with_refs(pod_body(), [first]))
    assert code == 201, pod
    second = controller("ReplicaSet", "web-2", "u2")

    code, status = await call(client, "PATCH", item(R.PODS, pod), {"metadata": {"ownerReferences": [second]}},
                              "application/strategic-merge-patch+json")

    # the merged list puts the patch's new element first, as strategicpatch's normalizeElementOrder does
    assert (code, status) == (422, expected_status(R.PODS, "web-1", [
        only_one([second, first], "ReplicaSet/web-2", "ReplicaSet/web")]))
    code, after = await call(client, "GET", item(R.PODS, pod))
    assert (code, after) == (200, pod)


async def test_a_strategic_merge_by_uid_that_keeps_one_controller_is_stored(client: Client) -> None:
    """Releasing the old controller and adding a new one in the same patch leaves one controller: accepted."""
    first = controller("ReplicaSet", "web", "u1")
    code, pod = await call(client, "POST", collection(R.PODS), with_refs(pod_body(), [first]))
    assert code == 201, pod
    second = controller("ReplicaSet", "web-2", "u2")

    code, patched = await call(client, "PATCH", item(R.PODS, pod),
                               {"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "u1"}, second]}},
                               "application/strategic-merge-patch+json")

    assert code == 200, patched
    assert patched["metadata"]["ownerReferences"] == [second]


@pytest.mark.parametrize("resource", [pytest.param(r, id=r.plural) for r in R.ALL])
async def test_every_kind_refuses_two_controllers_on_create_and_update(client: Client, resource: ApiResource) -> None:
    """Every kind the sim serves runs the ownerReferences rules, on create and on a merge patch."""
    code, status = await create(client, resource, TWO)
    name = BODIES[resource]()["metadata"]["name"]
    assert (code, status) == (422, expected_status(resource, name, [only_one(TWO, "ReplicaSet/web",
                                                                              "DaemonSet/agent")]))

    before = await stored_object(client, resource)
    code, status = await merge_patch(client, resource, TWO)
    assert (code, status) == (422, expected_status(resource, name, [only_one(TWO, "ReplicaSet/web",
                                                                              "DaemonSet/agent")]))
    assert await call(client, "GET", item(resource, before)) == (200, before)


@pytest.mark.parametrize("resource", [pytest.param(r, id=r.plural) for r in R.ALL])
async def test_every_kind_refuses_an_event_as_owner(client: Client, resource: ApiResource) -> None:
    """The banned-owners rule holds for every kind, Events included."""
    code, status = await create(client, resource, [EVENT])
    name = BODIES[resource]()["metadata"]["name"]
    assert (code, status) == (422, expected_status(resource, name, [
        (REFS, f"Invalid value: {shown(EVENT)}: /v1, Kind=Event is disallowed from being an owner")]))


@pytest.mark.parametrize("write", [w for w in WRITES.values() if w is not create],
                         ids=[k for k, w in WRITES.items() if w is not create])
async def test_an_owner_reference_to_the_object_itself_is_accepted(client: Client, write: Write) -> None:
    """kube-apiserver compares no reference with the object's own uid, so neither does the sim."""
    stored = await stored_object(client, R.REPLICASETS)
    own = controller("ReplicaSet", stored["metadata"]["name"], stored["metadata"]["uid"])

    code, written = await write(client, R.REPLICASETS, [own])

    assert code == 200, written
    assert written["metadata"]["ownerReferences"] == [own]


def test_an_event_update_reports_owner_references_beside_the_legacy_errors() -> None:
    """BeforeUpdate's common ObjectMeta checks come first and run whatever legacyValidateEvent finds."""
    old = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default", "uid": "e-uid"},
           "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-1"}}
    new = with_refs(old, TWO)
    new["involvedObject"]["namespace"] = "other"

    errors = [(error.field, error.body()) for error in validate("Event", new, old)]

    assert errors == [only_one(TWO, "ReplicaSet/web", "DaemonSet/agent"),
                      ("involvedObject.namespace", 'Invalid value: "other": does not match event.namespace')]
