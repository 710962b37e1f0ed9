"""A deterministic in-process cluster with a reconciler in it, recording what the live reconciler records.

For tests and benchmarks of the replay: no processes, no NATS, no database, a virtual clock. The world
holds an API server's objects, publishes every change as an ObservedEvent into an in-memory KUBUS_EVENTS,
runs the reconciler over it (`start`, then `run_batch` over batches of up to 500 messages: the functions
`reconciler.consuming` runs, committing to an in-memory store), executes the actions as an executor would
(creates in slow-start batches, failures injected at a seeded rate, deletes with uid preconditions, status
writes), plays kubelets (pods Running and Ready one step after they are bound, Failed after
`sim.kubus.io/fail-after-seconds`); its store keeps the input log (ticks), the decisions and their actions,
as the SQL store would. `restart()` is a reconciler process starting over (cache bootstrapped from the last
message of every object, expectations, backoff and positions as committed).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from kube import codec as kube_codec
from kube.core import Pod
from kube.nodeaffinity import get_target_node_name
from kube.times import format_micro_time, format_time
from messages import codec, subjects
from messages.actions import (
    FAILED,
    SKIPPED,
    SUCCEEDED,
    Action,
    ActionResult,
    BumpCollisionCount,
    CreateControllerRevision,
    CreatePods,
    DeleteControllerRevision,
    DeletePod,
    PatchControllerRevision,
    PatchPod,
    UpdateStatus,
    status_with_fields,
)
from messages.naming import NAME_ATTEMPTS, generated_name
from messages.observed import ADDED, DELETED, MODIFIED, ObservedEvent
from reconciler.core import batch, stepping
from reconciler.core.cache import Cache
from reconciler.core.controllers import Controllers, Settings
from reconciler.core.ticks import START
from replay.bundles import Bundle, RecordedAction, RecordedDecision
from replay.diff import normalized
from replay.source import EventReader, Recorded, bundles, from_list, memory_opener
from store.memory import MemoryStore

FAIL_AFTER = "sim.kubus.io/fail-after-seconds"
BATCH_SIZE = 500
START_TIME = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class _Later:
    at: datetime
    order: int
    kind: str  # "start" | "fail"
    key: tuple[str, str, str]
    uid: str


@dataclass
class World:
    nodes: int = 4
    partitions: int = 4
    prefix: str = subjects.PREFIX
    seed: int = 1
    fail_creates: float = 0.0  # the fraction of pod creates the "API" refuses with a 500
    kubelet_delay: timedelta = timedelta(milliseconds=200)
    now: datetime = START_TIME
    instance: str = "world-0"
    settings: Settings = field(default_factory=Settings)  # the reconciler's flags: feature gates, resync period
    stream: list[stepping.Message] = field(default_factory=list)
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    recorded: list[Recorded] = field(default_factory=list)
    decisions: int = 0

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._rv = 0
        self._uid = 0
        self._later: list[_Later] = []
        self._order = 0
        self._inbox: list[ActionResult] = []
        self._cursor = 0  # the next stream index the reconciler reads
        self._target = 0  # the stream index where the reconciler's history ended as it started
        self._restarts = 0
        self._ticks = 0  # how many of the store's ticks are in `recorded`
        self.store = MemoryStore(clock=lambda: self.now)  # what the reconciler commits to
        self.caught_up = False
        for i in range(self.nodes):
            name = f"node-{i}"
            self.create({"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                         "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        self.restart()

    # --- the API ----------------------------------------------------------------------------------------
    def _publish(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        kind = obj["kind"]
        namespace = meta.get("namespace", "")
        event = ObservedEvent(kind=kind, type=event_type, namespace=namespace, name=meta["name"], uid=meta["uid"],
                              resource_version=meta["resourceVersion"], observed_at=format_micro_time(self.now),
                              ingest="world", object=msgspec.Raw(msgspec.json.encode(obj)))
        partition = subjects.partition_of(namespace, self.partitions)
        seq = len(self.stream) + 1
        self.stream.append((seq, subjects.event_subject(partition, kind, meta["uid"], self.prefix),
                            codec.encode(event)))

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = msgspec.json.decode(msgspec.json.encode(obj))
        meta = obj["metadata"]
        kind = obj["kind"]
        key = (kind, meta.get("namespace", ""), meta["name"])
        if key in self.objects:
            raise ValueError(f"{key} exists")
        self._uid += 1
        meta.update({"uid": f"uid-{self._uid:06d}", "resourceVersion": self._next_rv(),
                     "creationTimestamp": format_time(self.now)})
        if kind in ("DaemonSet", "ReplicaSet"):
            meta["generation"] = 1
        obj.setdefault("status", {})
        if kind == "Pod" and not obj.get("spec", {}).get("nodeName"):
            pod = kube_codec.decode(msgspec.json.encode(obj), Pod)
            node = get_target_node_name(pod) or f"node-{self._uid % self.nodes}"
            obj["spec"]["nodeName"] = node
        self.objects[key] = obj
        self._publish(ADDED, obj)
        if kind == "Pod":
            self._schedule("start", key, meta["uid"], self.kubelet_delay)
        return obj

    def update(self, kind: str, namespace: str, name: str, change: dict[str, Any], *, status: bool = False) -> None:
        """A merge patch of the object (of its status with `status`); a spec change bumps the generation."""
        obj = self.objects[(kind, namespace, name)]
        before = msgspec.json.encode(obj.get("spec"))
        _merge(obj, msgspec.json.decode(msgspec.json.encode(change)))
        if not status and kind in ("DaemonSet", "ReplicaSet") and msgspec.json.encode(obj.get("spec")) != before:
            obj["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._publish(MODIFIED, obj)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        obj = self.objects.pop((kind, namespace, name))
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._publish(DELETED, obj)

    # --- kubelets ------------------------------------------------------------------------------------------
    def _schedule(self, kind: str, key: tuple[str, str, str], uid: str, delay: timedelta) -> None:
        self._order += 1
        self._later.append(_Later(self.now + delay, self._order, kind, key, uid))

    def _kubelets(self) -> None:
        due = sorted((x for x in self._later if x.at <= self.now), key=lambda x: (x.at, x.order))
        self._later = [x for x in self._later if x.at > self.now]
        for item in due:
            obj = self.objects.get(item.key)
            if obj is None or obj["metadata"]["uid"] != item.uid:
                continue
            stamp = format_time(self.now)
            if item.kind == "start":
                containers = obj["spec"].get("containers") or []
                self.update("Pod", *item.key[1:], {"status": {
                    "phase": "Running", "startTime": stamp,
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp}],
                    "containerStatuses": [{"name": c.get("name", ""), "ready": True, "restartCount": 0,
                                           "image": c.get("image", "")} for c in containers]}}, status=True)
                fail_after = (obj["metadata"].get("annotations") or {}).get(FAIL_AFTER)
                if fail_after:
                    self._schedule("fail", item.key, item.uid, timedelta(seconds=float(fail_after)))
            else:
                self.update("Pod", *item.key[1:], {"status": {
                    "phase": "Failed", "conditions": [{"type": "Ready", "status": "False",
                                                       "lastTransitionTime": stamp}]}}, status=True)

    # --- the executor ------------------------------------------------------------------------------------
    def _result(self, action: Action, key: str, outcome: str, *, code: int = 200, message: str = "",
                uid: str = "", rv: str = "", subject: str = "", reason: str = "") -> None:
        self._inbox.append(ActionResult(
            key=key, action_key=action.key, action=str(type(action).__struct_config__.tag),
            decision_id=action.decision_id, controller=action.controller, outcome=outcome, code=code, reason=reason,
            message=message, object_uid=uid, resource_version=rv, executor="world", finished_at=format_micro_time(
                self.now), subject=subject))

    def _execute(self, action: Action) -> None:
        if isinstance(action, CreatePods):
            batch, done, failed = 1, 0, False
            pods = list(action.pods)
            while done < len(pods):
                for item in pods[done:done + batch]:
                    if failed:
                        self._result(action, item.key, SKIPPED, code=0, message="not attempted")
                        continue
                    body = msgspec.json.decode(item.pod)
                    name = body["metadata"]["name"]
                    if self._random.random() < self.fail_creates:
                        self._result(action, item.key, FAILED, code=500, reason="InternalError",
                                     message="the server has received too many requests",
                                     subject=f"{action.namespace}/{name}")
                        failed = True
                        continue
                    body["metadata"]["namespace"] = action.namespace
                    prefix = body["metadata"].pop("generateName", None)
                    for attempt in range(1, NAME_ATTEMPTS):  # kube-apiserver's generateName retries
                        if prefix is None or ("Pod", action.namespace, name) not in self.objects:
                            break
                        name = body["metadata"]["name"] = generated_name(prefix, item.key, attempt)
                    obj = self.create(body)
                    self._result(action, item.key, SUCCEEDED, code=201, uid=obj["metadata"]["uid"],
                                 rv=obj["metadata"]["resourceVersion"], subject=f"{action.namespace}/{name}")
                done += batch
                batch *= 2
                if failed:
                    for item in pods[done:]:
                        self._result(action, item.key, SKIPPED, code=0, message="not attempted")
                    break
        elif isinstance(action, DeletePod):
            self._delete(action, "Pod", action.namespace, action.name, action.uid)
        elif isinstance(action, DeleteControllerRevision):
            self._delete(action, "ControllerRevision", action.namespace, action.name, action.uid)
        elif isinstance(action, PatchPod | PatchControllerRevision):
            kind = "Pod" if isinstance(action, PatchPod) else "ControllerRevision"
            target = self.objects.get((kind, action.namespace, action.name))
            if target is None or target["metadata"]["uid"] != action.uid:
                self._result(action, action.key, FAILED, code=404, reason="NotFound", message="not found")
                return
            self.update(kind, action.namespace, action.name, msgspec.json.decode(action.patch))
            self._result(action, action.key, SUCCEEDED, rv=target["metadata"]["resourceVersion"],
                         subject=f"{action.namespace}/{action.name}")
        elif isinstance(action, CreateControllerRevision):
            body = msgspec.json.decode(action.revision)
            body.setdefault("kind", "ControllerRevision")
            body["metadata"]["namespace"] = action.namespace
            key = ("ControllerRevision", action.namespace, body["metadata"]["name"])
            if key in self.objects:
                self._result(action, action.key, FAILED, code=409, reason="AlreadyExists", message="exists")
                return
            obj = self.create(body)
            self._result(action, action.key, SUCCEEDED, code=201, uid=obj["metadata"]["uid"],
                         rv=obj["metadata"]["resourceVersion"], subject=f"{action.namespace}/{key[2]}")
        elif isinstance(action, UpdateStatus | BumpCollisionCount):
            owner = self.objects.get((action.kind if isinstance(action, UpdateStatus) else "DaemonSet",
                                      action.namespace, action.name))
            if owner is None or owner["metadata"]["uid"] != action.uid:
                self._result(action, action.key, FAILED, code=404, reason="NotFound", message="not found")
                return
            if isinstance(action, UpdateStatus):
                status = msgspec.json.decode(action.status)
                stale = action.resource_version and action.resource_version != owner["metadata"]["resourceVersion"]
                if stale:  # as the executor: its retry on a fresh read sets only the named fields
                    status = status_with_fields(owner.get("status") or {}, status, action.status_fields)
                owner["status"] = status
            else:
                owner["status"]["collisionCount"] = action.seen + 1
            owner["metadata"]["resourceVersion"] = self._next_rv()
            self._publish(MODIFIED, owner)
            self._result(action, action.key, SUCCEEDED, rv=owner["metadata"]["resourceVersion"],
                         subject=f"{action.namespace}/{action.name}")
        else:  # events, annotations: nothing the controllers watch
            self._result(action, action.key, SUCCEEDED, code=201)

    def _delete(self, action: Action, kind: str, namespace: str, name: str, uid: str) -> None:
        obj = self.objects.get((kind, namespace, name))
        if obj is None:
            self._result(action, action.key, SUCCEEDED, code=404, reason="NotFound", message="already gone",
                         subject=f"{namespace}/{name}")
        elif obj["metadata"]["uid"] != uid:
            self._result(action, action.key, FAILED, code=409, reason="Conflict", message="uid precondition",
                         subject=f"{namespace}/{name}")
        else:
            self.delete(kind, namespace, name)
            self._result(action, action.key, SUCCEEDED, uid=uid, subject=f"{namespace}/{name}")

    # --- the reconciler ---------------------------------------------------------------------------------
    @property
    def cache(self) -> Cache:
        return self.state.cache

    @property
    def controllers(self) -> Controllers:
        return self.state.controllers

    def restart(self) -> None:
        """A reconciler process (re)starting: what `Reconciler.run` does before its first batch."""
        self._restarts += 1
        self.instance = f"world-{self._restarts}"
        top = len(self.stream)
        cache = Cache()
        last: dict[str, stepping.Message] = {}
        for message in self.stream:
            last[message[1]] = message
        for seq, subject, payload in sorted(last.values(), key=lambda m: m[0]):
            stepping.bootstrap_one(cache, subject, payload, seq)
        # the bootstrap is the stream as it is: as new as it is consistent
        self.state = batch.start(batch.Loaded(
            stored=self.store.load_now(), partition_count=self.partitions, prefix=self.prefix,
            settings=self.settings, newest=top, consistent=top, instance=self.instance, at=self.now), cache)
        self._cursor = self.state.first_seq - 1
        self._target = top
        self.caught_up = False
        if self._target < self.state.first_seq:
            self._catch_up()

    def _catch_up(self) -> None:
        self.caught_up = True
        batch.catch_up(self.state)

    def step(self, dt: timedelta = timedelta(milliseconds=100)) -> None:
        """Time passes; kubelets act; the reconciler runs one batch; the executor applies its actions."""
        self.now += dt
        self._kubelets()
        messages = self.stream[self._cursor:self._cursor + BATCH_SIZE]
        self._cursor += len(messages)
        fed, self._inbox = self._inbox, []
        # the results the executor reported since the last batch are new (it reports each once), and the
        # batch's transaction holds them
        commit = batch.run_batch(self.state, messages, fed, self.now, self.caught_up, recorded=bool(fed))
        if not commit.empty:
            ids = self.store.write(commit)
            self.decisions += len(ids)
            self._record()
            for sync, decision_id in zip(commit.decisions, ids, strict=True):
                for action in sync.actions:
                    self._execute(msgspec.structs.replace(action, decision_id=decision_id))
        if not self.caught_up and self._cursor >= self._target:
            self._catch_up()

    def _record(self) -> None:
        """The ticks the store recorded since the last look, with their decisions as the store holds them."""
        for tick in self.store.ticks[self._ticks:]:
            decisions = [] if tick.kind == START else [self._decision(i) for i in tick.decision_ids]
            self.recorded.append(Recorded(tick, decisions))
        self._ticks = len(self.store.ticks)

    def _decision(self, decision_id: int) -> RecordedDecision:
        d = self.store.decisions[decision_id]
        return RecordedDecision(
            id=decision_id, correlation_id=d.correlation_id, controller_key=d.controller_key,
            controller_kind=d.controller_kind, partition=d.partition, stream_seq=d.stream_seq, trigger=d.trigger,
            decided_at=d.decided_at, summary=normalized(d.summary),
            actions=[RecordedAction(r.key, r.payload) for r in self.store.outbox_now(decision_id)])

    def run(self, seconds: float, dt: timedelta = timedelta(milliseconds=100)) -> None:
        end = self.now + timedelta(seconds=seconds)
        while self.now < end:
            self.step(dt)

    def settle(self, limit: int = 2000, dt: timedelta = timedelta(milliseconds=100)) -> None:
        """Steps until nothing is left to do: every event consumed, no result pending, no kubelet work."""
        for _ in range(limit):
            self.step(dt)
            if self._cursor >= len(self.stream) and not self._inbox and not self._later \
                    and not len(self.controllers.queue):
                return
        raise RuntimeError(f"the world did not settle in {limit} steps")

    # --- the record ------------------------------------------------------------------------------------
    def bundles(self) -> AsyncIterator[Bundle]:
        return bundles(from_list(list(self.recorded)), EventReader(memory_opener(list(self.stream))))

    async def bundle_list(self) -> list[Bundle]:
        return [b async for b in self.bundles()]


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """A JSON merge patch (RFC 7386), in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


# --- manifests --------------------------------------------------------------------------------------------
def daemonset(name: str, namespace: str, image: str, *, max_unavailable: int | str = 1, max_surge: int | str = 0,
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    template_meta: dict[str, Any] = {"labels": {"app": name}}
    if annotations:
        template_meta["annotations"] = annotations
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": name}}, "revisionHistoryLimit": 10,
                     "updateStrategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": max_unavailable, "maxSurge": max_surge}},
                     "template": {"metadata": template_meta,
                                  "spec": {"containers": [{"name": "main", "image": image}],
                                           "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                                           "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler"}}}}


def replicaset(name: str, namespace: str, replicas: int, image: str = "nginx:1",
               annotations: dict[str, str] | None = None) -> dict[str, Any]:
    template_meta: dict[str, Any] = {"labels": {"app": name}}
    if annotations:
        template_meta["annotations"] = annotations
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": template_meta,
                                  "spec": {"containers": [{"name": "main", "image": image}]}}}}
