"""`kubus sim` driven by the official `kubernetes` Python client: the API semantics controllers rely on."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.simulation import SimProcess, wait_for

GENERATED_NAME = re.compile(r"^web-[bcdfghjklmnpqrstvwxz2456789]{5}$")


# --- fixtures and helpers ------------------------------------------------------------------------------
def api_client(kubeconfig: Path) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(cfg)


@pytest.fixture(scope="module")
def api(sim: SimProcess) -> Iterator[client.ApiClient]:
    with api_client(sim.kubeconfig) as api:
        yield api


@pytest.fixture(scope="module")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


@pytest.fixture(scope="module")
def small_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """A sim of its own that keeps only 20 watch events and sends bookmarks every 0.2 s."""
    proc = SimProcess(tmp_path_factory.mktemp("small-sim"), "--nodes", "1", "--watch-history", "20",
                      "--bookmark-interval", "0.2", "--kubelet-delay", "0.05", "--seed", "3")
    yield proc
    assert proc.stop() == 0, proc.log_path.read_text()


@pytest.fixture(scope="module")
def idle_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """A sim of its own without kubelets: pod status is the client's to write."""
    proc = SimProcess(tmp_path_factory.mktemp("idle-sim"), "--nodes", "2", "--no-kubelet", "--seed", "5")
    yield proc
    assert proc.stop() == 0, proc.log_path.read_text()


@pytest.fixture
def faults(sim: SimProcess) -> Iterator[SimProcess]:
    """The shared sim, with its fault injection rules cleared after the test."""
    yield sim
    code, body = sim.request("DELETE", "/sim/faults")
    assert code == 200 and body["rules"] == [], body


