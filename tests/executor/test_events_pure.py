"""The pure parts of event recording: the spam filter on an injected clock, which outcome records which event."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from executor.effects import Effect, failed, gave_up
from executor.errors import NAMESPACE_TERMINATING, TransientError
from executor.events import SpamFilter, build_event, create_event, delete_event, owner_reference
from kube.core import Event
from kube.meta import ObjectReference, Status
from messages.actions import FAILED, SKIPPED, SUCCEEDED

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
RS = ObjectReference(kind="ReplicaSet", namespace="ns", name="web", uid="rs-1", api_version="apps/v1",
                     resource_version="7")


def _event(involved: ObjectReference = RS, component: str = "replicaset-controller", key: str = "k",
           reason: str = "SuccessfulCreate", type: str = "Normal") -> Event:
    return build_event(involved, namespace="ns", type=type, reason=reason, message="m", component=component,
                       key=key, now=T0)


def test_spam_filter_passes_a_burst_of_25_then_one_per_300_seconds() -> None:
    """client-go's defaults: 25 at once, the 26th dropped; 300 s later one more, and only one."""
    spam = SpamFilter()
    assert [spam.allow(_event(key=str(i)), T0) for i in range(26)] == [True] * 25 + [False]
    assert not spam.allow(_event(), T0 + timedelta(seconds=299))
    assert spam.allow(_event(), T0 + timedelta(seconds=300))
    assert not spam.allow(_event(), T0 + timedelta(seconds=300))
    assert not spam.allow(_event(), T0 + timedelta(seconds=450))  # half a token
    assert spam.allow(_event(), T0 + timedelta(seconds=600))


def test_spam_filter_refills_only_up_to_the_burst() -> None:
    spam = SpamFilter(burst=2, refill_seconds=10)
    assert [spam.allow(_event(), T0) for _ in range(3)] == [True, True, False]
    later = T0 + timedelta(days=1)
    assert [spam.allow(_event(), later) for _ in range(3)] == [True, True, False]


def test_a_clock_going_back_refills_nothing() -> None:
    """As x/time/rate: an earlier reading adds no tokens, and the refill counts from it."""
    spam = SpamFilter(burst=1, refill_seconds=10)
    assert spam.allow(_event(), T0)
    back = T0 - timedelta(seconds=60)
    assert not spam.allow(_event(), back)
    assert not spam.allow(_event(), back + timedelta(seconds=9))
    assert spam.allow(_event(), back + timedelta(seconds=10))


@pytest.mark.parametrize("other", [
    pytest.param(_event(component="daemonset-controller"), id="another-component"),
    pytest.param(_event(msgspec.structs.replace(RS, uid="rs-2")), id="another-uid"),
    pytest.param(_event(msgspec.structs.replace(RS, name="api")), id="another-name"),
    pytest.param(_event(msgspec.structs.replace(RS, namespace="other")), id="another-namespace"),
    pytest.param(_event(msgspec.structs.replace(RS, kind="DaemonSet")), id="another-kind"),
    pytest.param(_event(msgspec.structs.replace(RS, api_version="apps/v2")), id="another-api-version"),
    pytest.param(_event(type="Warning"), id="another-type"),  # getSpamKey has the type since client-go 1.32
])
def test_each_source_and_object_has_a_bucket_of_its_own(other: Event) -> None:
    spam = SpamFilter(burst=1)
    assert spam.allow(_event(), T0) and not spam.allow(_event(), T0)
    assert spam.allow(other, T0)


def test_reason_message_and_resource_version_share_the_objects_bucket() -> None:
    """The key is the source and the object, not what the event says (nor the object's version)."""
    spam = SpamFilter(burst=1)
    assert spam.allow(_event(reason="SuccessfulCreate"), T0)
    assert not spam.allow(_event(msgspec.structs.replace(RS, resource_version="8"), reason="FailedCreate"), T0)


def test_the_least_recently_used_keys_are_forgotten_past_the_limit() -> None:
    spam = SpamFilter(burst=1, max_keys=2)
    a, b, c = (_event(msgspec.structs.replace(RS, uid=uid)) for uid in "abc")
    assert spam.allow(a, T0) and spam.allow(b, T0)
    assert not spam.allow(a, T0)  # a is now the most recently used
    assert spam.allow(c, T0)  # b is forgotten
    assert spam.allow(b, T0)  # a fresh bucket for b; a is forgotten
    assert spam.allow(a, T0)


