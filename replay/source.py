"""Where a replay's bundles come from: the store's input log and decisions, with the events from
KUBUS_EVENTS (or any other sequential reader of the event history); `kubus events export` writes the
same bundles to a file.

The bundler walks the ticks in commit order and gives each the messages it needs:

- a ``start`` tick: the last message of every subject up to its ``last_seq`` (what KUBUS_STATE held when
  that process bootstrapped), in sequence order;
- a ``batch`` tick: the messages of its range after the highest sequence an earlier batch of the same
  reconciler instance took. The ones before were committed by its earlier batches, so the live loop skipped
  them after a restart, and so does the replay (its consumer positions say so). Each member of a split
  deployment reads the whole history, so a history of several members gives each its own; and a start
  that re-reads the history (`bundles.restarts_reading`: a new set of partitions, a bootstrap behind its
  positions) goes back to its first sequence, as the live process did.

A replay of a window (`--since-seq`, `--since`, ...) starts at the latest start tick before the window
that recorded what it loaded (or at the very first tick), so the controllers' memory is right when the
window begins.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from messages.actions import ActionResult
from reconciler.core.stepping import Message, Payload
from replay.bundles import Bundle, RecordedAction, RecordedDecision, restarts_reading
from store import ticks as tick_rows
from store.engine import Store
from store.tables import decisions as decision_table
from store.tables import outbox as outbox_table
from store.tables import would_do_actions
from store.ticks import START, Tick

TICK_CHUNK = 500


class SourceError(ValueError):
    """A history that cannot be read for a replay (the message says what is missing)."""


# --- the replay window --------------------------------------------------------------------------------------
@dataclass
class Window:
    """Which ticks a replay reports on: by event sequence and by time (all bounds inclusive)."""

    since_seq: int | None = None
    until_seq: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    instance: str | None = None  # one reconciler of a split deployment (the ticks of the others are left out)

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.since_seq, self.until_seq, self.since, self.until))

    def place(self, position_before: int, position_after: int, at: datetime) -> int:
        """-1 before the window, 0 in it, 1 after it; `position_*` is the highest event sequence consumed
        before and after the tick."""
        if (self.until_seq is not None and position_before >= self.until_seq) or \
                (self.until is not None and at > self.until):
            return 1
        if (self.since_seq is not None and position_after < self.since_seq) or \
                (self.since is not None and at < self.since):
            return -1
        return 0


class WindowTracker:
    """`Window.place` for ticks seen one after another."""

    def __init__(self, window: Window):
        self.window = window
        self.position = 0

    def place(self, tick: Tick) -> int:
        before = self.position
        if tick.kind != START and tick.last_seq is not None:
            self.position = max(self.position, tick.last_seq)
        return self.window.place(before, self.position, tick.at)


def choose_ticks(outlines: Sequence[tick_rows.Outline], window: Window) -> tuple[int, int] | None:
    """(first id, last id) of the ticks to replay: from the start tick the window needs to the window's
    last tick; None when no tick falls in the window."""
    tracker = WindowTracker(window)
    first = last = None
    for i, o in enumerate(outlines):
        placed = tracker.place(Tick(instance=o.instance, kind=o.kind, at=o.at, caught_up=False, first_seq=o.first_seq,
                                    last_seq=o.last_seq))
        if placed == 0:
            if first is None:
                first = i
            last = i
        elif placed > 0:
            break
    if first is None or last is None:
        return None
    begin = next((i for i in range(first, -1, -1)
                  if outlines[i].kind == START and (outlines[i].has_state or i == 0)), None)
    if begin is None:
        raise SourceError(f"no start tick before tick {outlines[first].id} recorded what it loaded: replay from the "
                          f"beginning of the history instead")
    return outlines[begin].id, outlines[last].id


# --- reading the event history in order -----------------------------------------------------------------
Opener = Callable[[int], AsyncIterator[Message]]  # the history's messages from a sequence on, in order


RECENT = 10_000  # messages an EventReader keeps after handing them out, for the members of a split deployment


class EventReader:
    """One pass over the event history, keeping the last message of every subject (for bootstraps), and the
    last `recent` messages it handed out: the members of a split deployment read the same history, a little
    apart, and a member's batch behind the pass is served from those instead of a second pass."""

    def __init__(self, open_from: Opener, first_seq: int = 1, recent: int = RECENT):
        self._open = open_from
        self._first = first_seq
        self._messages: AsyncIterator[Message] | None = None
        self._peeked: Message | None = None
        self._ahead: deque[Message] = deque()
        self._recent: deque[Message] = deque()
        self._recent_size = recent
        self._recent_after = first_seq - 1  # `_recent` holds every message after this sequence up to `handed`
        self.cursor = 0  # the last sequence read
        self.handed = 0  # the last sequence `read` has gone past (handed out or skipped)
        self.shadow: dict[str, tuple[int, Payload]] = {}
        self.ended = False

    async def _next(self) -> Message | None:
        if self._peeked is not None:
            message, self._peeked = self._peeked, None
            return message
        if self._messages is None:
            self._messages = self._open(self._first)
        try:
            return await anext(self._messages)
        except StopAsyncIteration:
            self.ended = True
            return None

    async def _pull(self, upto: int) -> None:
        while self.cursor < upto:
            message = await self._next()
            if message is None:
                return
            if message[0] > upto:
                self._peeked = message
                return
            self.cursor = message[0]
            self.shadow[message[1]] = (message[0], message[2])
            self._ahead.append(message)

    async def read(self, after: int, upto: int) -> list[Message]:
        """The messages with after < seq <= upto. Usually forward of the last read; a split reconciler that
        took partitions over went back to their positions, and what this pass has gone past is read again
        with a second pass over that range."""
        taken: list[Message] = []
        if after < self.handed:
            taken = await self._reread(after, min(self.handed, upto))
        await self._pull(upto)
        ahead, recent = self._ahead, self._recent
        while ahead and ahead[0][0] <= upto:
            message = ahead.popleft()
            self.handed = message[0]
            if message[0] > after:
                taken.append(message)
            recent.append(message)
            if len(recent) > self._recent_size:
                self._recent_after = recent.popleft()[0]
        return taken

    async def _reread(self, after: int, upto: int) -> list[Message]:
        if after >= self._recent_after:  # still held: the messages after `after`, from the newest back
            back: list[Message] = []
            for message in reversed(self._recent):
                if message[0] <= after:
                    break
                if message[0] <= upto:
                    back.append(message)
            back.reverse()
            return back
        again: list[Message] = []
        messages = self._open(after + 1)
        try:
            async for message in messages:
                if message[0] > upto:
                    break
                again.append(message)
        finally:
            if hasattr(messages, "aclose"):
                await messages.aclose()
        return again

    async def state_at(self, seq: int) -> list[Message]:
        """The last message of every subject up to `seq`, in sequence order (KUBUS_STATE at that point)."""
        await self._pull(seq)
        shadow = self.shadow
        if self.cursor > seq:  # read past it already (KUBUS_STATE lagged behind the history): read again
            again = EventReader(self._open, self._first)
            await again._pull(seq)
            shadow = again.shadow
        return sorted(((s, subject, p) for subject, (s, p) in shadow.items() if s <= seq), key=lambda m: m[0])

    async def close(self) -> None:
        if self._messages is not None and hasattr(self._messages, "aclose"):
            await self._messages.aclose()


