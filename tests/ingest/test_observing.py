"""Raw API bytes -> ObservedEvent: metadata, routing, managedFields left out, and quarantine of what the model
rejects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ingest.kinds import KINDS
from ingest.observing import (
    Origin,
    Unroutable,
    bookmark_rv,
    observe,
    parse_line,
    parse_page,
    parse_status,
    without_managed_fields,
)
from kube import codec
from kube.testing import daemonset, node, pod, replicaset
from messages.observed import ADDED, DELETED, QUARANTINED

ORIGIN = Origin("ingest-test", "2026-01-02T03:04:05.000000Z")
# objects as kube-apiserver v1.36 wrote them on ingest's watches, managedFields and all (see its "_about")
APISERVER_OBJECTS = json.loads((Path(__file__).parent / "apiserver_objects.json").read_text())


def _line(event_type: str, obj: Any) -> bytes:
    body = obj if isinstance(obj, bytes) else codec.encode(obj)
    return b'{"type":"' + event_type.encode() + b'","object":' + body + b"}"


def _pod_json(**spec: Any) -> bytes:
    raw = codec.to_builtins(pod("web-1").ns("shop").uid("u-1").rv("41").build())
    raw["spec"].update(spec)
    return msgspec.json.encode(raw)


@pytest.mark.parametrize(("kind", "obj", "namespace", "name"), [
    pytest.param("Pod", pod("p1").ns("shop").uid("u1").rv("7").build(), "shop", "p1", id="pod"),
    pytest.param("Node", node("n1").uid("u1").rv("7").build(), "", "n1", id="cluster-scoped-node"),
    pytest.param("DaemonSet", daemonset("d1").ns("kube-system").uid("u1").rv("7").build(), "kube-system", "d1",
                 id="daemonset"),
    pytest.param("ReplicaSet", replicaset("r1").ns("shop").uid("u1").rv("7").build(), "shop", "r1",
                 id="replicaset"),
])
def test_a_watch_line_becomes_an_event_carrying_the_api_bytes(kind: str, obj: Any, namespace: str, name: str) -> None:
    """The event names the object's kind, namespace, name, uid and rv, and carries its JSON unchanged."""
    frame = parse_line(_line(ADDED, obj))
    event = observe(KINDS[kind], frame.type, frame.object, ORIGIN)
    assert (event.kind, event.type, event.namespace, event.name, event.uid, event.resource_version) == \
        (kind, ADDED, namespace, name, "u1", "7")
    assert event.error is None and event.ingest == "ingest-test"
    assert bytes(event.object) == codec.encode(obj)
    assert event.msg_id == f"{kind}/u1/7/ADDED"


@pytest.mark.parametrize(("spec", "field"), [
    pytest.param({"containers": {"name": "app"}}, "$.spec.containers", id="containers-not-a-list"),
    pytest.param({"hostNetwork": "yes"}, "$.spec.hostNetwork", id="bool-as-string"),
    pytest.param({"tolerations": [{"tolerationSeconds": "5"}]}, "$.spec.tolerations[0].tolerationSeconds",
                 id="nested-field"),
])
def test_an_object_the_model_rejects_is_quarantined_naming_the_field(spec: dict[str, Any], field: str) -> None:
    """QUARANTINED, routed by its metadata, with an error naming kind, namespace/name and the field."""
    frame = parse_line(_line(DELETED, _pod_json(**spec)))
    event = observe(KINDS["Pod"], frame.type, frame.object, ORIGIN)
    assert event.type == QUARANTINED
    assert (event.namespace, event.name, event.uid, event.resource_version) == ("shop", "web-1", "u-1", "41")
    assert event.error is not None
    assert "Pod shop/web-1" in event.error and field in event.error and "DELETED" in event.error


