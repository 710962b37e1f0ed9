"""A loopback port for a process that binds it later (an embedded nats-server, a test's or benchmark's services).

Asking the kernel for port 0 and closing the socket, then handing the number to another process, races twice:
the kernel gives the same just-freed port to the next `bind(("", 0))` anywhere on the machine, and it gives ports
of that range (`net.ipv4.ip_local_port_range`, 32768 to 60999 by default) to every outgoing connection too. With two
test runs on one machine, a reconciler then found its metrics port "already in use" a second after it was chosen
(CI, split_bench).

So the port comes from below the ephemeral range, where no outgoing connection is ever given one, chosen at
random, checked bindable, and reserved for RESERVED_FOR seconds in a directory every process of this user shares:
a file per port, created exclusively, so no two pickers on the machine hand out the same port while the first
one's process may still be starting. A reservation older than that is stale and taken over.
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
import time
from pathlib import Path

LOWEST = 20_000  # above the well-known services a developer machine may run (8080, 9090, 5432, 4222, 6443, ...)
RESERVED_FOR = 600.0  # seconds: longer than any service takes from the pick to its bind
ATTEMPTS = 500
_DEFAULT_RANGE = (32768, 60999)
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")

_random = random.SystemRandom()  # not the global generator: a test that seeds it must not make pickers collide


def ephemeral_range(path: Path = _RANGE_FILE) -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections and `bind(0)` (Linux's default elsewhere)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return _DEFAULT_RANGE
    return low, high


def reservations_dir() -> Path:
    path = Path(tempfile.gettempdir()) / f"kubus-ports-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _reserve(directory: Path, port: int, now: float) -> bool:
    """Claim `port` for this caller unless another claimed it less than RESERVED_FOR seconds ago."""
    path = directory / str(port)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return True
    except FileExistsError:
        pass
    try:
        if now - path.stat().st_mtime < RESERVED_FOR:
            return False
        aside = directory / f".stale-{port}-{os.getpid()}-{_random.getrandbits(32):x}"
        os.rename(path, aside)  # of two pickers that found it stale, one moves it; the other's rename fails
        os.unlink(aside)
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return True
    except (FileNotFoundError, FileExistsError):  # another picker was quicker: try the next candidate
        return False


def _bindable(port: int, host: str) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port on `host` nobody listens on, outside the ephemeral range, not handed out by another picker on this
    machine in the last RESERVED_FOR seconds."""
    highest = min(ephemeral_range()[0], 32768) - 1
    if highest < LOWEST + 1000:  # a machine whose ephemeral range starts low: no port is safe from it, pick anyway
        highest = 32767
    directory = reservations_dir()
    for _ in range(ATTEMPTS):
        port = _random.randint(LOWEST, highest)
        if _reserve(directory, port, time.time()) and _bindable(port, host):
            return port
    raise RuntimeError(f"no free port between {LOWEST} and {highest} on {host} after {ATTEMPTS} tries; "
                       f"see {directory}")
