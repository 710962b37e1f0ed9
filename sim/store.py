"""The simulated cluster's object store: objects, resource versions, and the watch history.

Every write bumps one global resourceVersion and appends exactly one event to a bounded history,
so resourceVersions are dense integers and a watch resumes by index. Stored dicts are never
mutated after they are stored (writers build new ones: `Entry.clone` for a deep copy, `Entry.shallow`
for one that shares what the write leaves as it was), which lets events and list snapshots
share them without copying. Each object is JSON-encoded once, when written, and the bytes are
reused by every GET, list and watch frame.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from sim.resources import ApiResource

_encode = msgspec.json.encode
_decode = msgspec.json.decode
_WAITS_KEPT = 64  # waits of watches on the next write before the finished ones are dropped (see next_write)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(slots=True)
class Entry:
    obj: dict[str, Any]
    raw: bytes
    rv: int

    def clone(self) -> dict[str, Any]:
        """A private deep copy of the object, for a writer to change."""
        result: dict[str, Any] = _decode(self.raw)
        return result

    def shallow(self) -> dict[str, Any]:
        """A copy whose top level and metadata are the writer's to change (set or remove keys); everything below
        them is the stored object's, shared: a writer replaces such a part, never changes it (stored objects are
        never mutated). Much cheaper than `clone`, which decodes the whole object, for writes that touch little."""
        obj = dict(self.obj)
        obj["metadata"] = dict(obj["metadata"])
        return obj


@dataclass(slots=True)
class HistoryEvent:
    rv: int
    type: str
    resource: ApiResource
    namespace: str
    name: str
    entry: Entry
    old: dict[str, Any] | None  # the object before a MODIFIED, for selector transitions


class Expired(Exception):
    """The requested resourceVersion is older than the history window."""


def owner_uids(obj: dict[str, Any]) -> list[str]:
    refs = obj.get("metadata", {}).get("ownerReferences") or ()
    return [r["uid"] for r in refs if isinstance(r, dict) and "uid" in r]


class ObjectStore:
    def __init__(self, history_size: int = 20_000):
        self.rv = 1  # resourceVersion "1" is the empty cluster
        self._tables: dict[ApiResource, dict[str, dict[str, Entry]]] = {}
        self._history: list[HistoryEvent] = []
        self._history_base = 2  # the rv of _history[0]
        self._history_size = history_size
        self._wakeup = asyncio.Event()
        self._next_write: list[asyncio.Future[None]] = []
        # ownerReference uid -> keys of dependents, for the garbage collector
        self._dependents: dict[str, set[tuple[ApiResource, str, str]]] = {}
        self._uids: dict[str, tuple[ApiResource, str, str]] = {}
        self._listeners: list[Any] = []
        self._dry_run = False

    # --- reads -------------------------------------------------------------------------------
    def get(self, resource: ApiResource, namespace: str, name: str) -> Entry | None:
        # without `.get(key, {})` chains: the hottest read (several per pod write) allocated two empty dicts
        spaces = self._tables.get(resource)
        names = spaces.get(namespace) if spaces is not None else None
        return names.get(name) if names is not None else None

    def by_uid(self, uid: str) -> tuple[ApiResource, str, str] | None:
        return self._uids.get(uid)

    def dependents_of(self, uid: str) -> set[tuple[ApiResource, str, str]]:
        return set(self._dependents.get(uid, ()))

    def iter(self, resource: ApiResource, namespace: str | None = None) -> Iterator[Entry]:
        """Entries in (namespace, name) order: the order kube-apiserver lists in."""
        table = self._tables.get(resource, {})
        spaces = [namespace] if namespace is not None else sorted(table)
        for ns in spaces:
            names = table.get(ns)
            if not names:
                continue
            for name in sorted(names):
                yield names[name]

    def count(self, resource: ApiResource) -> int:
        return sum(len(t) for t in self._tables.get(resource, {}).values())

    # --- writes ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def dry_run(self) -> Iterator[None]:
        """Within it, writes return what they would store and change nothing (`dryRun=All`).

        Only for synchronous code: a write by anything else while it is open would be lost.
        """
        self._dry_run = True
        try:
            yield
        finally:
            self._dry_run = False

    def put(self, resource: ApiResource, obj: dict[str, Any], event_type: str,
            old: dict[str, Any] | None = None) -> Entry:
        """Stores `obj` (ADDED or MODIFIED) under a new resourceVersion, which it writes into obj."""
        if self._dry_run:  # kube-apiserver answers a dry run without a new resourceVersion
            return Entry(obj, _encode(obj), self.rv)
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        ns, name = meta.get("namespace", ""), meta["name"]
        entry = Entry(obj, _encode(obj), self.rv)
        table = self._tables.setdefault(resource, {}).setdefault(ns, {})
        previous = table.get(name)
        table[name] = entry
        key = (resource, ns, name)
        if previous is None:
            self._index(key, obj)
        else:
            old_meta = previous.obj["metadata"]
            # a write that keeps the uid and shares the owner references (Entry.shallow: a binding, a status, a
            # deletion mark) leaves both indexes as they are
            if old_meta.get("ownerReferences") is not meta.get("ownerReferences") or \
                    old_meta.get("uid") != meta.get("uid"):
                self._unindex(key, previous.obj)
                self._index(key, obj)
        self._append(HistoryEvent(self.rv, event_type, resource, ns, name, entry, old))
        return entry

    def remove(self, resource: ApiResource, namespace: str, name: str) -> Entry | None:
        """Deletes the object; the DELETED event carries it with the deletion's resourceVersion."""
        names = self._tables.get(resource, {}).get(namespace)
        if not names or name not in names:
            return None
        if self._dry_run:
            return names[name]
        previous = names.pop(name)
        if not names:
            del self._tables[resource][namespace]
        self._unindex((resource, namespace, name), previous.obj)
        self.rv += 1
        obj = previous.shallow()
        obj["metadata"]["resourceVersion"] = str(self.rv)
        entry = Entry(obj, _encode(obj), self.rv)
        self._append(HistoryEvent(self.rv, DELETED, resource, namespace, name, entry, previous.obj))
        return entry

    def _index(self, key: tuple[ApiResource, str, str], obj: dict[str, Any]) -> None:
        uid = obj["metadata"].get("uid")
        if uid:
            self._uids[uid] = key
        for owner in owner_uids(obj):
            self._dependents.setdefault(owner, set()).add(key)

    def _unindex(self, key: tuple[ApiResource, str, str], obj: dict[str, Any]) -> None:
        uid = obj["metadata"].get("uid")
        if uid and self._uids.get(uid) == key:
            del self._uids[uid]
        for owner in owner_uids(obj):
            deps = self._dependents.get(owner)
            if deps is not None:
                deps.discard(key)
                if not deps:
                    del self._dependents[owner]

    # --- history and notification --------------------------------------------------------------
    def _append(self, event: HistoryEvent) -> None:
        self._history.append(event)
        if len(self._history) > self._history_size * 2:
            # trim in bulk so appends stay amortised O(1)
            drop = len(self._history) - self._history_size
            del self._history[:drop]
            self._history_base += drop
        for listener in self._listeners:
            listener(event)
        self._wakeup.set()
        if self._next_write:
            for future in self._next_write:
                if not future.done():  # a watch that stopped waiting (timeout, stop, cancel) left its own
                    future.set_result(None)
            self._next_write = []

    def add_listener(self, listener: Any) -> None:
        """Calls listener(event) synchronously on every write (the sim's own controllers)."""
        self._listeners.append(listener)

    @property
    def oldest_rv(self) -> int:
        """The oldest resourceVersion a watch may still start from (events after it are kept)."""
        return self._history_base - 1

    def events_since(self, rv: int) -> list[HistoryEvent]:
        """Events with resourceVersion > rv. Raises Expired when they are no longer all kept."""
        if rv < self._history_base - 1:
            raise Expired(rv)
        start = rv + 1 - self._history_base
        return self._history[start:] if start < len(self._history) else []

    def next_write(self) -> asyncio.Future[None]:
        """A future done at the next write. A watch awaits it (with its stop and timeout) rather than running
        `wait_past` as a task: a task started and cancelled per wake cost more than the frames it sent."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if len(self._next_write) >= _WAITS_KEPT:  # an idle store: watches that timed out left theirs, done
            self._next_write = [f for f in self._next_write if not f.done()]
        self._next_write.append(future)
        return future

    async def wait_past(self, rv: int) -> None:
        """Returns once the store holds a write newer than `rv`."""
        while self.rv <= rv:
            if self._wakeup.is_set():
                self._wakeup = asyncio.Event()
            await self._wakeup.wait()
