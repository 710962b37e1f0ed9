"""The executor's per-call values (Effect, Reply, Answer, the correlator's Correlated): built positionally in their
fields' order, compared by value, immutable, and printed with every field, as the frozen dataclasses they were."""

from __future__ import annotations

import pytest

from executor.correlating import Correlated
from executor.effects import Effect
from executor.errors import Reply
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
