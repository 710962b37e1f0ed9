"""The keys the reconciler writes read back as what they say: controller keys, correlation ids, action keys."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from messages.actions import ActionKind, CreatePods, DeletePod, PatchPod, RecordEvent
from messages.keys import (
    ADOPT,
    ControllerKey,
    ControllerKind,
    action_step,
    correlation_id,
    correlation_of,
    parse_controller_key,
    status_key,
)

WEB = ControllerKey(ControllerKind.REPLICA_SET, "default", "web")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("ReplicaSet/default/web", WEB, id="replicaset"),
        pytest.param("DaemonSet/kube-system/agent", ControllerKey(ControllerKind.DAEMON_SET, "kube-system", "agent"),
                     id="daemonset"),
        pytest.param("DaemonSet/ns/a/b", ControllerKey(ControllerKind.DAEMON_SET, "ns", "a/b"),
                     id="the-name-is-the-rest"),
        pytest.param("StandIn/demo", None, id="an-older-kubus-controller"),
        pytest.param("Deployment/default/web", None, id="no-controller-of-ours"),
        pytest.param("ReplicaSet/default", None, id="no-name"),
        pytest.param("", None, id="empty"),
    ],
)
def test_a_controller_key_parses_once(text: str, expected: ControllerKey | None) -> None:
    """A stored or received key parses into its kind, namespace and name, and formats back the same."""
    key = parse_controller_key(text)
    assert key == expected
    if key is not None:
        assert str(key) == f"{key}" == text


def test_keys_format_as_stored() -> None:
    """A key formats as the stored string, and a correlation id starts with it."""
    at = datetime(2026, 3, 15, 12, 0, 0, 123456, tzinfo=UTC)
    assert str(WEB) == "ReplicaSet/default/web"
    assert correlation_id(str(WEB), 7, at) == f"ReplicaSet/default/web@7~{int(at.timestamp() * 1_000_000)}"
    assert status_key("c@1~2") == "c@1~2/status"


@pytest.mark.parametrize(
    ("action_key", "step"),
    [
        pytest.param("ReplicaSet/default/web@7~1/adopt/uid-1", ADOPT, id="adoption"),
        pytest.param("ReplicaSet/default/web@7~1/release/uid-1", "release", id="release"),
        pytest.param("ReplicaSet/adopt/web@7~1/release/uid-1", "release", id="release-in-a-namespace-named-adopt"),
        pytest.param("DaemonSet/default/adopt@7~1/relabel/uid-1", "relabel", id="relabel-of-a-daemonset-named-adopt"),
        pytest.param("ReplicaSet/default/web@7~1/status", "status", id="status"),
        pytest.param("ReplicaSet/default/web@7~1/create/0", "create", id="a-pod-of-a-create"),
        pytest.param("a/adopt/b", "", id="no-correlation-id"),
        pytest.param("ReplicaSet/default/web@7~1", "", id="no-step"),
    ],
)
def test_an_action_keys_step_follows_its_correlation_id(action_key: str, step: str) -> None:
    """What an action key names after its correlation id, wherever else the same word appears."""
    assert action_step(action_key) == step


@pytest.mark.parametrize(
    ("action_key", "correlation"),
    [
        pytest.param("ReplicaSet/default/web@7~1/create", "ReplicaSet/default/web@7~1", id="create"),
        pytest.param("DaemonSet/default/adopt@7~1/status", "DaemonSet/default/adopt@7~1", id="status"),
        pytest.param("DaemonSet/kube-system/agent@412~17/create/node-07", "DaemonSet/kube-system/agent@412~17",
                     id="a-pod-of-a-create"),
        pytest.param("a/adopt/b", "", id="no-correlation-id"),
        pytest.param("ReplicaSet/default/web@7~1", "", id="no-step"),
    ],
)
def test_an_action_keys_correlation_id_is_its_decisions(action_key: str, correlation: str) -> None:
    assert correlation_of(action_key) == correlation


@pytest.mark.parametrize(
    ("cls", "kind"),
    [
        pytest.param(CreatePods, ActionKind.CREATE_PODS, id="create_pods"),
        pytest.param(DeletePod, ActionKind.DELETE_POD, id="delete_pod"),
        pytest.param(PatchPod, ActionKind.PATCH_POD, id="patch_pod"),
        pytest.param(RecordEvent, ActionKind.RECORD_EVENT, id="record_event"),
    ],
)
def test_an_actions_tag_is_its_kind(cls: type, kind: ActionKind) -> None:
    """A result's `action` (the action's tag) maps to its ActionKind; an unknown one to none."""
    tag = cls.__struct_config__.tag
    assert type(tag) is str and ActionKind.of(tag) is kind
    assert ActionKind.of("set_annotation") is None
