"""After a list: what the bus must be told so that it agrees with the API again.

`plan_relist` is the informer's Replace: objects the bus never saw are ADDED, objects whose
resourceVersion moved are RELISTED (a synthetic update), objects the bus still holds but the list
no longer has get a DELETED_FINAL_STATE_UNKNOWN tombstone carrying their last known state, and
unchanged objects produce nothing. The synthetic events' ids are built from what both sides know
(uid and resourceVersion), so two replicas relisting at once publish each of them once.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Mapping

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from ingest.observing import Origin
from messages import subjects
from messages.codec import BadMessage, decode_observed
from messages.observed import DELETED_FINAL_STATE_UNKNOWN, QUARANTINED, RELISTED, ObservedEvent
from runtime.bus import Bus
from runtime.deadletter import EVENTS, STATE, Original, dead_letter

log = logging.getLogger("kubus.ingest")


def plan_relist(kind: str, known: Mapping[str, ObservedEvent], listed: Iterable[ObservedEvent],
                origin: Origin, list_rv: str = "") -> list[ObservedEvent]:
    """The events that bring the bus from `known` (uid -> last event) to `listed` (ADDED events), listed at
    `list_rv`. An object the bus knows at a version newer than the list's is no tombstone: another replica
    published it after the list was taken (`known` is read after listing), and a deletion is final."""
    out: list[ObservedEvent] = []
    present: set[str] = set()
    for event in listed:
        present.add(event.uid)
        last = known.get(event.uid)
        if last is None or last.is_deletion:
            out.append(event)
        elif last.resource_version != event.resource_version:
            # a quarantined object stays quarantined: its type says it cannot be decoded
            out.append(event if event.type == QUARANTINED else msgspec.structs.replace(event, type=RELISTED))
    for uid, last in known.items():
        if uid not in present and not last.is_deletion and not _newer_than(last.resource_version, list_rv):
            out.append(ObservedEvent(
                kind=kind, type=DELETED_FINAL_STATE_UNKNOWN, namespace=last.namespace, name=last.name, uid=uid,
                resource_version=last.resource_version, observed_at=origin.observed_at, ingest=origin.ingest,
                object=last.object, error=last.error))
    return out


def _newer_than(version: str, list_rv: str) -> bool:
    """Whether `version` is newer than the list's; False when either is no integer (the list decides)."""
    if not (version.isascii() and version.isdigit() and list_rv.isascii() and list_rv.isdigit()):
        return False
    return int(version) > int(list_rv)


async def read_known(bus: Bus, kind: str, by: str = "ingest") -> dict[str, ObservedEvent]:
    """The last event of every object of `kind` on the bus, by uid.

    KUBUS_STATE holds the last event of every object ever seen, but the server fills it from
    KUBUS_EVENTS asynchronously, so it can trail what was just acked; the last event per subject
    of KUBUS_EVENTS is laid over it (KUBUS_EVENTS ages out, so it cannot serve alone).

    An unusable message is moved to KUBUS_DEAD (`by` says who did; the same copy a reconciler makes of it
    is stored once) and left out. A message of a newer kubus raises codec.NewerSchema: what the bus knows
    of that object cannot be read, so no relist can be planned against it until this ingest is upgraded.
    """
    known: dict[str, ObservedEvent] = {}
    sources = (
        (subjects.STATE_STREAM, f"{bus.prefix}.state.*.{kind}.*", DeliverPolicy.ALL),
        (subjects.EVENTS_STREAM, f"{bus.prefix}.events.*.{kind}.*", DeliverPolicy.LAST_PER_SUBJECT),
    )
    for base, subject_filter, policy in sources:
        stream = bus.stream(base)
        origin = STATE if base == subjects.STATE_STREAM else EVENTS
        async for msg in read_stream(bus.js, stream, subject_filter, policy):
            try:
                event = decode_observed(msg.data)
            except BadMessage as exc:
                original = Original(stream, msg.metadata.sequence.stream, msg.subject, msg.data)
                await dead_letter(bus, origin, original, exc.reason, str(exc), by)
                continue
            known[event.uid] = event
    return known


async def read_stream(js: JetStreamContext, stream: str, subject_filter: str,
                      policy: DeliverPolicy = DeliverPolicy.ALL, batch: int = 1000,
                      headers_only: bool = False) -> AsyncIterator[Msg]:
    """Every message of `stream` matching `subject_filter` that is there now, in stream order,
    through an ephemeral pull consumer that is deleted afterwards (`headers_only`: without their data)."""
    sub = await js.pull_subscribe(subject_filter, stream=stream, config=ConsumerConfig(
        deliver_policy=policy, ack_policy=AckPolicy.NONE, inactive_threshold=60.0, mem_storage=True,
        headers_only=headers_only or None))
    name = ""
    try:
        info = await sub.consumer_info()
        name = info.name
        if info.num_pending == 0:
            return
        while True:
            try:
                msgs = await sub.fetch(batch, timeout=5)
            except TimeoutError:
                return  # num_pending promised more, but they were removed meanwhile (limits)
            for msg in msgs:
                yield msg
            if msgs[-1].metadata.num_pending == 0:
                return
    finally:
        # best effort: inactive_threshold removes the consumer anyway if NATS is gone right now
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
            if name:
                await js.delete_consumer(stream, name)