def memory_opener(messages: Sequence[Message]) -> Opener:
    """An opener over messages held in memory (in sequence order)."""

    async def open_from(seq: int) -> AsyncIterator[Message]:
        for message in messages:
            if message[0] >= seq:
                yield message

    return open_from


# --- ticks into bundles -------------------------------------------------------------------------------------
@dataclass
class Recorded:
    """A tick with its results decoded and its decisions (None: not available)."""

    tick: Tick
    decisions: list[RecordedDecision] | None


def results_of(tick: Tick) -> list[ActionResult]:
    return [msgspec.convert(r, ActionResult) for r in tick.results]


async def bundles(ticks: AsyncIterator[Recorded], events: EventReader) -> AsyncIterator[Bundle]:
    """The bundles of the ticks, their messages read from `events` (see the module's docstring)."""
    # per reconciler instance, the highest sequence a batch of it took: the members of a split deployment each
    # read the whole history, so each one's batches are given what it read, not what another member took first
    emitted: dict[str, int] = {}
    started = False
    async for recorded in ticks:
        tick = recorded.tick
        instance = tick.instance
        if tick.kind == START:
            top = tick.last_seq or 0
            messages = await events.state_at(top) if top else []
            state = tick.state or {}
            if instance not in emitted:
                positions = state.get("positions") or {}
                emitted[instance] = max((int(s) for s in positions.values()), default=0)
            if restarts_reading(tick):
                emitted[instance] = min(emitted[instance], (tick.first_seq or 1) - 1)
            started = True
            yield Bundle(tick, messages, [], recorded.decisions)
            continue
        if not started:
            raise SourceError(f"tick {tick.id}: the history must begin with a start tick")
        # a member whose start lies before the window: its batches from their own range on
        took = emitted.get(instance, (tick.first_seq or 1) - 1)
        messages = []
        if tick.last_seq is not None and tick.last_seq > took:
            messages = await events.read(max(took, (tick.first_seq or 1) - 1), tick.last_seq)
            emitted[instance] = tick.last_seq
        yield Bundle(tick, messages, results_of(tick), recorded.decisions)


