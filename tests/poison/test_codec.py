"""The codec's checks at the boundary, table-driven: every fault a consumer could meet is a BadMessage with the
reason it is counted under, or NewerSchema for a newer kubus's message, and never anything else."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from messages import codec
from messages.observed import SCHEMA_VERSION

OBSERVED: dict[str, Any] = {
    "msg": "observed", "v": 1, "kind": "Pod", "type": "ADDED", "namespace": "ns", "name": "p", "uid": "u1",
    "resource_version": "7", "observed_at": "2026-03-15T12:00:00.000000Z", "ingest": "ingest-0",
    "object": {"metadata": {"name": "p"}}}
RESULT: dict[str, Any] = {
    "msg": "result", "v": 1, "key": "k", "action_key": "k", "action": "create_pods", "decision_id": 3,
    "controller": "ReplicaSet/ns/web", "outcome": "succeeded", "finished_at": "2026-03-15T12:00:01Z"}
ACTION: dict[str, Any] = {
    "msg": "delete_pod", "v": 1, "key": "k", "decision_id": 3, "controller": "ReplicaSet/ns/web",
    "issued_at": "2026-03-15T12:00:00.000000Z", "namespace": "ns", "name": "p", "uid": "u1"}

Decode = Callable[[bytes], Any]


def changed(base: dict[str, Any], **fields: Any) -> bytes:
    return msgspec.json.encode({**base, **fields})


def without(base: dict[str, Any], field: str) -> bytes:
    return msgspec.json.encode({k: v for k, v in base.items() if k != field})


BAD: list[tuple[str, Decode, bytes, str, str]] = [
    # (case, decoder, bytes, reason, a part of the error text)
    ("event: not JSON", codec.decode_observed, b"not json at all", codec.UNDECODABLE, "not a observed-event"),
    ("event: empty", codec.decode_observed, b"", codec.UNDECODABLE, "not a observed-event"),
    ("event: a JSON list", codec.decode_observed, b"[1, 2]", codec.UNDECODABLE, "a JSON list"),
    ("event: an action", codec.decode_observed, msgspec.json.encode(ACTION), codec.WRONG_KIND, "'delete_pod'"),
    ("event: no uid", codec.decode_observed, without(OBSERVED, "uid"), codec.MALFORMED, "uid"),
    ("event: kind a number", codec.decode_observed, changed(OBSERVED, kind=5), codec.MALFORMED, "kind"),
    ("event: version a string", codec.decode_observed, changed(OBSERVED, v="2"), codec.MALFORMED, "`$.v`"),
    ("event: observed_at not a time", codec.decode_observed, changed(OBSERVED, observed_at="yesterday"),
     codec.BAD_TIMESTAMP, "observed_at 'yesterday'"),
    ("event: observed_at empty", codec.decode_observed, changed(OBSERVED, observed_at=""),
     codec.BAD_TIMESTAMP, "observed_at"),
    ("event: observed_at without offset", codec.decode_observed, changed(OBSERVED, observed_at="2026-03-15T12:00:00"),
     codec.BAD_TIMESTAMP, "observed_at"),
    ("event: NUL in the name", codec.decode_observed, changed(OBSERVED, name="p\x00"), codec.MALFORMED,
     "NUL character in name"),
    ("result: not JSON", codec.decode_result, b"{", codec.UNDECODABLE, "not a action-result"),
    ("result: an event", codec.decode_result, msgspec.json.encode(OBSERVED), codec.WRONG_KIND, "'observed'"),
    ("result: no key", codec.decode_result, without(RESULT, "key"), codec.MALFORMED, "key"),
    ("result: finished_at not a time", codec.decode_result, changed(RESULT, finished_at="2026-13-45T99:00:00Z"),
     codec.BAD_TIMESTAMP, "finished_at"),
    ("result: attempts past the column", codec.decode_result, changed(RESULT, attempts=2**40), codec.MALFORMED,
     "attempts"),
    ("result: decision id past the column", codec.decode_result, changed(RESULT, decision_id=2**63),
     codec.MALFORMED, "decision_id"),
    ("result: NUL in the message", codec.decode_result, changed(RESULT, message="a\x00b"), codec.MALFORMED,
     "NUL character in message"),
    ("action: not JSON", codec.decode_action, b"\xff\xfe", codec.UNDECODABLE, "not a action"),
    ("action: an unknown action", codec.decode_action, changed(ACTION, msg="explode"), codec.WRONG_KIND,
     "'explode'"),
    ("action: a result", codec.decode_action, msgspec.json.encode(RESULT), codec.WRONG_KIND, "'result'"),
    ("action: no tag", codec.decode_action, without(ACTION, "msg"), codec.MALFORMED, "msg"),
    ("action: issued_at not a time", codec.decode_action, changed(ACTION, issued_at="12:00"), codec.BAD_TIMESTAMP,
     "issued_at '12:00'"),
]


@pytest.mark.parametrize(("decode", "data", "reason", "text"), [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])
def test_unusable_messages_are_bad_messages_with_their_reason(decode: Decode, data: bytes, reason: str,
                                                              text: str) -> None:
    with pytest.raises(codec.BadMessage) as caught:
        decode(data)
    assert caught.value.reason == reason
    assert reason in codec.REASONS
    assert text in str(caught.value)


NEWER: list[tuple[str, Decode, bytes]] = [
    ("event: decodes", codec.decode_observed, changed(OBSERVED, v=SCHEMA_VERSION + 1)),
    ("event: a field this kubus does not know is missing", codec.decode_observed,
     msgspec.json.encode({**{k: v for k, v in OBSERVED.items() if k != "uid"}, "v": SCHEMA_VERSION + 1})),
    ("event: a bad timestamp, in a newer format maybe", codec.decode_observed,
     changed(OBSERVED, v=SCHEMA_VERSION + 1, observed_at=12345)),
    ("result", codec.decode_result, changed(RESULT, v=SCHEMA_VERSION + 5)),
    ("action: a newer action kind", codec.decode_action, changed(ACTION, v=SCHEMA_VERSION + 1, msg="resize_pod")),
    ("action: the executor's old test case", codec.decode_action,
     msgspec.json.encode({"v": 99, "type": "create_pods"})),
]


@pytest.mark.parametrize(("decode", "data"), [case[1:] for case in NEWER], ids=[case[0] for case in NEWER])
def test_newer_messages_are_not_bad_but_newer(decode: Decode, data: bytes) -> None:
    with pytest.raises(codec.NewerSchema) as caught:
        decode(data)
    assert not isinstance(caught.value, ValueError)  # nothing that skips bad messages takes it for one
    version = msgspec.json.decode(data)["v"]
    assert caught.value.version == version
    assert str(caught.value).endswith(f"schema version {version}; this kubus understands up to {SCHEMA_VERSION}: "
                                      "upgrade this process")


GOOD: list[tuple[str, Decode, bytes]] = [
    ("event", codec.decode_observed, msgspec.json.encode(OBSERVED)),
    ("event without a version (the first kubus's)", codec.decode_observed, without(OBSERVED, "v")),
    ("event observed_at with an offset", codec.decode_observed,
     changed(OBSERVED, observed_at="2026-03-15T13:00:00.5+01:00")),
    ("event of a kind no controller reads", codec.decode_observed, changed(OBSERVED, kind="Namespace")),
    ("result", codec.decode_result, msgspec.json.encode(RESULT)),
    ("result with a negative code", codec.decode_result, changed(RESULT, code=-1)),
    ("action", codec.decode_action, msgspec.json.encode(ACTION)),
]


@pytest.mark.parametrize(("decode", "data"), [case[1:] for case in GOOD], ids=[case[0] for case in GOOD])
def test_usable_messages_decode(decode: Decode, data: bytes) -> None:
    assert decode(data) is not None


def test_a_newer_process_reads_what_this_one_stops_at(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the upgrade (here: SCHEMA_VERSION raised in place) the same bytes decode."""
    data = changed(OBSERVED, v=SCHEMA_VERSION + 1)
    with pytest.raises(codec.NewerSchema):
        codec.decode_observed(data)
    monkeypatch.setattr(codec, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    assert codec.decode_observed(data).v == SCHEMA_VERSION + 1
