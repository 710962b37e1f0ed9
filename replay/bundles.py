"""What a replay consumes: one bundle per tick of the reconciler's input log.

Every source (an exported file, or the store with JetStream) yields the same bundles, in commit order:

- a ``start`` tick (a reconciler process started) with the messages its cache was bootstrapped with:
  the last event of every object up to the tick's ``last_seq``, in sequence order (what KUBUS_STATE
  held), and the store state it loaded (``tick.state``);
- a ``batch`` tick with the KUBUS_EVENTS messages of its range that no earlier bundle carried (the
  ones before were consumed by earlier batches, so the live loop skipped them too), the executor
  results it fed to the controllers, and the decisions it committed, when the source has them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from messages.actions import ActionResult
from reconciler.core.stepping import Message
from store.ticks import START, Tick


@dataclass(frozen=True)
class RecordedAction:
    key: str
    payload: bytes  # the outbox payload: the action's JSON, its decision_id the recorded one


@dataclass(frozen=True)
class RecordedDecision:
    id: int
    correlation_id: str
    controller_key: str
    controller_kind: str
    partition: int
    stream_seq: int
    trigger: str | None
    decided_at: datetime
    summary: dict[str, Any]
    actions: list[RecordedAction]


@dataclass
class Bundle:
    tick: Tick
    messages: list[Message]
    results: list[ActionResult]
    decisions: list[RecordedDecision] | None  # None: the source has no decisions
    line: int = 0  # the tick's line in a file (0: not from a file), counted after `lines_before`'s lines
    # the lines before those its reader read, when it read a file's end (replay.parallel's second half): worked
    # out only to show a line number (the count costs a read of everything before)
    lines_before: Callable[[], int] | None = None

    @property
    def line_in_file(self) -> int:
        """The tick's line in the file (0: not from a file)."""
        return self.line + self.lines_before() if self.lines_before is not None and self.line else self.line

    @property
    def where(self) -> str:
        line = self.line_in_file
        return f"tick {self.tick.id}" + (f" (line {line})" if line else "")


def restarts_reading(tick: Tick) -> bool:
    """Whether a start tick re-reads the history from its `first_seq` (before what its instance took already):
    a split reconciler's new set of partitions (it re-reads from the lowest position among them, and what it
    took over was read by another process, not by this one), or a start whose bootstrap lagged behind its
    positions (it re-reads from what the bootstrap reflects, to catch its cache up)."""
    return tick.kind == START and (tick.partitions is not None or "consistent" in (tick.state or {}))
