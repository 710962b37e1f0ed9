from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.natscluster import NatsCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """A 3-node JetStream cluster on loopback, healthy, shared by a module (each test takes its own --prefix)."""
    nats = NatsCluster(tmp_path_factory.mktemp("nats-cluster"))
    try:
        nats.start()
        yield nats
    finally:
        nats.stop()
