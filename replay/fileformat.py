"""The exported history: line-delimited JSON, written by `kubus events export`, read by `kubus replay
--from-file` and `kubus events import` (docs/replay.md describes it for other tools).

Line 1 is a header, ``{"kubus_events": FORMAT, "schema": SCHEMA_VERSION, "exported_at": ..., "source":
{...}, "decisions": true|false}``; every other line is an object whose ``"line"`` says what it is:

- ``state``: ``{"line": "state", "seq", "subject", "event"}``, one event a starting reconciler's cache
  was bootstrapped with (the block comes right before its ``start`` tick, in sequence order);
- ``event``: ``{"line": "event", "seq", "subject", "event"}``, a KUBUS_EVENTS message as published
  (``"data_b64"`` instead of ``"event"`` when the message was not JSON), before the batch that took it;
- ``result``: ``{"line": "result", "result"}``, an ActionResult fed to the controllers by the next tick;
- ``tick``: ``{"line": "tick", "id", "instance", "kind", "at", "caught_up", "first_seq", "last_seq",
  "partitions", "result_keys", "decision_ids", "state", "lease_epoch"}``, a row of reconciler_ticks;
- ``decision``: ``{"line": "decision", "id", "tick", "correlation_id", "controller_key", ...,
  "summary", "actions": [{"key", "action"}]}``, what the tick decided (when the header says so);
- ``end``: ``{"line": "end", "counts": {"state", "event", "result", "tick", "decision"}}``, the last
  line, so a truncated file is told from a complete one.

A reader for the replay (`Reader(..., decode_objects=True)`) decodes a pod's object with its line, straight into
the model the cache folds it into (`_PodEvent`), instead of skipping it and decoding it again from the bytes:
see `Reader`.

The reader refuses, with the line number and the reason, a file that is truncated, out of order (event
sequences strictly increasing within a batch and per reconciler instance, going back only after a start
that re-reads the history; state sequences within their block; tick ids strictly increasing, decision ids
per instance; an event inside the range of the batch after it; a tick's results and decisions exactly the
lines around it) or written by a newer kubus (a newer format or event schema).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import IO, Any, Final

import msgspec

from kube import codec
from kube.core import Pod
from kube.times import format_micro_time, parse_time
from messages.actions import ActionResult
from messages.observed import ADDED, MODIFIED, RELISTED, SCHEMA_VERSION, ObservedEvent
from reconciler.core.stepping import Message
from replay.bundles import Bundle, RecordedAction, RecordedDecision, restarts_reading
from store.ticks import BATCH, START, Tick

FORMAT: Final = 1
READ_BUFFER: Final = 1 << 20
KINDS: Final = ("state", "event", "result", "tick", "decision")


class FormatError(ValueError):
    """A file `kubus replay` refuses; says on which line and why."""

    def __init__(self, line: int, reason: str):
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


# --- lines --------------------------------------------------------------------------------------------
class Header(msgspec.Struct, kw_only=True):
    kubus_events: int
    schema: int
    exported_at: str = ""
    source: dict[str, Any] = msgspec.field(default_factory=dict)
    decisions: bool = False


class _Line(msgspec.Struct, kw_only=True, tag_field="line"):
    pass


class EventLine(_Line, tag="event"):
    seq: int
    subject: str
    event: ObservedEvent


class StateLine(_Line, tag="state"):
    seq: int
    subject: str
    event: ObservedEvent


class _PodEvent(ObservedEvent, frozen=True, kw_only=True):
    """An observed event of a pod whose object was decoded with its line: `Cache.apply` takes an object already in
    its kind's model as it is. Only the replay's reader makes them (never exported or imported: their object is no
    longer the bytes ingest published)."""

    object: Pod  # type: ignore[assignment]  # (the object as the cache decodes it, not as published)


class _PodEventLine(EventLine):
    event: _PodEvent


class _PodStateLine(StateLine):
    event: _PodEvent


class RawEventLine(_Line, tag="event"):
    """An event line whose message is not an ObservedEvent this kubus decodes (kept as bytes: the live
    loop logged and skipped it, and so does the replay)."""

    seq: int
    subject: str
    event: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    data_b64: str | msgspec.UnsetType = msgspec.UNSET


class RawStateLine(_Line, tag="state"):
    seq: int
    subject: str
    event: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    data_b64: str | msgspec.UnsetType = msgspec.UNSET


class ResultLine(_Line, tag="result"):
    result: ActionResult


class TickLine(_Line, tag="tick"):
    id: int
    instance: str
    kind: str
    at: str
    caught_up: bool
    first_seq: int | None = None
    last_seq: int | None = None
    partitions: list[int] | None = None
    result_keys: list[str] = msgspec.field(default_factory=list)
    decision_ids: list[int] = msgspec.field(default_factory=list)
    state: dict[str, Any] | None = None
    lease_epoch: int | None = None


class ActionLine(msgspec.Struct, kw_only=True):
    key: str
    action: msgspec.Raw


class DecisionLine(_Line, tag="decision"):
    id: int
    tick: int
    correlation_id: str
    controller_key: str
    controller_kind: str
    partition: int
    stream_seq: int
    decided_at: str
    summary: dict[str, Any]
    trigger: str | None = None
    actions: list[ActionLine] = msgspec.field(default_factory=list)


class EndLine(_Line, tag="end"):
    counts: dict[str, int]


_MESSAGE_LINES = (EventLine, RawEventLine, StateLine, RawStateLine)
_EVENT_LINES = (EventLine, RawEventLine)
_DECODED_LINES = (EventLine, StateLine)
_fast = msgspec.json.Decoder(EventLine | StateLine | ResultLine | TickLine | DecisionLine | EndLine)
# the same lines, an event's object decoded as a pod (a line this refuses is decoded by _fast, and refused by it or not)
_pods = msgspec.json.Decoder(_PodEventLine | _PodStateLine | ResultLine | TickLine | DecisionLine | EndLine,
                             dec_hook=codec.dec_hook)
_POD_LINES = (_PodEventLine, _PodStateLine)
_EVENT_FAST = frozenset((EventLine, _PodEventLine))
_FOLDED_TYPES = frozenset((ADDED, MODIFIED, RELISTED))  # the events whose object the cache decodes (not deletions)
_raw_event = msgspec.json.Decoder(RawEventLine | RawStateLine)
_header = msgspec.json.Decoder(Header)
_encoder = msgspec.json.Encoder()


class _Kind(msgspec.Struct):
    line: str = ""


_kind = msgspec.json.Decoder(_Kind)


def format_at(moment: datetime) -> str:
    return format_micro_time(moment)


# --- writing ------------------------------------------------------------------------------------------
class Writer:
    """Writes bundles as lines; `close` writes the trailer (without it a reader calls the file truncated)."""

    def __init__(self, out: IO[bytes], source: dict[str, Any], *, decisions: bool = True,
                 exported_at: datetime | None = None):
        self.out = out
        self.decisions = decisions
        self.counts = dict.fromkeys(KINDS, 0)
        header = Header(kubus_events=FORMAT, schema=SCHEMA_VERSION,
                        exported_at=format_at(exported_at or datetime.now(UTC)), source=source,
                        decisions=decisions)
        out.write(_encoder.encode(header) + b"\n")

    def bundle(self, bundle: Bundle) -> None:
        tick = bundle.tick
        kind = "state" if tick.kind == START else "event"
        write = self.out.write
        for seq, subject, payload in bundle.messages:
            write(_message_line(kind, seq, subject, payload))
        self.counts[kind] += len(bundle.messages)
        for result in bundle.results:
            write(b'{"line":"result","result":' + _encoder.encode(result) + b"}\n")
        self.counts["result"] += len(bundle.results)
        assert tick.id is not None
        write(_encoder.encode(TickLine(
            id=tick.id, instance=tick.instance, kind=tick.kind, at=format_at(tick.at), caught_up=tick.caught_up,
            first_seq=tick.first_seq, last_seq=tick.last_seq, partitions=tick.partitions,
            result_keys=list(tick.result_keys), decision_ids=list(tick.decision_ids), state=tick.state,
            lease_epoch=tick.lease_epoch)) + b"\n")
        self.counts["tick"] += 1
        if self.decisions:
            for d in bundle.decisions or ():
                write(_encoder.encode(DecisionLine(
                    id=d.id, tick=tick.id, correlation_id=d.correlation_id, controller_key=d.controller_key,
                    controller_kind=d.controller_kind, partition=d.partition, stream_seq=d.stream_seq,
                    trigger=d.trigger, decided_at=format_at(d.decided_at), summary=d.summary,
                    actions=[ActionLine(key=a.key, action=msgspec.Raw(a.payload)) for a in d.actions])) + b"\n")
                self.counts["decision"] += 1

    def close(self) -> None:
        self.out.write(_encoder.encode(EndLine(counts=self.counts)) + b"\n")
        self.out.flush()


def _message_line(kind: str, seq: int, subject: str, payload: bytes | ObservedEvent) -> bytes:
    head = b'{"line":"%s","seq":%d,"subject":%s,' % (kind.encode(), seq, _encoder.encode(subject))
    data = _encoder.encode(payload) if isinstance(payload, ObservedEvent) else payload
    if _is_json_object(data):
        return head + b'"event":' + data + b"}\n"
    return head + b'"data_b64":"' + base64.b64encode(data) + b'"}\n'


def _is_json_object(data: bytes) -> bool:
    if not data.startswith(b"{") or b"\n" in data or b"\r" in data:
        return False
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError:
        return False
    return True


def write(out: IO[bytes], bundles: Iterable[Bundle], source: dict[str, Any], *,
          decisions: bool = True) -> dict[str, int]:
    writer = Writer(out, source, decisions=decisions)
    for bundle in bundles:
        writer.bundle(bundle)
    writer.close()
    return writer.counts


# --- reading ------------------------------------------------------------------------------------------
class Reader:
    """Reads a file into bundles, checking it as it goes (see the module's docstring).

    With `decode_objects` (a replay's reader: nothing but `Cache.apply` reads the events' objects), an event or state
    line that follows a pod's creation or update (most of them do: a history's events come in runs) is decoded with its
    object as a pod (`_PodEvent`), in the same pass, rather than skipped and decoded again by the cache. A line that is
    not one such after all is decoded as any other (a deletion's pod is kept: the cache may take it as the final
    state), so the lines read and the errors for a bad one are the same either way."""

    def __init__(self, lines: Iterable[bytes], *, decode_objects: bool = False):
        self._lines = iter(lines)
        self._decode_objects = decode_objects
        self.header: Header | None = None
        self.counts = dict.fromkeys(KINDS, 0)
        self.lines = 0
        # set when the lines read are a file's end: what the lines before them number (see Bundle.lines_before;
        # `lines` and the lines of FormatError then count from there)
        self.lines_before: Callable[[], int] | None = None
        # the lines read are the end of a file from a bundle's first line on (replay.parallel's second half): the end
        # line's counts are not checked here (replay.parallel checks them against both halves' lines)
        self.partial = False
        self.end_counts: dict[str, int] = {}  # what the end line says

    def read_header(self) -> Header:
        first = next(self._lines, None)
        self.lines = 1
        if first is None or not first.strip():
            raise FormatError(1, "empty file: no kubus events header")
        try:
            header = _header.decode(first)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise FormatError(1, f"not a kubus events header ({exc})") from None
        if header.kubus_events > FORMAT:
            raise FormatError(1, f"format version {header.kubus_events} is newer than this kubus reads ({FORMAT}): "
                                 f"upgrade kubus")
        if header.kubus_events < 1:
            raise FormatError(1, f"format version {header.kubus_events} is not one kubus wrote")
        if header.schema > SCHEMA_VERSION:
            raise FormatError(1, f"event schema version {header.schema} is newer than this kubus understands "
                                 f"({SCHEMA_VERSION}): upgrade kubus")
        self.header = header
        return header

    def __iter__(self) -> Iterator[Bundle]:
        header = self.header or self.read_header()
        messages: list[Message] = []
        message_kind = ""
        first_message_line = 0
        results: list[ActionResult] = []
        current: Bundle | None = None
        last_event = last_state = last_tick = 0  # last_event: within the block of event lines
        # per reconciler instance: the highest sequence its batches took, its last decision id (the members of a
        # split deployment commit at once: ids are drawn in one order and committed in another)
        took: dict[str, int] = {}
        last_decision: dict[str, int] = {}
        counts = self.counts
        n = self.lines
        ended = False
        decode = _fast.decode
        decode_pod = _pods.decode if self._decode_objects else decode
        pod_next = False  # the last event or state line was a pod's creation or update: so is this one, likely
        append = messages.append
        for raw in self._lines:
            n += 1
            self.lines = n
            if ended:
                raise FormatError(n, "lines after the end line")
            if pod_next:
                try:
                    line = decode_pod(raw)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    line = self._decode(raw, n)
                if type(line) in _POD_LINES and line.event.kind != "Pod":
                    line = self._decode(raw, n)  # (its object is not a pod's)
            else:  # (self._decode, inlined: the other lines)
                try:
                    line = decode(raw)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    line = self._slow(raw, n, exc)
            cls = type(line)
            if cls in _EVENT_FAST and message_kind != "state":
                # the fast path of the branch below for the most common line (most of a file's lines are
                # events): the same checks, in the same order
                seq = line.seq
                if not messages:
                    first_message_line = n
                elif seq <= last_event:
                    raise FormatError(n, f"event sequence {seq} after {last_event}: out of order")
                last_event = seq
                message_kind = "event"
                event = line.event
                if event.v > SCHEMA_VERSION:
                    raise FormatError(n, f"event has schema version {event.v}, newer than this kubus "
                                         f"understands ({SCHEMA_VERSION}): upgrade kubus")
                append((seq, line.subject, event))
                pod_next = event.kind == "Pod" and event.type in _FOLDED_TYPES
                counts["event"] += 1
                if current is not None:
                    yield _finished(current, n)
                    current = None
            elif cls is ResultLine:
                result = line.result
                if result.v > SCHEMA_VERSION:
                    raise FormatError(n, f"result has schema version {result.v}, newer than this kubus "
                                         f"understands ({SCHEMA_VERSION}): upgrade kubus")
                results.append(result)
                counts["result"] += 1
                if current is not None:
                    yield _finished(current, n)
                    current = None
            elif isinstance(line, _MESSAGE_LINES):
                kind = "event" if isinstance(line, _EVENT_LINES) else "state"
                seq = line.seq
                if kind == "event":
                    if messages and message_kind == "event" and seq <= last_event:
                        raise FormatError(n, f"event sequence {seq} after {last_event}: out of order")
                    last_event = seq
                else:
                    if message_kind == "state" and seq <= last_state:
                        raise FormatError(n, f"state sequence {seq} after {last_state}: out of order")
                    last_state = seq
                if message_kind and kind != message_kind:
                    raise FormatError(n, f"{kind} line among {message_kind} lines: a start tick takes state lines, "
                                         f"a batch tick event lines")
                if not messages:
                    first_message_line = n
                message_kind = kind
                payload: bytes | ObservedEvent
                if isinstance(line, _DECODED_LINES):
                    if line.event.v > SCHEMA_VERSION:
                        raise FormatError(n, f"event has schema version {line.event.v}, newer than this kubus "
                                             f"understands ({SCHEMA_VERSION}): upgrade kubus")
                    payload = line.event
                    pod_next = payload.kind == "Pod" and payload.type in _FOLDED_TYPES
                else:
                    payload = _raw_payload(line, n)
                    pod_next = False
                append((seq, line.subject, payload))
                counts[kind] += 1
                if current is not None:
                    yield _finished(current, n)
                    current = None
            elif isinstance(line, TickLine):
                if current is not None:
                    yield _finished(current, n)
                    current = None
                if line.id <= last_tick:
                    raise FormatError(n, f"tick {line.id} after tick {last_tick}: out of order")
                last_tick = line.id
                tick = _tick(line, n)
                self._check_tick(tick, messages, message_kind, first_message_line, results, n)
                _check_read_order(tick, messages, first_message_line, took)
                current = Bundle(tick, messages, results, [] if header.decisions else None, n, self.lines_before)
                messages, message_kind, results = [], "", []
                append = messages.append
                counts["tick"] += 1
                if not tick.decision_ids and current.decisions is not None:
                    yield current
                    current = None
            elif isinstance(line, DecisionLine):
                if current is None or current.decisions is None or line.tick != current.tick.id:
                    raise FormatError(n, f"decision {line.id} of tick {line.tick} is not right after that tick")
                instance = current.tick.instance
                before = last_decision.get(instance, 0)
                if line.id <= before:
                    raise FormatError(n, f"decision {line.id} after decision {before} of {instance}: out of order")
                last_decision[instance] = line.id
                expected = current.tick.decision_ids
                index = len(current.decisions)
                if index >= len(expected) or expected[index] != line.id:
                    raise FormatError(n, f"decision {line.id} is not the next one tick {line.tick} committed "
                                         f"(it names {expected})")
                current.decisions.append(_decision(line, n))
                counts["decision"] += 1
                if len(current.decisions) == len(expected):
                    yield current
                    current = None
            elif isinstance(line, EndLine):
                if messages or results:
                    raise FormatError(n, f"the end line follows {len(messages) + len(results)} lines no tick took")
                if current is not None:
                    yield _finished(current, n)
                    current = None
                self.end_counts = line.counts
                if not self.partial:
                    self._check_end(line, n)
                ended = True
        if not ended:
            raise FormatError(n + 1, "the file ends without its end line: truncated")

    def _decode(self, raw: bytes, n: int) -> Any:
        """A line as the reader decodes it without `decode_objects`."""
        try:
            return _fast.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return self._slow(raw, n, exc)

    def _slow(self, raw: bytes, n: int, exc: Exception) -> Any:
        """A line the typed decoder refused: which kind it is, and if it is an event, keep its bytes."""
        if not raw.strip():
            raise FormatError(n, "empty line")
        try:
            kind = _kind.decode(raw).line
        except msgspec.DecodeError:
            raise FormatError(n, f"not a JSON line (truncated?): {exc}") from None
        except msgspec.ValidationError as error:
            raise FormatError(n, f"not a kubus events line: {error}") from None
        if kind in ("event", "state"):
            try:
                return _raw_event.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError) as error:
                raise FormatError(n, f"malformed {kind} line: {error}") from None
        if kind not in (*KINDS, "end"):
            raise FormatError(n, f"unknown line kind {kind!r}")
        raise FormatError(n, f"malformed {kind} line: {exc}")

    def _check_tick(self, tick: Tick, messages: list[Message], kind: str, first_line: int,
                    results: list[ActionResult], n: int) -> None:
        if tick.kind == START:
            if kind == "event":
                raise FormatError(first_line, f"event lines before start tick {tick.id}: events go before the batch "
                                              f"tick that takes them")
            top = tick.last_seq or 0
            if messages and messages[-1][0] > top:
                raise FormatError(n, f"start tick {tick.id} bootstrapped up to sequence {top}, but its state lines "
                                     f"reach {messages[-1][0]}")
        elif tick.kind == BATCH:
            if kind == "state":
                raise FormatError(first_line, f"state lines before batch tick {tick.id}: they belong before a start "
                                              f"tick")
            if messages:
                lo, hi = tick.first_seq, tick.last_seq
                if lo is None or hi is None or messages[0][0] < lo or messages[-1][0] > hi:
                    raise FormatError(n, f"tick {tick.id} took sequences {lo}-{hi}, but the event lines before it "
                                         f"(from line {first_line}) hold {messages[0][0]}-{messages[-1][0]}")
        else:
            raise FormatError(n, f"tick {tick.id} has kind {tick.kind!r}, neither 'start' nor 'batch'")
        keys = [r.key for r in results]
        if keys != tick.result_keys:
            raise FormatError(n, f"tick {tick.id} was fed results {tick.result_keys}, but the result lines before "
                                 f"it hold {keys}")

    def _check_end(self, line: EndLine, n: int) -> None:
        for kind in KINDS:
            if line.counts.get(kind, 0) != self.counts[kind]:
                raise FormatError(n, f"the end line counts {line.counts.get(kind, 0)} {kind} lines, the file "
                                     f"holds {self.counts[kind]}")


def _check_read_order(tick: Tick, messages: list[Message], first_line: int, took: dict[str, int]) -> None:
    """A batch's event lines come after what the earlier batches of its instance took (each member of a split
    deployment reads the whole history, so the file holds each one's events); a start that re-reads the history
    (`restarts_reading`) goes back to its first_seq, as `replay.source.bundles` does. Moves `took` on."""
    instance = tick.instance
    if tick.kind == START:
        took.setdefault(instance, 0)
        if restarts_reading(tick):
            took[instance] = min(took[instance], (tick.first_seq or 1) - 1)
        return
    before = took.get(instance)
    if before is not None and messages and messages[0][0] <= before:
        raise FormatError(first_line, f"event sequence {messages[0][0]} after {before}: out of order (the batches "
                                      f"of {instance} before tick {tick.id} took up to {before})")
    if tick.last_seq is not None:
        took[instance] = max(before or 0, tick.last_seq)


def _finished(bundle: Bundle, n: int) -> Bundle:
    """The bundle, once the line after it (`n`) showed no more of its decisions follow."""
    if bundle.decisions is not None and len(bundle.decisions) != len(bundle.tick.decision_ids):
        raise FormatError(n, f"tick {bundle.tick.id} committed decisions {bundle.tick.decision_ids}, the file holds "
                             f"{len(bundle.decisions)} of them before this line")
    return bundle


def _raw_payload(line: RawEventLine | RawStateLine, n: int) -> bytes:
    if isinstance(line.event, msgspec.Raw):
        return bytes(line.event)
    if isinstance(line.data_b64, str):
        try:
            return base64.b64decode(line.data_b64, validate=True)
        except ValueError:
            raise FormatError(n, "data_b64 is not base64") from None
    raise FormatError(n, "an event line needs \"event\" or \"data_b64\"")


def _tick(line: TickLine, n: int) -> Tick:
    try:
        at = parse_time(line.at)
    except ValueError:
        raise FormatError(n, f"tick {line.id}: bad time {line.at!r}") from None
    return Tick(id=line.id, instance=line.instance, kind=line.kind, at=at, caught_up=line.caught_up,
                first_seq=line.first_seq, last_seq=line.last_seq, partitions=line.partitions,
                result_keys=list(line.result_keys), decision_ids=list(line.decision_ids), state=line.state,
                lease_epoch=line.lease_epoch)


def _decision(line: DecisionLine, n: int) -> RecordedDecision:
    try:
        decided_at = parse_time(line.decided_at)
    except ValueError:
        raise FormatError(n, f"decision {line.id}: bad time {line.decided_at!r}") from None
    return RecordedDecision(
        id=line.id, correlation_id=line.correlation_id, controller_key=line.controller_key,
        controller_kind=line.controller_kind, partition=line.partition, stream_seq=line.stream_seq,
        trigger=line.trigger, decided_at=decided_at, summary=line.summary,
        actions=[RecordedAction(a.key, bytes(a.action)) for a in line.actions])


def read_file(path: str, *, decode_objects: bool = False) -> tuple[Header, Iterator[Bundle]]:
    """The header (checked at once) and the bundles (checked as they are read); `decode_objects`: see Reader."""
    # a large buffer: lines are read one by one, and the default (8 KiB) refills every few pod events
    handle = open(path, "rb", buffering=READ_BUFFER)  # noqa: SIM115 - closed when the iterator ends
    # the file itself: a generator between it and the reader costs a resume a line
    reader = Reader(handle, decode_objects=decode_objects)
    try:
        header = reader.read_header()
    except BaseException:
        handle.close()
        raise

    def bundles() -> Iterator[Bundle]:
        with handle:
            yield from reader

    return header, bundles()
