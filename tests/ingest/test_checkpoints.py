"""One contract for every Checkpoints adapter."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from nats.js import JetStreamContext

from ingest.checkpoints import Checkpoints, KvCheckpoints, MemoryCheckpoints, bucket_name


@pytest.fixture(params=["memory", "kv"])
async def checkpoints(request: pytest.FixtureRequest, js: JetStreamContext, prefix: str) -> AsyncIterator[Checkpoints]:
    if request.param == "memory":
        yield MemoryCheckpoints()
    else:
        yield await KvCheckpoints.open(js, prefix)


async def test_an_unknown_kind_has_no_checkpoint(checkpoints: Checkpoints) -> None:
    assert await checkpoints.get("Pod") is None


async def test_the_last_saved_version_is_returned_per_kind(checkpoints: Checkpoints) -> None:
    await checkpoints.save("Pod", "10")
    await checkpoints.save("Pod", "12")
    await checkpoints.save("Node", "3")
    assert await checkpoints.get("Pod") == "12"
    assert await checkpoints.get("Node") == "3"


async def test_kv_checkpoints_survive_reopening(js: JetStreamContext, prefix: str) -> None:
    await (await KvCheckpoints.open(js, prefix)).save("ReplicaSet", "77")
    assert await (await KvCheckpoints.open(js, prefix)).get("ReplicaSet") == "77"


@pytest.mark.parametrize(("prefix", "bucket"), [
    pytest.param("kubus", "kubus_ingest", id="default"),
    pytest.param("team.a", "team_a_ingest", id="dotted-prefix"),
])
def test_bucket_names_are_valid_kv_names(prefix: str, bucket: str) -> None:
    assert bucket_name(prefix) == bucket
