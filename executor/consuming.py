"""The executor's shell: pull actions from JetStream, apply them, publish results, then ack.

All executors share one durable pull consumer on the KUBUS_ACTIONS work queue, so each action
goes to one of them. A message is acked only after every result it produced is stored by
JetStream (results carry `Nats-Msg-Id: result/<key>`, so a re-run after a crash publishes each
result once). Unfinished actions are NAKed: with a growing delay after an unknown outcome (no
answer, or a 504: an answer from the API, success or failure, is a result; see executor/errors.py),
at once when the executor is stopping so another executor takes them. Messages that cannot be
used (codec.BadMessage, or a subject that names no partition) are copied to `<prefix>.dead.actions` with the
reason and terminated (runtime/deadletter.py). An action of a newer kubus is neither applied nor
dead-lettered: it is NAKed with a delay for an upgraded executor, and this one stops taking actions until it
is upgraded itself (/readyz false), finishing those it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from executor import metrics as m
from executor import ownership
from executor.applying import apply, subject_of
from executor.config import ExecutorConfig
from executor.delivery import Delivery
from executor.effects import Effect, RetryLater, StaleVersion, head_of, object_subject
from executor.errors import Interrupted, TransientError
from executor.events import EventRecorder
from executor.kubeapi import KubeApi
from executor.laststate import LastStates
from kube.flowcontrol import doubled
from kube.times import Clock, utcnow
from messages import codec, subjects
from messages.actions import FAILED, Action, ActionResult, CreatePods
from runtime import failpoints, logs
from runtime.bus import Bus, Sent, publish_async, stored
from runtime.deadletter import ACTIONS, Halts, Original, dead_letter

log = logging.getLogger("kubus.executor")

# JetStream stops redelivering after max_deliver; a few deliveries beyond our own limit leave room
# for executors killed during the final delivery, which must still end in a published result
EXTRA_DELIVERIES = 5
MAX_REDELIVERY_DELAY = 30.0
MAX_ACK_PENDING = 20_000
BUSY_FETCH_WAIT = 0.05  # how long a batch fetch lingers for more while actions are in flight
# checks of a delete whose checked version went stale (the object changed before the DELETE): the first may
# take the word of the object's last state on KUBUS_STATE, the others read the object; the last stale one is
# reported failed (409), as client-go's RetryOnConflict gives up after its steps (DefaultRetry: 5)
PROOFS = 5


def redelivery_delay(delivery: int, initial: float) -> float:
    """The NAK delay after a delivery ended with an unknown outcome: initial, doubling, capped."""
    return doubled(initial, delivery - 1, MAX_REDELIVERY_DELAY)


class Results:
    """Publishes one delivery's results as they come (publish_async), and waits for their acks."""

    def __init__(self, js: JetStreamContext, subject: str, metrics: m.ExecutorMetrics):
        self._js = js
        self._subject = subject
        self._metrics = metrics
        self._sent: list[Sent] = []

    async def publish(self, result: ActionResult) -> None:
        self._metrics.result(result.action, result.outcome)
        self._sent.append(await publish_async(
            self._js, self._subject, codec.encode(result), {"Nats-Msg-Id": f"result/{result.key}"}))

    async def stored(self, timeout: float = 30.0) -> None:
        """Returns once JetStream has stored every result (publishing again what an ack lost to a reconnect
        left unconfirmed); raises if one was refused or could not be stored within `timeout`."""
        await stored(self._js, self._sent, timeout=timeout)


