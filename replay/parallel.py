"""`kubus replay --from-file FILE --diff` on two cores: the history cut in two at a reconciler's restart.

A replay is sequential: every batch depends on the cache and the controllers' memory the batches before it
left. A restart is the one place where nothing is carried over but what the store holds: the new process
bootstraps a fresh cache from KUBUS_STATE (the state lines before its start tick) and fresh controllers from
the positions, expectations and failed-pod backoff it loaded, which its start tick records. Under `--diff`
the replay checks at every restart that its copy of the store holds exactly what the process recorded it
loaded (`Engine.check_start`); once that holds, replaying on from that start with a fresh engine whose copy of
the store is the recorded one (what `kubus replay --since-seq` does when it starts at a restart) decides
exactly what the sequential replay decides from there. So the two halves can be replayed at the same time:

- this process reads and checks the file up to the cut's start tick, replays the ticks before it, and at that
  start tick only compares the store (it skips the start's state lines, which only a bootstrap reads: the
  second half reads, checks and bootstraps from them);
- a forked process reads and checks the file from the cut (its first state line) to the end, replays from that
  start on, and sends back its statistics, its first divergence or refused line, the reconciler instances it
  saw and its count of lines by kind.

The second half's checks of a line that depend on earlier lines depend on the earlier lines of the same
reconciler instance (the order of its events, its decision ids) or on the end line's counts, which this
process checks against both halves' counts. An instance's name is its host's and pid's unless one is given
(`--instance`, KUBUS_INSTANCE), so a restart may reuse an earlier name: the file is not cut at a start whose
name a line before it quotes, and should the second half hold an instance the first holds too (a later start
reusing a name), the file is replayed again in one process. The answer is the sequential replay's:
the first divergence or refused line in file order, the statistics summed. The cut is the restart nearest the
middle of the file (by bytes) whose start tick recorded what it loaded, decided for every partition, is
preceded only by its own state lines and names a new instance. A file without such a restart, a small one, a
stdin, a what-if, a window or an instance of a split deployment replays in one process (`cut` says None); so
does the whole file again should the second half fail to start at the cut.
"""

from __future__ import annotations

import functools
import io
import itertools
import mmap
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Final

import msgspec

from replay.diff import Divergence
from replay.engine import Engine, ReplayError, Stats, tuned_gc
from replay.fileformat import KINDS, READ_BUFFER, FormatError, Reader, TickLine, read_file
from store.ticks import START

MIN_BYTES: Final = 16 << 20  # a smaller file is replayed in one process (a fork costs more than it saves)
_TICK_HEAD: Final = b'{"line":"tick"'
_STATE_HEAD: Final = b'{"line":"state"'
_START_KIND: Final = b'"kind":"start"'
_BUNDLE_ENDS: Final = (_TICK_HEAD, b'{"line":"decision"')  # a bundle's last line: its tick's, or its last decision's
_tick_line = msgspec.json.Decoder(TickLine)


@dataclass(frozen=True)
class Cut:
    """Where the second process takes over: the first line of a start bundle (its first state line)."""

    offset: int  # in bytes
    tick: int  # the start tick's id
    tick_offset: int  # of the start tick's line: its state lines are the ones from `offset` up to it
    states: int  # how many state lines it has


@dataclass
class Outcome:
    stats: Stats
    divergence: Divergence | None
    processes: int  # 2: replayed in two halves; 1: in one process (no cut, or the second half refused a line)
    cpu: tuple[float, ...] = ()  # CPU seconds of each process (this one's first): the longest is the critical path


@dataclass
class _Half:
    """What the second process sends back."""

    stats: Stats
    divergence: Divergence | None = None
    cpu: float = 0.0
    error: str | None = None  # "format" (a refused line), "replay" (ReplayError), "cut" (not at a start), "crash"
    message: str = ""
    line: int = 0  # of a refused line, or the line of the tick that diverged (in the file)
    reason: str = ""
    instances: set[str] = field(default_factory=set)  # of its ticks
    counts: dict[str, int] = field(default_factory=dict)  # its lines after the cut's start tick, by kind
    end_counts: dict[str, int] = field(default_factory=dict)  # what the end line says
    end_line: int = 0  # counted from the cut (the lines before it are counted only to show a refused line)


