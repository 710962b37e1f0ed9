"""Poison and newer messages, the same way in every consumer kubus runs.

A message a consumer cannot use (codec.BadMessage: undecodable, of another kind, malformed, a bad subject or
timestamp) is copied to KUBUS_DEAD on `<prefix>.dead.<origin>` by `dead_letter`, with why and where from in
its headers, counted in `kubus_dead_lettered_total{origin,reason}` and logged once; the consumer then moves
past it. The copy's Nats-Msg-Id is the original's stream and sequence, so a consumer that dead-letters it
again (a redelivery, a restart before its position was committed, two readers of one stream) stores it once
within KUBUS_DEAD's duplicate window.

A message of a newer schema version (codec.NewerSchema) is neither: its consumer stops before it, and
`Halts` says so: one error line, the gauge `kubus_consumer_halted{consumer}` at 1, and /readyz false (each
service registers `halts.ready`). The process runs on (/healthz, /metrics, its other consumers); once it is
upgraded, the message is consumed as any other.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from messages import subjects
from runtime.bus import Bus, publish_async, stored
from runtime.serving import DEAD_LETTERED, HALTED

log = logging.getLogger("kubus.dead")

# the origins: the consumed subject's family, `<prefix>.dead.<origin>`
EVENTS, STATE, RESULTS, ACTIONS = "events", "state", "results", "actions"

HEADER_LIMIT = 1024  # characters of an error kept in a header


@dataclass(frozen=True, slots=True)
class Original:
    """Where a message was read: its stream (the full name), sequence and subject, and its bytes."""

    stream: str
    seq: int
    subject: str
    data: bytes


def headers_of(original: Original, reason: str, error: str, by: str) -> dict[str, str]:
    return {
        "Nats-Msg-Id": f"dead/{original.stream}/{original.seq}",
        "Kubus-Dead-Reason": reason,
        "Kubus-Dead-Error": one_line(error),
        "Kubus-Dead-By": by,
        "Kubus-Original-Stream": original.stream,
        "Kubus-Original-Sequence": str(original.seq),
        "Kubus-Original-Subject": original.subject,
    }


async def dead_letter(bus: Bus, origin: str, original: Original, reason: str, error: str, by: str) -> None:
    """Copies `original` to `<prefix>.dead.<origin>` and returns once JetStream stored it (raising if it could
    not within `stored`'s timeout: the caller then has not moved past the message, and meets it again); then
    counts and logs it."""
    sent = await publish_async(bus.js, subjects.dead_subject(origin, bus.prefix), original.data,
                               headers_of(original, reason, error, by))
    await stored(bus.js, [sent])
    DEAD_LETTERED.labels(origin=origin, reason=reason).inc()
    log.error("%s message %s#%d on %s is unusable (%s), moved to %s and skipped: %s", origin, original.stream,
              original.seq, original.subject, reason, subjects.dead_subject(origin, bus.prefix), one_line(error))


def one_line(text: str, limit: int = HEADER_LIMIT) -> str:
    """NATS headers are single lines: fold line breaks, and keep them short."""
    return " ".join(text.split())[:limit]


class Halts:
    """The consumers of one service stopped at a message of a newer schema version; `ready` is its /readyz
    check. Each consumer is named once in the log, however often it meets the message again."""

    def __init__(self) -> None:
        self.halted: dict[str, str] = {}  # consumer -> why

    def halt(self, consumer: str, where: str, error: str) -> None:
        if consumer not in self.halted:
            log.error("%s consumer stopped at %s: %s", consumer, where, error)
            HALTED.labels(consumer=consumer).set(1)
        self.halted[consumer] = error

    def clear(self, consumer: str) -> None:
        """A consumer started afresh (a split reconciler's loop rebuilt): it says again if it stops."""
        self.halted.pop(consumer, None)
        HALTED.labels(consumer=consumer).set(0)

    def ready(self) -> bool:
        return not self.halted