class Executor:
    def __init__(self, bus: Bus, api: KubeApi, config: ExecutorConfig, metrics: m.ExecutorMetrics,
                 stopping: asyncio.Event, now: Clock = utcnow, halts: Halts | None = None,
                 states: LastStates | None = None):
        self._bus = bus
        self.halts = halts or Halts()  # the service's: /readyz is false once this executor met a newer action
        self._api = api
        self._config = config
        self._metrics = metrics
        self._stopping = stopping  # set when run() winds down: API calls then raise Interrupted
        self._now = now
        self._events = EventRecorder(metrics, clock=now)  # one EventCorrelator for every delivery of this process
        # the controllers actions create for, by uid, and who controls each pod (executor/ownership.py)
        self._owners = ownership.Owners(api, states, metrics)
        self._fetch_timeout = config.fetch_timeout
        self._tasks: set[asyncio.Task[None]] = set()
        self._working: dict[int, Msg] = {}  # by id(): Msg is an unhashable dataclass
        # --concurrent-daemonset-syncs, --concurrent-replicaset-syncs: per controller kind, actions applied at once
        self._slots = {kind: asyncio.Semaphore(n) for kind, n in config.concurrent_syncs}

    async def run(self, stop: asyncio.Event) -> None:
        """Works until `stop` is set (or the task is cancelled), then winds down in-flight actions."""
        stream = self._bus.stream(subjects.ACTIONS_STREAM)
        await self._bus.js.add_consumer(stream, ConsumerConfig(
            durable_name=self._config.durable, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
            filter_subject=f"{self._bus.prefix}.actions.>", ack_wait=self._config.ack_wait,
            max_deliver=self._config.max_deliveries + EXTRA_DELIVERIES, max_ack_pending=MAX_ACK_PENDING))
        sub = await self._bus.js.pull_subscribe_bind(durable=self._config.durable, stream=stream)
        keepalive = asyncio.create_task(self._keep_alive())
        stopped = asyncio.create_task(stop.wait())
        idle = True
        try:
            while not stop.is_set():
                if ACTIONS in self.halts.halted:  # a newer action met: no new ones until upgraded
                    await asyncio.wait({stopped})
                    continue
                free = self._config.concurrency - len(self._tasks)
                if free <= 0:
                    await asyncio.wait({stopped, *self._tasks}, return_when=asyncio.FIRST_COMPLETED)
                    continue
                try:
                    # nats-py's batch fetch, finding nothing at once, lingers until its batch is full or
                    # its time is up; so an idle executor long-polls for one message (returned as soon as
                    # it arrives) and a busy one fetches batches with a short linger. A fetch is never
                    # abandoned half-way on a stop: its pull request would capture redeliveries.
                    if idle:
                        msgs = await sub.fetch(1, timeout=self._fetch_timeout)
                    else:
                        msgs = await sub.fetch(min(free, self._config.fetch_batch), timeout=BUSY_FETCH_WAIT)
                except TimeoutError:
                    idle = True
                    continue
                except nats.errors.Error as exc:
                    # NATS is away: nats-py reconnects by itself; try again shortly
                    log.warning("fetching actions failed (%s); retrying", exc)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(stopped), self._fetch_timeout)
                    continue
                idle = False
                if ACTIONS in self.halts.halted:  # fetched while an action of the batch halted it: another's
                    for msg in msgs:
                        with contextlib.suppress(Exception):
                            await msg.nak()
                    continue
                for msg in msgs:
                    task = asyncio.create_task(self._handle(msg))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
        finally:
            # unsubscribing first matters when the task was cancelled inside a fetch: the server drops a
            # pull request nobody listens to, so the NAKs below are redelivered to other executors
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            await self._wind_down()
            with contextlib.suppress(TimeoutError):  # events in flight: best-effort, briefly
                await asyncio.wait_for(self._events.drain(), self._config.shutdown_grace)
            for helper in (stopped, keepalive):
                helper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await helper

    async def _wind_down(self) -> None:
        """In-flight actions stop at their next API call and are NAKed for another executor; a call
        already on the wire is finished first, so nothing is half-applied. Past the grace period the
        rest are cancelled and left unacked, for JetStream to redeliver after ack_wait."""
        self._stopping.set()
        if not self._tasks:
            return
        _, late = await asyncio.wait(set(self._tasks), timeout=self._config.shutdown_grace)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)

    async def _keep_alive(self) -> None:
        """Tells JetStream that long actions (slow start under the rate limiter, backoffs) are still
        being worked on, so ack_wait does not hand them to a second executor meanwhile."""
        while True:
            await asyncio.sleep(self._config.ack_wait / 3)
            for msg in list(self._working.values()):
                with contextlib.suppress(Exception):
                    await msg.in_progress()

    async def _handle(self, msg: Msg) -> None:
        self._metrics.in_flight += 1
        self._working[id(msg)] = msg
        try:
            await self._process(msg)
        except Exception:
            # NATS went away mid-way, or a bug: ask for a redelivery after the usual delay; should the NAK
            # not get through either, JetStream redelivers the unacked message after ack_wait anyway
            log.exception("action %s left for redelivery", _describe(msg))
            with contextlib.suppress(Exception):
                await msg.nak(delay=redelivery_delay(msg.metadata.num_delivered or 1, self._config.redelivery_delay))
                self._metrics.delivery(m.REDELIVERED)
        finally:
            self._working.pop(id(msg), None)
            self._metrics.in_flight -= 1

    async def _process(self, msg: Msg) -> None:
        number = msg.metadata.num_delivered or 1
        try:
            partition = self._partition(msg.subject)
            action = codec.decode_action(msg.data)
        except codec.NewerSchema as exc:
            # for an upgraded executor: every delivery counts towards max_deliver, so this one takes no more
            self.halts.halt(ACTIONS, _describe(msg), str(exc))
            self._working.pop(id(msg), None)
            await msg.nak(delay=redelivery_delay(number, self._config.redelivery_delay))
            self._metrics.delivery(m.REDELIVERED)
            return
        except codec.BadMessage as exc:
            await self._dead_letter(msg, exc.reason, str(exc))
            return
        # every line of this action's task (its events recorded in the background too) says which it is about
        logs.bind(**logs.of_controller(action.controller), action=str(type(action).__struct_config__.tag),
                  key=action.key, decision=action.decision_id, partition=partition)
        slot = self._slots.get(action.controller.partition("/")[0])
        if slot is None:
            await self._apply(msg, partition, action, number)
        else:
            async with slot:  # waiting here, the message is kept in progress (_keep_alive) as one being applied
                await self._apply(msg, partition, action, number)

    async def _apply(self, msg: Msg, partition: str, action: Action, number: int) -> None:
        results = Results(self._bus.js, subjects.result_subject(partition, self._bus.prefix), self._metrics)
        delivery = Delivery(api=self._api, action=action, number=number,
                            final=number >= self._config.max_deliveries, executor=self._config.instance,
                            report=results.publish, now=self._now, events=self._events)
        refused: str | None = None
        try:
            refused = await checked_apply(delivery, self._owners if self._config.check_ownership else None)
        except RetryLater as exc:
            await results.stored()
            delay = redelivery_delay(number, self._config.redelivery_delay)
            log.info("action %s: %s; redelivering in %.1fs", action.key, exc, delay)
            self._working.pop(id(msg), None)
            await msg.nak(delay=delay)
            self._metrics.delivery(m.REDELIVERED)
            return
        except Interrupted:
            await results.stored()
            self._working.pop(id(msg), None)
            await msg.nak()
            self._metrics.delivery(m.INTERRUPTED)
            return
        except Exception as exc:
            if not delivery.final:
                raise
            # the last delivery of an action that keeps breaking the executor: park it where people look
            await results.stored()
            await self._dead_letter(msg, codec.EXECUTOR_ERROR,
                                    f"executor error on the last delivery: {type(exc).__name__}: {exc}")
            return
        if refused is not None:  # the reconciler records the failed results; people find the message in KUBUS_DEAD
            await results.stored()
            await self._dead_letter(msg, ownership.NOT_OWNED, refused)
            return
        failpoints.hit("executor.after-apply")
        await results.stored()
        self._working.pop(id(msg), None)
        await msg.ack()
        self._metrics.delivery(m.ACKED)

    def _partition(self, subject: str) -> str:
        """The partition of `<prefix>.actions.<partition>` (where its results go), or BadMessage."""
        parts = subject.split(".")
        partition = parts[-1]
        if len(parts) != 3 or not (partition.isascii() and partition.isdigit()
                                   and int(partition) < self._bus.partitions):
            raise codec.BadMessage(codec.BAD_SUBJECT, f"subject {subject!r} is not <prefix>.actions.<partition> "
                                   f"with one of the bus's {self._bus.partitions} partitions")
        return partition

    async def _dead_letter(self, msg: Msg, reason: str, error: str) -> None:
        """Counted in kubus_dead_lettered_total{origin="actions"}, as every consumer's (runtime/deadletter.py)."""
        original = Original(self._bus.stream(subjects.ACTIONS_STREAM), msg.metadata.sequence.stream, msg.subject,
                            msg.data)
        await dead_letter(self._bus, ACTIONS, original, reason, error, self._config.instance)
        self._working.pop(id(msg), None)
        await msg.term()


