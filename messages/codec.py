"""Encoding and decoding bus messages, with errors that say what is wrong with a message.

Everything a consumer needs of a message to use it without raising is checked here, at the boundary: that
it is JSON of the kind of message the subject carries, with the fields and types its struct declares, that
its timestamps are RFC 3339 (the store parses them), and that what the store keeps fits its columns (no NUL
character, which PostgreSQL's text refuses; integers within their column). A message that fails is a
`BadMessage`, whose `reason` (one of REASONS) names the fault for the dead-letter header and the
`kubus_dead_lettered_total{origin,reason}` metric. A message of a newer schema version than this process
understands is not bad but early: `NewerSchema`, which its consumer stops at until this process is upgraded
(docs/production.md, "Upgrades").

A message may travel compressed (`compress`): zlib behind a marker no JSON document begins with. Every
decoder here takes either form, so a consumer (the reconciler's batches, its bootstrap from KUBUS_STATE,
ingest's relist, the replay) reads a compressed event like any other. Ingest compresses only an event too
large for NATS's max_payload (docs/production.md, "Large objects"); everything else stays plain JSON.
"""

from __future__ import annotations

import zlib
from collections.abc import Container
from typing import Any, Final, Protocol, TypeVar

import msgspec

from kube.times import parse_time
from messages.actions import Action, ActionKind, ActionResult
from messages.observed import SCHEMA_VERSION, ObservedEvent


class _Versioned(Protocol):
    @property
    def v(self) -> int: ...


V = TypeVar("V", bound=_Versioned)

_encoder = msgspec.json.Encoder()
_observed = msgspec.json.Decoder(ObservedEvent)
_action = msgspec.json.Decoder(Action)
_result = msgspec.json.Decoder(ActionResult)
_any = msgspec.json.Decoder()

# why a message cannot be used: the dead-letter header's Kubus-Dead-Reason and the metric's `reason` label
UNDECODABLE: Final = "undecodable"  # not a JSON object
WRONG_KIND: Final = "wrong_kind"  # another kind of message than its subject carries (an action among events)
MALFORMED: Final = "malformed"  # a field missing, mistyped or out of range
BAD_TIMESTAMP: Final = "bad_timestamp"  # observed_at, finished_at or issued_at not RFC 3339
BAD_SUBJECT: Final = "bad_subject"  # a subject that does not name a partition (and kind and uid) of this bus
BAD_OBJECT: Final = "bad_object"  # an event whose object does not decode into its kind's model
EXECUTOR_ERROR: Final = "executor_error"  # an action that broke the executor on its last delivery
TOO_LARGE: Final = "too_large"  # an outbox row over NATS's max_payload even compressed: never published
REASONS: Final = (UNDECODABLE, WRONG_KIND, MALFORMED, BAD_TIMESTAMP, BAD_SUBJECT, BAD_OBJECT, EXECUTOR_ERROR,
                  TOO_LARGE)

INT32: Final = 2**31 - 1  # the store's Integer columns (a result's code and attempts)
INT64: Final = 2**63 - 1  # its BigInteger columns (decision ids)


class BadMessage(ValueError):
    """A message that cannot be used; the reason goes with it to the dead-letter subject."""

    def __init__(self, reason: str, text: str) -> None:
        super().__init__(text)
        self.reason = reason


class NewerSchema(Exception):
    """A message written by a newer kubus (schema version above SCHEMA_VERSION): not unusable, only not yet.
    Its consumer stops before it (not past it, not dead-lettering it) until this process is upgraded. Not a
    ValueError, so nothing that handles unusable messages takes it for one."""

    def __init__(self, what: str, version: int) -> None:
        self.version = version
        super().__init__(f"{what} message has schema version {version}; this kubus understands "
                         f"up to {SCHEMA_VERSION}: upgrade this process")


def encode(message: Any) -> bytes:
    return _encoder.encode(message)


# The marker of a compressed message: a NUL byte cannot begin a JSON document, so nothing older is mistaken
# for one, and a reader that predates compression reports it as "not a ... message" rather than misreading it.
COMPRESSED = b"\x00kubus-zlib\x00"
# The most a compressed message may inflate to: above kube-apiserver's largest object (etcd's 1.5 MiB request
# limit) with room to spare, and a bound on what a corrupt or hostile message can make a consumer allocate.
MAX_INFLATED = 16 * 1024 * 1024
COMPRESSION_LEVEL = 6  # zlib's default: of the levels measured, the best size for the time (bench/RESULTS.md)