def pod(name: str, *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        owner: Any = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner.metadata.name,
                                    "uid": owner.metadata.uid, "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}], **spec}}


def replicaset(name: str, replicas: int = 1, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta,
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"rs": name}},
                     "template": {"metadata": {"labels": {"rs": name}},
                                  "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}}


def delete_rs(apps: client.AppsV1Api, namespace: str, name: str, policy: str | None = None) -> dict[str, Any]:
    """Deletes a ReplicaSet and returns the raw answer: a Status, or the object while finalizers hold it."""
    answer = apps.delete_namespaced_replica_set(name, namespace, propagation_policy=policy, _preload_content=False)
    body: dict[str, Any] = json.loads(answer.data)
    return body


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def condition(obj: Any, kind: str) -> Any:
    return next((c for c in obj.status.conditions or [] if c.type == kind), None)


def watch_until(func: Any, *args: Any, last: str, **kwargs: Any) -> list[tuple[str, str, int]]:
    """(type, name, resourceVersion) of each event up to and including the one for object `last`."""
    seen = []
    w = watch.Watch()
    for event in w.stream(func, *args, timeout_seconds=10, **kwargs):
        obj = event["object"]
        seen.append((event["type"], obj.metadata.name, int(obj.metadata.resource_version)))
        if obj.metadata.name == last:
            w.stop()
    assert seen and seen[-1][1] == last, f"the watch ended before {last}: {seen}"
    return seen


def raw_lines(sim: SimProcess, path: str, limit: int) -> list[dict[str, Any]]:
    """The first `limit` frames of a streamed response, read with plain HTTP."""
    frames = []
    with urllib.request.urlopen(sim.url + path, timeout=10) as resp:
        assert resp.status == 200
        for line in resp:
            frames.append(json.loads(line))
            if len(frames) >= limit:
                break
    return frames


# --- list: selectors and pagination ---------------------------------------------------------------------
@pytest.mark.parametrize("label_selector, field_selector, expected", [
    pytest.param("app=a", None, {"a1", "a2"}, id="label-equals"),
    pytest.param("app in (a,b)", None, {"a1", "a2", "b1"}, id="label-in"),
    pytest.param("!app", None, {"none"}, id="label-absent"),
    pytest.param("app,tier notin (db)", None, {"a1", "b1"}, id="label-exists-notin"),
    pytest.param(None, "metadata.name=a2", {"a2"}, id="field-name"),
    pytest.param(None, "spec.nodeName=node-1", {"a1", "none"}, id="field-node"),
    pytest.param(None, "spec.nodeName!=node-1", {"a2", "b1"}, id="field-node-not"),
    pytest.param("app=a", "spec.nodeName=node-1", {"a1"}, id="label-and-field"),
])
def test_list_with_selectors(core: client.CoreV1Api, namespace: str, label_selector: str | None,
                             field_selector: str | None, expected: set[str]) -> None:
    """Lists honour label and field selectors, alone and together."""
    for name, labels, node in [("a1", {"app": "a"}, "node-1"), ("a2", {"app": "a", "tier": "db"}, "node-2"),
                               ("b1", {"app": "b"}, "node-0"), ("none", None, "node-1")]:
        core.create_namespaced_pod(namespace, pod(name, labels=labels, nodeName=node))
    listed = core.list_namespaced_pod(namespace, label_selector=label_selector, field_selector=field_selector)
    assert {p.metadata.name for p in listed.items} == expected


def test_list_with_unsupported_field_selector_is_bad_request(core: client.CoreV1Api, namespace: str) -> None:
    """A field selector on a field the kind does not index is refused with 400."""
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod(namespace, field_selector="spec.containers=x")
    assert caught.value.status == 400
    assert status_of(caught.value)["reason"] == "BadRequest"


def test_list_pagination(core: client.CoreV1Api, namespace: str) -> None:
    """limit/continue pages through 25 pods in pages of 10, from one consistent snapshot."""
    expected = {f"p{i:02d}" for i in range(25)}
    for name in sorted(expected):
        core.create_namespaced_pod(namespace, pod(name))
    pages, remaining, seen = [], [], []
    token = None
    list_rv = None
    while True:
        page = core.list_namespaced_pod(namespace, limit=10, _continue=token)
        pages.append(len(page.items))
        remaining.append(page.metadata.remaining_item_count)
        seen += [p.metadata.name for p in page.items]
        list_rv = list_rv or page.metadata.resource_version
        assert page.metadata.resource_version == list_rv  # every page is served from the first page's version
        token = page.metadata._continue
        if not token:
            break
        if len(pages) == 1:  # written between pages: a consistent list does not show it
            core.create_namespaced_pod(namespace, pod("p99"))
    assert pages == [10, 10, 5]
    assert remaining == [15, 5, None]
    assert len(seen) == len(set(seen)) == 25
    assert set(seen) == expected
    assert seen == sorted(seen)
    assert len(core.list_namespaced_pod(namespace).items) == 26


def test_list_with_bad_continue_token(core: client.CoreV1Api, namespace: str) -> None:
    """A continue token that is not one the server issued is refused with 400."""
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod(namespace, limit=1, _continue="not-a-token")
    assert caught.value.status == 400


# --- watch ---------------------------------------------------------------------------------------------
def _replicaset_history(apps: client.AppsV1Api, namespace: str) -> None:
    """Writes a fixed sequence of ReplicaSet changes ending with the `zz-end` sentinel (app=x)."""
    apps.create_namespaced_replica_set(namespace, replicaset("a", labels={"app": "x"}))
    apps.create_namespaced_replica_set(namespace, replicaset("b", labels={"app": "y"}))
    apps.patch_namespaced_replica_set("a", namespace, {"metadata": {"labels": {"tier": "1"}}})
    apps.patch_namespaced_replica_set("b", namespace, {"metadata": {"labels": {"app": "x"}}})
    apps.patch_namespaced_replica_set("a", namespace, {"metadata": {"labels": {"app": "z"}}})
    assert delete_rs(apps, namespace, "b")["status"] == "Success"
    apps.create_namespaced_replica_set(namespace, replicaset("zz-end", labels={"app": "x"}))


@pytest.mark.parametrize("label_selector, expected", [
    pytest.param(None, [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("MODIFIED", "b"), ("MODIFIED", "a"),
                        ("DELETED", "b"), ("ADDED", "zz-end")], id="everything"),
    # a change into the selector is ADDED for this watcher, a change out of it DELETED
    pytest.param("app=x", [("ADDED", "a"), ("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a"), ("DELETED", "b"),
                           ("ADDED", "zz-end")], id="label-selector"),
])
def test_watch_from_resource_version(apps: client.AppsV1Api, namespace: str, label_selector: str | None,
                                     expected: list[tuple[str, str]]) -> None:
    """A watch from a list's resourceVersion sees exactly the later events, in order."""
    apps.create_namespaced_replica_set(namespace, replicaset("earlier", labels={"app": "x"}))
    start = apps.list_namespaced_replica_set(namespace).metadata.resource_version
    _replicaset_history(apps, namespace)
    events = watch_until(apps.list_namespaced_replica_set, namespace, resource_version=start,
                         label_selector=label_selector, last="zz-end")
    assert [(t, n) for t, n, _ in events] == expected
    versions = [rv for _, _, rv in events]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert versions[0] > int(start)


def test_watch_without_resource_version_starts_with_current_objects(apps: client.AppsV1Api, namespace: str) -> None:
    """A watch without a resourceVersion first lists the current objects as ADDED, then streams changes."""
    apps.create_namespaced_replica_set(namespace, replicaset("one"))
    apps.create_namespaced_replica_set(namespace, replicaset("two"))
    seen = []
    w = watch.Watch()
    for event in w.stream(apps.list_namespaced_replica_set, namespace, timeout_seconds=10):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 2:
            apps.create_namespaced_replica_set(namespace, replicaset("zz-end"))
        if event["object"].metadata.name == "zz-end":
            w.stop()
    assert seen == [("ADDED", "one"), ("ADDED", "two"), ("ADDED", "zz-end")]


def test_watch_resume_loses_and_duplicates_nothing(apps: client.AppsV1Api, namespace: str) -> None:
    """Stopping a watch after a few events and resuming from the last seen version continues exactly there."""
    start = apps.list_namespaced_replica_set(namespace).metadata.resource_version
    _replicaset_history(apps, namespace)
    full = watch_until(apps.list_namespaced_replica_set, namespace, resource_version=start, last="zz-end")
    first = []
    w = watch.Watch()
    for event in w.stream(apps.list_namespaced_replica_set, namespace, resource_version=start, timeout_seconds=10):
        first.append((event["type"], event["object"].metadata.name, int(event["object"].metadata.resource_version)))
        if len(first) == 3:
            w.stop()
    assert w.resource_version == str(first[-1][2])
    rest = watch_until(apps.list_namespaced_replica_set, namespace, resource_version=w.resource_version,
                       last="zz-end")
    assert first + rest == full
    assert len(full) == 7


def _write_many(core: client.CoreV1Api, count: int) -> None:
    core.create_namespace({"metadata": {"name": "churn", "labels": {"n": "0"}}})
    for i in range(1, count):
        core.patch_namespace("churn", {"metadata": {"labels": {"n": str(i)}}})


@pytest.mark.parametrize("kwargs", [
    pytest.param({"timeout_seconds": 5}, id="no-retry-with-timeout"),
    pytest.param({"_request_timeout": 10}, id="after-one-retry"),
])
def test_watch_past_history_is_gone(small_sim: SimProcess, kwargs: dict[str, Any]) -> None:
    """A watch from a version older than the history window raises ApiException 410 in the client."""
    with api_client(small_sim.kubeconfig) as api:
        core = client.CoreV1Api(api)
        if core.list_namespace(field_selector="metadata.name=churn").items == []:
            _write_many(core, 65)
        with pytest.raises(ApiException) as caught:
            for _ in watch.Watch().stream(core.list_namespace, resource_version="2", **kwargs):
                pass
    assert caught.value.status == 410
    assert "Expired" in caught.value.reason


def test_raw_watch_past_history_gets_expired_status(small_sim: SimProcess) -> None:
    """Over plain HTTP, a too-old watch gets one ERROR frame carrying a 410 Expired Status."""
    with api_client(small_sim.kubeconfig) as api:
        core = client.CoreV1Api(api)
        if core.list_namespace(field_selector="metadata.name=churn").items == []:
            _write_many(core, 65)
    frames = raw_lines(small_sim, "/api/v1/namespaces?watch=true&resourceVersion=2", 2)
    assert len(frames) == 1
    assert frames[0]["type"] == "ERROR"
    status = frames[0]["object"]
    assert (status["kind"], status["apiVersion"], status["status"]) == ("Status", "v1", "Failure")
    assert (status["code"], status["reason"]) == (410, "Expired")
    assert status["message"].startswith("too old resource version: 2 (")


def test_watch_bookmarks(small_sim: SimProcess) -> None:
    """With allowWatchBookmarks a quiet watch gets BOOKMARK events carrying the current resourceVersion."""
    with api_client(small_sim.kubeconfig) as api:
        core = client.CoreV1Api(api)
        current = core.list_namespace().metadata.resource_version
        w = watch.Watch()
        seen = []
        for event in w.stream(core.list_namespace, resource_version=current, allow_watch_bookmarks=True,
                              timeout_seconds=5):
            seen.append(event)
            if len([e for e in seen if e["type"] == "BOOKMARK"]) == 2:
                w.stop()
    assert [e["type"] for e in seen] == ["BOOKMARK", "BOOKMARK"]
    bookmark = seen[0]["raw_object"]
    assert bookmark["kind"] == "Namespace"
    assert bookmark["metadata"]["resourceVersion"] == current
    assert w.resource_version == current


def test_watch_timeout_ends_the_stream(small_sim: SimProcess) -> None:
    """timeoutSeconds ends a quiet watch after that long, with no bookmarks unless they were asked for."""
    with api_client(small_sim.kubeconfig) as api:
        core = client.CoreV1Api(api)
        current = core.list_namespace().metadata.resource_version
        began = time.monotonic()
        events = list(watch.Watch().stream(core.list_namespace, resource_version=current, timeout_seconds=1))
        elapsed = time.monotonic() - began
    assert events == []
    assert 0.9 <= elapsed < 3.0


# --- writes: concurrency, generation, status -------------------------------------------------------------
def test_update_with_stale_resource_version_conflicts(apps: client.AppsV1Api, namespace: str) -> None:
    """A replace carrying an outdated resourceVersion fails with 409 Conflict; the fresh one succeeds."""
    created = apps.create_namespaced_replica_set(namespace, replicaset("r"))
    created.spec.replicas = 2
    updated = apps.replace_namespaced_replica_set("r", namespace, created)
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    created.spec.replicas = 3
    with pytest.raises(ApiException) as caught:
        apps.replace_namespaced_replica_set("r", namespace, created)
    assert caught.value.status == 409
    status = status_of(caught.value)
    assert status["reason"] == "Conflict"
    assert status["message"] == ('Operation cannot be fulfilled on replicasets.apps "r": the object has been '
                                 "modified; please apply your changes to the latest version and try again")
    assert status["details"] == {"name": "r", "group": "apps", "kind": "replicasets"}
    assert apps.read_namespaced_replica_set("r", namespace).spec.replicas == 2


def test_update_with_another_uid_conflicts(apps: client.AppsV1Api, namespace: str) -> None:
    """A replace whose metadata.uid is not the stored object's fails its storage precondition with 409."""
    body = apps.create_namespaced_replica_set(namespace, replicaset("r"))
    stored_uid = body.metadata.uid
    body.metadata.uid = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(ApiException) as caught:
        apps.replace_namespaced_replica_set("r", namespace, body)
    assert caught.value.status == 409
    assert status_of(caught.value)["message"].endswith(
        f"Key: /registry/replicasets/{namespace}/r, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: "
        f"UID in precondition: 00000000-0000-4000-8000-000000000000, UID in object meta: {stored_uid}")


@pytest.mark.parametrize("patch, generation", [
    pytest.param({"metadata": {"labels": {"x": "y"}}}, 1, id="labels-keep-generation"),
    pytest.param({"metadata": {"annotations": {"x": "y"}}}, 1, id="annotations-keep-generation"),
    pytest.param({"spec": {"replicas": 5}}, 2, id="replicas-bump-generation"),
    pytest.param({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:2"}]}}}}, 2,
                 id="template-bumps-generation"),
])
def test_generation_bumps_only_on_spec_change(apps: client.AppsV1Api, namespace: str, patch: dict[str, Any],
                                              generation: int) -> None:
    """metadata.generation of a ReplicaSet moves only when its spec changes."""
    created = apps.create_namespaced_replica_set(namespace, replicaset("r"))
    assert created.metadata.generation == 1
    patched = apps.patch_namespaced_replica_set("r", namespace, patch)
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)
    assert patched.metadata.generation == generation


def test_status_subresource_split(apps: client.AppsV1Api, namespace: str) -> None:
    """/status writes only status; a write of the main resource ignores status."""
    created = apps.create_namespaced_replica_set(namespace, replicaset("r", 2))
    assert created.status.replicas == 0
    body = apps.read_namespaced_replica_set("r", namespace)
    body.status.replicas, body.status.ready_replicas, body.status.observed_generation = 2, 1, 1
    body.spec.replicas = 9
    after_status = apps.replace_namespaced_replica_set_status("r", namespace, body)
    assert (after_status.status.replicas, after_status.status.ready_replicas) == (2, 1)
    assert after_status.spec.replicas == 2
    assert after_status.metadata.generation == 1
    after_status.status.replicas = 7
    after_status.metadata.labels = {"tier": "web"}
    after_main = apps.replace_namespaced_replica_set("r", namespace, after_status)
    assert after_main.status.replicas == 2
    assert after_main.metadata.labels == {"tier": "web"}
    read = apps.read_namespaced_replica_set_status("r", namespace)
    assert (read.status.replicas, read.status.ready_replicas, read.spec.replicas) == (2, 1, 2)


@pytest.mark.parametrize("preconditions, field", [
    pytest.param({"uid": "00000000-0000-4000-8000-000000000000"}, "UID", id="uid"),
    pytest.param({"resourceVersion": "1"}, "ResourceVersion", id="resource-version"),
])
def test_delete_precondition_mismatch_conflicts(core: client.CoreV1Api, namespace: str,
                                                preconditions: dict[str, str], field: str) -> None:
    """A delete whose uid or resourceVersion precondition does not match fails with 409; nothing is deleted."""
    core.create_namespaced_pod(namespace, pod("p"))
    with pytest.raises(ApiException) as caught:
        core.delete_namespaced_pod("p", namespace, body={"preconditions": preconditions})
    assert caught.value.status == 409
    status = status_of(caught.value)
    assert status["reason"] == "Conflict"
    live = core.read_namespaced_pod("p", namespace)
    actual = live.metadata.uid if field == "UID" else live.metadata.resource_version
    # as kube-apiserver's rest.BeforeDelete answers it (the real one: tests/controlplane/test_kubus_on_controlplane.py)
    why = "deleted and then recreated" if field == "UID" else "modified"
    assert status["message"] == (
        f'Operation cannot be fulfilled on Pod "p": the {field} in the precondition '
        f"({next(iter(preconditions.values()))}) does not match the {field} in record ({actual}). "
        f"The object might have been {why}")
    assert status["details"] == {"name": "p", "kind": "Pod"}
    assert live.metadata.deletion_timestamp is None
    core.delete_namespaced_pod("p", namespace, body={"preconditions": {"uid": live.metadata.uid}},
                               grace_period_seconds=0)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("p", namespace)
    assert gone.value.status == 404


# --- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, message, details", [
    pytest.param("pod", 'pods "missing" not found', {"name": "missing", "kind": "pods"}, id="pod"),
    pytest.param("rs", 'replicasets.apps "missing" not found', {"name": "missing", "group": "apps",
                                                                  "kind": "replicasets"}, id="replicaset"),
])
def test_not_found_status(core: client.CoreV1Api, apps: client.AppsV1Api, namespace: str, kind: str,
                          message: str, details: dict[str, str]) -> None:
    """Reading a missing object fails with a 404 Status: reason NotFound, message and details."""
    read = core.read_namespaced_pod if kind == "pod" else apps.read_namespaced_replica_set
    with pytest.raises(ApiException) as caught:
        read("missing", namespace)
    assert caught.value.status == 404
    status = status_of(caught.value)
    assert status == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": "NotFound", "details": details, "code": 404}


