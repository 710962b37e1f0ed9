"""The outbox relay and the results recorder: the two ends of the actions' round trip.

The relay publishes committed outbox rows to JetStream with the row's key as Nats-Msg-Id and
marks them sent only after JetStream acknowledged them. A crash between the publish and the
mark republishes the row, and JetStream's de-duplication drops the copy; a crash before the
publish leaves the row pending for the next scan. Nothing is lost and nothing is doubled.

The recorder hands the executors' results to the reconciler, which stores them (idempotent on
the result key) and lets its controllers react (failed or skipped creations lower expectations,
as upstream does for creations that will never be observed); they are acknowledged only after
that commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection
from typing import Any, Protocol

from nats.errors import NoRespondersError
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import NotFoundError, ServiceUnavailableError

from kube.times import parse_time
from messages import codec, subjects
from messages.actions import ActionResult
from reconciler.consuming import Stopped
from runtime import failpoints, serving
from runtime.bus import Bus, publish_async, stored
from store.port import RelayPort
from store.results import ResultRow

log = logging.getLogger("kubus.relay")

RELAY_BATCH = 500
RESULTS_CONSUMER = "reconciler-results"


RELAY_WINDOW = 0.02  # seconds the relay lets commits gather before one scan of the outbox


SubjectsOf = Callable[[], Collection[str] | None]


class Recorder(Protocol):
    """Where the results go: the reconciler's loop, which commits them with its next batch."""

    async def record_results(self, results: list[ActionResult], rows: list[ResultRow]) -> None: ...


async def relay(bus: Bus, store: RelayPort, wakeup: asyncio.Event, interval: float = 1.0,
                subjects_of: SubjectsOf | None = None, stop: asyncio.Event | None = None) -> None:
    """Publishes the pending outbox rows, on a wakeup or every `interval` seconds; with `subjects_of`,
    only those bound for the subjects it returns (a split reconciler relays its own partitions'). Ends
    between two rounds once `stop` is set (never in the middle of a write: see run_reconciler)."""
    stop = stop or asyncio.Event()
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
        if wakeup.is_set():
            await asyncio.sleep(RELAY_WINDOW)  # a window, not synchronisation: fewer, larger scans
        wakeup.clear()
        try:
            while await relay_once(bus, store, subjects_of() if subjects_of else None) == RELAY_BATCH:
                pass
        except Exception as exc:  # NATS or the database away: the next round retries the same rows
            log.warning("outbox relay paused: %s", exc)


async def relay_once(bus: Bus, store: RelayPort, subjects: Collection[str] | None = None) -> int:
    rows = await store.pending(RELAY_BATCH, subjects)
    serving.OUTBOX_DEPTH.set(len(rows))
    if not rows:
        return 0
    sent = [await publish_async(bus.js, row.subject, row.payload, {"Nats-Msg-Id": row.key})
            for row in rows]
    await stored(bus.js, sent)  # an ack lost to a reconnect is published again, never waited for for ever
    failpoints.hit("relay.after-publish")
    await store.mark_sent([row.key for row in rows])
    return len(rows)


async def record_results(bus: Bus, recorder: Recorder, partitions: Collection[int] | None = None,
                         ack_wait: float = 30.0, stop: asyncio.Event | None = None) -> None:
    """Feeds the executors' results to `recorder.record_results` (the reconciler), acking after it
    committed them.

    With `partitions` (a split reconciler), each partition's results come through a durable of its
    own, `reconciler-results-<partition>`, which whoever holds the partition binds: results a
    reconciler did not commit before its partition moved (it died, or its commit raised LeaseLost)
    are redelivered to the next owner after `ack_wait`.

    `stop` ends it within a fetch (a second): what a fetch brought in after it was set is handed back
    (nak) for the next binding at once. Rebuilding a split reconciler's loop stops its recorder that way
    rather than by cancelling it mid-fetch, which would strand the results the server had already sent
    until their ack wait ran out."""
    stop = stop or asyncio.Event()
    if partitions is None:
        await _record(bus, recorder, f"{bus.prefix}.results.>", RESULTS_CONSUMER, ack_wait, stop)
        return
    try:
        async with asyncio.TaskGroup() as group:
            for p in sorted(partitions):
                group.create_task(_record(bus, recorder, subjects.result_subject(str(p), bus.prefix),
                                          f"{RESULTS_CONSUMER}-{p}", ack_wait, stop))
    except ExceptionGroup as group_error:  # what failed, not "unhandled errors in a TaskGroup"
        raise group_error.exceptions[0] from None


class StreamMissing(RuntimeError):
    """A stream kubus consumes is gone (deleted under the running service): it ends, and is restarted,
    rather than waiting for messages that cannot come (the start creates the streams again)."""


CONSUMER_CHECK = 10  # idle fetches (about a second each) between two checks that the consumer still exists


async def _record(bus: Bus, recorder: Recorder, subject: str, durable: str, ack_wait: float,
                  stop: asyncio.Event) -> None:
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
            gone = await _record_until(bus, recorder, sub, subject, stop)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if not gone:
            return
        log.warning("results consumer %s on %s is gone; binding it again", durable, stream)


async def _record_until(bus: Bus, recorder: Recorder, sub: Any, subject: str, stop: asyncio.Event) -> bool:
    """Records until `stop` or the recorder's loop stopped (False), or until the consumer is found gone
    (True: the caller binds it again)."""
    idle = 0
    while not stop.is_set():
        try:
            msgs = await sub.fetch(500, timeout=1.0)
        except TimeoutError:  # nats-py's fetch timeout is a TimeoutError: nothing to record yet
            idle += 1
            # a deleted consumer answers pulls with a status nats-py takes for "no messages": ask now and then
            if idle % CONSUMER_CHECK == 0 and not await _consumer_exists(sub):
                return True
            continue
        except Exception as exc:
            log.warning("results consumer paused: %s", exc)
            await asyncio.sleep(1.0)  # NATS reconnecting; try again shortly
            if not await _consumer_exists(sub):
                return True
            continue
        idle = 0
        if stop.is_set():  # fetched for a loop that has ended: the next binding takes them now
            for msg in msgs:
                with contextlib.suppress(Exception):
                    await msg.nak()
            return False
        results: list[ActionResult] = []
        rows: list[ResultRow] = []
        for msg in msgs:
            try:
                result = codec.decode_result(msg.data)
            except codec.BadMessage as exc:
                log.error("unusable result on %s dead-lettered: %s", msg.subject, exc)
                await bus.js.publish(subjects.dead_subject("results", bus.prefix), msg.data,
                                     headers={"Kubus-Reason": str(exc), "Kubus-Subject": msg.subject})
                continue
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
                for msg in msgs:
                    with contextlib.suppress(Exception):
                        await msg.nak()
                if isinstance(exc, Stopped):
                    return False
                continue
        for msg in msgs:
            await msg.ack()
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
