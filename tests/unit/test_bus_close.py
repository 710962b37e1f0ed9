"""A clean close of a NATS connection is not a disconnection to warn about (issue 21, 7).

nats-py calls the disconnect callback from close() too, so every clean stop of a service logged
`WARNING ... disconnected; reconnecting`. A connection lost still says so at WARNING.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from runtime import bus
from runtime.natsserver import EmbeddedNats

LOGGER = "kubus.jetstream"


def _said(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


async def _until_said(caplog: pytest.LogCaptureFixture, text: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not any(text in m for m in _said(caplog, logging.WARNING)):
        assert loop.time() < deadline, f"no warning {text!r} within {timeout}s: {_said(caplog, logging.WARNING)}"
        await asyncio.sleep(0.02)  # nats-py notices the lost socket in its read loop


@pytest.mark.parametrize("reconnect", [True, False])
async def test_a_clean_close_warns_of_nothing(nats_server: EmbeddedNats, caplog: pytest.LogCaptureFixture,
                                              reconnect: bool) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    nc = await bus.connect(nats_server.url, "kubus-test", reconnect=reconnect)
    await nc.flush()
    await bus.close(nc)
    assert nc.is_closed
    assert _said(caplog, logging.WARNING) == []
    assert "NATS kubus-test: closed" in _said(caplog, logging.DEBUG)  # the callback ran, and said it quietly


async def test_services_close_quietly(nats_server: EmbeddedNats, caplog: pytest.LogCaptureFixture) -> None:
    """`connected`, how run_service connects every service, closes through bus.close on the way out."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    async with bus.connected(nats_server.url, "kubus-service", prefix="KUBUSTEST", partitions=2) as b:
        await b.nc.flush()
    assert b.nc.is_closed
    assert _said(caplog, logging.WARNING) == []


async def test_a_lost_connection_still_warns(nats_server: EmbeddedNats, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    nc = await bus.connect(nats_server.url, "kubus-test")
    try:
        await nats_server.stop()
        await _until_said(caplog, "NATS kubus-test: disconnected; reconnecting")
    finally:
        await bus.close(nc)


async def test_a_lost_connection_that_does_not_reconnect_says_so(nats_server: EmbeddedNats,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    nc = await bus.connect(nats_server.url, "kubus-cli", reconnect=False)
    try:
        await nats_server.stop()
        await _until_said(caplog, "NATS kubus-cli: disconnected; not reconnecting")
        assert not any("reconnecting" in m and "not reconnecting" not in m for m in _said(caplog, logging.WARNING))
    finally:
        await bus.close(nc)
