"""Encoding and decoding bus messages, with errors that say what is wrong with a message."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import msgspec

from messages.actions import Action, ActionResult
from messages.observed import SCHEMA_VERSION, ObservedEvent


class _Versioned(Protocol):
    @property
    def v(self) -> int: ...


V = TypeVar("V", bound=_Versioned)

_encoder = msgspec.json.Encoder()
_observed = msgspec.json.Decoder(ObservedEvent)
_action = msgspec.json.Decoder(Action)
_result = msgspec.json.Decoder(ActionResult)


class _Version(msgspec.Struct):
    v: int = 0


_version = msgspec.json.Decoder(_Version)


class BadMessage(ValueError):
    """A message that cannot be used; the reason goes with it to the dead-letter subject."""


def encode(message: Any) -> bytes:
    return _encoder.encode(message)


def _decode(data: bytes, decoder: msgspec.json.Decoder[V], what: str) -> V:
    """The message, parsed once: its schema version is a field of it. Only a message that does not decode is
    parsed a second time, for its version alone, to tell one from a newer kubus from a malformed one."""
    try:
        message = decoder.decode(data)
    except msgspec.DecodeError as malformed:
        try:
            version = _version.decode(data).v
        except msgspec.DecodeError as exc:
            raise BadMessage(f"not a {what} message: {exc}") from None
        if version > SCHEMA_VERSION:
            raise _too_new(what, version) from None
        raise BadMessage(f"malformed {what} message: {malformed}") from None
    if message.v > SCHEMA_VERSION:
        raise _too_new(what, message.v)
    return message


def _too_new(what: str, version: int) -> BadMessage:
    return BadMessage(f"{what} message has schema version {version}; this kubus understands "
                      f"up to {SCHEMA_VERSION}: upgrade this process")


def decode_observed(data: bytes) -> ObservedEvent:
    return _decode(data, _observed, "observed-event")


def decode_action(data: bytes) -> Action:
    action: Action = _decode(data, _action, "action")
    return action


def decode_result(data: bytes) -> ActionResult:
    return _decode(data, _result, "action-result")
