"""A small recorded history, made in process by `replay.synthetic.World`: four nodes, a DaemonSet rolled
to pods that fail a second after they start, a ReplicaSet scaled down, a pod create in ten refused, and a
reconciler restart in the middle of the rollout."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from replay import fileformat
from replay.bundles import Bundle
from replay.synthetic import FAIL_AFTER, World, daemonset, replicaset

NAMESPACE = "demo"


def recorded_world() -> World:
    world = World(nodes=4, fail_creates=0.1, seed=3)
    world.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    world.create(daemonset("agent", NAMESPACE, "busybox:1"))
    world.create(replicaset("web", NAMESPACE, 5))
    world.settle()
    world.update("DaemonSet", NAMESPACE, "agent", {"spec": {"template": {
        "metadata": {"annotations": {FAIL_AFTER: "1"}},
        "spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}}})
    world.run(3)
    world.restart()
    world.update("ReplicaSet", NAMESPACE, "web", {"spec": {"replicas": 2}})
    world.run(5)
    return world


@pytest.fixture(scope="session")
def world() -> World:
    return recorded_world()


@pytest.fixture(scope="session")
def bundles(world: World) -> list[Bundle]:
    return asyncio.run(world.bundle_list())


@pytest.fixture(scope="session")
def history(bundles: list[Bundle]) -> bytes:
    out = io.BytesIO()
    fileformat.write(out, bundles, {"test": "replay"})
    return out.getvalue()


@pytest.fixture
def history_file(history: bytes, tmp_path: Path) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_bytes(history)
    return path


def read(data: bytes) -> list[Bundle]:
    reader = fileformat.Reader(io.BytesIO(data))
    reader.read_header()
    return list(reader)
