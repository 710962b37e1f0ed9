"""The simulated garbage collector and namespace controller.

- An object all of whose owners are gone is deleted (background propagation); one that keeps
  some owner loses only its dangling ownerReferences.
- An owner deleted with propagationPolicy=Orphan carries the `orphan` finalizer: its dependents
  lose their ownerReference to it, then the finalizer is removed and the owner goes.
- An owner deleted with propagationPolicy=Foreground carries `foregroundDeletion`: its
  dependents are deleted first and the owner goes once none is left.
- A deleted namespace is emptied, then removed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sim import resources as R
from sim import status as errors
from sim.registry import FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Registry
from sim.resources import ApiResource
from sim.store import DELETED, HistoryEvent, owner_uids

log = logging.getLogger("kubus.sim.gc")

Key = tuple[ApiResource, str, str]


class GarbageCollector:
    def __init__(self, registry: Registry):
        self.registry = registry
        self.store = registry.store
        self._dirty: dict[tuple[str, Any], None] = {}
        self._wakeup = asyncio.Event()
        self.store.add_listener(self._observe)

    def _observe(self, event: HistoryEvent) -> None:
        obj = event.entry.obj
        meta = obj["metadata"]
        if event.type == DELETED:
            self._queue("owner-gone", meta.get("uid"))
            for owner in owner_uids(obj):
                self._queue("dependent-gone", owner)
            if event.resource is not R.NAMESPACES and event.namespace:
                self._queue("namespace", event.namespace)
            return
        if meta.get("deletionTimestamp"):
            if event.resource is R.NAMESPACES:
                self._queue("namespace", meta["name"])
            elif set(meta.get("finalizers") or ()) & {ORPHAN_FINALIZER, FOREGROUND_FINALIZER}:
                self._queue("finalize", (event.resource, event.namespace, event.name))
        if event.type == "ADDED" and meta.get("ownerReferences"):
            self._queue("check-owners", (event.resource, event.namespace, event.name))

    def _queue(self, kind: str, item: Any) -> None:
        if item:
            self._dirty[(kind, item)] = None
            self._wakeup.set()

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._dirty:
                batch = list(self._dirty)[:500]
                for item in batch:
                    del self._dirty[item]
                    try:
                        self._process(*item)
                    except errors.ApiError as exc:
                        log.debug("garbage collection of %s failed: %s", item, exc.message)
                    except Exception:
                        log.exception("garbage collection of %s failed", item)
                await asyncio.sleep(0)

    def _process(self, kind: str, item: Any) -> None:
        if kind == "owner-gone":
            for key in self.store.dependents_of(item):
                self._collect_if_orphaned(key)
        elif kind == "check-owners":
            self._collect_if_orphaned(item)
        elif kind == "dependent-gone":
            located = self.store.by_uid(item)
            if located is not None:
                self._finalize(located)
        elif kind == "finalize":
            self._finalize(item)
        elif kind == "namespace":
            self._clean_namespace(item)

    def _collect_if_orphaned(self, key: Key) -> None:
        entry = self.store.get(*key)
        if entry is None:
            return
        refs = entry.obj["metadata"].get("ownerReferences") or []
        alive = [r for r in refs if self.store.by_uid(r.get("uid", "")) is not None]
        if len(alive) == len(refs):
            return
        resource, namespace, name = key
        if not alive:
            self.registry.delete(resource, namespace, name, {"preconditions": {"uid": entry.obj["metadata"]["uid"]}})
        else:
            obj = entry.clone()
            obj["metadata"]["ownerReferences"] = alive
            self.registry.update(resource, namespace, name, obj)

    def _finalize(self, key: Key) -> None:
        entry = self.store.get(*key)
        if entry is None or not entry.obj["metadata"].get("deletionTimestamp"):
            return
        meta = entry.obj["metadata"]
        uid = meta["uid"]
        finalizers = list(meta.get("finalizers") or [])
        dependents = self.store.dependents_of(uid)
        if ORPHAN_FINALIZER in finalizers:
            for dep in dependents:
                self._drop_owner(dep, uid)
            finalizers.remove(ORPHAN_FINALIZER)
        elif FOREGROUND_FINALIZER in finalizers:
            for dep in dependents:
                dep_entry = self.store.get(*dep)
                if dep_entry is not None and not dep_entry.obj["metadata"].get("deletionTimestamp"):
                    self.registry.delete(*dep, {"propagationPolicy": "Foreground"})
            if self.store.dependents_of(uid):
                return  # wait until they are gone; their DELETED events bring us back
            finalizers.remove(FOREGROUND_FINALIZER)
        else:
            return
        obj = entry.clone()
        obj["metadata"]["finalizers"] = finalizers
        self.registry.update(*key, obj)

    def _drop_owner(self, key: Key, owner_uid: str) -> None:
        entry = self.store.get(*key)
        if entry is None:
            return
        obj = entry.clone()
        obj["metadata"]["ownerReferences"] = [
            r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
        if not obj["metadata"]["ownerReferences"]:
            del obj["metadata"]["ownerReferences"]
        self.registry.update(*key, obj)

    def _clean_namespace(self, namespace: str) -> None:
        ns = self.store.get(R.NAMESPACES, "", namespace)
        if ns is None or not ns.obj["metadata"].get("deletionTimestamp"):
            return
        remaining = 0
        for resource in R.ALL:
            if not resource.namespaced:
                continue
            for entry in list(self.store.iter(resource, namespace)):
                remaining += 1
                if not entry.obj["metadata"].get("deletionTimestamp"):
                    self.registry.delete(resource, namespace, entry.obj["metadata"]["name"])
        if remaining == 0:
            self.store.remove(R.NAMESPACES, "", namespace)