def of_instance(bundles: Iterable[Bundle], instance: str, where: str) -> Iterator[Bundle]:
    """The bundles of one reconciler instance (`--instance` on a file holding several: a full export of a
    split deployment holds each member's events with its ticks); a SourceError when none is its."""
    others: set[str] = set()
    found = False
    for bundle in bundles:
        if bundle.tick.instance == instance:
            found = True
            yield bundle
        else:
            others.add(bundle.tick.instance)
    if not found:
        held = ", ".join(sorted(others)) or "none"
        raise SourceError(f"{where} holds no tick of reconciler instance {instance!r} (it holds: {held})")


async def from_list(items: Iterable[Recorded]) -> AsyncIterator[Recorded]:
    for item in items:
        yield item


# --- the store ---------------------------------------------------------------------------------------------
async def store_ticks(store: Store, first_id: int, last_id: int, with_decisions: bool = True,
                      instance: str | None = None) -> AsyncIterator[Recorded]:
    """The ticks first_id..last_id with their decisions and actions, read in chunks."""
    after = first_id - 1
    while after < last_id:
        async with store.engine.connect() as conn:
            chunk = await tick_rows.load(conn, instance, after_id=after, until_id=last_id, limit=TICK_CHUNK)
            ids = [i for t in chunk for i in t.decision_ids]
            decisions = await load_decisions(conn, ids) if with_decisions else {}
        if not chunk:
            return
        for tick in chunk:
            listed = None
            if with_decisions:
                missing = [i for i in tick.decision_ids if i not in decisions]
                if missing:
                    raise SourceError(f"tick {tick.id}: decisions {missing} are no longer in the store (retention?)")
                listed = [decisions[i] for i in tick.decision_ids]
            yield Recorded(tick, listed)
        assert chunk[-1].id is not None
        after = chunk[-1].id


