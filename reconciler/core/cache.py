"""The reconciler's informer-like view of the cluster: a fold of observed events.

`Cache.apply(event, seq)` is synchronous and does no I/O, so a replay is the same fold over a
recorded history. Objects are kept decoded into the `kube` model, by kind and uid, with the
indexes the controllers ask for (namespace, name, controller uid, orphans per namespace). `seq` is
the event's position in the history stream: an event older than what the cache already holds for
that object does not change the cache, which lets a reconciler bootstrap from the compacted state
and then replay the history after its last committed position without ever going back in time.
Such an event still comes back as a `replayed` change: the controllers' expectations must observe
the creations and deletions that happened after their last commit, even though the cache already
shows them.

An object never moves backwards, whatever order ingest replicas published its events in (issue 15:
a replica cut off from NATS for longer than the duplicate window publishes its stale events after
the other's newer ones, and the stream takes them). Two rules, both on what the events carry:

- resourceVersions: an update whose resourceVersion is not newer than the cached object's is stale
  and ignored; so is a relist's tombstone (DELETED_FINAL_STATE_UNKNOWN) older than the cached object
  (planned from an outdated view: the object changed after the list). A watch's DELETED is always
  taken: it is the object's last event, and carries the deletion's own resourceVersion. Versions
  are compared as integers, as kube-apiserver issues them (etcd revisions):
  upstream's informers never compare them, but they never see two writers either. When either does
  not parse as an integer the stream's order decides, as it always did.
- a deletion (DELETED or DELETED_FINAL_STATE_UNKNOWN) is final for its uid: a later event of that
  uid is ignored (a uid is never reused). The cache remembers a deleted uid, with the sequence of
  its deletion, for DELETED_MEMORY of event time after it (measured on the deletions' own
  `observed_at`, so a replay forgets exactly when the live loop did). That is far longer than the
  duplicate window (120 s) plus any lag of an ingest replica that still delivers, and it bounds the
  memory by the deletions of the last hour instead of every uid ever seen. Forgetting is safe in
  both directions: a replay of the history that comes back to a forgotten uid (a bootstrap, then the
  events after the last commit) brings its whole history in order, its deletion included; and a
  stale publish that late is refused by ingest in the first place (ingest/publishing.py publishes
  with the subject's expected last sequence).

An ignored event changes nothing and reaches no handler (expectations included: the event it repeats,
or the deletion that ended the object, was observed when it came); `stale` counts them.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, NamedTuple

import msgspec

from kube import codec
from kube.apps import ControllerRevision, DaemonSet, ReplicaSet
from kube.core import Node, Pod
from kube.ownership import get_controller_of
from kube.pods import PodFacts, pod_facts
from kube.times import parse_time
from messages.observed import DELETED, DELETED_FINAL_STATE_UNKNOWN, QUARANTINED, ObservedEvent

MODELS: dict[str, type[Any]] = {
    "Pod": Pod, "Node": Node, "DaemonSet": DaemonSet, "ReplicaSet": ReplicaSet,
    "ControllerRevision": ControllerRevision,
}
_DELETIONS = (DELETED, DELETED_FINAL_STATE_UNKNOWN)  # ObservedEvent.is_deletion
LABEL_SETS = 10_000  # label sets Cache._shared_labels remembers
JOURNAL_LIMIT = 16_384  # uids a Journal keeps: a reader further behind reads everything again
# how long (in the deletions' own observed_at) a deleted uid is remembered as final: see the module's docstring
DELETED_MEMORY = timedelta(hours=1)


class Change(NamedTuple):
    """What one applied event changed: the kube objects before and after (None when absent).

    A named tuple (immutable, built in a fraction of a frozen dataclass's time): one per event. `Cache.apply`
    builds it with tuple.__new__ (every field given), without the Python-level __new__ of Change(...)."""

    kind: str
    namespace: str
    name: str
    uid: str
    old: Any
    new: Any
    type: str = ""  # the event's type (ADDED, MODIFIED, ...)
    replayed: bool = False  # the cache already held a later state: only expectations may use it


class Journal:
    """The uids of one kind in one namespace whose cached state changed, in the order of the changes, for a
    reader that keeps something derived from them up to date (a DaemonSet's status counts:
    reconciler.core.daemonset.tally) instead of reading every object again.

    A reader holds a position (`end` when it last read); `since(position)` lists the uids changed after it,
    or None when the journal has forgotten some of them (it keeps the last JOURNAL_LIMIT or so): the reader
    then reads the whole state again. A uid is listed once per change."""

    __slots__ = ("base", "uids")

    def __init__(self) -> None:
        self.uids: list[str] = []
        self.base = 0  # the position of uids[0]

    @property
    def end(self) -> int:
        return self.base + len(self.uids)

    def append(self, uid: str) -> None:
        uids = self.uids
        uids.append(uid)
        if len(uids) > JOURNAL_LIMIT:
            dropped = len(uids) // 2
            del uids[:dropped]
            self.base += dropped

    def since(self, position: int) -> list[str] | None:
        if position < self.base:
            return None
        return self.uids[position - self.base:]


@dataclass
class Cache:
    objects: dict[str, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    seqs: dict[str, int] = field(default_factory=dict)  # uid -> stream seq of the event it reflects (live objects)
    # deleted uid -> the stream seq of its deletion: final for that uid (see the module's docstring)
    deleted: dict[str, int] = field(default_factory=dict)
    # (forget at, uid, seq) in the order the deletions came: what `deleted` forgets first
    deleted_expiry: deque[tuple[datetime, str, int]] = field(default_factory=deque)
    deleted_clock: datetime = datetime.min  # the newest deletion's observed_at, naive UTC (min: none yet)
    deleted_clock_text: str = ""  # the last deletion's observed_at as it came
    by_namespace: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    by_name: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (kind, ns, name) -> uid
    # (kind, namespace, controller uid) -> uids: owner references never cross namespaces
    by_controller: dict[tuple[str, str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    orphans: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))  # (kind, ns)
    # uid -> what the controllers read from that pod in every sync, computed once per pod version (a pod is
    # immutable and replaced on every update): kept in step with objects["Pod"] by `apply`
    pod_facts: dict[str, PodFacts] = field(default_factory=dict)
    # the same facts by (namespace, controller uid or None for orphans) -> uid, for owned_or_orphan_pods
    pod_groups: dict[tuple[str, str | None], dict[str, PodFacts]] = field(default_factory=dict)
    # one dict for each set of pod labels seen (a ReplicaSet's thousands of pods share a few), see _shared_labels
    label_sets: dict[frozenset[tuple[str, str]], dict[str, str]] = field(default_factory=dict)
    # (kind, namespace) -> the Journal of its changes; a journal is kept only once someone asked for it (`journal`)
    journals: dict[tuple[str, str], Journal] = field(default_factory=dict)
    quarantined: int = 0
    stale: int = 0  # events ignored because the object already had a newer state, or was deleted

    def get(self, kind: str, uid: str) -> Any:
        return self.objects[kind].get(uid)

    def named(self, kind: str, namespace: str, name: str) -> Any:
        uid = self.by_name.get((kind, namespace, name))
        return None if uid is None else self.objects[kind].get(uid)

    def in_namespace(self, kind: str, namespace: str) -> list[Any]:
        table = self.objects[kind]
        return [table[uid] for uid in self.by_namespace.get((kind, namespace), ())]

    def controlled_by(self, kind: str, namespace: str, controller_uid: str) -> list[Any]:
        table = self.objects[kind]
        return [table[uid] for uid in self.by_controller.get((kind, namespace, controller_uid), ())]

    def owned_or_orphans(self, kind: str, namespace: str, controller_uid: str) -> list[Any]:
        """FilterPodsByOwner(includeOrphans=true): controlled by the uid, or by nothing at all, in `namespace`.

        An object in another namespace naming the uid as its controller is not returned: upstream
        looks in the owner's namespace only (owner references never cross namespaces)."""
        table = self.objects[kind]
        return [table[uid] for uid in (*self.by_controller.get((kind, namespace, controller_uid), ()),
                                       *self.orphans.get((kind, namespace), ()))]

    def owned_or_orphan_pods(self, namespace: str, controller_uid: str) -> list[PodFacts]:
        """owned_or_orphans("Pod", ...) as the pods' facts, in no particular order: not necessarily
        owned_or_orphans' (a caller whose outcome depends on the order must sort)."""
        owned = self.pod_groups.get((namespace, controller_uid))
        orphans = self.pod_groups.get((namespace, None))
        if orphans is None:
            return [] if owned is None else list(owned.values())
        return list(orphans.values()) if owned is None else [*owned.values(), *orphans.values()]

    def all(self, kind: str) -> list[Any]:
        return list(self.objects[kind].values())

    def journal(self, kind: str, namespace: str) -> Journal:
        """The Journal of the changes to `kind` in `namespace` ("" for nodes) from now on."""
        journal = self.journals.get((kind, namespace))
        if journal is None:
            journal = self.journals[(kind, namespace)] = Journal()
        return journal

    def pod_facts_of(self, uid: str) -> PodFacts | None:
        return self.pod_facts.get(uid)

    def apply(self, event: ObservedEvent, seq: int, final_state: bool = True) -> Change | None:
        """Folds one event in; returns what changed, or None for a stale or unusable event. Without
        `final_state`, the deletion of an object the cache never held reports no old state instead of
        decoding the one the event carries (a bootstrap's tombstones: nobody looks at them). An event whose
        object is in its kind's model already (decoded with the line that carried it: replay.fileformat) is
        taken as it is.

        An event of a kind no controller reads changes nothing: the namespaces an older ingest watched
        (for a stand-in controller since removed) stay in the streams it wrote."""
        type_, uid, kind = event.type, event.uid, event.kind
        if type_ == QUARANTINED:
            self.quarantined += 1
            return None
        model = MODELS.get(kind)
        if model is None:
            return None
        deleted_at = self.deleted.get(uid)
        if seq <= (self.seqs.get(uid, 0) if deleted_at is None else deleted_at):
            # the cache already reflects this or a later state of the object
            obj = event.object
            if type(obj) is not model:
                obj = codec.decode(obj, model)
            old, new = (obj, None) if type_ in _DELETIONS else (None, obj)
            return _change(Change, (kind, event.namespace, event.name, uid, old, new, type_, True))
        if deleted_at is not None:
            self.stale += 1  # a later event of a deleted uid: a deletion is final
            return None
        table = self.objects[kind]
        old = table.get(uid)
        if old is not None and type_ != DELETED and _older(event, old, type_ == DELETED_FINAL_STATE_UNKNOWN):
            self.stale += 1
            return None
        if self.journals:
            journal = self.journals.get((kind, event.namespace))
            if journal is not None:
                journal.append(uid)
        if type_ in _DELETIONS:
            if old is not None:
                self._unindex(kind, uid, old)
            self._forget_deleted(event.observed_at)
            self.seqs.pop(uid, None)
            self.deleted[uid] = seq
            self.deleted_expiry.append((self.deleted_clock + DELETED_MEMORY, uid, seq))
            table.pop(uid, None)
            final = old if old is not None else _decode_final_state(event) if final_state else None
            return _change(Change, (kind, event.namespace, event.name, uid, final, None, type_, False))
        new = event.object
        if type(new) is not model:
            try:
                new = codec.decode(new, model)
            except BaseException:
                # what unindexing first and then decoding did: the old state stays, out of the indexes
                if old is not None:
                    self._unindex(kind, uid, old)
                self.seqs[uid] = seq
                raise
        self.seqs[uid] = seq
        table[uid] = new
        if old is None:
            self._index(kind, uid, new)
        else:
            self._reindex(kind, uid, old, new)
        return _change(Change, (kind, event.namespace, event.name, uid, old, new, type_, False))

    def _forget_deleted(self, observed_at: str) -> None:
        """Moves the deletions' clock to `observed_at` (never back; an unreadable time leaves it) and forgets
        the deleted uids remembered for longer than DELETED_MEMORY on it."""
        if observed_at != self.deleted_clock_text:  # a watch batch's events share one observed_at: parse it once
            self.deleted_clock_text = observed_at
            try:
                moment = parse_time(observed_at).replace(tzinfo=None)
            except ValueError:
                moment = self.deleted_clock
            if moment > self.deleted_clock:
                self.deleted_clock = moment
        expiry, deleted = self.deleted_expiry, self.deleted
        while expiry and expiry[0][0] < self.deleted_clock:
            _, uid, seq = expiry.popleft()
            if deleted.get(uid) == seq:  # not a later deletion of a uid forgotten before
                del deleted[uid]

    def _reindex(self, kind: str, uid: str, old: Any, new: Any) -> None:
        """_unindex(old) then _index(new), doing only what changes: most updates (a pod's status) keep the
        namespace, the name and the controller, and so every index but the pod's facts."""
        old_meta, meta = old.metadata, new.metadata
        namespace, name = meta.namespace, meta.name
        facts = None
        if kind == "Pod":
            old_facts = self.pod_facts.get(uid)
            labels = meta.labels
            # most updates keep the labels: the previous version's shared dict, without hashing them again
            shared = old_facts.labels if old_facts is not None and old_facts.labels == labels else \
                self._shared_labels(labels)
            facts = pod_facts(new, shared, old_facts)
            same_controller = old_facts is not None and old_facts.controller_uid == facts.controller_uid
        else:
            old_ref, ref = get_controller_of(old_meta), get_controller_of(meta)
            same_controller = (None if old_ref is None else old_ref.uid) == (None if ref is None else ref.uid)
        if not (same_controller and old_meta.namespace == namespace and old_meta.name == name):
            self._unindex(kind, uid, old)
            self._index(kind, uid, new, facts)
            return
        self.by_name[(kind, namespace, name)] = uid  # as _index: the name is this object's again
        if facts is not None:
            self.pod_facts[uid] = facts
            self.pod_groups[(namespace, facts.controller_uid)][uid] = facts

    def _index(self, kind: str, uid: str, obj: Any, facts: PodFacts | None = None) -> None:
        meta = obj.metadata
        namespace = meta.namespace
        self.by_namespace[(kind, namespace)].add(uid)
        self.by_name[(kind, namespace, meta.name)] = uid
        if kind == "Pod":
            if facts is None:
                facts = pod_facts(obj, self._shared_labels(meta.labels))
            self.pod_facts[uid] = facts
            controller_uid = facts.controller_uid
            group = self.pod_groups.get((namespace, controller_uid))
            if group is None:
                group = self.pod_groups[(namespace, controller_uid)] = {}
            group[uid] = facts
        else:
            ref = get_controller_of(meta)
            controller_uid = None if ref is None else ref.uid
        if controller_uid is None:
            self.orphans[(kind, namespace)].add(uid)
        else:
            self.by_controller[(kind, namespace, controller_uid)].add(uid)

    def _unindex(self, kind: str, uid: str, obj: Any) -> None:
        meta = obj.metadata
        namespace = meta.namespace
        self.by_namespace[(kind, namespace)].discard(uid)
        name_key = (kind, namespace, meta.name)
        if self.by_name.get(name_key) == uid:
            del self.by_name[name_key]
        facts = self.pod_facts.pop(uid, None) if kind == "Pod" else None
        if facts is not None:
            controller_uid = facts.controller_uid
            group = self.pod_groups.get((namespace, controller_uid))
            if group is not None:
                group.pop(uid, None)
                if not group:
                    del self.pod_groups[(namespace, controller_uid)]
        else:
            ref = get_controller_of(meta)
            controller_uid = None if ref is None else ref.uid
        if controller_uid is None:
            self.orphans[(kind, namespace)].discard(uid)
        else:
            owned = self.by_controller.get((kind, namespace, controller_uid))
            if owned is not None:
                owned.discard(uid)
                if not owned:
                    del self.by_controller[(kind, namespace, controller_uid)]

    def _shared_labels(self, labels: dict[str, str]) -> dict[str, str]:
        """`labels`, or an equal dict seen before: a sync then tests one dict (in the CPU's cache) for
        thousands of pods. The table forgets everything when it grows past LABEL_SETS (pods with unique
        labels): sharing is only a speed-up, an equal dict is as good."""
        key = frozenset(labels.items())
        shared = self.label_sets.get(key)
        if shared is None:
            if len(self.label_sets) >= LABEL_SETS:
                self.label_sets.clear()
            shared = self.label_sets[key] = labels
        return shared


_change: Final = tuple.__new__


def _older(event: ObservedEvent, cached: Any, tombstone: bool) -> bool:
    """Whether `event` is older than the `cached` object of the same uid, by resourceVersion: an update must
    be newer, a relist's tombstone at least as new (it carries the last version it knew). False
    when either version is not an integer: the stream's order decides then."""
    theirs, ours = event.resource_version, cached.metadata.resource_version
    if not (theirs.isascii() and theirs.isdigit() and ours.isascii() and ours.isdigit()):
        return False
    return int(theirs) < int(ours) if tombstone else int(theirs) <= int(ours)


def _decode_final_state(event: ObservedEvent) -> Any:
    """A deletion of an object the cache never held: its last state, as the event carries it."""
    try:
        return decode_object(event)
    except (msgspec.DecodeError, ValueError):
        return None


def decode_object(event: ObservedEvent) -> Any:
    model = MODELS.get(event.kind)
    if model is None:
        raise ValueError(f"no model for kind {event.kind}")
    obj = event.object
    return obj if type(obj) is model else codec.decode(obj, model)
