"""The outbox relay and the results recorder: the two ends of the actions' round trip.

The relay publishes committed outbox rows to JetStream with the row's key as Nats-Msg-Id and
marks them sent only after JetStream acknowledged them. A crash between the publish and the
mark republishes the row, and JetStream's de-duplication drops the copy; a crash before the
publish leaves the row pending for the next scan. Nothing is lost and nothing is doubled.

A row larger than the server's max_payload (a single pod, status or revision too large: a sync cuts a
CreatePods of several pods to fit, core/sizing.py) is published compressed; one NATS can never take even
so is dead-lettered: a note goes to KUBUS_DEAD,
a failed result (reason TooLarge, naming the action, the object and the size against the limit) to
KUBUS_RESULTS for each of its effects, and the row leaves the outbox. It is never retried in front of the
rows after it; the controllers read the result as any failed create or write (expectations lowered,
the sync retried with backoff), and the audit trail shows it.

The rows a reconciler's loop just committed reach the relay in memory (`Outgoing`): while every pending row
the table holds is among the handed ones, a round publishes them without scanning the table. The relay scans
when it starts, after a round that failed (what it did not mark is left in the table), after a commit the loop
could not hand over, and always for a split reconciler (whose partitions move between members); rows handed
during a scan that the scan found too are published once. Handed or scanned, a round publishes in the scan's
order (creation, then key).

The recorder hands the executors' results to the reconciler, which stores them (idempotent on
the result key) and lets its controllers react (failed or skipped creations lower expectations,
as upstream does for creations that will never be observed); they are acknowledged only after
that commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import NotFoundError, ServiceUnavailableError

from kube.codec import decode_head
from kube.times import format_micro_time, parse_time, utcnow
from messages import codec, subjects
from messages.actions import FAILED, Action, ActionResult, CreateControllerRevision, CreatePods
from reconciler.consuming import Stopped
from reconciler.outgoing import Outgoing
from runtime import failpoints, logs, serving
from runtime.bus import Bus, ConsumerDeleted, Pull, Sent, publish_async, stored, wire_size
from runtime.deadletter import ACTIONS, RESULTS, Halts, Original, dead_letter, one_line
from store.outbox import OutboxRow
from store.port import RelayPort
from store.results import ResultRow

log = logging.getLogger("kubus.relay")

RELAY_BATCH = 500
RESULTS_CONSUMER = "reconciler-results"


SubjectsOf = Callable[[], Collection[str] | None]


class Recorder(Protocol):
    """Where the results go: the reconciler's loop, which commits them with its next batch."""

    async def record_results(self, results: list[ActionResult], rows: list[ResultRow]) -> None: ...


RELAY_STALL_LIMIT = 120.0  # seconds a relay may fail round after round before /healthz says it is stuck
DEAD_LETTER_REASON = "TooLarge"  # the reason of the failed results of a dead-lettered row
RELAY_EXECUTOR = "outbox-relay"  # what a dead-lettered row's results name as their executor