async def checked_apply(delivery: Delivery, owners: ownership.Owners | None) -> str | None:
    """Checks the action (executor/ownership.py; not when `owners` is None) and applies it: why it was refused
    (its effects reported failed), or None when it was applied. A delete whose checked version went stale before
    it (StaleVersion: nothing applied) is checked again by reading the object, at most PROOFS times in all."""
    for attempt in range(1, PROOFS + 1):
        proven = None
        if owners is not None:
            # the first check may take KUBUS_STATE's word; after a stale version, read the object
            refused, proven = await _refusal(delivery, owners, use_state=attempt == 1)
            if refused is not None:
                return refused
        try:
            await apply(msgspec.structs.replace(delivery, proven=proven, last_proof=attempt == PROOFS))
            return None
        except StaleVersion as exc:  # changed since it was checked: nothing applied, check it again
            if owners is not None:
                owners.checked(ownership.STALE)
            log.debug("action %s: %s; checking it again", delivery.action.key, exc)
    raise AssertionError("the last proof reports a stale version as a failure")  # pragma: no cover


async def _refusal(delivery: Delivery, owners: ownership.Owners,
                   use_state: bool) -> tuple[str | None, ownership.Proven | None]:
    """Why the action must not be applied, its effects reported failed (executor/ownership.py), or None to apply
    it, with the version of the object it touches found its controller's (a delete's preconditions)."""
    action = delivery.action
    try:
        return None, await ownership.check(owners, action, use_state=use_state)
    except TransientError as exc:  # the controller could not be read: as any API call of the action
        if not delivery.final:
            raise RetryLater(exc) from exc
        why = f"its controller could not be read to check ownership: {exc}"
    except ownership.NotOwned as exc:
        why = str(exc)
    why = f"refused: {why}"
    log.error("action %s (%s, controller %s) %s", action.key, delivery.tag, action.controller, why)
    effect = Effect(FAILED, reason=ownership.NOT_OWNED, message=why)
    if isinstance(action, CreatePods):
        for pod in action.pods:
            await delivery.emit(pod.key, effect, object_subject(action.namespace, head_of(bytes(pod.pod)).name))
    else:
        await delivery.emit(action.key, effect, subject_of(action))
    return why, None


def _describe(msg: Msg) -> str:
    meta: Any = msg.metadata
    return f"{msg.subject}#{meta.sequence.stream} (delivery {meta.num_delivered})"