def cut(path: str, min_bytes: int = MIN_BYTES) -> Cut | None:
    """The restart nearest the middle of the file to cut the replay at, or None (see the module's docstring)."""
    size = os.path.getsize(path)
    if size < max(min_bytes, 1):
        return None
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        middle = size // 2
        after = _start_after(data, middle, size)
        # one before the middle only if it may be nearer (the search reads the file backwards from the middle)
        floor = max(data.find(b"\n"), 0 if after is None else middle - abs(after.offset - middle))
        found = [c for c in (after, _start_before(data, middle, floor)) if c is not None]
    return min(found, key=lambda c: abs(c.offset - middle), default=None)


def _start_after(data: mmap.mmap, pos: int, size: int) -> Cut | None:
    while (hit := data.find(_START_KIND, pos)) >= 0:
        candidate, pos = _candidate(data, hit, size)
        if candidate is not None:
            return candidate
    return None


def _start_before(data: mmap.mmap, pos: int, floor: int) -> Cut | None:
    while (hit := data.rfind(_START_KIND, floor, pos)) >= 0:
        candidate, _ = _candidate(data, hit, len(data))
        if candidate is not None:
            return candidate
        pos = hit
    return None


def _candidate(data: mmap.mmap, hit: int, size: int) -> tuple[Cut | None, int]:
    """The cut at the tick line holding `hit`, if it is a start one can be cut at; and where its line ends."""
    begin = data.rfind(b"\n", 0, hit) + 1
    end = data.find(b"\n", hit)
    end = size if end < 0 else end
    if begin == 0 or data[begin:begin + len(_TICK_HEAD)] != _TICK_HEAD:
        return None, end
    try:
        tick = _tick_line.decode(data[begin:end])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None, end
    if tick.kind != START or tick.state is None or tick.partitions is not None:
        return None, end
    first, states = begin, 0  # back over its own state lines
    while first > 0:
        previous = data.rfind(b"\n", 0, first - 1) + 1
        if previous == 0 or data[previous:previous + len(_STATE_HEAD)] != _STATE_HEAD:
            break
        first, states = previous, states + 1
    before = data.rfind(b"\n", 0, first - 1) + 1
    if before == 0 or data[first - 2:first - 1] != b"}" or not data[before:first].startswith(_BUNDLE_ENDS):
        # the first bundle (nothing before it to replay), or the line before is not the whole last line of a
        # bundle: the first half, which skips the state lines, would refuse the file otherwise than the one-process
        # replay does
        return None, end
    if _named_before(data, tick.instance, first):
        return None, end  # its instance has ticks before it too (a name given, not drawn): see replay_diff
    return Cut(first, tick.id, begin, states), end


def _named_before(data: mmap.mmap, instance: str, end: int) -> bool:
    """Whether a line before `end` names the instance (a tick of it, or anything quoting its name)."""
    return data.rfind(b'"instance":' + msgspec.json.encode(instance), 0, end) >= 0


def _lines_before(path: str, offset: int) -> int:
    """The lines before `offset`. Not counted before the fork: both halves would wait for it (a read of the first
    half, ~0.06 - 0.2 s of ~2.5 s for 250 MB on two cores), and a line number is shown only when a line is
    refused, a tick diverges or the replay logs about a tick, so the second half counts them only then."""
    count = 0
    chunk = bytearray(READ_BUFFER * 8)
    with open(path, "rb", buffering=0) as handle:
        left = offset
        while left > 0:
            view = memoryview(chunk)[:min(left, len(chunk))]
            got = handle.readinto(view)
            if not got:
                break
            count += chunk.count(b"\n", 0, got)
            left -= got
    return count