def _no_containers() -> dict[str, Any]:
    body = pod("empty")
    body["spec"]["containers"] = []
    return body


def _mismatched_selector() -> dict[str, Any]:
    body = replicaset("mismatch")
    body["spec"]["template"]["metadata"]["labels"] = {"rs": "other"}
    return body


def _bad_image_pull_policy() -> dict[str, Any]:
    body = pod("policy")
    body["spec"]["containers"][0]["imagePullPolicy"] = "Sometimes"
    return body


@pytest.mark.parametrize("kind, body, field", [
    pytest.param("pod", pod("Bad_Name"), "metadata.name", id="pod-name"),
    pytest.param("pod", _no_containers(), "spec.containers", id="pod-no-containers"),
    pytest.param("pod", pod("labels", labels={"app": "bad value!"}), "metadata.labels", id="pod-label-value"),
    pytest.param("pod", _bad_image_pull_policy(), "spec.containers[0].imagePullPolicy", id="pod-pull-policy"),
    pytest.param("rs", replicaset("negative", -1), "spec.replicas", id="rs-negative-replicas"),
    pytest.param("rs", _mismatched_selector(), "spec.template.metadata.labels", id="rs-selector-mismatch"),
])
def test_invalid_object_is_422_with_causes(core: client.CoreV1Api, apps: client.AppsV1Api, namespace: str,
                                           kind: str, body: dict[str, Any], field: str) -> None:
    """An invalid object is refused with 422 Invalid whose causes name the field at fault."""
    create = core.create_namespaced_pod if kind == "pod" else apps.create_namespaced_replica_set
    with pytest.raises(ApiException) as caught:
        create(namespace, body)
    assert caught.value.status == 422
    status = status_of(caught.value)
    assert status["reason"] == "Invalid"
    qualified = "Pod" if kind == "pod" else "ReplicaSet.apps"
    assert status["message"].startswith(f'{qualified} "{body["metadata"]["name"]}" is invalid: ')
    assert field in [c.get("field") for c in status["details"]["causes"]], status
    assert field in status["message"]
    # NewInvalid names the kind in its details, so kubectl says `The ReplicaSet "x" is invalid`
    assert status["details"]["kind"] == qualified.split(".")[0]
    assert status["details"].get("group") == ("apps" if kind == "rs" else None)
    assert status["details"]["name"] == body["metadata"]["name"]


