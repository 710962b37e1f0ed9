"""Encoding and decoding bus messages, with errors that say what is wrong with a message.

A message may travel compressed (`compress`): zlib behind a marker no JSON document begins with. Every
decoder here takes either form, so a consumer (the reconciler's batches, its bootstrap from KUBUS_STATE,
ingest's relist, the replay) reads a compressed event like any other. Ingest compresses only an event too
large for NATS's max_payload (docs/production.md, "Large objects"); everything else stays plain JSON.
"""

from __future__ import annotations

import zlib
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
        raise BadMessage(f"compressed message is corrupt: {exc}") from None
    if inflater.unconsumed_tail:
        raise BadMessage(f"compressed message inflates beyond {MAX_INFLATED} bytes") from None
    if not inflater.eof:
        raise BadMessage("compressed message is truncated") from None
    return out


def _decode(data: bytes, decoder: msgspec.json.Decoder[V], what: str) -> V:
    """The message, parsed once: its schema version is a field of it. Only a message that does not decode is
    parsed a second time, for its version alone, to tell one from a newer kubus from a malformed one."""
    data = inflated(data)
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
