"""The embedded nats-server (a fresh machine's `kubus up`, every test's own server) keeps answering however much it
logs: its log goes to a rotated file, not to a pipe that fills up after 64 KiB and then blocks the server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats

from runtime.natsserver import EmbeddedNats


async def _garbage_client(port: int) -> None:
    """A client that speaks no NATS: the server logs a parser error for it, about 150 bytes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"NOT NATS AT ALL " + b"x" * 64 + b"\r\n")
    await writer.drain()
    await reader.read()  # the server closes it
    writer.close()


async def test_a_server_that_logged_far_more_than_a_pipe_holds_still_answers(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    try:
        for _ in range(25):  # 2,500 parser errors, about 375 KB: far more than a pipe and asyncio's reader buffer
            await asyncio.wait_for(asyncio.gather(*(_garbage_client(server.port) for _ in range(100))), 30)
        assert server.log_path.stat().st_size > 300_000, server.log_path.read_text()[-500:]
        nc = await nats.connect(server.url, connect_timeout=5, max_reconnect_attempts=0)
        try:
            answer = await asyncio.wait_for(nc.jetstream().account_info(), 5)
            assert answer.limits is not None
        finally:
            await nc.close()
    finally:
        await server.stop()


async def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    first = EmbeddedNats(tmp_path / "a")
    await first.start()
    try:
        second = EmbeddedNats(tmp_path / "b", port=first.port)  # the port is taken
        try:
            await second.start()
        except RuntimeError as exc:
            assert "address already in use" in str(exc).lower(), exc
            assert second._proc is not None and second._proc.returncode is not None, "left running"
        else:
            raise AssertionError("a second server on a taken port started")
    finally:
        await first.stop()