async def load_decisions(conn: AsyncConnection, ids: Sequence[int]) -> dict[int, RecordedDecision]:
    found: dict[int, RecordedDecision] = {}
    d, o = decision_table, outbox_table
    for start in range(0, len(ids), 1000):
        part = list(ids[start:start + 1000])
        actions: dict[int, list[RecordedAction]] = {}
        # an acting reconciler's actions are its outbox rows; a shadow's, its would-do actions (docs/shadow.md)
        for table in (o, would_do_actions):
            rows = await conn.execute(sa.select(table.c.decision_id, table.c.key, table.c.payload)
                                      .where(table.c.decision_id.in_(part)).order_by(table.c.key))
            for decision_id, key, payload in rows:
                actions.setdefault(int(decision_id), []).append(RecordedAction(str(key), bytes(payload)))
        for r in (await conn.execute(sa.select(d).where(d.c.id.in_(part)))).mappings():
            found[int(r["id"])] = RecordedDecision(
                id=int(r["id"]), correlation_id=r["correlation_id"], controller_key=r["controller_key"],
                controller_kind=r["controller_kind"], partition=int(r["partition"]), stream_seq=int(r["stream_seq"]),
                trigger=r["trigger"], decided_at=r["decided_at"], summary=r["summary"],
                actions=actions.get(int(r["id"]), []))
    return found


async def store_window(store: Store, window: Window) -> tuple[int, int] | None:
    async with store.engine.connect() as conn:
        outlines = await tick_rows.outline(conn)
    if window.instance is not None:
        outlines = [o for o in outlines if o.instance == window.instance]
    if not outlines:
        return None
    return choose_ticks(outlines, window)


# --- JetStream ------------------------------------------------------------------------------------------------
def jetstream_opener(bus: Any, idle_timeout: float = 10.0) -> Opener:
    """Reads KUBUS_EVENTS of `bus` from a sequence on, up to the last message it held when opened."""
    from nats import errors as nats_errors
    from nats.js.api import ConsumerConfig, DeliverPolicy

    from messages import subjects

    async def open_from(seq: int) -> AsyncIterator[Message]:
        stream = bus.stream(subjects.EVENTS_STREAM)
        info = await bus.js.stream_info(stream)
        last = info.state.last_seq
        if not info.state.messages or last < seq:
            return
        sub = await bus.js.subscribe(
            f"{bus.prefix}.events.>", stream=stream, ordered_consumer=True, pending_msgs_limit=100_000,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=max(seq, 1)))
        current = seq - 1
        try:
            while True:
                try:
                    msg = await sub.next_msg(timeout=idle_timeout)
                except nats_errors.TimeoutError:
                    raise SourceError(f"{stream} delivered nothing after sequence {current} for {idle_timeout:g} s, "
                                      f"before its last one ({last})") from None
                current = msg.metadata.sequence.stream
                yield current, msg.subject, msg.data
                if current >= last:
                    return
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    return open_from


async def stream_first_seq(bus: Any) -> tuple[int, int]:
    """KUBUS_EVENTS's (first, last) sequence."""
    from messages import subjects

    info = await bus.js.stream_info(bus.stream(subjects.EVENTS_STREAM))
    return int(info.state.first_seq), int(info.state.last_seq)


async def live_bundles(store: Store, bus: Any, window: Window, with_decisions: bool = True
                       ) -> tuple[AsyncIterator[Bundle], Callable[[], Awaitable[None]]] | None:
    """The bundles of the store's input log in `window`, events from KUBUS_EVENTS; None: no tick in it.
    The second item closes the event reader."""
    chosen = await store_window(store, window)
    if chosen is None:
        return None
    first, _ = await stream_first_seq(bus)
    reader = EventReader(jetstream_opener(bus), first_seq=1)
    if first > 1:
        async def check() -> AsyncIterator[Recorded]:
            async for recorded in store_ticks(store, *chosen, with_decisions=with_decisions,
                                              instance=window.instance):
                tick = recorded.tick
                # a bootstrap needs the last event of every object, however old; a batch its own range
                needs = (1 if tick.last_seq else None) if tick.kind == START else tick.first_seq
                if needs is not None and needs < first:
                    raise SourceError(f"tick {tick.id} needs events from sequence {needs} on, but KUBUS_EVENTS now "
                                      f"begins at {first} (older events aged out): export histories before they do")
                yield recorded
        ticks = check()
    else:
        ticks = store_ticks(store, *chosen, with_decisions=with_decisions, instance=window.instance)
    return bundles(ticks, reader), reader.close