def test_duplicate_name_already_exists(core: client.CoreV1Api, namespace: str) -> None:
    """Creating a second object with a taken name fails with 409 AlreadyExists."""
    first = core.create_namespaced_pod(namespace, pod("twice"))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(namespace, pod("twice"))
    assert caught.value.status == 409
    status = status_of(caught.value)
    assert (status["reason"], status["message"]) == ("AlreadyExists", 'pods "twice" already exists')
    assert status["details"] == {"name": "twice", "kind": "pods"}
    assert core.read_namespaced_pod("twice", namespace).metadata.uid == first.metadata.uid


def test_generate_name(core: client.CoreV1Api, namespace: str) -> None:
    """generateName gives `prefix` plus 5 characters from apimachinery's alphabet, a new name each time."""
    created = []
    for _ in range(5):
        body = pod("")
        body["metadata"] = {"generateName": "web-"}
        created.append(core.create_namespaced_pod(namespace, body))
    names = [p.metadata.name for p in created]
    assert all(GENERATED_NAME.match(n) for n in names), names
    assert len(set(names)) == 5
    assert all(p.metadata.generate_name == "web-" for p in created)
    assert len({p.metadata.uid for p in created}) == 5


@pytest.mark.parametrize("method, path, body, content_type, code", [
    pytest.param("POST", "/api/v1/namespaces/NS/pods", b'{"metadata": {"name": "x"', "application/json", 400,
                 id="malformed-json"),
    pytest.param("POST", "/api/v1/namespaces/NS/pods", b"metadata: {name: [\n", "application/yaml", 400,
                 id="malformed-yaml"),
    pytest.param("POST", "/api/v1/namespaces/NS/pods", b"<pod/>", "application/xml", 415, id="unknown-media-type"),
    pytest.param("GET", "/api/v1/namespaces/NS/widgets", None, "application/json", 404, id="unknown-resource"),
    pytest.param("GET", "/api/v1/namespaces/NS/pods?labelSelector=a+in+(b", None, "application/json", 400,
                 id="bad-label-selector"),
    pytest.param("GET", "/api/v1/namespaces/NS/pods?watch=true&resourceVersion=abc", None, "application/json",
                 400, id="bad-watch-version"),
])
def test_malformed_requests(sim: SimProcess, namespace: str, method: str, path: str, body: bytes | None,
                            content_type: str, code: int) -> None:
    """Requests the server cannot parse get a Status error with the matching code."""
    req = urllib.request.Request(sim.url + path.replace("NS", namespace), data=body, method=method,
                                 headers={"Content-Type": content_type, "Accept": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(req, timeout=10)
    assert caught.value.code == code
    status = json.loads(caught.value.read())
    caught.value.close()
    assert status["kind"] == "Status" and status["code"] == code


# --- dry run -----------------------------------------------------------------------------------------------
def test_dry_run_writes_nothing(core: client.CoreV1Api, namespace: str) -> None:
    """dryRun=All create, patch and delete answer with the would-be object and store nothing."""
    core.create_namespaced_pod(namespace, pod("live"))
    live = _running_then(core, namespace, "live", "Running")
    created = core.create_namespaced_pod(namespace, pod("ghost"), dry_run="All")
    assert created.metadata.name == "ghost" and created.metadata.uid
    assert created.spec.termination_grace_period_seconds == 30  # defaulted as a real create would be
    patched = core.patch_namespaced_pod("live", namespace, {"metadata": {"labels": {"x": "y"}}}, dry_run="All")
    assert patched.metadata.labels == {"x": "y"}
    deleted = core.delete_namespaced_pod("live", namespace, dry_run="All")
    assert deleted.metadata.deletion_timestamp is not None
    assert [p.metadata.name for p in core.list_namespaced_pod(namespace).items] == ["live"]
    after = core.read_namespaced_pod("live", namespace)
    assert after.metadata.resource_version == live.metadata.resource_version
    assert not after.metadata.labels and after.metadata.deletion_timestamp is None


def test_dry_run_with_unknown_value_is_invalid(core: client.CoreV1Api, namespace: str) -> None:
    """A dryRun value other than All is refused with 422 and nothing is created."""
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(namespace, pod("p"), dry_run="Everything")
    assert caught.value.status == 422
    status = status_of(caught.value)
    assert status["message"] == ('CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: '
                                 '[]string{"Everything"}: supported values: "All"')
    assert _pod_names(core, namespace) == set()


# --- more watch and list shapes ------------------------------------------------------------------------------
def test_node_field_selector_watch_sees_binding_as_added(core: client.CoreV1Api, namespace: str) -> None:
    """A kubelet-style watch on spec.nodeName sees a pod ADDED when it is bound there, then its changes."""
    start = core.list_namespaced_pod(namespace).metadata.resource_version
    core.create_namespaced_pod(namespace, pod("elsewhere", nodeSelector={"kubernetes.io/hostname": "node-1"}))
    core.create_namespaced_pod(namespace, pod("here", nodeSelector={"kubernetes.io/hostname": "node-2"}))
    _running_then(core, namespace, "here", "Running")
    core.delete_namespaced_pod("here", namespace, grace_period_seconds=0)
    core.create_namespaced_pod(namespace, pod("zz-end", nodeName="node-2"))
    events = watch_until(core.list_namespaced_pod, namespace, resource_version=start,
                         field_selector="spec.nodeName=node-2", last="zz-end")
    assert [(t, n) for t, n, _ in events] == [("ADDED", "here"), ("MODIFIED", "here"), ("DELETED", "here"),
                                              ("ADDED", "zz-end")]


def test_watch_list_with_initial_events(sim: SimProcess, core: client.CoreV1Api, namespace: str) -> None:
    """sendInitialEvents=true streams the current objects, then a bookmark marking the end of them."""
    for name in ("a", "b"):
        core.create_namespaced_pod(namespace, pod(name))
    frames = raw_lines(sim, f"/api/v1/namespaces/{namespace}/pods?watch=true&sendInitialEvents=true"
                            "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5", 3)
    assert [(f["type"], f["object"]["metadata"].get("name")) for f in frames] == [
        ("ADDED", "a"), ("ADDED", "b"), ("BOOKMARK", None)]
    assert frames[2]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(frames[2]["object"]["metadata"]["resourceVersion"]) >= max(
        int(f["object"]["metadata"]["resourceVersion"]) for f in frames[:2])


def test_delete_collection_by_label(core: client.CoreV1Api, namespace: str) -> None:
    """deletecollection with a label selector deletes exactly the matching pods."""
    for name, app in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        core.create_namespaced_pod(namespace, pod(name, labels={"app": app}))
    core.delete_collection_namespaced_pod(namespace, label_selector="app=a", grace_period_seconds=0)
    assert _pod_names(core, namespace) == {"b1"}


def test_cluster_wide_pagination(core: client.CoreV1Api, namespace: str) -> None:
    """A cluster-wide list pages in (namespace, name) order without losing or repeating pods."""
    for i in range(3):
        core.create_namespaced_pod(namespace, pod(f"p{i}"))
    paged, token = [], None
    while True:
        page = core.list_pod_for_all_namespaces(limit=2, _continue=token)
        paged += [(p.metadata.namespace, p.metadata.name) for p in page.items]
        token = page.metadata._continue
        if not token:
            break
    # other tests' pods may finish terminating meanwhile, so compare the pages with themselves:
    # one consistent snapshot, in order, nothing twice, this test's pods included
    assert paged == sorted(set(paged))
    assert {(namespace, f"p{i}") for i in range(3)} <= set(paged)


def test_empty_optional_lists_and_maps_are_dropped(apps: client.AppsV1Api, namespace: str) -> None:
    """Empty omitempty fields (tolerations: [], nodeSelector: {}, env: []) are not stored, as in kube-apiserver."""
    body = replicaset("r")
    body["metadata"]["annotations"] = {}
    spec = body["spec"]["template"]["spec"]
    spec.update({"tolerations": [], "nodeSelector": {}, "volumes": []})
    spec["containers"][0].update({"env": [], "ports": []})
    apps.create_namespaced_replica_set(namespace, body)
    raw = json.loads(apps.read_namespaced_replica_set("r", namespace, _preload_content=False).data)
    stored = raw["spec"]["template"]["spec"]
    assert "annotations" not in raw["metadata"]
    assert not {"tolerations", "nodeSelector", "volumes"} & set(stored)
    assert not {"env", "ports"} & set(stored["containers"][0])


def test_finalizers_hold_a_deleted_object(apps: client.AppsV1Api, namespace: str) -> None:
    """An object with a finalizer stays, marked for deletion, until the finalizer is removed."""
    body = replicaset("held")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    apps.create_namespaced_replica_set(namespace, body)
    marked = delete_rs(apps, namespace, "held")
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["finalizers"] == ["example.com/keep"]
    assert apps.read_namespaced_replica_set("held", namespace).metadata.deletion_timestamp is not None
    apps.patch_namespaced_replica_set("held", namespace, {"metadata": {"finalizers": None}})
    assert apps.list_namespaced_replica_set(namespace).items == []


def test_no_new_finalizers_while_deleting(apps: client.AppsV1Api, namespace: str) -> None:
    """A finalizer cannot be added to an object that is being deleted (ValidateObjectMetaUpdate)."""
    body = replicaset("held")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    apps.create_namespaced_replica_set(namespace, body)
    delete_rs(apps, namespace, "held")
    try:
        with pytest.raises(ApiException) as caught:
            apps.patch_namespaced_replica_set("held", namespace, {"metadata": {
                "finalizers": ["example.com/keep", "example.com/more"]}})
        assert caught.value.status == 422
        assert "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted" \
            in status_of(caught.value)["message"]
    finally:
        apps.patch_namespaced_replica_set("held", namespace, {"metadata": {"finalizers": None}})


# --- the scheduler --------------------------------------------------------------------------------------
def test_unschedulable_pod_stays_pending(core: client.CoreV1Api, namespace: str) -> None:
    """A pod whose nodeSelector matches no node stays Pending with PodScheduled=False, reason Unschedulable."""
    core.create_namespaced_pod(namespace, pod("nowhere", nodeSelector={"disk": "floppy"}))
    cond = wait_for(lambda: condition(core.read_namespaced_pod("nowhere", namespace), "PodScheduled"),
                    what="a PodScheduled condition")
    assert (cond.status, cond.reason) == ("False", "Unschedulable")
    assert cond.message.startswith("0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector")
    live = core.read_namespaced_pod("nowhere", namespace)
    assert live.status.phase == "Pending"
    assert live.spec.node_name is None


def test_match_fields_pins_pod_to_node(core: client.CoreV1Api, namespace: str) -> None:
    """Required node affinity matchFields metadata.name In [node-2] puts every such pod on node-2."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-2"]}]}]}}}
    for i in range(4):
        core.create_namespaced_pod(namespace, pod(f"pinned-{i}", affinity=affinity))

    def placed() -> set[str] | None:
        nodes = {p.spec.node_name for p in core.list_namespaced_pod(namespace).items}
        return None if None in nodes else nodes

    assert wait_for(placed, what="pods bound") == {"node-2"}


@pytest.fixture
def tainted_node(core: client.CoreV1Api) -> Iterator[str]:
    """node-3 with a NoSchedule taint, removed after the test."""
    core.patch_node("node-3", {"spec": {"taints": [{"key": "dedicated", "value": "e2e", "effect": "NoSchedule"}]}})
    yield "node-3"
    core.patch_node("node-3", {"spec": {"taints": None}})


def test_taint_repels_pods_without_toleration(core: client.CoreV1Api, namespace: str, tainted_node: str) -> None:
    """Pods that do not tolerate a node's NoSchedule taint avoid it; a tolerating pod may land there."""
    here = {"kubernetes.io/hostname": tainted_node}
    toleration = [{"key": "dedicated", "operator": "Equal", "value": "e2e", "effect": "NoSchedule"}]
    core.create_namespaced_pod(namespace, pod("intolerant", nodeSelector=here))
    core.create_namespaced_pod(namespace, pod("tolerant", nodeSelector=here, tolerations=toleration))
    for i in range(8):
        core.create_namespaced_pod(namespace, pod(f"free-{i}"))
    cond = wait_for(lambda: (c := condition(core.read_namespaced_pod("intolerant", namespace), "PodScheduled"))
                    and c.status == "False" and c, what="intolerant pod unschedulable")
    assert "untolerated taint {dedicated: e2e}" in cond.message
    wait_for(lambda: core.read_namespaced_pod("tolerant", namespace).spec.node_name == tainted_node,
             what="tolerant pod bound to the tainted node")

    def free_nodes() -> set[str] | None:
        pods = core.list_namespaced_pod(namespace).items
        nodes = {p.spec.node_name for p in pods if p.metadata.name.startswith("free-")}
        return None if None in nodes else nodes

    nodes = wait_for(free_nodes, what="free pods bound")
    assert tainted_node not in nodes
    assert core.read_namespaced_pod("intolerant", namespace).spec.node_name is None


def test_unschedulable_pod_is_scheduled_once_a_node_fits(core: client.CoreV1Api, namespace: str) -> None:
    """A pod waiting for a node label is scheduled as soon as a node gets that label."""
    core.create_namespaced_pod(namespace, pod("waiting", nodeSelector={"e2e-disk": "ssd"}))
    wait_for(lambda: condition(core.read_namespaced_pod("waiting", namespace), "PodScheduled"),
             what="pod marked unschedulable")
    core.patch_node("node-0", {"metadata": {"labels": {"e2e-disk": "ssd"}}})
    try:
        wait_for(lambda: core.read_namespaced_pod("waiting", namespace).spec.node_name == "node-0",
                 what="pod scheduled on the relabelled node")
    finally:
        core.patch_node("node-0", {"metadata": {"labels": {"e2e-disk": None}}})
    assert condition(core.read_namespaced_pod("waiting", namespace), "PodScheduled").status == "True"


def test_other_scheduler_and_binding(core: client.CoreV1Api, namespace: str) -> None:
    """The sim's scheduler leaves pods of another schedulerName alone; POST pods/binding binds them."""
    core.create_namespaced_pod(namespace, pod("custom", schedulerName="my-scheduler"))
    core.create_namespaced_pod(namespace, pod("zz-default"))
    _running_then(core, namespace, "zz-default", "Running")
    assert core.read_namespaced_pod("custom", namespace).spec.node_name is None
    answer = core.create_namespaced_pod_binding("custom", namespace, {
        "metadata": {"name": "custom"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "node-3"}},
        _preload_content=False)
    assert answer.status == 201
    assert json.loads(answer.data)["status"] == "Success"
    _running_then(core, namespace, "custom", "Running")
    assert core.read_namespaced_pod("custom", namespace).spec.node_name == "node-3"
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod_binding("custom", namespace, {
            "metadata": {"name": "custom"}, "target": {"name": "node-1"}}, _preload_content=False)
    assert caught.value.status == 409
    assert 'is already assigned to node "node-3"' in status_of(caught.value)["message"]


# --- the kubelets -----------------------------------------------------------------------------------------
@pytest.fixture
def node_restored(sim: SimProcess) -> Iterator[str]:
    """node-1, made Ready again after the test."""
    yield "node-1"
    code, body = sim.request("POST", "/sim/nodes/node-1/ready", {"ready": True})
    assert code == 200, body


def test_node_not_ready_adds_taints(sim: SimProcess, core: client.CoreV1Api, node_restored: str) -> None:
    """/sim/nodes/NAME/ready false makes the node NotReady with the not-ready taints; true undoes it."""
    code, body = sim.request("POST", f"/sim/nodes/{node_restored}/ready", {"ready": False})
    assert code == 200, body
    node = core.read_node(node_restored)
    assert {(t.key, t.effect) for t in node.spec.taints} == {("node.kubernetes.io/not-ready", "NoSchedule"),
                                                             ("node.kubernetes.io/not-ready", "NoExecute")}
    assert condition(node, "Ready").status == "False"
    code, body = sim.request("POST", f"/sim/nodes/{node_restored}/ready", {"ready": True})
    assert code == 200, body
    node = core.read_node(node_restored)
    assert not node.spec.taints
    assert condition(node, "Ready").status == "True"


def _running_then(core: client.CoreV1Api, namespace: str, name: str, phase: str) -> Any:
    return wait_for(lambda: (p := core.read_namespaced_pod(name, namespace)).status.phase == phase and p,
                    what=f"{name} {phase}")


@pytest.mark.parametrize("annotation, value, phase, exit_code, reason", [
    pytest.param("sim.kubus.io/fail-after-seconds", "0.2", "Failed", 1, "Error", id="fail-after"),
    pytest.param("sim.kubus.io/succeed-after-seconds", "0.2", "Succeeded", 0, "Completed", id="succeed-after"),
])
def test_pod_lifecycle_annotations(core: client.CoreV1Api, namespace: str, annotation: str, value: str,
                                   phase: str, exit_code: int, reason: str) -> None:
    """A running pod annotated to fail or succeed after N seconds ends in that phase with that exit code."""
    core.create_namespaced_pod(namespace, pod("p", annotations={annotation: value}))
    done = _running_then(core, namespace, "p", phase)
    assert done.status.start_time is not None  # it ran first
    terminated = done.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (exit_code, reason)
    assert condition(done, "Ready").status == "False"


def test_never_ready_annotation(core: client.CoreV1Api, namespace: str) -> None:
    """`sim.kubus.io/never-ready` runs the pod without it ever becoming Ready."""
    core.create_namespaced_pod(namespace, pod("p", annotations={"sim.kubus.io/never-ready": "true"}))
    running = _running_then(core, namespace, "p", "Running")
    assert condition(running, "Ready").status == "False"
    assert condition(running, "ContainersReady").reason == "ContainersNotReady"
    assert running.status.container_statuses[0].ready is False


def test_fail_pod_endpoint(sim: SimProcess, core: client.CoreV1Api, namespace: str) -> None:
    """POST /sim/pods/NS/NAME/fail fails a running pod at once."""
    core.create_namespaced_pod(namespace, pod("victim"))
    _running_then(core, namespace, "victim", "Running")
    code, body = sim.request("POST", f"/sim/pods/{namespace}/victim/fail")
    assert code == 200, body
    assert core.read_namespaced_pod("victim", namespace).status.phase == "Failed"


def test_a_pod_a_finalizer_holds_is_reported_terminal_once_its_grace_period_ends(
        core: client.CoreV1Api, namespace: str) -> None:
    """As a real kubelet: the containers stop after the grace period and the pod, still there for its finalizer,
    is Succeeded with its containers terminated (so a ReplicaSet no longer counts it as terminating); it goes
    once the finalizer is removed."""
    body = pod("held")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    core.create_namespaced_pod(namespace, body)
    _running_then(core, namespace, "held", "Running")
    core.delete_namespaced_pod("held", namespace, grace_period_seconds=1)
    done = _running_then(core, namespace, "held", "Succeeded")
    assert done.metadata.deletion_timestamp is not None
    assert [s.state.terminated.exit_code for s in done.status.container_statuses] == [0]
    core.patch_namespaced_pod("held", namespace, {"metadata": {"finalizers": None}})

    def gone() -> bool:
        try:
            core.read_namespaced_pod("held", namespace)
        except client.ApiException as exc:
            return exc.status == 404
        return False
    wait_for(gone, what="the pod gone once its finalizer is")


def test_no_kubelet_leaves_status_to_the_client(idle_sim: SimProcess) -> None:
    """Without kubelets a bound pod stays Pending until a client writes Running and Ready through /status."""
    with api_client(idle_sim.kubeconfig) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod("default", pod("manual"))
        bound = wait_for(lambda: (p := core.read_namespaced_pod("manual", "default")).spec.node_name and p,
                         what="pod bound")
        assert bound.spec.node_name in ("node-0", "node-1")
        assert bound.status.phase == "Pending"
        assert not bound.status.container_statuses
        now = "2025-01-01T00:00:00Z"
        status = {"phase": "Running", "podIP": "10.9.9.9", "startTime": now,
                  "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                                 for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                  "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "image": "nginx:1.27",
                                         "imageID": "", "started": True, "state": {"running": {"startedAt": now}}}]}
        core.patch_namespaced_pod_status("manual", "default", {"status": status})
        live = core.read_namespaced_pod("manual", "default")
        assert live.status.phase == "Running"
        assert live.status.pod_ip == "10.9.9.9"
        assert condition(live, "Ready").status == "True"
        assert live.spec.node_name == bound.spec.node_name
        # nobody finishes a graceful deletion on a node without a kubelet, until a forced delete
        core.delete_namespaced_pod("manual", "default")
        assert core.read_namespaced_pod("manual", "default").metadata.deletion_timestamp is not None
        core.delete_namespaced_pod("manual", "default", grace_period_seconds=0)
        assert core.list_namespaced_pod("default").items == []


