from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from runtime.bus import Bus, connect, ensure_streams
from runtime.natsserver import EmbeddedNats
from tests.pipeline.harness import Pipeline


@pytest.fixture
async def bus(nats_server: EmbeddedNats) -> AsyncIterator[Bus]:
    nc = await connect(nats_server.url, "test")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    yield await ensure_streams(nc, prefix=prefix, partitions=4)
    await nc.close()


@pytest.fixture
def faults(pipeline: Pipeline) -> Iterator[Callable[..., None]]:
    """Sets the sim's fault rules (`RESOURCE:VERB:FRACTION:FAULT`, seeded); clears them when the test ends (whatever
    it asserted). `pipeline` is the module's own."""

    def set_rules(*rules: str) -> None:
        code, body = pipeline.sim.request("PUT", "/sim/faults", {"rules": list(rules), "seed": 1})
        assert code == 200, body

    yield set_rules
    code, body = pipeline.sim.request("DELETE", "/sim/faults")
    assert code == 200, body
