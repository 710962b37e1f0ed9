from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from ingest.config import IngestConfig
from runtime.natsserver import EmbeddedNats
from tests.ingest.harness import api, unique
from tests.simulation import SimProcess


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """A sim shared by a module: fast kubelets and a bookmark every 0.5 s, so idle kinds' checkpoints move."""
    proc = SimProcess(tmp_path_factory.mktemp("sim"), "--nodes", "2", "--kubelet-delay", "0.05",
                      "--termination-seconds", "0.1", "--bookmark-interval", "0.5", "--seed", "11")
    yield proc
    code = proc.stop()
    assert code == 0, f"kubus sim exited with {code}:\n{proc.log_path.read_text()}"



@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    yield client
    await client.close()


@pytest.fixture
def js(nc: Client) -> JetStreamContext:
    return nc.jetstream()


@pytest.fixture
def prefix() -> str:
    """A stream prefix of the test's own: its streams and checkpoint bucket collide with nothing."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def config(nats_server: EmbeddedNats, prefix: str, sim: SimProcess) -> IngestConfig:
    return IngestConfig(nats_url=nats_server.url, prefix=prefix, partitions=4, kubeconfig=str(sim.kubeconfig),
                        instance="ingest-a", checkpoints="memory", checkpoint_interval=0.1, ack_timeout=1.0,
                        backoff_initial=0.05, backoff_max=0.5, stop_timeout=2.0)


@pytest.fixture
async def namespace(sim: SimProcess) -> str:
    name = unique("ns")
    await api(sim, "POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    return name