# --- garbage collection ---------------------------------------------------------------------------------------
def _owner_with_pods(core: client.CoreV1Api, apps: client.AppsV1Api, namespace: str) -> Any:
    owner = apps.create_namespaced_replica_set(namespace, replicaset("owner", 2))
    for i in range(2):
        core.create_namespaced_pod(namespace, pod(f"owned-{i}", labels={"rs": "owner"}, owner=owner))
    core.create_namespaced_pod(namespace, pod("unrelated", labels={"rs": "owner"}))
    return owner


def _pod_names(core: client.CoreV1Api, namespace: str) -> set[str]:
    return {p.metadata.name for p in core.list_namespaced_pod(namespace).items}


def test_background_deletion_removes_dependents(core: client.CoreV1Api, apps: client.AppsV1Api,
                                                namespace: str) -> None:
    """Deleting an owner in the background removes it at once and its dependents soon after."""
    _owner_with_pods(core, apps, namespace)
    assert delete_rs(apps, namespace, "owner", "Background")["kind"] == "Status"
    assert apps.list_namespaced_replica_set(namespace).items == []
    wait_for(lambda: _pod_names(core, namespace) == {"unrelated"}, what="dependents deleted")


def test_foreground_deletion_removes_dependents_first(core: client.CoreV1Api, apps: client.AppsV1Api,
                                                      namespace: str) -> None:
    """Deleting an owner in the foreground keeps it (foregroundDeletion) until its dependents are gone."""
    _owner_with_pods(core, apps, namespace)
    start = core.list_namespaced_pod(namespace).metadata.resource_version
    delete_rs(apps, namespace, "owner", "Foreground")
    wait_for(lambda: apps.list_namespaced_replica_set(namespace).items == [], what="owner deleted")
    assert _pod_names(core, namespace) == {"unrelated"}
    apps.create_namespaced_replica_set(namespace, replicaset("zz-end"))
    core.create_namespaced_pod(namespace, pod("zz-end"))
    owner_events = watch_until(apps.list_namespaced_replica_set, namespace, resource_version=start, last="zz-end")
    pod_events = watch_until(core.list_namespaced_pod, namespace, resource_version=start, last="zz-end")
    marked = next(rv for t, n, rv in owner_events if t == "MODIFIED" and n == "owner")
    owner_gone = next(rv for t, n, rv in owner_events if t == "DELETED" and n == "owner")
    pods_gone = [rv for t, n, rv in pod_events if t == "DELETED"]
    assert len(pods_gone) == 2
    assert marked < min(pods_gone) and max(pods_gone) < owner_gone


