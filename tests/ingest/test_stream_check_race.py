"""Ingest's check for a lost KUBUS_EVENTS (ingest/service.py, _follow_stream) compares the stream's last sequence
with the highest this ingest had stored. Found in issue 25's benchmark on a loaded machine: the stored sequence was
read after the stream info's answer was awaited, so a publish ack handled meanwhile (the stream had stored a newer
message after answering) looked like events the stream had lost, and ingest renewed KUBUS_STATE and relisted
every kind in the middle of a run."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from ingest import service
from ingest.config import IngestConfig
from ingest.service import Ingest

CREATED = datetime(2026, 11, 28, tzinfo=UTC)


class Stop(BaseException):
    """Ends the check's loop after its first full round (it swallows Exception)."""


async def test_an_ack_handled_while_the_stream_info_is_awaited_is_no_lost_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ingest = Ingest(IngestConfig(kinds=("Pod",), stream_check_interval=0.01))
    relisted: list[str] = []
    watcher = SimpleNamespace(publisher=SimpleNamespace(max_seq=100), wanted=CREATED.isoformat(),
                              listed=CREATED.isoformat(), relist_into=relisted.append)
    ingest._watchers = [watcher]  # type: ignore[list-item]

    async def events_info(bus: Any) -> Any:
        # the stream answers: its last message is 100; before the awaiting task runs again, the ack of 101 arrives
        await asyncio.sleep(0)
        watcher.publisher.max_seq = 101
        return SimpleNamespace(created=CREATED, state=SimpleNamespace(last_seq=100))

    async def claim(*args: Any) -> None:
        raise Stop()

    monkeypatch.setattr(service, "events_info", events_info)
    monkeypatch.setattr(service.identity, "claim", claim)
    monkeypatch.setattr(service, "renew_state", lambda bus: pytest.fail("KUBUS_STATE renewed"))
    bus = SimpleNamespace(stream=lambda base: base)
    with pytest.raises(Stop):
        await ingest._follow_stream(bus, None, CREATED.isoformat())  # type: ignore[arg-type]
    assert relisted == [] and watcher.publisher.max_seq == 101
