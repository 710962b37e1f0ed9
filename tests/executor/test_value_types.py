"""The executor's per-call values (Effect, Reply, Answer, the correlator's Correlated, Delivery): built positionally
in their fields' order, compared by value, immutable, and printed with every field, as the frozen dataclasses they
were."""

from __future__ import annotations

import msgspec
import pytest

from executor.correlating import Correlated
from executor.delivery import Delivery
from executor.effects import Effect
from executor.errors import Reply
from executor.events import EventRecorder
from executor.kubeapi import KubeApi
from executor.ownership import Proven
from kube.times import utcnow
from messages.actions import ActionResult, DeletePod
from runtime.kubehttp import Answer


def test_an_effect_takes_its_fields_in_order_and_cannot_be_changed() -> None:
    effect = Effect("failed", 409, "AlreadyExists", "taken", "uid-1", "7", "api says", "web-0")
    assert (effect.outcome, effect.code, effect.reason, effect.message, effect.object_uid, effect.resource_version,
            effect.api_message, effect.object_name) == (
        "failed", 409, "AlreadyExists", "taken", "uid-1", "7", "api says", "web-0")
    assert effect.error == "api says" and Effect("skipped", message="m").error == "m"
    assert effect == Effect("failed", 409, "AlreadyExists", "taken", "uid-1", "7", "api says", "web-0")
    assert effect != Effect("failed", 409, "AlreadyExists", "taken", "uid-1", "8", "api says", "web-0")
    assert hash(effect) == hash(Effect("failed", 409, "AlreadyExists", "taken", "uid-1", "7", "api says", "web-0"))
    assert repr(Effect("succeeded")) == ("Effect(outcome='succeeded', code=0, reason='', message='', object_uid='', "
                                         "resource_version='', api_message='', object_name='')")
    with pytest.raises(AttributeError):
        effect.outcome = "succeeded"  # type: ignore[misc]


def test_replies_answers_and_correlations_are_values() -> None:
    reply = Reply(201, b"{}")
    assert (reply.status, reply.data, reply.retry_after, reply.ok) == (201, b"{}", None, True)
    assert not Reply(0, b"").ok and not Reply(409, b"", 1.5).ok and Reply(409, b"", 1.5).retry_after == 1.5
    answer = Answer(429, b"slow down", "3")
    assert (answer.status, answer.body, answer.retry_after) == (429, b"slow down", "3") == (
        Answer(429, b"slow down", "3").status, b"slow down", "3")
    assert answer == Answer(429, b"slow down", "3") and Answer(200, b"").retry_after is None
    correlated = Correlated(None)
    assert correlated.skip and not correlated.update_existing and correlated.patch is None
    for value, field in ((reply, "status"), (answer, "status"), (correlated, "patch")):
        with pytest.raises(AttributeError):
            setattr(value, field, 0)


async def _report(result: ActionResult) -> None:
    raise AssertionError("nothing is reported here")


def test_a_delivery_is_a_value_that_a_check_replaces_its_proof_in() -> None:
    """checked_apply applies a copy with the ownership check's proof (`msgspec.structs.replace`): every other field
    kept, the original unchanged."""
    api, recorder = KubeApi(None, limiter=None, metrics=None, stopping=None), EventRecorder()  # type: ignore[arg-type]
    action = DeletePod(key="k", decision_id=1, controller="ReplicaSet/ns/web", issued_at="2026-01-01T00:00:00Z",
                       namespace="ns", name="web-0", uid="uid-0")
    delivery = Delivery(api, action, 2, False, "executor-0", _report, utcnow, recorder)
    assert delivery == Delivery(api=api, action=action, number=2, final=False, executor="executor-0", report=_report,
                                now=utcnow, events=recorder, proven=None, last_proof=True)
    assert delivery.tag == "delete_pod"
    proven = Proven("uid-0", "7")
    checked = msgspec.structs.replace(delivery, proven=proven, last_proof=False)
    assert (checked.proven, checked.last_proof) == (proven, False) and (delivery.proven, delivery.last_proof) == (
        None, True)
    assert checked == Delivery(api, action, 2, False, "executor-0", _report, utcnow, recorder, proven, False)
    assert checked != delivery
    with pytest.raises(AttributeError):
        delivery.number = 3  # type: ignore[misc]
