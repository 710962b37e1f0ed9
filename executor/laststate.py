"""Who controls a pod or ControllerRevision, as its last event on KUBUS_STATE says, read when the executor
deletes it: it saves the ownership check's GET before a delete (executor/ownership.py), never a check.

Issue 16's check reads every pod (and ControllerRevision) a DeletePod (DeleteControllerRevision) names before
deleting it, through the same rate limiter as every write: at 20 QPS a delete cost two requests where upstream's
costs one (it deletes straight from its informer's cache). KUBUS_STATE keeps each object's last event on its
subject `<prefix>.state.<partition>.<kind>.<uid>` (messages/subjects.py; one message per subject), so the
executor asks JetStream for that one message when it deletes (a direct get: `$JS.API.DIRECT.GET.<stream>.
<subject>`, answered by any replica of the stream, `allow_direct` on KUBUS_STATE, runtime/bus.py) and learns
the object's namespace, name, resourceVersion and controller reference at that version.

Why it keeps issue 16's guarantee. The reconciler, which the check guards against, sees every pod's uid and
resourceVersion on the bus, so a precondition taken from an action proves nothing. KUBUS_STATE is sourced from
KUBUS_EVENTS, which only ingest may publish to (docs/nats-permissions.conf: the reconcile identity publishes
actions and dead letters, nothing else); the executor's identity may read KUBUS_STATE and publish nothing there.
So what the get returns is what the API server sent ingest: the object at that resourceVersion was controlled by
that controller. The delete then goes out with `preconditions: {uid, resourceVersion}` of exactly that version,
and kube-apiserver deletes only if the object is still at it (etcd compares it in the same transaction): the
object deleted is the very version checked, controlled by the action's controller. A state behind the cluster
therefore cannot make a delete happen: its older version fails the precondition (409), and the executor falls
back to the GET, check and delete (carrying the version it just read). Behind it may be: KUBUS_STATE copies
KUBUS_EVENTS a moment after ingest publishes, and on a stream of three replicas a follower that has not applied
the last changes may answer. An object with no message there, one whose last event is another's, an orphan's,
a deletion, unreadable or of a newer schema, takes the GET path too; so does every delete while the get is
refused (a KUBUS_STATE without `allow_direct`, an identity without the permission) or unanswered, and for
REFUSED_PAUSE after it (a refusal then costs one timeout, not one per delete): the get only ever answers "yes,
at this version", and a "yes" is enforced by the API server. The uid in the subject is the action's: one with a
wildcard gets some other object's last event, which the event's own uid, checked, refuses.

It decodes only the metadata it keeps (msgspec Structs of just those fields).

This replaced an index of every controlled pod and ControllerRevision, fed by ordered consumers over
KUBUS_STATE (issue 25, round 9): it decoded three messages for each pod created (~15,000 in a 5,000-node
DaemonSet apply that deletes nothing) to save a GET at deletes, and it was not rebuilt when KUBUS_STATE was
renewed. A get at delete time reads one message per delete and nothing else, and always the state there is.

Two alternatives were weighed. A precondition from the action alone (the reconciler's cache's resourceVersion)
saves the get too, but the action's publisher is exactly who the check distrusts. Reading KUBUS_EVENTS instead
of KUBUS_STATE would see a change a few milliseconds earlier, but holds only `history_max_age` of history:
the last event of an object unchanged for longer is gone.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

import msgspec
from nats.aio.client import Client

from messages import codec, subjects
from messages.observed import DELETED, DELETED_FINAL_STATE_UNKNOWN, QUARANTINED, SCHEMA_VERSION
from runtime.bus import Bus, denied

log = logging.getLogger("kubus.executor.state")

CONTROLLER_KINDS: Final = ("ReplicaSet", "DaemonSet")
DIRECT_GET: Final = "$JS.API.DIRECT.GET"  # nats-server's JSDirectGetLastBySubjectT: <this>.<stream>.<subject>
GET_TIMEOUT: Final = 1.0  # seconds: a direct get answers in about a millisecond; past this, the delete reads the object
STATUS: Final = "Status"  # the header of an answer without a message: why
NOT_FOUND: Final = "404"  # no message on the subject
REFUSED_PAUSE: Final = 5.0  # seconds without gets after one was refused or unanswered: every delete reads meanwhile


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
    """The fields of an ObservedEvent (messages/observed.py) read here; its object's metadata only."""

    v: int = SCHEMA_VERSION
    kind: str = ""
    type: str = ""
    uid: str = ""
    object: _Object | None = None


