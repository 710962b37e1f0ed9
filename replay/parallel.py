"""`kubus replay --from-file FILE --diff` on two cores: the history cut in two at a reconciler's restart.

A replay is sequential: every batch depends on the cache and the controllers' memory the batches before it
left. A restart is the one place where nothing is carried over but what the store holds: the new process
bootstraps a fresh cache from KUBUS_STATE (the state lines before its start tick) and fresh controllers from
the positions, expectations and failed-pod backoff it loaded, which its start tick records. Under `--diff`
the replay checks at every restart that its copy of the store holds exactly what the process recorded it
loaded (`Engine.check_start`); once that holds, replaying on from that start with a fresh engine whose copy of
the store is the recorded one (what `kubus replay --since-seq` does when it starts at a restart) decides
exactly what the sequential replay decides from there. So the two halves can be replayed at the same time:

- this process reads and checks the whole file (every line, as the sequential replay: the order, the counts
  of the end line), replays the ticks before the cut, and at the cut's start tick only compares the store;
- a forked process reads from the cut (its first state line) to the end, replays from that start on, and
  sends back its statistics and its first divergence or error.

The answer is the sequential replay's: the first divergence or refused line in file order, the statistics
summed. The cut is the restart nearest the middle of the file (by bytes) whose start tick recorded what it
loaded, decided for every partition and is preceded only by its own state lines. A file without such a
restart, a small one, a stdin, a what-if, a window or an instance of a split deployment replays in one process
(`cut` says None). Should the second process refuse a line the first does not (it reads from the cut with no
memory of what came before, so its checks are a subset of the first's), the whole file is replayed again in
one process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
import multiprocessing
import os
import time
from dataclasses import dataclass, fields
from typing import Any, Final

import msgspec

from replay.diff import Divergence
from replay.engine import Engine, ReplayError, Stats, tuned_gc
from replay.fileformat import READ_BUFFER, FormatError, Reader, TickLine, read_file
from store.ticks import START

MIN_BYTES: Final = 16 << 20  # a smaller file is replayed in one process (a fork costs more than it saves)
_TICK_HEAD: Final = b'{"line":"tick"'
_STATE_HEAD: Final = b'{"line":"state"'
_START_KIND: Final = b'"kind":"start"'
_tick_line = msgspec.json.Decoder(TickLine)


@dataclass(frozen=True)
class Cut:
    """Where the second process takes over: the first line of a start bundle (its first state line)."""

    offset: int  # in bytes
    tick: int  # the start tick's id
    lines: int = 0  # the lines before it (counted by this process before it forks: the other one has more to do)


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
    line: int = 0  # of a refused line, or the line of the tick that diverged
    reason: str = ""


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
    best = min(found, key=lambda c: abs(c.offset - middle), default=None)
    return None if best is None else dataclasses.replace(best, lines=_lines_before(path, best.offset))


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
    first = begin  # back over its own state lines
    while first > 0:
        previous = data.rfind(b"\n", 0, first - 1) + 1
        if previous == 0 or data[previous:previous + len(_STATE_HEAD)] != _STATE_HEAD:
            break
        first = previous
    if data.rfind(b"\n", 0, first - 1) < 0 or data[first - 2:first - 1] != b"}":
        return None, end  # the first bundle (nothing before it to replay), or the line before is not a whole one
    return Cut(first, tick.id), end


def _lines_before(path: str, offset: int) -> int:
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


def replay_second_half(path: str, at: Cut) -> _Half:
    """The replay from `at` to the end of the file, with a fresh engine (see the module's docstring)."""
    engine = Engine(compare=True)
    try:
        with open(path, "rb", buffering=READ_BUFFER) as handle:
            reader = Reader(handle)
            reader.read_header()
            handle.seek(at.offset)
            reader.lines = at.lines
            reader.partial = True
            with tuned_gc():
                for bundle in reader:
                    if engine.stats.ticks == 0 and (bundle.tick.kind != START or bundle.tick.id != at.tick):
                        return _Half(engine.stats, error="cut", message=f"{bundle.where} is not start tick {at.tick}")
                    engine.feed(bundle)
                    if engine.divergence is not None:
                        return _Half(engine.stats, engine.divergence, line=engine.divergence.line)
    except FormatError as exc:
        return _Half(engine.stats, error="format", message=str(exc), line=exc.line, reason=exc.reason)
    except ReplayError as exc:
        return _Half(engine.stats, error="replay", message=str(exc))
    return _Half(engine.stats)


def _child(path: str, at: Cut, conn: Any) -> None:
    cpu = time.process_time()
    try:
        half = replay_second_half(path, at)
        half.cpu = time.process_time() - cpu
    except BaseException as exc:  # reported to the parent, which replays alone
        half = _Half(Stats(), error="crash", message=f"{type(exc).__name__}: {exc}")
    conn.send(half)
    conn.close()


def replay_diff(path: str, *, processes: int = 2, min_bytes: int = MIN_BYTES) -> Outcome:
    """`--diff` over the file at `path`, in two processes when it can be cut (else in one). Raises FormatError
    and ReplayError as the sequential replay does, for the first refused line or tick in file order."""
    at = cut(path, min_bytes) if processes > 1 else None
    if at is None:
        return _alone(path)
    started, cpu = time.perf_counter(), time.process_time()
    context = multiprocessing.get_context("fork")
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(path, at, sending), name="kubus-replay-half", daemon=True)
    child.start()
    sending.close()
    half: _Half | None = None
    try:
        first, error = _first_half(path, at)
        if error is not None and error.line < at_line(first):
            raise error
        half = receiving.recv()
    finally:
        receiving.close()
        if half is None:  # this half failed: the other's answer does not matter
            child.terminate()
        child.join()
    stats = first.stats
    cpus = (time.process_time() - cpu, half.cpu)
    if first.divergence is not None:  # in the first half, or at the cut itself
        return Outcome(stats, first.divergence, 2, cpus)
    if half.error in ("cut", "crash") or (half.error == "format" and error is None):
        return _alone(path)  # the second half refused what the whole file's reading did not: replay it alone
    if error is not None and not (half.divergence is not None and half.line < error.line):
        raise error
    if half.error == "replay":
        raise ReplayError(half.message)
    total = _sum(stats, half.stats)
    total.seconds = time.perf_counter() - started
    return Outcome(total, half.divergence, 2, cpus)


