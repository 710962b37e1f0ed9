"""A bootstrap whose KUBUS_STATE messages vanish between its look at the stream and its read (an ingest
purging expired tombstones, the stream renewed) ends, instead of waiting for a "none pending" no message
will ever carry."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from messages import subjects
from reconciler import bootstrapping
from reconciler.core.cache import Cache
from runtime.bus import Bus
from tests.pipeline.test_reconciler import publish, replicaset_event


async def test_state_purged_under_the_bootstrap_ends_it(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    await publish(bus, replicaset_event("gone", 1))
    state = bus.stream(subjects.STATE_STREAM)
    copied = await bootstrapping.wait_for_state(bus)
    assert copied > 0

    async def caught_up(_: Bus) -> int:
        return copied

    monkeypatch.setattr(bootstrapping, "wait_for_state", caught_up)
    look = bootstrapping._newest_state

    async def purged_after_the_look(*args: Any) -> Any:
        newest = await look(*args)
        await bus.js.purge_stream(state)  # what the bootstrap saw is gone by the time it reads
        return newest

    monkeypatch.setattr(bootstrapping, "_newest_state", purged_after_the_look)
    done = await asyncio.wait_for(bootstrapping.bootstrap(bus, Cache(), lambda _: True), 30)
    assert done.loaded == 0
