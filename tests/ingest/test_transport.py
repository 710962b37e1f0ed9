"""WatchStream: a watch body read on a thread arrives on the loop as whole lines, errors as exceptions."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from collections.abc import Iterator

import pytest

from ingest.transport import WatchStream
from tests.simulation import wait_for


class FakeResponse:
    """Stands in for urllib3's HTTPResponse: yields the body in the given chunks, then maybe fails."""

    def __init__(self, chunks: list[bytes], error: Exception | None = None):
        self.chunks = chunks
        self.error = error

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        yield from self.chunks
        if self.error is not None:
            raise self.error

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


async def read_all(stream: WatchStream) -> list[list[bytes]]:
    return [batch async for batch in stream.batches()]


async def test_lines_cut_across_chunks_arrive_whole() -> None:
    response = FakeResponse([b'{"a":1}\n{"b"', b':2}\n', b'{"c":3}\n{"d":4}\n'])
    batches = await read_all(WatchStream(lambda: response, name="test"))  # type: ignore[arg-type,return-value]
    assert batches[0] == []  # the stream opened
    assert [line for batch in batches for line in batch] == [b'{"a":1}', b'{"b":2}', b'{"c":3}', b'{"d":4}']


@pytest.mark.parametrize("chunks", [
    pytest.param([b'{"a":1}\n', b'{"b":2}\n'], id="a-line-a-chunk"),
    pytest.param([b'{"a":1}\n', b"\n", b'{"b":2}\n'], id="an-empty-line-between"),
    pytest.param([b'{"a"', b':1}\n', b'{"b":2}\n'], id="a-line-ended-by-the-next-chunk"),
    pytest.param([b'{"a":1}\n{"b"', b':2}\n'], id="a-line-and-the-start-of-the-next"),
    pytest.param([b'{"a":1}\n{"b":2}\n'], id="two-lines-a-chunk"),
])
async def test_every_line_arrives_once_and_whole_however_the_chunks_cut_them(chunks: list[bytes]) -> None:
    batches = await read_all(WatchStream(lambda: FakeResponse(chunks), name="test"))  # type: ignore[arg-type,return-value]
    assert [line for batch in batches for line in batch] == [b'{"a":1}', b'{"b":2}']


async def test_a_broken_stream_raises_on_the_loop_after_the_lines_read_before() -> None:
    response = FakeResponse([b'{"a":1}\n'], error=ConnectionResetError("reset by peer"))
    stream = WatchStream(lambda: response, name="test")  # type: ignore[arg-type,return-value]
    seen: list[bytes] = []
    with pytest.raises(ConnectionResetError):
        async for batch in stream.batches():
            seen.extend(batch)
    assert seen == [b'{"a":1}']


async def test_a_request_that_fails_raises_on_the_loop() -> None:
    def refuse() -> FakeResponse:
        raise OSError("connection refused")
    with pytest.raises(OSError, match="refused"):
        await read_all(WatchStream(refuse, name="test"))  # type: ignore[arg-type]


class Counted(FakeResponse):
    """Counts the chunks the thread has read."""

    def __init__(self, chunks: list[bytes]):
        super().__init__(chunks)
        self.read = 0

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.read += 1
            yield chunk


async def test_the_thread_reads_at_most_depth_batches_ahead_of_the_loop() -> None:
    """A loop that falls behind holds the thread back: `depth` batches handed over, one chunk read and waiting."""
    depth, chunks = 3, 20
    response = Counted([b'{"n":%d}\n' % i for i in range(chunks)])
    stream = WatchStream(lambda: response, name="test", depth=depth)  # type: ignore[arg-type,return-value]
    taken = 0
    async for _ in stream.batches():
        taken += 1  # the opening batch holds no chunk: `depth` ahead of it is depth - 1 chunks, and one waiting
        # the loop stands still here (nothing else runs on it) while the thread reads as far as it may
        wait_for(lambda: response.read >= min(taken + depth, chunks), interval=0.001,  # noqa: B023
                 what="the thread to read ahead")
        assert response.read == min(taken + depth, chunks)
    assert taken == chunks + 1


async def test_closing_a_stream_wakes_a_thread_waiting_for_room() -> None:
    """A thread held back by a loop that stopped taking batches ends once the stream is closed."""
    response = Counted([b'{"n":%d}\n' % i for i in range(10)])
    stream = WatchStream(lambda: response, name="held-back", depth=1)  # type: ignore[arg-type,return-value]
    batches = stream.batches()
    assert await anext(batches) == []
    # one batch handed over and not taken, one chunk read and waiting for room
    wait_for(lambda: response.read >= 2, interval=0.001, what="the thread to wait for room")
    stream.close()
    wait_for(lambda: all(t.name != "held-back" for t in threading.enumerate()), interval=0.001,
             what="the watch thread to end")
    assert response.read == 2
    await batches.aclose()


class CutLater(FakeResponse):
    """A watch that stays open until `cut` is set, then breaks as a socket shut down by `close()` does."""

    def __init__(self) -> None:
        super().__init__([])
        self.cut = threading.Event()

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        self.cut.wait(timeout=30)
        raise ConnectionResetError("shut down")
        yield b""  # a generator, as urllib3's stream is


@pytest.mark.parametrize("close_loop", [pytest.param(False, id="loop-stopped"), pytest.param(True, id="loop-closed")])
def test_a_watch_thread_ending_after_its_loop_leaves_nothing_unawaited(close_loop: bool) -> None:
    """The thread hands the stream's end over after the loop stopped or closed (a loaded machine ending a test, or a
    process): nothing it scheduled on the loop is left behind unawaited (pytest turns that warning into a failure)."""
    response = CutLater()
    name = f"watch-cut-after-loop-{close_loop}"
    loop = asyncio.new_event_loop()

    async def open_then_close() -> None:
        stream = WatchStream(lambda: response, name=name)  # type: ignore[arg-type,return-value]
        batches = stream.batches()
        assert await anext(batches) == []  # the watch is open
        stream.close()  # as ingest's shutdown does; the thread is still in its read
        await batches.aclose()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop.run_until_complete(open_then_close())
        if close_loop:
            loop.close()
        response.cut.set()  # only now does the thread get to hand its end over
        wait_for(lambda: all(t.name != name for t in threading.enumerate()), what="the watch thread to end")
        loop.close()
        gc.collect()
    assert [str(w.message) for w in caught] == []