def replay_second_half(path: str, at: Cut, keep: list[Engine] | None = None) -> _Half:
    """The replay from `at` to the end of the file, with a fresh engine (see the module's docstring); the engine
    is appended to `keep` when given, so that the caller decides when its objects are freed."""
    engine = Engine(compare=True)
    if keep is not None:
        keep.append(engine)
    half = _Half(engine.stats)
    before = functools.cache(functools.partial(_lines_before, path, at.offset))
    try:
        with open(path, "rb", buffering=READ_BUFFER) as handle:
            reader = Reader(handle, decode_objects=True)
            reader.read_header()
            handle.seek(at.offset)
            reader.lines, reader.lines_before = 0, before  # its lines counted from the cut
            reader.partial = True
            at_cut: dict[str, int] = {}
            with tuned_gc():
                for bundle in reader:
                    if not at_cut:
                        if bundle.tick.kind != START or bundle.tick.id != at.tick:
                            half.error, half.message = "cut", f"{bundle.where} is not start tick {at.tick}"
                            return half
                        at_cut = dict(reader.counts)  # the lines the first half reads too
                    half.instances.add(bundle.tick.instance)
                    engine.feed(bundle)
                    if engine.divergence is not None:
                        half.divergence, half.line = engine.divergence, engine.divergence.line
                        return half
            half.counts = {kind: reader.counts[kind] - at_cut.get(kind, 0) for kind in reader.counts}
            half.end_counts, half.end_line = reader.end_counts, reader.lines
    except FormatError as exc:
        line = exc.line + before()  # counted from the cut
        half.error, half.line, half.reason = "format", line, exc.reason
        half.message = str(FormatError(line, exc.reason))
        if not half.instances:
            half.error = "cut"  # before the cut's start tick: the first half reads those lines (and refuses them)
    except ReplayError as exc:
        half.error, half.message = "replay", str(exc)
    return half


def _child(path: str, at: Cut, conn: Any) -> None:
    cpu = time.process_time()
    kept: list[Engine] = []
    try:
        half = replay_second_half(path, at, keep=kept)
        half.cpu = time.process_time() - cpu
    except BaseException as exc:  # reported to the parent, which replays alone
        half = _Half(Stats(), error="crash", message=f"{type(exc).__name__}: {exc}")
    conn.send(half)
    conn.close()
    # The engine still holds every object of the cluster: freeing them one by one costs about 3% of this
    # process's replay, and the parent waits for this process to end (join). Nothing is left to do here, so it
    # ends at once, as multiprocessing's own fork child does once its target returns (os._exit), its output
    # flushed first.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def replay_diff(path: str, *, processes: int = 2, min_bytes: int = MIN_BYTES) -> Outcome:
    """`--diff` over the file at `path`, in two processes when it can be cut (else in one). Raises FormatError
    and ReplayError as the sequential replay does, for the first refused line or tick in file order."""
    at = cut(path, min_bytes) if processes > 1 and "fork" in multiprocessing.get_all_start_methods() else None
    if at is None:
        return replay_alone(path)
    started, cpu = time.perf_counter(), time.process_time()
    context = multiprocessing.get_context("fork")
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(path, at, sending), name="kubus-replay-half", daemon=True)
    child.start()
    sending.close()
    half: _Half | None = None
    try:
        first = replay_first_half(path, at)  # raises the refused lines up to the cut's start tick
        if first.divergence is None and not first.reached:
            return replay_alone(path)  # (not a start tick this process can cut at: never, cut() decoded it)
        half = receiving.recv()
    finally:
        receiving.close()
        if half is None:  # this half ended the replay: the other's answer does not matter
            child.terminate()
        child.join()
    cpus = (time.process_time() - cpu, half.cpu)
    if first.divergence is not None and not (first.reached and half.error == "cut"):
        # in the first half, or at the cut itself (unless the second half refused a line of the cut's start: the
        # one-process replay refuses it before it compares the store there)
        return Outcome(first.stats, first.divergence, 2, cpus)
    if half.error in ("cut", "crash") or half.instances & first.instances:
        # the second half could not be replayed alone, or its checks would miss the first half's lines of an
        # instance it also holds (a reconciler's name is its host's and pid's unless --instance or KUBUS_INSTANCE
        # gives one: cut() does not cut at a start whose name came before, a later start may reuse one): replay
        # the file in one process
        return replay_alone(path)
    if half.error == "format":
        raise FormatError(half.line, half.reason)
    if half.error == "replay":
        raise ReplayError(half.message)
    if half.divergence is None:
        _check_end(first.counts, half, functools.partial(_lines_before, path, at.offset))
    total = _sum(first.stats, half.stats)
    total.seconds = time.perf_counter() - started
    return Outcome(total, half.divergence, 2, cpus)


