"""A TCP proxy a test can pause: a process behind it is cut off (its writes wait in its socket, nothing comes
back) without its connection closing, as behind a network partition."""

from __future__ import annotations

import asyncio
import contextlib

from runtime.ports import free_port


class Proxy:
    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.port = free_port()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    def url(self, scheme: str) -> str:
        return f"{scheme}://127.0.0.1:{self.port}"

    def pause(self) -> None:
        """Nothing more passes, either way, until resume(): what was read waits in the proxy, the rest in the
        sockets."""
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.resume()
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.create_task(self._pump(source, sink))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                await self._flowing.wait()
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()
