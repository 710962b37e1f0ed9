"""JSON in and out of the object model.

One msgspec Decoder per target type (cached on first use) and one Encoder,
all sharing the hooks that make ``PodTemplateSpec`` lossless (see
``kube.template``). Unknown fields are ignored everywhere else, so newer API
servers decode fine. Every decoding failure becomes a ``DecodeError`` naming
the object's kind, its ``namespace/name`` when those could be read, and the
JSON path of the bad field.

``null`` decodes only where the model says ``X | None``: lists and maps must
be absent or hold a value, which is all the API server ever writes (Go's
``omitempty`` drops nil slices and maps).
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from kube.meta import ObjectMeta, Status, WatchEvent
from kube.template import PodTemplateSpec

__all__ = [
    "DecodeError",
    "Head",
    "HeadMeta",
    "dec_hook",
    "decode",
    "decode_builtin",
    "decode_head",
    "decode_metadata",
    "decode_watch_event",
    "enc_hook",
    "encode",
    "to_builtins",
]

T = TypeVar("T")

_AT = re.compile(r" - at `(\$[^`]*)`")


class DecodeError(ValueError):
    """A JSON document that does not fit the model, e.g. ``"replicas": "three"``."""

    def __init__(self, kind: str, name: str, path: str, message: str) -> None:
        self.kind = kind
        self.name = name
        self.path = path
        self.message = message
        where = f"{kind} {name}".strip() or "object"
        super().__init__(f"{where}: {path}: {message}" if path else f"{where}: {message}")


class HeadMeta(msgspec.Struct, rename="camel", gc=False):
    """The fields of ``metadata`` that name an object and its version: all that routing, results and
    error messages need."""

    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""


class Head(msgspec.Struct, gc=False):
    """An object's kind and :class:`HeadMeta`, read without the rest: msgspec skips spec, status and the
    other metadata without building them, and they need not fit the model (an object the model refuses
    can still be named and routed)."""

    kind: str = ""
    metadata: HeadMeta = msgspec.field(default_factory=HeadMeta)


class _Metadata(msgspec.Struct, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


_head = msgspec.json.Decoder(Head)
_metadata = msgspec.json.Decoder(_Metadata)


def decode_head(data: bytes | str) -> Head:
    """The kind and identity of any object's JSON (absent fields read as ""); raises msgspec.DecodeError
    when the JSON is not an object or those few fields have the wrong types."""
    return _head.decode(data)


def decode_metadata(data: bytes | str) -> ObjectMeta:
    """All of any object's ``metadata`` (labels, annotations, owners, deletion timestamp, ...) without its spec
    and status, for what :func:`decode_head` does not read; raises msgspec.DecodeError when the JSON is not an
    object or its metadata does not fit the model (where decode_head, which reads less, may still succeed)."""
    return _metadata.decode(data).metadata


def dec_hook(tp: Any, obj: Any) -> Any:
    """msgspec ``dec_hook`` for the model; pass it to any other msgspec decoder of kube types."""
    if tp is PodTemplateSpec:
        if isinstance(obj, PodTemplateSpec):
            return obj
        try:
            return PodTemplateSpec.from_builtins(obj)
        except msgspec.ValidationError as error:
            # msgspec passes a ValidationError through unchanged but appends
            # the template's own path to a plain ValueError; _wrap joins them.
            raise ValueError(str(error)) from error
    raise NotImplementedError(f"kube.codec cannot decode {tp!r}")


def enc_hook(obj: Any) -> Any:
    """msgspec ``enc_hook`` for the model (e.g. for a msgpack encoder of bus messages)."""
    if isinstance(obj, PodTemplateSpec):
        return obj.to_builtins()
    raise NotImplementedError(f"kube.codec cannot encode {type(obj)!r}")


_encoder = msgspec.json.Encoder(enc_hook=enc_hook)
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def _decoder(target: Any) -> msgspec.json.Decoder[Any]:
    found = _decoders.get(target)
    if found is None:
        found = _decoders[target] = msgspec.json.Decoder(target, dec_hook=dec_hook)
    return found


def decode(data: bytes | str, type: type[T]) -> T:
    """Decode API JSON into ``type`` (a kind, ``List[Kind]``, ...); raises DecodeError."""
    decoder = _decoders.get(type)  # _decoder's lookup, inlined: the reconciler decodes every pod event's object
    if decoder is None:
        decoder = _decoder(type)
    try:
        result: T = decoder.decode(data)
    except msgspec.DecodeError as error:
        try:
            head = decode_head(data)
        except msgspec.DecodeError:
            head = Head()
        raise _wrap(error, head, type) from error
    return result


def decode_builtin(obj: Any, type: type[T]) -> T:
    """Convert an already-parsed JSON value (dicts, lists, scalars) into ``type``; raises DecodeError."""
    try:
        return msgspec.convert(obj, type, dec_hook=dec_hook)
    except msgspec.ValidationError as error:
        try:
            head = msgspec.convert(obj, Head)
        except msgspec.ValidationError:
            head = Head()
        raise _wrap(error, head, type) from error


def decode_watch_event(data: bytes | str, type: type[T]) -> WatchEvent[T] | WatchEvent[Status]:
    """Decode one watch line; an ERROR event's object is decoded as a Status, others as ``type``."""
    raw = decode(data, WatchEvent[msgspec.Raw])
    if raw.type == "ERROR":
        return WatchEvent(type=raw.type, object=decode(raw.object, Status))
    return WatchEvent(type=raw.type, object=decode(raw.object, type))


def encode(obj: Any) -> bytes:
    """Encode a model object (or any JSON-able value holding them) to compact JSON."""
    return _encoder.encode(obj)


def to_builtins(obj: Any) -> Any:
    """A model object as plain dicts, lists and scalars with API field names."""
    return msgspec.to_builtins(obj, enc_hook=enc_hook)


def _wrap(error: msgspec.DecodeError, head: Head, target: Any) -> DecodeError:
    text = str(error)
    paths = _AT.findall(text)
    message = _AT.split(text, maxsplit=1)[0] if paths else text
    # Nested failures (inside a template) list the innermost path first.
    path = "".join(p.removeprefix("$") for p in reversed(paths[:-1]))
    path = paths[-1] + path if paths else ""
    meta = head.metadata
    name = f"{meta.namespace}/{meta.name}" if meta.namespace and meta.name else meta.name
    kind = head.kind or getattr(target, "__name__", "")
    return DecodeError(kind, name, path, message)