def _check_end(first: dict[str, int], half: _Half, lines_before: Callable[[], int]) -> None:
    """The end line's counts against the lines of both halves (Reader._check_end, over the whole file)."""
    for kind in KINDS:
        holds = first.get(kind, 0) + half.counts.get(kind, 0)
        if half.end_counts.get(kind, 0) != holds:
            raise FormatError(half.end_line + lines_before(), f"the end line counts {half.end_counts.get(kind, 0)} "
                                                              f"{kind} lines, the file holds {holds}")


@dataclass
class _First:
    stats: Stats
    divergence: Divergence | None
    reached: bool = False  # the cut's start tick
    counts: dict[str, int] = field(default_factory=dict)  # the lines read up to the cut's start tick, by kind
    instances: set[str] = field(default_factory=set)  # of the ticks before it


def replay_first_half(path: str, at: Cut) -> _First:
    """Reads and checks the file up to the cut's start tick, replays it up to there and checks the store there.
    The lines after it are the second half's to check, and so are the start's state lines, which it skips (only
    a bootstrap reads them; refused there, the file is replayed in one process): every check there that depends
    on an earlier line depends on the lines of the same reconciler instance (which the second half holds alone,
    else the file is replayed in one process) or on the end line's counts (`_check_end`)."""
    engine = Engine(compare=True)
    first = _First(engine.stats, None)
    skipped_after: list[int] = []  # the lines read when the state lines were skipped (the reader numbers on)

    def from_the_tick(rest: io.BufferedReader) -> Iterator[bytes]:
        skipped_after.append(reader.lines)
        rest.seek(at.tick_offset)
        yield from rest

    with open(path, "rb", buffering=0) as raw, open(path, "rb") as rest:
        up_to_the_cut = io.BufferedReader(_Until(raw, at.offset), READ_BUFFER)
        reader = Reader(itertools.chain(up_to_the_cut, from_the_tick(rest)), decode_objects=True)
        reader.read_header()
        try:
            with tuned_gc():
                for bundle in reader:
                    if bundle.tick.id == at.tick and bundle.tick.kind == START:
                        first.reached, first.counts = True, dict(reader.counts)
                        first.counts["state"] += at.states
                        bundle.line += at.states
                        engine.check_start(bundle)
                        break
                    first.instances.add(bundle.tick.instance)
                    engine.feed(bundle)
                    if engine.divergence is not None:
                        break
        except FormatError as exc:
            if skipped_after and exc.line > skipped_after[0]:  # a line after the state lines: its line in the file
                raise FormatError(exc.line + at.states, exc.reason) from None
            raise
    first.divergence = engine.divergence
    return first


class _Until(io.RawIOBase):
    """A file's bytes up to `end` (its lines read in C, as the file's own, by a BufferedReader around it)."""

    def __init__(self, raw: io.FileIO, end: int):
        self._raw, self._left = raw, end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with memoryview(buffer) as view:
            got = self._raw.readinto(view[:self._left]) or 0
        self._left -= got
        return got


def replay_alone(path: str) -> Outcome:
    started, cpu = time.perf_counter(), time.process_time()
    _, bundles = read_file(path, decode_objects=True)
    engine = Engine(compare=True)
    engine.run(bundles)
    engine.stats.seconds = time.perf_counter() - started
    return Outcome(engine.stats, engine.divergence, 1, (time.process_time() - cpu,))


def _sum(a: Stats, b: Stats) -> Stats:
    return Stats(**{f.name: getattr(a, f.name) + getattr(b, f.name) for f in fields(Stats)})