@pytest.mark.parametrize("obj", [
    pytest.param(b'{"metadata":{"name":"x"},"spec":{}}', id="no-uid"),
    pytest.param(b'{"metadata":{"name":"x","uid":7},"spec":{"containers":5}}', id="unreadable-metadata"),
])
def test_an_object_without_a_readable_uid_cannot_be_routed(obj: bytes) -> None:
    frame = parse_line(_line(ADDED, obj))
    with pytest.raises(Unroutable):
        observe(KINDS["Pod"], frame.type, frame.object, ORIGIN)


def test_error_frames_and_bookmarks_are_read() -> None:
    gone = parse_line(b'{"type":"ERROR","object":{"kind":"Status","status":"Failure","code":410,'
                      b'"reason":"Expired","message":"too old resource version: 5 (90)"}}')
    assert parse_status(gone.object).code == 410
    assert parse_status(msgspec.Raw(b"[1]")).code == 500  # an unreadable Status still reads as an error
    bookmark = parse_line(b'{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"99"}}}')
    assert bookmark_rv(bookmark.object) == "99"


def test_a_list_page_keeps_items_raw() -> None:
    page = parse_page(b'{"kind":"PodList","metadata":{"resourceVersion":"12","continue":"abc"},'
                      b'"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}')
    assert page.metadata.resource_version == "12" and page.metadata.continue_ == "abc"
    assert [bytes(i) for i in page.items] == [b'{"metadata":{"name":"a"}}', b'{"metadata":{"name":"b"}}']


def test_a_line_that_is_not_a_watch_frame_is_refused() -> None:
    with pytest.raises(msgspec.DecodeError):
        parse_line(b'{"type":"ADDED"')


def _go_json(obj: Any) -> bytes:
    """`obj` written compactly in its own member order, as kube-apiserver writes JSON."""
    return json.dumps(obj, separators=(",", ":")).encode()


@pytest.mark.parametrize(("name", "kind"), [("pod-created", "Pod"), ("pod-running", "Pod"), ("node", "Node")])
def test_the_event_carries_the_api_bytes_less_metadata_managed_fields(name: str, kind: str) -> None:
    """kube-controller-manager's informers drop managedFields; so does ingest, from the object's own metadata
    only, every other member the API's bytes in the API's order."""
    obj = APISERVER_OBJECTS[name]
    assert obj["metadata"]["managedFields"]
    frame = parse_line(_line("MODIFIED", _go_json(obj)))
    event = observe(KINDS[kind], frame.type, frame.object, ORIGIN)
    expected = json.loads(json.dumps(obj))
    del expected["metadata"]["managedFields"]
    assert bytes(event.object) == _go_json(expected)
    assert event.error is None and event.resource_version == obj["metadata"]["resourceVersion"]
    assert len(event.object) < len(_go_json(obj)) * 0.8  # a fifth of it or more, on every object here


def test_only_the_metadata_member_named_managed_fields_is_left_out() -> None:
    """The name as a label's or an annotation's text, or in a template's metadata, is not the object's."""
    obj = APISERVER_OBJECTS["pod-running"]
    kept = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}
    kept["metadata"]["annotations"] = {"note": '"managedFields":[]', "managedFields": "x"}
    raw = msgspec.Raw(_go_json(kept))
    assert without_managed_fields(raw) is raw  # nothing to leave out: the very bytes, not a copy
    template = {"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "d", "uid": "u", "managedFields": []},
                "spec": {"template": {"metadata": {"managedFields": [{"manager": "m"}]}}}}
    trimmed = json.loads(bytes(without_managed_fields(msgspec.Raw(_go_json(template)))))
    assert trimmed == {**template, "metadata": {"name": "d", "uid": "u"}}


@pytest.mark.parametrize("body", [b'{"metadata":"managedFields"}', b'{"managedFields":[],"metadata":{}}',
                                  b'{"metadata":{"managedFields":[}', b'["managedFields"]'],
                         ids=["metadata-not-an-object", "not-in-metadata", "unreadable", "not-an-object"])
def test_an_object_whose_metadata_cannot_be_read_is_left_for_the_model_to_judge(body: bytes) -> None:
    raw = msgspec.Raw(body)
    assert without_managed_fields(raw) is raw
