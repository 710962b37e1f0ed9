"""Progress on stderr when it is a terminal, and never otherwise (issue 24): `kubus replay`, `kubus events import`
and `kubus db prune`, each run with stderr on a pseudo-terminal and on a pipe. (`kubus events export` draws the same
Progress around the same kind of loop; it needs a NATS and is left to its own tests.)"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

BAR = "ticks"  # tqdm's bar: "kubus replay: 75.0ticks [00:00, ...ticks/s]"


def run(argv: list[str], *, terminal: bool, tmp_path: Path) -> tuple[int, str, str]:
    """`kubus ARGV` with stdout to a file and stderr on a pseudo-terminal (`terminal`) or a pipe."""
    stdout_path = tmp_path / f"stdout-{len(list(tmp_path.iterdir()))}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBUS_")} | {"COLUMNS": "100"}
    with open(stdout_path, "wb") as stdout:
        if not terminal:
            result = subprocess.run([sys.executable, "-m", "kubus", *argv], stdout=stdout, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, env=env, timeout=120)
            return result.returncode, stdout_path.read_text(), result.stderr.decode()
        leader, follower = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "kubus", *argv], stdout=stdout, stderr=follower,
                                stdin=subprocess.DEVNULL, env=env)
        os.close(follower)
        said = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal's last follower
                break
            if not chunk:
                break
            said += chunk
        os.close(leader)
        code = proc.wait(timeout=120)
    return code, stdout_path.read_text(), said.decode(errors="replace")


def test_replay(history_file: Path, tmp_path: Path) -> None:
    argv = ["replay", "--from-file", str(history_file)]
    code, out, err = run(argv, terminal=True, tmp_path=tmp_path)
    assert code == 0, err
    assert "kubus replay:" in err and f"{BAR}/s" in err, err
    assert "kubus replay" not in out and "replayed" in out  # the bar never goes to stdout
    code, out, err = run(argv, terminal=False, tmp_path=tmp_path)
    assert (code, err) == (0, ""), err
    assert "replayed" in out


def test_events_import(history_file: Path, tmp_path: Path) -> None:
    for terminal in (True, False):
        data = tmp_path / f"data-{terminal}"
        code, _, err = run(["events", "import", str(history_file), "--no-stream", "--data-dir", str(data)],
                           terminal=terminal, tmp_path=tmp_path)
        assert code == 0, err
        lines = err.replace("\r", "\n").strip().splitlines()
        assert lines[-1].startswith("kubus events import: 75 ticks"), err
        assert (f"{BAR}/s" in err) is terminal, err


def test_db_prune(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run(["db", "upgrade", "--data-dir", str(data)], terminal=False, tmp_path=tmp_path)[0] == 0
    code, out, err = run(["db", "prune", "--older-than", "7d", "--data-dir", str(data)], terminal=True,
                         tmp_path=tmp_path)
    assert code == 0, err
    assert "kubus db prune:" in err and "rows/s" in err, err
    assert out.startswith("kubus db prune: deleted 0 observed events")
    code, out, err = run(["db", "prune", "--older-than", "7d", "--data-dir", str(data)], terminal=False,
                         tmp_path=tmp_path)
    assert (code, err) == (0, ""), err