@dataclass
class _First:
    stats: Stats
    divergence: Divergence | None
    cut_line: int  # the line number of the cut's start tick (0: not reached)


def at_line(first: _First) -> int:
    return first.cut_line or 1 << 62


def _first_half(path: str, at: Cut) -> tuple[_First, FormatError | None]:
    """Reads and checks the whole file, replays it up to the cut and checks the store there."""
    engine = Engine(compare=True)
    cut_line = 0
    _, bundles = read_file(path)
    try:
        with tuned_gc():
            for bundle in bundles:
                if bundle.tick.id == at.tick and bundle.tick.kind == START:
                    cut_line = bundle.line
                    engine.check_start(bundle)
                    break
                engine.feed(bundle)
                if engine.divergence is not None:
                    return _First(engine.stats, engine.divergence, cut_line), None
            if engine.divergence is None:
                for _ in bundles:  # the rest is only read: every line checked, as the sequential replay checks it
                    pass
    except FormatError as exc:
        return _First(engine.stats, engine.divergence, cut_line), exc
    finally:
        with contextlib.suppress(Exception):
            bundles.close()  # type: ignore[attr-defined]
    return _First(engine.stats, engine.divergence, cut_line), None


def _alone(path: str) -> Outcome:
    started, cpu = time.perf_counter(), time.process_time()
    _, bundles = read_file(path)
    engine = Engine(compare=True)
    engine.run(bundles)
    engine.stats.seconds = time.perf_counter() - started
    return Outcome(engine.stats, engine.divergence, 1, (time.process_time() - cpu,))


def _sum(a: Stats, b: Stats) -> Stats:
    return Stats(**{f.name: getattr(a, f.name) + getattr(b, f.name) for f in fields(Stats)})
