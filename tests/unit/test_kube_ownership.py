"""Controller references and the adopt/release patch bytes of controller_ref_manager.go."""

from __future__ import annotations

import pytest

from kube.gojson import marshal
from kube.meta import ObjectMeta, OwnerReference
from kube.ownership import adopt_patch, get_controller_of, is_controlled_by, new_controller_ref, release_patch

RS = ObjectMeta(name="web-5d8f9c7b6", namespace="default", uid="rs-uid")


def test_new_controller_ref() -> None:
    """NewControllerRef sets controller and blockOwnerDeletion."""
    assert new_controller_ref(RS, "apps/v1", "ReplicaSet") == OwnerReference(
        api_version="apps/v1",
        kind="ReplicaSet",
        name="web-5d8f9c7b6",
        uid="rs-uid",
        controller=True,
        block_owner_deletion=True,
    )


@pytest.mark.parametrize(
    ("refs", "controller_uid"),
    [
        pytest.param([], None, id="orphan"),
        pytest.param([OwnerReference(uid="a")], None, id="owner-without-controller-flag"),
        pytest.param([OwnerReference(uid="a", controller=False)], None, id="controller-false"),
        pytest.param(
            [
                OwnerReference(uid="a"),
                OwnerReference(uid="b", controller=True),
                OwnerReference(uid="c", controller=True),
            ],
            "b",
            id="first-controller-wins",
        ),
    ],
)
def test_get_controller_of(refs: list[OwnerReference], controller_uid: str | None) -> None:
    """GetControllerOf / IsControlledBy."""
    meta = ObjectMeta(owner_references=refs)
    found = get_controller_of(meta)
    assert (found.uid if found else None) == controller_uid
    assert is_controlled_by(meta, "b") is (controller_uid == "b")


@pytest.mark.parametrize(
    ("finalizers", "expected"),
    [
        pytest.param(
            (),
            b'{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-5d8f9c7b6",'
            b'"uid":"rs-uid","controller":true,"blockOwnerDeletion":true}],"uid":"pod-uid"}}',
            id="plain",
        ),
        pytest.param(
            ("foregroundDeletion",),
            b'{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-5d8f9c7b6",'
            b'"uid":"rs-uid","controller":true,"blockOwnerDeletion":true}],"uid":"pod-uid",'
            b'"finalizers":["foregroundDeletion"]}}',
            id="with-finalizers",
        ),
    ],
)
def test_adopt_patch_bytes(finalizers: tuple[str, ...], expected: bytes) -> None:
    """ownerRefControllerPatch: ownerReferences, then uid, then finalizers if any."""
    assert adopt_patch(RS, "apps/v1", "ReplicaSet", "pod-uid", finalizers) == expected


@pytest.mark.parametrize(
    ("finalizers", "expected"),
    [
        pytest.param(
            (), b'{"metadata":{"uid":"pod-uid","ownerReferences":[{"$patch":"delete","uid":"rs-uid"}]}}', id="plain"
        ),
        pytest.param(
            ("f1",),
            b'{"metadata":{"uid":"pod-uid","ownerReferences":[{"$patch":"delete","uid":"rs-uid"}],'
            b'"$deleteFromPrimitiveList/finalizers":["f1"]}}',
            id="with-finalizers",
        ),
    ],
)
def test_release_patch_bytes(finalizers: tuple[str, ...], expected: bytes) -> None:
    """GenerateDeleteOwnerRefStrategicMergeBytes: uid first, map keys sorted."""
    assert release_patch("rs-uid", "pod-uid", finalizers) == expected


@pytest.mark.parametrize(
    ("value", "sort_keys", "expected"),
    [
        pytest.param({"b": 1, "a": [True, None]}, True, b'{"a":[true,null],"b":1}', id="map-keys-sorted"),
        pytest.param({"b": 1, "a": 2}, False, b'{"b":1,"a":2}', id="struct-order-kept"),
        pytest.param({"s": "<a&b>"}, True, b'{"s":"\\u003ca\\u0026b\\u003e"}', id="html-escaped"),
        pytest.param({"s": "é\u2028"}, True, '{"s":"é\\u2028"}'.encode(), id="utf8-and-line-separator"),
    ],
)
def test_go_json(value: object, sort_keys: bool, expected: bytes) -> None:
    """json.Marshal output: compact, HTML-safe, UTF-8."""
    assert marshal(value, sort_keys=sort_keys) == expected