def test_foreground_deletion_marks_owner(core: client.CoreV1Api, apps: client.AppsV1Api, namespace: str) -> None:
    """A foreground delete answers with the owner marked: deletionTimestamp and the foregroundDeletion finalizer."""
    owner = apps.create_namespaced_replica_set(namespace, replicaset("owner", 2))
    core.create_namespaced_pod(namespace, pod("owned", owner=owner, annotations={
        "sim.kubus.io/termination-seconds": "0.5"}))
    _running_then(core, namespace, "owned", "Running")
    marked = delete_rs(apps, namespace, "owner", "Foreground")
    assert marked["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert marked["metadata"]["deletionTimestamp"]
    wait_for(lambda: apps.list_namespaced_replica_set(namespace).items == [], what="owner deleted")
    assert _pod_names(core, namespace) == set()


def test_orphan_deletion_keeps_dependents(core: client.CoreV1Api, apps: client.AppsV1Api, namespace: str) -> None:
    """Deleting an owner with Orphan keeps its dependents and strips their ownerReferences."""
    _owner_with_pods(core, apps, namespace)
    delete_rs(apps, namespace, "owner", "Orphan")
    wait_for(lambda: apps.list_namespaced_replica_set(namespace).items == [], what="owner deleted")
    pods = core.list_namespaced_pod(namespace).items
    assert {p.metadata.name for p in pods} == {"owned-0", "owned-1", "unrelated"}
    assert all(not p.metadata.owner_references for p in pods)
    assert all(p.metadata.deletion_timestamp is None for p in pods)


def test_adopt_and_release_patches(core: client.CoreV1Api, apps: client.AppsV1Api, namespace: str) -> None:
    """The controller-ref manager's strategic merge patches adopt and release a pod, guarded by its uid."""
    owner = apps.create_namespaced_replica_set(namespace, replicaset("owner"))
    orphan = core.create_namespaced_pod(namespace, pod("orphan", labels={"rs": "owner"}))
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "owner", "uid": owner.metadata.uid,
           "controller": True, "blockOwnerDeletion": True}
    adopted = core.patch_namespaced_pod("orphan", namespace, {"metadata": {
        "ownerReferences": [ref], "uid": orphan.metadata.uid}})
    assert [r.uid for r in adopted.metadata.owner_references] == [owner.metadata.uid]
    with pytest.raises(ApiException) as caught:  # a pod recreated under the same name is not adopted
        core.patch_namespaced_pod("orphan", namespace, {"metadata": {
            "ownerReferences": [ref], "uid": "00000000-0000-4000-8000-000000000000"}})
    assert caught.value.status == 422
    assert status_of(caught.value)["message"] == ('Pod "orphan" is invalid: metadata.uid: Invalid value: '
                                                  '"00000000-0000-4000-8000-000000000000": field is immutable')
    released = core.patch_namespaced_pod("orphan", namespace, {"metadata": {
        "ownerReferences": [{"$patch": "delete", "uid": owner.metadata.uid}], "uid": orphan.metadata.uid}})
    assert not released.metadata.owner_references
    core.create_namespaced_pod(namespace, pod("sentinel", owner=owner))
    delete_rs(apps, namespace, "owner", "Background")
    wait_for(lambda: _pod_names(core, namespace) == {"orphan"}, what="the owner's remaining dependent collected")
    assert core.read_namespaced_pod("orphan", namespace).metadata.deletion_timestamp is None


