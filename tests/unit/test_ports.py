"""runtime.ports.free_port: a port for another process to bind, that neither another picker on the machine nor an
outgoing connection takes in between (CI: a split_bench reconciler found its metrics port in use)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime import ports

PICKS = 1500


@pytest.fixture
def reservations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(ports, "reservations_dir", lambda: tmp_path)
    return tmp_path


def test_a_port_is_below_the_ephemeral_range_so_no_outgoing_connection_is_given_it(reservations: Path) -> None:
    low, _ = ports.ephemeral_range()
    for _ in range(50):
        port = ports.free_port()
        assert ports.LOWEST <= port < min(low, 32768)


def test_the_ephemeral_range_is_read_from_the_kernel_or_defaults(tmp_path: Path) -> None:
    given = tmp_path / "range"
    given.write_text("40000\t50000\n")
    assert ports.ephemeral_range(given) == (40000, 50000)
    assert ports.ephemeral_range(tmp_path / "missing") == (32768, 60999)
    given.write_text("garbage")
    assert ports.ephemeral_range(given) == (32768, 60999)


def test_two_processes_picking_at_once_never_get_the_same_port(tmp_path: Path) -> None:
    """The old way (bind port 0, close, hand the number over) gave ~140 shared ports in two runs of 1,500 picks
    (and ~80 repeats within each): the kernel hands a just-freed port to the next bind. Reserved, none is shared."""
    go = tmp_path / "go"
    script = ("import pathlib, sys, time\n"
              "from runtime import ports\n"
              f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.001)\n"
              f"print(' '.join(str(ports.free_port()) for _ in range({PICKS})))\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the reservations of this test only
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env,
                              cwd=Path(__file__).resolve().parents[2]) for _ in range(2)]
    go.touch()
    picked = [proc.communicate(timeout=120)[0].split() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    assert [len(p) for p in picked] == [PICKS, PICKS]
    assert len(set(picked[0]) | set(picked[1])) == 2 * PICKS


def test_a_port_someone_listens_on_is_not_handed_out(reservations: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        candidates = iter([busy, 23456])
        monkeypatch.setattr(ports._random, "randint", lambda low, high: next(candidates))
        assert ports.free_port() == 23456


def test_a_reservation_holds_for_its_time_then_lapses(reservations: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports._random, "randint", lambda low, high: 24680)
    assert ports.free_port() == 24680
    with pytest.raises(RuntimeError, match="no free port between"):
        ports.free_port()  # reserved by the first call: every try finds it taken
    stale = time.time() - ports.RESERVED_FOR - 1
    os.utime(reservations / "24680", (stale, stale))
    assert ports.free_port() == 24680
    assert [p.name for p in reservations.iterdir()] == ["24680"]  # the stale one replaced, nothing left aside
