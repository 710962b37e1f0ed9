"""runtime.redact: a URL's password or token never survives into a message, whatever the scheme."""

from __future__ import annotations

import logging

import pytest

from runtime import logs, redact


@pytest.mark.parametrize(("given", "shown"), [
    ("nats://u:secret@127.0.0.1:1", "nats://u:***@127.0.0.1:1"),
    ("nats://s3cr3t@nats:4222", "nats://***@nats:4222"),
    ("tls://s3cr3t@nats:4222", "tls://***@nats:4222"),
    ("nats://a:secret@n1:4222,nats://b:secret@n2:4222", "nats://a:***@n1:4222,nats://b:***@n2:4222"),
    ("nats://n1:4222,n2:4222", "nats://n1:4222,n2:4222"),
    ("postgresql://kubus:secret@db:5432/kubus?sslmode=require", "postgresql://kubus:***@db:5432/kubus?sslmode=require"),
    ("postgresql://kubus@db/kubus?password=secret&sslmode=verify-full",
     "postgresql://kubus@db/kubus?password=***&sslmode=verify-full"),
    ("postgresql://kubus:p@ss:w0rd@db/kubus", "postgresql://kubus:***@db/kubus"),
    ("cannot reach NATS at nats://u:secret@h:1 (refused); start it", "cannot reach NATS at nats://u:***@h:1 (refused); "
     "start it"),
    ("postgresql://kubus@db:5432/kubus", "postgresql://kubus@db:5432/kubus"),
    ("https://api.example:6443/api/v1/pods?watch=true", "https://api.example:6443/api/v1/pods?watch=true"),
])
def test_redacted(given: str, shown: str) -> None:
    assert redact.url(given) == shown
    assert "secret" not in redact.text(f"x {given} y")
    assert redact.text(shown) == shown  # idempotent


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_every_log_line_is_redacted(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Whoever logs a URL (a library included), in the message or in a traceback, the line has no password."""
    logs.configure("info", fmt)
    try:
        log = logging.getLogger("some.library")
        log.warning("connecting to %s", "nats://u:secret@h:4222")
        try:
            raise ConnectionError("postgresql://kubus:secret@db/kubus refused")
        except ConnectionError:
            log.exception("failed")
    finally:
        logging.getLogger().handlers.clear()
    err = capsys.readouterr().err
    assert "nats://u:***@h:4222" in err
    assert "postgresql://kubus:***@db/kubus" in err
    assert "secret" not in err
