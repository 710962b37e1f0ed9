"""Raw API bytes -> ObservedEvents. Pure: no I/O, the clock passed in.

The object travels as the API's own bytes (`msgspec.Raw`), less its metadata.managedFields (as
kube-controller-manager's informers drop them: `without_managed_fields`); decoding it into its kube model here
only proves it is usable downstream. An object that does not decode becomes a QUARANTINED event
carrying the decoder's message (kind, namespace/name and the field at fault), so the bus keeps
the fact and no controller is handed something it cannot read.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from ingest.kinds import KindSpec
from kube import codec
from kube.meta import Status
from messages import codec as bus_codec
from messages.observed import QUARANTINED, ObservedEvent

BOOKMARK = "BOOKMARK"
ERROR = "ERROR"


class WatchLine(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class ListPage(msgspec.Struct):
    """One page of a list response; the items stay raw until `observe` looks at them."""

    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] = []


_line = msgspec.json.Decoder(WatchLine)
_page = msgspec.json.Decoder(ListPage)
_status = msgspec.json.Decoder(Status)
_members = msgspec.json.Decoder(dict[str, msgspec.Raw])  # an object's members, each kept as the API's bytes
_encode = msgspec.json.Encoder().encode
_MANAGED_FIELDS = "managedFields"
_MANAGED_FIELDS_KEY = b'"managedFields"'  # the member's name as it is written: searched before any decoding


class Unroutable(ValueError):
    """An object without a readable uid: there is no subject to publish it on."""


@dataclass(frozen=True)
class Origin:
    """Who observed and when: stamped on every event of one batch."""

    ingest: str
    observed_at: str


def parse_line(line: bytes) -> WatchLine:
    """One watch frame; raises msgspec.DecodeError for a line that is not one."""
    return _line.decode(line)


def parse_page(body: bytes) -> ListPage:
    return _page.decode(body)


def parse_status(raw: msgspec.Raw) -> Status:
    """The Status of a watch ERROR frame; an unreadable one reads as a 500."""
    try:
        return _status.decode(raw)
    except msgspec.DecodeError:
        return Status(code=500, message=bytes(raw).decode(errors="replace"))


def bookmark_rv(raw: msgspec.Raw) -> str:
    return codec.decode_head(raw).metadata.resource_version


def without_managed_fields(raw: msgspec.Raw) -> msgspec.Raw:
    """The object without its `metadata.managedFields`, every other byte the API's, in the API's order.

    kube-controller-manager's informers drop managedFields from every object they cache (the transform its
    CreateControllerContext gives the shared informer factories, "for memory efficiency"): no controller reads
    them. On a real cluster they are about a third of a pod's JSON and half a node's (one entry per writer:
    the controller's create, the scheduler, the kubelet's status), and every event crosses the bus several
    times (KUBUS_EVENTS, KUBUS_STATE, each consumer) and stays in its history. Only the object's own metadata
    loses them, as upstream's accessor does; a template's metadata inside the object is left as written. An
    object without them (the sim keeps none) is returned as it is, after a byte search; one whose members
    cannot be read is too, for the model's decoding to quarantine it naming the field."""
    data = bytes(raw)
    if _MANAGED_FIELDS_KEY not in data:
        return raw
    try:
        members = _members.decode(data)
        metadata = members.get("metadata")
        if metadata is None:
            return raw
        fields = _members.decode(metadata)
    except msgspec.DecodeError:
        return raw
    if fields.pop(_MANAGED_FIELDS, None) is None:
        return raw
    members["metadata"] = msgspec.Raw(_encode(fields))
    return msgspec.Raw(_encode(members))


def observe(spec: KindSpec, event_type: str, raw: msgspec.Raw, origin: Origin) -> ObservedEvent:
    """The event for one object, without its managedFields (see without_managed_fields); QUARANTINED (with
    `error`) when it does not decode into its model."""
    raw = without_managed_fields(raw)
    try:
        meta = codec.decode(raw, spec.model).metadata
        error = None
        ns, name, uid, rv = meta.namespace, meta.name, meta.uid, meta.resource_version
    except codec.DecodeError as exc:
        # the model rejected it; the metadata alone may still be readable, which is all routing needs
        error = f"{exc} (in a {event_type} event)"
        event_type = QUARANTINED
        try:
            head = codec.decode_head(raw).metadata
        except msgspec.DecodeError:
            raise Unroutable(f"{spec.kind}: unreadable metadata ({exc})") from None
        ns, name, uid, rv = head.namespace, head.name, head.uid, head.resource_version
    if not uid:
        raise Unroutable(f"{spec.kind} {ns}/{name}: no metadata.uid")
    return ObservedEvent(kind=spec.kind, type=event_type, namespace=ns, name=name, uid=uid,
                         resource_version=rv, observed_at=origin.observed_at, ingest=origin.ingest,
                         object=raw, error=error)


def fitted(event: ObservedEvent, limit: int) -> tuple[bytes, str | None]:
    """The message to publish for `event`, at most `limit` bytes (NATS's max_payload less headroom), and the
    error when it is not the event itself.

    An event that fits goes as it is (JSON). One that does not goes compressed: a Pod the API accepts is up
    to ~1.5 MiB, more than NATS's default 1 MiB, and its JSON compresses several times over (the numbers
    are in docs/production.md, "Large objects"). One still too large compressed becomes a QUARANTINED event
    carrying only the object's identity and the error naming the object and the sizes: the bus keeps the
    fact, no controller is handed a partial object, and the events after it are published (never a wedge)."""
    data = bus_codec.encode(event)
    if len(data) <= limit:
        return data, None
    packed = bus_codec.compress(data)
    if len(packed) <= limit:
        return packed, None
    where = f"{event.namespace}/{event.name}" if event.namespace else event.name
    error = (f"{event.kind} {where} (uid {event.uid}, resourceVersion {event.resource_version}) is too large "
             f"for NATS: {len(data)} bytes, {len(packed)} compressed, over the {limit}-byte limit (the server's "
             f"max_payload less headroom); raise max_payload in the NATS configuration (in a {event.type} event)")
    identity = {"metadata": {"name": event.name, "namespace": event.namespace, "uid": event.uid,
                             "resourceVersion": event.resource_version}}
    stand_in = msgspec.structs.replace(event, type=QUARANTINED, error=error,
                                       object=msgspec.Raw(msgspec.json.encode(identity)))
    return bus_codec.encode(stand_in), error