def test_events_are_named_from_their_key() -> None:
    first, again, other = _event(key="ns/web/0/SuccessfulCreate"), _event(key="ns/web/0/SuccessfulCreate"), \
        _event(key="ns/web/0/FailedCreate")
    assert first.metadata.name == again.metadata.name != other.metadata.name
    assert first.metadata.name.startswith("web.") and len(first.metadata.name) == len("web.") + 16
    assert (first.metadata.namespace, first.first_timestamp, first.count) == ("ns", "2024-05-01T12:00:00Z", 1)


def _status(code: int, reason: str, message: str) -> Status:
    return Status(status="Failure", code=code, reason=reason, message=message)


@pytest.mark.parametrize(("effect", "event"), [
    pytest.param(Effect(SUCCEEDED, 201), ("Normal", "SuccessfulCreate", "Created pod: web-0"), id="created"),
    pytest.param(Effect(SUCCEEDED, 409, "AlreadyExists", "created by an earlier attempt"),
                 ("Normal", "SuccessfulCreate", "Created pod: web-0"), id="created-earlier"),
    pytest.param(failed(_status(422, "Invalid", 'Pod "web-0" is invalid')),
                 ("Warning", "FailedCreate", 'Error creating: Pod "web-0" is invalid'), id="rejected"),
    pytest.param(gave_up(TransientError(500, "InternalError", "boom")),
                 ("Warning", "FailedCreate", "Error creating: boom"), id="gave-up"),
    pytest.param(Effect(FAILED, 409, "AlreadyExists", 'pods "web-0" already exists, and it is not ours',
                        api_message='pods "web-0" already exists'),
                 ("Warning", "FailedCreate", 'Error creating: pods "web-0" already exists'), id="someone-elses"),
    pytest.param(Effect(FAILED, 403, NAMESPACE_TERMINATING, "terminating"), None, id="namespace-terminating"),
    pytest.param(Effect(FAILED, reason="NotIdempotent", message="no key"), None, id="never-sent"),
    pytest.param(Effect(SKIPPED, reason="SlowStartStopped"), None, id="skipped"),
])
def test_which_create_outcome_records_which_event(effect: Effect, event: tuple[str, str, str] | None) -> None:
    assert create_event(effect, "web-0") == event


@pytest.mark.parametrize(("effect", "event"), [
    pytest.param(Effect(SUCCEEDED, 200), ("Normal", "SuccessfulDelete", "Deleted pod: web-0"), id="deleted"),
    pytest.param(Effect(SUCCEEDED, 404, "NotFound", "not found"), None, id="not-found"),
    pytest.param(Effect(SUCCEEDED, 409, "Gone", "Precondition failed"), None, id="replaced"),
    pytest.param(failed(_status(403, "Forbidden", "no")), ("Warning", "FailedDelete", "Error deleting: no"),
                 id="refused"),
    pytest.param(gave_up(TransientError(0, "", "connection refused")),
                 ("Warning", "FailedDelete", "Error deleting: connection refused"), id="gave-up"),
])
def test_which_delete_outcome_records_which_event(effect: Effect, event: tuple[str, str, str] | None) -> None:
    assert delete_event(effect, "web-0") == event


@pytest.mark.parametrize(("owner", "expected"), [
    pytest.param(msgspec.UNSET, None, id="unset"),
    pytest.param(msgspec.Raw(b"null"), None, id="null"),
    pytest.param(msgspec.Raw(b'"web"'), None, id="not-an-object"),
    pytest.param(msgspec.Raw(msgspec.json.encode({"kind": "ReplicaSet", "namespace": "ns", "name": "web",
                                                  "uid": "rs-1", "apiVersion": "apps/v1",
                                                  "resourceVersion": "7"})), RS, id="a-reference"),
])
def test_owner_reference(owner: msgspec.Raw | msgspec.UnsetType, expected: ObjectReference | None) -> None:
    assert owner_reference(owner) == expected