def compress(data: bytes) -> bytes:
    """`data` (an encoded message) compressed, behind the COMPRESSED marker."""
    return COMPRESSED + zlib.compress(data, COMPRESSION_LEVEL)


def is_compressed(data: bytes) -> bool:
    return data[:len(COMPRESSED)] == COMPRESSED


def inflated(data: bytes) -> bytes:
    """A message as encoded: compressed ones inflated, others as they are. BadMessage when a compressed one
    is corrupt or inflates beyond MAX_INFLATED."""
    if not is_compressed(data):
        return data
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(memoryview(data)[len(COMPRESSED):], MAX_INFLATED)
    except zlib.error as exc:
        raise BadMessage(UNDECODABLE, f"compressed message is corrupt: {exc}") from None
    if inflater.unconsumed_tail:
        raise BadMessage(UNDECODABLE, f"compressed message inflates beyond {MAX_INFLATED} bytes") from None
    if not inflater.eof:
        raise BadMessage(UNDECODABLE, "compressed message is truncated") from None
    return out


def _decode(data: bytes, decoder: msgspec.json.Decoder[V], what: str, tags: Container[str]) -> V:
    """The message, parsed once: its schema version is a field of it. Only a message that does not decode is
    parsed a second time, to tell one from a newer kubus (its version) from one of another kind (its tag)
    from a malformed one."""
    data = inflated(data)
    try:
        message = decoder.decode(data)
    except msgspec.DecodeError as malformed:
        try:
            head = _any.decode(data)
        except msgspec.DecodeError as exc:
            raise BadMessage(UNDECODABLE, f"not a {what} message: {exc}") from None
        if not isinstance(head, dict):
            raise BadMessage(UNDECODABLE, f"not a {what} message: a JSON {type(head).__name__}, "
                             "not an object") from None
        version = head.get("v")
        if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
            raise NewerSchema(what, version) from None
        tag = head.get("msg")
        if isinstance(tag, str) and tag not in tags:
            raise BadMessage(WRONG_KIND, f"not a {what} message: a {tag!r} message") from None
        raise BadMessage(MALFORMED, f"malformed {what} message: {malformed}") from None
    if message.v > SCHEMA_VERSION:
        raise NewerSchema(what, message.v)
    return message


def _timestamp(what: str, field: str, value: str) -> None:
    try:
        parse_time(value)
    except (ValueError, IndexError) as exc:
        raise BadMessage(BAD_TIMESTAMP, f"{what} has {field} {value!r}: {exc}") from None


def _text(what: str, fields: dict[str, str]) -> None:
    for name, value in fields.items():
        if "\x00" in value:
            raise BadMessage(MALFORMED, f"{what} has a NUL character in {name}")


def _number(what: str, name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise BadMessage(MALFORMED, f"{what} has {name} {value}, outside [{low}, {high}]")


_OBSERVED_TAGS: Final = ("observed",)
_RESULT_TAGS: Final = ("result",)
_ACTION_TAGS: Final = frozenset(kind.value for kind in ActionKind)


def decode_observed(data: bytes) -> ObservedEvent:
    event = _decode(data, _observed, "observed-event", _OBSERVED_TAGS)
    what = f"event {event.kind} {event.namespace}/{event.name}"
    _timestamp(what, "observed_at", event.observed_at)
    _text(what, {"kind": event.kind, "type": event.type, "namespace": event.namespace, "name": event.name,
                 "uid": event.uid, "resource_version": event.resource_version, "ingest": event.ingest})
    return event


def decode_action(data: bytes) -> Action:
    action: Action = _decode(data, _action, "action", _ACTION_TAGS)
    what = f"action {action.key}"
    _timestamp(what, "issued_at", action.issued_at)
    _number(what, "decision_id", action.decision_id, -INT64 - 1, INT64)
    return action


def decode_result(data: bytes) -> ActionResult:
    result = _decode(data, _result, "action-result", _RESULT_TAGS)
    what = f"result {result.key}"
    _timestamp(what, "finished_at", result.finished_at)
    _text(what, {"key": result.key, "action_key": result.action_key, "action": result.action,
                 "controller": result.controller, "outcome": result.outcome, "reason": result.reason,
                 "message": result.message, "object_uid": result.object_uid,
                 "resource_version": result.resource_version, "executor": result.executor,
                 "subject": result.subject})
    _number(what, "decision_id", result.decision_id, -INT64 - 1, INT64)
    _number(what, "code", result.code, -INT32 - 1, INT32)
    _number(what, "attempts", result.attempts, -INT32 - 1, INT32)
    return result