class RelayProgress:
    """Whether the relay moves: since when its rounds have been failing (None while they succeed). Read by
    /healthz (`healthy`) and the kubus_outbox_relay_stalled_seconds gauge."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, limit: float = RELAY_STALL_LIMIT):
        self._clock = clock
        self.limit = limit
        self.failing_since: float | None = None

    def succeeded(self) -> None:
        self.failing_since = None
        serving.RELAY_STALLED.set(0)

    def failed(self) -> float:
        """Records a failed round; how long the rounds have been failing."""
        if self.failing_since is None:
            self.failing_since = self._clock()
        stalled = self.stalled_for()
        serving.RELAY_STALLED.set(stalled)
        return stalled

    def stalled_for(self) -> float:
        return 0.0 if self.failing_since is None else self._clock() - self.failing_since

    def healthy(self) -> bool:
        return self.stalled_for() < self.limit


async def relay(bus: Bus, store: RelayPort, wakeup: asyncio.Event, interval: float = 1.0,
                subjects_of: SubjectsOf | None = None, stop: asyncio.Event | None = None,
                progress: RelayProgress | None = None, outgoing: Outgoing | None = None) -> None:
    """Publishes the pending outbox rows, on a wakeup or every `interval` seconds; with `subjects_of`,
    only those bound for the subjects it returns (a split reconciler relays its own partitions'). Ends
    between two rounds once `stop` is set (never in the middle of a write: see run_reconciler).
    `progress` learns of every round's success or failure (see RelayProgress). With `outgoing` (a reconciler
    alone: every partition), the rows its loop hands over are published without a scan while it is complete."""
    stop = stop or asyncio.Event()
    progress = progress or RelayProgress()
    while not stop.is_set():
        woken = asyncio.ensure_future(wakeup.wait())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([woken, stopped], timeout=interval, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            stopped.cancel()
        if stop.is_set():
            return
        # no window of its own before the scan: a commit comes once per batch, the batch's window gathered its
        # events already, and commits that land while this round publishes are taken by the next round
        wakeup.clear()
        try:
            if outgoing is not None and outgoing.complete:
                await _relay_handed(bus, store, outgoing)
            else:
                subjects = subjects_of() if subjects_of else None
                if outgoing is not None:
                    outgoing.scanning()
                while await relay_once(bus, store, subjects, outgoing) == RELAY_BATCH:
                    pass
        except Exception as exc:  # NATS or the database away: the next round retries the rows not yet taken
            if outgoing is not None:
                outgoing.lost()  # what the round did not mark is in the table only
            stalled = progress.failed()
            log.warning("outbox relay paused (failing for %.0f s): %s", stalled, exc)
        else:
            progress.succeeded()


async def relay_once(bus: Bus, store: RelayPort, subjects: Collection[str] | None = None,
                     outgoing: Outgoing | None = None) -> int:
    """Publishes what a scan of the table finds (up to RELAY_BATCH rows); how many. `outgoing` learns what it
    found."""
    rows = await store.pending(RELAY_BATCH, subjects)
    if outgoing is not None:
        outgoing.scanned(rows)
    _gauge(rows)
    await publish_rows(bus, store, rows)
    return len(rows)


async def _relay_handed(bus: Bus, store: RelayPort, outgoing: Outgoing) -> None:
    """Publishes the rows the loop handed over (every pending row, `outgoing` being complete), RELAY_BATCH at a
    time as a scan would."""
    rows = outgoing.take()
    _gauge(rows[:RELAY_BATCH])  # what a scan would have found: kubus_outbox_pending is at most one round's batch
    for start in range(0, len(rows), RELAY_BATCH):
        await publish_rows(bus, store, rows[start:start + RELAY_BATCH])


def _gauge(rows: list[OutboxRow]) -> None:
    """The outbox's depth and age as a round finds it."""
    serving.OUTBOX_DEPTH.set(len(rows))
    serving.OUTBOX_OLDEST.set(max(0.0, (utcnow() - rows[0].created_at).total_seconds()) if rows else 0.0)


async def publish_rows(bus: Bus, store: RelayPort, rows: list[OutboxRow]) -> None:
    """Publishes the pending `rows` and marks them sent once JetStream stored them (a row it never can take is
    dead-lettered, see the module's docstring)."""
    if not rows:
        return
    # publish_async_bounded: a row over max_payload is never written (nor leaks a slot of nats-py's window),
    # its ack fails with TooLarge and `stored` hands it back in `refused`
    sent = [await publish_async(bus.js, row.subject, _wire(bus, row), {"Nats-Msg-Id": row.key}) for row in rows]
    refused: list[Sent] = []
    try:
        await stored(bus.js, sent, refused=refused)  # an ack lost to a reconnect is published again
    except Exception:
        # what JetStream did store is marked, so the next round does not publish it again
        taken = [row.key for row, message in zip(rows, sent, strict=True) if _acked(message)]
        if taken:
            await store.mark_sent(taken)
        raise
    failpoints.hit("relay.after-publish")
    dead = {id(message) for message in refused}
    for row, message in zip(rows, sent, strict=True):
        if id(message) in dead:
            await dead_letter_row(bus, row, message)
    await store.mark_sent([row.key for row in rows])