def test_dependent_with_a_live_owner_keeps_it(core: client.CoreV1Api, apps: client.AppsV1Api,
                                              namespace: str) -> None:
    """A dependent of two owners loses only the reference to the deleted one and is not collected."""
    first = apps.create_namespaced_replica_set(namespace, replicaset("first"))
    second = apps.create_namespaced_replica_set(namespace, replicaset("second"))
    body = pod("shared", owner=first)
    body["metadata"]["ownerReferences"].append({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "second",
                                                "uid": second.metadata.uid})
    core.create_namespaced_pod(namespace, body)
    delete_rs(apps, namespace, "first", "Background")
    wait_for(lambda: [r.name for r in core.read_namespaced_pod("shared", namespace).metadata.owner_references]
             == ["second"], what="the dangling reference dropped")
    assert core.read_namespaced_pod("shared", namespace).metadata.deletion_timestamp is None


def test_dependent_of_a_missing_owner_is_collected(core: client.CoreV1Api, namespace: str) -> None:
    """A pod whose only owner does not exist is garbage collected."""
    ghost = SimpleNamespace(metadata=SimpleNamespace(name="ghost", uid="00000000-0000-4000-8000-00000000dead"))
    core.create_namespaced_pod(namespace, pod("stray", owner=ghost))
    core.create_namespaced_pod(namespace, pod("unowned"))
    wait_for(lambda: _pod_names(core, namespace) == {"unowned"}, what="the stray pod collected")


