"""Fixtures shared by the unit tests of the sim's HTTP API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sim.cluster import SimCluster, SimConfig
from sim.nodes import generate

SimClient = TestClient[Any, Any]


@pytest.fixture
async def sim_client() -> AsyncIterator[SimClient]:
    """The sim's aiohttp application in process, one node, no kubelet, scheduler or garbage collector running."""
    cluster = SimCluster(SimConfig(nodes=generate(1), seed=1))
    cluster._seed()  # the system namespaces and the node, as start() does
    async with TestClient(TestServer(cluster.app())) as test_client:
        yield test_client