def _wire(bus: Bus, row: OutboxRow) -> bytes:
    """What goes on the bus for `row`: its payload, or compressed when that is over max_payload (an action
    with one pod, status or revision that large: a sync cuts only a CreatePods of several pods). Executors
    decode either (messages/codec.py); the outbox keeps the payload as the sync encoded it."""
    if wire_size(row.payload, {"Nats-Msg-Id": row.key}) <= bus.nc.max_payload:
        return row.payload
    return codec.compress(row.payload)


def _acked(message: Sent) -> bool:
    return message.ack.done() and not message.ack.cancelled() and message.ack.exception() is None


async def dead_letter_row(bus: Bus, row: OutboxRow, message: Sent) -> None:
    """A row NATS will never take: a note on KUBUS_DEAD and a failed result per effect on KUBUS_RESULTS,
    both stored before the caller marks the row (a crash in between publishes both again, and JetStream's
    de-duplication keeps one of each)."""
    size, limit = wire_size(message.payload, message.headers), bus.nc.max_payload
    about = logs.fields(key=row.key, decision=row.decision_id, partition=row.subject.rpartition(".")[2])
    try:
        action: Action | None = codec.decode_action(row.payload)
    except codec.BadMessage as exc:  # the store wrote it: only a newer kubus's row can be unreadable
        log.error("outbox row %s cannot be read (%s); no result can be recorded for it", row.key, exc,
                  extra=about)
        action = None
    what = f"{action.controller} {type(action).__name__}" if action is not None else "action"
    reason = (f"{what} {row.key} is {len(row.payload)} bytes ({size} on the wire), over NATS's "
              f"max_payload of {limit} bytes: it can never be published, and was dead-lettered")
    if action is not None:
        about[logs.EXTRA].update(logs.of_controller(action.controller), action=_tag(action))
    log.error("outbox row dead-lettered: %s", reason, extra=about)
    note = codec.encode({"key": row.key, "subject": row.subject, "decision_id": row.decision_id,
                         "action": _tag(action), "size": size, "max_payload": limit, "reason": reason})
    # the headers every dead letter has (runtime/deadletter.py), the row standing for the message never sent
    notes = [await publish_async(bus.js, subjects.dead_subject(ACTIONS, bus.prefix), note, {
        "Nats-Msg-Id": f"dead/outbox/{row.key}", "Kubus-Dead-Reason": codec.TOO_LARGE,
        "Kubus-Dead-Error": one_line(reason), "Kubus-Dead-By": RELAY_EXECUTOR, "Kubus-Original-Subject": row.subject})]
    if action is not None:
        results = subjects.result_subject(row.subject.rsplit(".", 1)[-1], bus.prefix)
        now = format_micro_time(datetime.now(UTC))
        for key, subject in _effects(action):
            result = ActionResult(
                key=key, action_key=action.key, action=_tag(action), decision_id=action.decision_id,
                controller=action.controller, outcome=FAILED, reason=DEAD_LETTER_REASON,
                message=f"{reason} ({subject or action.namespace})", executor=RELAY_EXECUTOR, attempts=0,
                finished_at=now, subject=subject)
            notes.append(await publish_async(bus.js, results, codec.encode(result), {"Nats-Msg-Id": f"result/{key}"}))
    await stored(bus.js, notes)
    serving.DEAD_LETTERED.labels(origin=ACTIONS, reason=codec.TOO_LARGE).inc()


def _tag(action: Action | None) -> str:
    return "unknown" if action is None else type(action).__struct_config__.tag  # type: ignore[return-value]


def _effects(action: Action) -> list[tuple[str, str]]:
    """(result key, the object the effect was on as ActionResult.subject names it), one per effect: each pod
    of a CreatePods, else the action itself."""
    if isinstance(action, CreatePods):
        return [(pod.key, _subject(action.namespace, _name_of(pod.pod))) for pod in action.pods]
    if isinstance(action, CreateControllerRevision):
        return [(action.key, _subject(action.namespace, _name_of(action.revision)))]
    name = getattr(action, "name", "")
    return [(action.key, _subject(action.namespace, name) if name else action.namespace)]


