from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from runtime.bus import Bus, connect, ensure_streams
from runtime.natsserver import EmbeddedNats


@pytest.fixture
async def bus(nats_server: EmbeddedNats) -> AsyncIterator[Bus]:
    nc = await connect(nats_server.url, "test")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    yield await ensure_streams(nc, prefix=prefix, partitions=4)
    await nc.close()