_decode_event = msgspec.json.Decoder(_Event).decode


class Controlled(msgspec.Struct, frozen=True, gc=False):
    """An object at one resourceVersion, and the controller its controller reference names at that version."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    controller_kind: str
    controller_name: str
    controller_uid: str


def controlled_of(kind: str, uid: str, data: bytes) -> Controlled | None:
    """The object of `data` (the last event of `kind` `uid` on KUBUS_STATE) and its controller, when a
    ReplicaSet or DaemonSet controls it at that version; None for anything else (a deletion, an orphan,
    another kind's, another object's, unreadable, a newer schema): its delete reads the object."""
    try:
        event = _decode_event(codec.inflated(data))
    except (msgspec.DecodeError, codec.BadMessage):
        return None
    obj = event.object
    if (event.v > SCHEMA_VERSION or event.type in (DELETED, DELETED_FINAL_STATE_UNKNOWN, QUARANTINED)
            or obj is None or event.kind != kind or event.uid != uid or obj.metadata.uid != uid
            or not obj.metadata.resource_version):
        return None
    meta = obj.metadata
    refs = [r for r in meta.owner_references if r.controller]
    if len(refs) != 1 or refs[0].kind not in CONTROLLER_KINDS:
        return None  # an orphan, or another kind's: nothing to vouch for
    ref = refs[0]
    return Controlled(meta.namespace, meta.name, uid, meta.resource_version, ref.kind, ref.name, ref.uid)


class LastStates:
    """Reads an object's last event from KUBUS_STATE by a direct get of its subject, one request an object.
    Deletes are applied as concurrent tasks (executor/consuming.py), so a burst's gets are in flight together."""

    def __init__(self, nc: Client, stream: str, prefix: str, partitions: int, *,
                 timeout: float = GET_TIMEOUT, refused_pause: float = REFUSED_PAUSE) -> None:
        self._nc = nc
        self._stream = stream
        self._prefix = prefix
        self._partitions = partitions
        self._timeout = timeout
        self._refused_pause = refused_pause
        self._refused_until = 0.0  # the event loop's time before which no get is asked

    @classmethod
    def of(cls, bus: Bus) -> LastStates:
        return cls(bus.nc, bus.stream(subjects.STATE_STREAM), bus.prefix, bus.partitions)

    async def controlled(self, kind: str, namespace: str, uid: str) -> Controlled | None:
        """`controlled_of` the last event of `kind` `uid` in `namespace` on KUBUS_STATE; None when there is none,
        or the get is refused or unanswered."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._refused_until:
            return None
        partition = subjects.partition_of(namespace, self._partitions)
        subject = f"{DIRECT_GET}.{self._stream}.{self._prefix}.state.{partition}.{kind}.{uid}"
        try:
            # nats-py's request() reads every answer's headers to find a no-responders status (which kubus parses
            # when first read, runtime/bus.py: ~15% of a get); the request it wraps reads none, and the status is
            # read below, of an answer without a message only
            reply = await self._nc._request_new_style(subject, b"", timeout=self._timeout)
        except Exception as exc:  # anything NATS says: the get is an optimisation, the read decides
            refused = denied(self._nc, DIRECT_GET)
            self._refused(loop, f"a permission violation on {refused}" if refused is not None
                          else str(exc) or type(exc).__name__)
            return None
        if reply.data:
            return controlled_of(kind, uid, reply.data)
        status = (reply.headers or {}).get(STATUS)
        if status != NOT_FOUND:  # 503: no responders, a KUBUS_STATE without allow_direct; or another refusal
            self._refused(loop, f"status {status}")
        return None

    def _refused(self, loop: asyncio.AbstractEventLoop, why: str) -> None:
        self._refused_until = loop.time() + self._refused_pause
        log.warning("cannot read the last state of objects from %s (%s; is allow_direct on, and may this identity "
                    "publish to %s.%s.>?): deletes read their object first for %.0fs", self._stream, why, DIRECT_GET,
                    self._stream, self._refused_pause)