def _name_of(raw: msgspec.Raw) -> str:
    try:
        return decode_head(raw).metadata.name
    except (msgspec.DecodeError, ValueError):
        return ""


def _subject(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


async def record_results(bus: Bus, recorder: Recorder, partitions: Collection[int] | None = None,
                         ack_wait: float = 30.0, stop: asyncio.Event | None = None, *, by: str = "reconciler",
                         halts: Halts | None = None) -> None:
    """Feeds the executors' results to `recorder.record_results` (the reconciler), acking after it
    committed them.

    With `partitions` (a split reconciler), each partition's results come through a durable of its
    own, `reconciler-results-<partition>`, which whoever holds the partition binds: results a
    reconciler did not commit before its partition moved (it died, or its commit raised LeaseLost)
    are redelivered to the next owner after `ack_wait`.

    `stop` ends it within a second: what its pull brought in after it was set is handed back (nak) for the
    next binding at once. Rebuilding a split reconciler's loop stops its recorder that way rather than by
    cancelling it mid-take, which would strand the results the server had already sent until their ack
    wait ran out.

    An unusable result is moved to KUBUS_DEAD (`by` says who did) and acked. At a result of a newer kubus the
    consumer stops (`halts`: /readyz false) until `stop`, leaving it and what came after it unacked."""
    stop = stop or asyncio.Event()
    halts = halts or Halts()
    halts.clear(RESULTS)
    sink = _Sink(bus, recorder, stop, by, halts)
    if partitions is None:
        await _record(sink, f"{bus.prefix}.results.>", RESULTS_CONSUMER, ack_wait)
        return
    try:
        async with asyncio.TaskGroup() as group:
            for p in sorted(partitions):
                group.create_task(_record(sink, subjects.result_subject(str(p), bus.prefix),
                                          f"{RESULTS_CONSUMER}-{p}", ack_wait))
    except ExceptionGroup as group_error:  # what failed, not "unhandled errors in a TaskGroup"
        raise group_error.exceptions[0] from None


class StreamMissing(RuntimeError):
    """A stream kubus consumes is gone (deleted under the running service): it ends, and is restarted,
    rather than waiting for messages that cannot come (the start creates the streams again)."""


CONSUMER_CHECK = 10  # idle takes (about a second each) between two checks that the consumer still exists
RESULTS_PULL = 500  # results a pull request asks for (another is made once half of them came)


@dataclass(frozen=True)
class _Sink:
    """Where a results consumer's messages go, and what it answers to."""

    bus: Bus
    recorder: Recorder
    stop: asyncio.Event
    by: str
    halts: Halts


async def _record(sink: _Sink, subject: str, durable: str, ack_wait: float) -> None:
    bus, stop = sink.bus, sink.stop
    stream = bus.stream(subjects.RESULTS_STREAM)
    config = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=5000, ack_wait=ack_wait)
    while not stop.is_set():
        try:  # binds the durable, creating it when it does not exist (first use, or deleted under us)
            sub = await bus.js.pull_subscribe(subject, durable=durable, stream=stream, config=config)
        except NotFoundError as exc:
            raise StreamMissing(f"stream {stream} is gone ({exc.description or exc}); results on {subject} "
                                f"cannot be recorded") from None
        except (TimeoutError, ServiceUnavailableError, NoRespondersError) as exc:
            # JetStream did not answer: a server of the cluster is down and the stream's or the meta leader is
            # being elected, or NATS is reconnecting. Transient, as in _record_until: a crashed recorder would
            # take the whole reconciler down (found by tests/chaos, a nats-server killed as a loop started).
            log.warning("results consumer %s on %s not bound yet (%r); trying again", durable, stream, exc)
            await asyncio.sleep(1.0)
            continue
        try:
            gone = await _record_until(sink, sub, subject)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if not gone:
            return
        log.warning("results consumer %s on %s is gone; binding it again", durable, stream)