def test_namespace_deletion(sim: SimProcess, core: client.CoreV1Api, apps: client.AppsV1Api) -> None:
    """A deleted namespace is Terminating and refuses new objects until its content is gone, then goes."""
    core.create_namespace({"metadata": {"name": "e2e-teardown"}})
    apps.create_namespaced_replica_set("e2e-teardown", replicaset("r"))
    core.create_namespaced_pod("e2e-teardown", pod("slow", annotations={"sim.kubus.io/termination-seconds": "1"}))
    _running_then(core, "e2e-teardown", "slow", "Running")
    core.delete_namespace("e2e-teardown")
    assert core.read_namespace("e2e-teardown").status.phase == "Terminating"
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("e2e-teardown", pod("late"))
    assert caught.value.status == 403
    status = status_of(caught.value)
    assert status["reason"] == "Forbidden"
    assert "unable to create new content in namespace e2e-teardown because it is being terminated" \
        in status["message"]

    def gone() -> bool:
        return not core.list_namespace(field_selector="metadata.name=e2e-teardown").items

    wait_for(gone, what="the namespace removed")
    assert core.list_namespaced_pod("e2e-teardown").items == []
    assert apps.list_namespaced_replica_set("e2e-teardown").items == []


# --- fault injection --------------------------------------------------------------------------------------
def test_injected_500_then_cleared(faults: SimProcess, core: client.CoreV1Api, namespace: str) -> None:
    """PUT /sim/faults with pods:create:1.0:500 fails creates with 500 until DELETE clears the rules."""
    code, body = faults.request("PUT", "/sim/faults", {"rules": ["pods:create:1.0:500"], "seed": 1})
    assert code == 200, body
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(namespace, pod("refused"))
    assert caught.value.status == 500
    assert status_of(caught.value)["reason"] == "InternalError"
    assert _pod_names(core, namespace) == set()  # not applied; and lists are not affected
    code, body = faults.request("GET", "/sim/faults")
    assert body["rules"] == [{"rule": "pods:create:1.0:500", "injected": 1}]
    code, body = faults.request("DELETE", "/sim/faults")
    assert (code, body) == (200, {"rules": []})
    core.create_namespaced_pod(namespace, pod("accepted"))
    assert _pod_names(core, namespace) == {"accepted"}


def test_injected_timeout_applied(faults: SimProcess, core: client.CoreV1Api, namespace: str) -> None:
    """`timeout-applied` answers a create with 504 although the pod was created."""
    code, body = faults.request("PUT", "/sim/faults", {"rules": ["pods:create:1.0:timeout-applied"],
                                                        "timeoutSeconds": 0.2})
    assert code == 200, body
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(namespace, pod("applied"))
    assert caught.value.status == 504
    assert status_of(caught.value)["reason"] == "Timeout"
    assert core.read_namespaced_pod("applied", namespace).metadata.name == "applied"


def test_bad_fault_rule_is_refused(faults: SimProcess) -> None:
    """A malformed fault rule is refused with 400 and leaves the rules unchanged."""
    code, body = faults.request("PUT", "/sim/faults", {"rules": ["pods:create:2:500"]})
    assert code == 400 and "between 0 and 1" in body["error"]
    assert faults.request("GET", "/sim/faults") == (200, {"rules": []})
