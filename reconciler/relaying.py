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
from datetime import datetime
from typing import Any

from nats.js.api import AckPolicy, ConsumerConfig

from kubus import failpoints, serving
from kubus.jetstream import Bus
from messages import codec, subjects
from messages.actions import ActionResult
from store.results import ActionResult as ResultRow

log = logging.getLogger("kubus.relay")

RELAY_BATCH = 500
RESULTS_CONSUMER = "reconciler-results"


RELAY_WINDOW = 0.02  # seconds the relay lets commits gather before one scan of the outbox


async def relay(bus: Bus, store: Any, wakeup: asyncio.Event, interval: float = 1.0) -> None:
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wakeup.wait(), interval)
        if wakeup.is_set():
            await asyncio.sleep(RELAY_WINDOW)  # a window, not synchronisation: fewer, larger scans
        wakeup.clear()
        try:
            while await relay_once(bus, store) == RELAY_BATCH:
                pass
        except Exception as exc:  # NATS or the database away: the next round retries the same rows
            log.warning("outbox relay paused: %s", exc)


async def relay_once(bus: Bus, store: Any) -> int:
    rows = await store.pending(RELAY_BATCH)
    serving.OUTBOX_DEPTH.set(len(rows))
    if not rows:
        return 0
    acks = [await bus.js.publish_async(row.subject, row.payload, headers={"Nats-Msg-Id": row.key})
            for row in rows]
    await asyncio.gather(*acks)
    failpoints.hit("relay.after-publish")
    await store.mark_sent([row.key for row in rows])
    return len(rows)


async def record_results(bus: Bus, recorder: Any) -> None:
    """Feeds the executors' results to `recorder.record_results` (the reconciler), acking after it
    committed them."""
    stream = bus.stream(subjects.RESULTS_STREAM)
    sub = await bus.js.pull_subscribe(f"{bus.prefix}.results.>", durable=RESULTS_CONSUMER, stream=stream,
                                      config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=5000))
    while True:
        try:
            msgs = await sub.fetch(500, timeout=1.0)
        except TimeoutError:  # nats-py's fetch timeout is a TimeoutError: nothing to record yet
            continue
        except Exception as exc:
            log.warning("results consumer paused: %s", exc)
            await asyncio.sleep(1.0)  # NATS reconnecting; try again shortly
            continue
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
                attempts=result.attempts,
                finished_at=datetime.fromisoformat(result.finished_at.replace("Z", "+00:00")),
                subject=result.subject or None, resource_version=result.resource_version or None))
        if rows:
            await recorder.record_results(results, rows)
        for msg in msgs:
            await msg.ack()
