"""The executor's own index of who controls each pod and ControllerRevision, fed by ingest's events: it saves
the ownership check's GET before a delete (executor/ownership.py), never a check.

Issue 16's check reads every pod (and ControllerRevision) a DeletePod (DeleteControllerRevision) names before
deleting it, through the same rate limiter as every write: at 20 QPS a delete cost two requests where upstream's
costs one (it deletes straight from its informer's cache). This index is the executor's informer: uid ->
(namespace, name, resourceVersion, controller reference kind/name/uid) for every pod and ControllerRevision whose
controller is a ReplicaSet or DaemonSet, as the last event of it on KUBUS_STATE says.

Why it keeps issue 16's guarantee. The reconciler, which the check guards against, sees every pod's uid and
resourceVersion on the bus, so a precondition taken from an action proves nothing. This index is built only
from KUBUS_STATE, which is sourced from KUBUS_EVENTS, which only ingest may publish to
(docs/nats-permissions.conf: the reconcile identity publishes actions and dead letters, nothing else); the
executor's identity may read KUBUS_STATE and publish nothing there. So an entry is what the API server sent
ingest: the object at that resourceVersion was controlled by that controller. The delete then goes out with
`preconditions: {uid, resourceVersion}` of exactly that version, and kube-apiserver deletes only if the object
is still at it (etcd compares it in the same transaction): the object deleted is the very version the index
checked, controlled by the action's controller. An index behind the cluster therefore cannot make a delete
happen: its older version fails the precondition (409), and the executor falls back to today's GET, check and
delete (carrying the version it just read). An object missing from the index, or indexed as another's or as an
orphan, takes that path too: the index only ever answers "yes, at this version", and a "yes" is enforced by
the API server.

It decodes only the metadata it keeps (msgspec Structs of just those fields), and keeps nothing of an object
not controlled by a ReplicaSet or DaemonSet. An event it cannot decode (or of a newer schema) drops the uid's
entry: the fallback reads the object.

Known limit, left to do: when KUBUS_STATE is renewed (ingest found KUBUS_EVENTS reset) the index is not rebuilt;
its ordered consumers resume by sequence (nats-py's reset), so it may miss objects and keep entries of objects
changed or deleted meanwhile. That costs speed, not safety: a missing entry is read (GET, then DELETE, as before
the index), a stale one fails its precondition first (409: one request more than before the index) or finds the
object gone (404, a success as before).

Two alternatives were weighed. A precondition from the action alone (the reconciler's cache's resourceVersion)
saves the GET too, but the action's publisher is exactly who the check distrusts. Reading KUBUS_EVENTS instead
of KUBUS_STATE would see a change a few milliseconds earlier, but holds only `history_max_age` of history:
an object unchanged for longer would never be indexed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from messages import codec, subjects
from messages.observed import DELETED, DELETED_FINAL_STATE_UNKNOWN, QUARANTINED, SCHEMA_VERSION
from runtime.bus import Bus

log = logging.getLogger("kubus.executor.index")

INDEXED_KINDS: Final = ("Pod", "ControllerRevision")
CONTROLLER_KINDS: Final = ("ReplicaSet", "DaemonSet")
RETRY_SUBSCRIBE: Final = 5.0  # seconds between attempts to subscribe while NATS refuses (the index stays empty)


class _Ref(msgspec.Struct, gc=False):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class _Meta(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    owner_references: list[_Ref] = []


class _Object(msgspec.Struct, gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


class _Event(msgspec.Struct, gc=False):
    """The fields of an ObservedEvent (messages/observed.py) the index reads; its object's metadata only."""

    v: int = SCHEMA_VERSION
    kind: str = ""
    type: str = ""
    uid: str = ""
    object: _Object | None = None


_decode_event = msgspec.json.Decoder(_Event).decode


class Controlled(msgspec.Struct, frozen=True, gc=False):
    """An object at one resourceVersion, and the controller its controller reference names at that version.

    A frozen msgspec Struct, not a frozen dataclass: one is built for nearly every event the index reads, and a
    frozen dataclass's __init__ sets each of its seven fields through object.__setattr__ in Python (~10,000
    instructions a build, a fifth of `apply`); a Struct's is C. No reference cycles can go through its strings
    (gc=False)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    controller_kind: str
    controller_name: str
    controller_uid: str


class OwnershipIndex:
    """uid -> Controlled, per kind, from the events `apply` is given in each subject's order."""

    def __init__(self) -> None:
        self._by_kind: dict[str, dict[str, Controlled]] = {kind: {} for kind in INDEXED_KINDS}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_kind.values())

    def lookup(self, kind: str, uid: str) -> Controlled | None:
        entries = self._by_kind.get(kind)
        return None if entries is None else entries.get(uid)

    def apply(self, subject: str, data: bytes) -> None:
        """One message of `<prefix>.state.<partition>.<kind>.<uid>` (or of the events stream: same body)."""
        parts = subject.rsplit(".", 2)
        if len(parts) != 3 or parts[1] not in self._by_kind:
            return
        entries, uid = self._by_kind[parts[1]], parts[2]
        try:
            event = _decode_event(codec.inflated(data))
        except (msgspec.DecodeError, codec.BadMessage):
            entries.pop(uid, None)  # unknown now: the fallback reads it
            return
        obj = event.object
        if (event.v > SCHEMA_VERSION or event.type in (DELETED, DELETED_FINAL_STATE_UNKNOWN, QUARANTINED)
                or obj is None or event.uid != uid or obj.metadata.uid != uid or not obj.metadata.resource_version):
            entries.pop(uid, None)
            return
        meta = obj.metadata
        refs = [r for r in meta.owner_references if r.controller]
        if len(refs) != 1 or refs[0].kind not in CONTROLLER_KINDS:
            entries.pop(uid, None)  # an orphan, or another kind's: nothing the index may vouch for
            return
        ref = refs[0]
        entries[uid] = Controlled(meta.namespace, meta.name, uid, meta.resource_version, ref.kind, ref.name, ref.uid)


async def follow(bus: Bus, index: OwnershipIndex, stop: asyncio.Event) -> None:
    """Feeds `index` from KUBUS_STATE (each object's last event, then every new one) until `stop` is set: one
    ordered consumer per indexed kind. Should NATS refuse (the executor's identity lacks the permission of
    docs/nats-permissions.conf), it says so and tries again later; meanwhile every check reads the object."""
    stream = bus.stream(subjects.STATE_STREAM)

    async def on_message(msg: Msg) -> None:
        index.apply(msg.subject, msg.data)

    subs: list[JetStreamContext.PushSubscription] = []
    try:
        while not stop.is_set():
            try:
                for kind in INDEXED_KINDS:
                    subs.append(await bus.js.subscribe(
                        f"{bus.prefix}.state.*.{kind}.*", stream=stream, cb=on_message, ordered_consumer=True,
                        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL)))
                break
            except Exception as exc:  # anything NATS says: the index is an optimisation
                log.warning("the ownership index cannot follow %s (%s): every delete reads its object first; "
                            "retrying in %.0fs", stream, exc, RETRY_SUBSCRIBE)
                await _unsubscribe(subs)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RETRY_SUBSCRIBE)
        await stop.wait()
    finally:
        await _unsubscribe(subs)


async def _unsubscribe(subs: list[JetStreamContext.PushSubscription]) -> None:
    for sub in subs:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    subs.clear()