async def _record_until(sink: _Sink, sub: Any, subject: str) -> bool:
    """Records until `stop` or the recorder's loop stopped (False), or until the consumer is found gone
    (True: the caller binds it again). The results come through one pull kept open (runtime.bus.Pull: each
    handed over as it comes, not a fetch's batch a second apart); what it delivered and was not recorded is
    handed back (nak) when it ends."""
    pull = Pull(sub, RESULTS_PULL)
    try:
        return await _record_pulled(sink, sub, pull, subject)
    finally:
        for msg in await pull.close():
            with contextlib.suppress(Exception):
                await msg.nak()


async def _record_pulled(sink: _Sink, sub: Any, pull: Pull, subject: str) -> bool:
    bus, recorder, stop = sink.bus, sink.recorder, sink.stop
    stream = bus.stream(subjects.RESULTS_STREAM)
    idle = 0
    while not stop.is_set():
        try:
            msgs = await pull.take(timeout=1.0)
        except ConsumerDeleted:
            return True
        except Exception as exc:
            log.warning("results consumer paused: %s", exc)
            await asyncio.sleep(1.0)  # NATS reconnecting; try again shortly
            if not await _consumer_exists(sub):
                return True
            continue
        if not msgs:  # nothing to record yet
            idle += 1
            # a consumer deleted while NATS was away, its pull lost with it, says nothing: ask now and then
            if idle % CONSUMER_CHECK == 0 and not await _consumer_exists(sub):
                return True
            continue
        idle = 0
        if stop.is_set():  # taken for a loop that has ended: the next binding takes them now
            for msg in msgs:
                with contextlib.suppress(Exception):
                    await msg.nak()
            return False
        results: list[ActionResult] = []
        rows: list[ResultRow] = []
        taken: list[Msg] = []  # the messages of `results`
        newer: codec.NewerSchema | None = None
        later: list[Msg] = []  # from a result of a newer kubus on: left for an upgraded recorder
        for index, msg in enumerate(msgs):
            try:
                result = codec.decode_result(msg.data)
            except codec.NewerSchema as exc:
                newer, later = exc, msgs[index:]
                break
            except codec.BadMessage as exc:
                original = Original(stream, msg.metadata.sequence.stream, msg.subject, msg.data)
                await dead_letter(bus, RESULTS, original, exc.reason, str(exc), sink.by)
                await msg.ack()
                continue
            taken.append(msg)
            serving.ACTIONS.labels(action=result.action, outcome=result.outcome).inc()
            results.append(result)
            rows.append(ResultRow(
                key=result.key, action_key=result.action_key, decision_id=result.decision_id or None,
                action=result.action, outcome=result.outcome, code=result.code or None, reason=result.reason,
                message=result.message, object_uid=result.object_uid or None, executor=result.executor,
                attempts=result.attempts, finished_at=parse_time(result.finished_at),
                subject=result.subject or None, resource_version=result.resource_version or None))
        if rows:
            try:
                await recorder.record_results(results, rows)
            except Exception as exc:  # not committed (the partition moved): the next owner gets them
                log.info("results on %s not recorded, left for redelivery: %s", subject, exc)
                for msg in [*taken, *later]:
                    with contextlib.suppress(Exception):
                        await msg.nak()
                if isinstance(exc, Stopped):
                    return False
                continue
        for msg in taken:
            await msg.ack()
        if newer is not None:
            first = later[0]
            for msg in [*later, *await pull.close()]:  # nothing more taken until upgraded
                with contextlib.suppress(Exception):
                    await msg.nak()
            sink.halts.halt(RESULTS, f"{stream}#{first.metadata.sequence.stream} ({first.subject})", str(newer))
            await stop.wait()
            return False
    return False


async def _consumer_exists(sub: Any) -> bool:
    """False only when the server says the consumer is not there (a server that does not answer: True)."""
    try:
        await sub.consumer_info()
    except NotFoundError:
        return False
    except Exception:  # NATS away: not a verdict on the consumer
        return True
    return True
