"""WatchStream: a watch body read on a thread arrives on the loop as whole lines, errors as exceptions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ingest.transport import WatchStream


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
