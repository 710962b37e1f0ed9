"""kubus's streams on a 3-node JetStream cluster: created R3 with --stream-replicas 3, checked and never
rewritten at a restart (the operator's limits and replicas stand), refused in one line when they do not
fit what kubus depends on; and /metrics says how full each one is."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import pytest
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from executor.laststate import Controlled, LastStates
from messages import codec, subjects
from messages.observed import ObservedEvent
from runtime.bus import STREAMS, GiB, StreamSettings, connect, ensure_streams
from runtime.ports import free_port
from tests.natscluster import NatsCluster
from tests.simulation import wait_for

pytestmark = pytest.mark.slow


def fresh_prefix() -> str:
    return f"c{uuid.uuid4().hex[:8]}"


def names(prefix: str) -> list[str]:
    return [subjects.stream_name(base, prefix) for base in STREAMS]


@asynccontextmanager
async def jetstream(cluster: NatsCluster) -> AsyncIterator[JetStreamContext]:
    nc = await connect(cluster.seeds, "test", reconnect=False)
    try:
        yield nc.jetstream()
    finally:
        await nc.close()


def kubus_reconcile(cluster: NatsCluster, prefix: str, workdir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "kubus", "reconcile", "--nats-url", cluster.seeds, "--prefix", prefix,
            "--data-dir", str(workdir / "data"), "--instance", "streams-test", *args]


class Reconcile:
    """`kubus reconcile` on the cluster, serving /metrics on a port of its own."""

    def __init__(self, cluster: NatsCluster, prefix: str, workdir: Path, *args: str):
        self.metrics_port = free_port()
        self.log = workdir / "reconcile.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(kubus_reconcile(cluster, prefix, workdir, "--metrics-port",
                                                         str(self.metrics_port), *args),
                                         stdout=log, stderr=subprocess.STDOUT)

    def metrics(self) -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as resp:
                return str(resp.read().decode())
        except OSError:
            if self.proc.poll() is not None:  # pytest.fail: wait_for would retry an AssertionError until its deadline
                pytest.fail(f"kubus reconcile exited with {self.proc.returncode}:\n{self.log.read_text()}")
            return None

    def gauge(self, name: str, stream: str) -> float | None:
        """A stream gauge's value on /metrics, or None while the service does not serve it yet."""
        text = self.metrics() or ""
        found = re.search(rf'^{name}{{stream="{stream}"}} (\S+)$', text, re.MULTILINE)
        return float(found.group(1)) if found else None

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=30)


async def test_streams_are_created_with_three_replicas(cluster: NatsCluster, tmp_path: Path) -> None:
    prefix = fresh_prefix()
    service = Reconcile(cluster, prefix, tmp_path, "--stream-replicas", "3")
    # /metrics is served once the streams are ensured, and the first refresh of the gauges reads them all
    wait_for(lambda: all(service.gauge("kubus_stream_messages", name) is not None for name in names(prefix)),
             timeout=30, what="the stream gauges on /metrics")
    assert service.stop() == 0, service.log.read_text()
    async with jetstream(cluster) as js:
        for name in names(prefix):
            info = await js.stream_info(name)
            assert info.config.num_replicas == 3, name
            assert info.cluster is not None and info.cluster.replicas is not None, name
            peers = {info.cluster.leader, *(peer.name for peer in info.cluster.replicas)}
            assert peers == set(cluster.nodes), (name, info.cluster)


async def test_an_operators_limits_and_replicas_survive_a_restart(cluster: NatsCluster, tmp_path: Path) -> None:
    """Raised max_bytes on KUBUS_EVENTS and KUBUS_DEAD taken down to R1 stay as the operator set them when
    kubus starts again with flags that say otherwise (--stream-replicas 1, --events-max-bytes 64MiB)."""
    prefix = fresh_prefix()
    events, dead = subjects.stream_name(subjects.EVENTS_STREAM, prefix), subjects.stream_name(subjects.DEAD_STREAM,
                                                                                             prefix)
    first = Reconcile(cluster, prefix, tmp_path, "--stream-replicas", "3")
    wait_for(lambda: first.gauge("kubus_stream_messages", events) is not None, timeout=30, what="the streams")
    assert first.stop() == 0, first.log.read_text()
    async with jetstream(cluster) as js:
        config = (await js.stream_info(events)).config
        config.max_bytes = 2 * GiB
        await js.update_stream(config)
        config = (await js.stream_info(dead)).config
        config.num_replicas = 1
        await js.update_stream(config)
        await js.publish(subjects.dead_subject("operator", prefix), b"x" * 1000)

    again = Reconcile(cluster, prefix, tmp_path, "--events-max-bytes", "64MiB")
    fullness = wait_for(lambda: again.gauge("kubus_stream_fullness_ratio", dead), timeout=30,
                        what="KUBUS_DEAD's fullness on /metrics")
    assert again.gauge("kubus_stream_messages", dead) == 1
    dead_bytes = again.gauge("kubus_stream_bytes", dead)
    assert dead_bytes is not None and dead_bytes > 1000 and fullness == pytest.approx(dead_bytes / (32 * 1024**2))
    assert again.gauge("kubus_stream_fullness_ratio", events) == 0
    assert again.stop() == 0, again.log.read_text()
    async with jetstream(cluster) as js:
        for name in names(prefix):
            info = await js.stream_info(name)
            assert info.config.num_replicas == (1 if name == dead else 3), name
        assert (await js.stream_info(events)).config.max_bytes == 2 * GiB
    assert "keeps its 3 replicas (--stream-replicas 1 applies to streams kubus creates)" in again.log.read_text()


@pytest.mark.parametrize(("base", "subject", "retention", "field"), [
    pytest.param(subjects.EVENTS_STREAM, "history.>", RetentionPolicy.LIMITS,
                 "subjects are ['{prefix}.history.>'], kubus needs ['{prefix}.events.>']", id="other-subjects"),
    pytest.param(subjects.ACTIONS_STREAM, "actions.>", RetentionPolicy.LIMITS,
                 "retention is limits, kubus needs workqueue", id="retention"),
])
async def test_an_incompatible_stream_is_refused_in_one_line(cluster: NatsCluster, tmp_path: Path, base: str,
                                                             subject: str, retention: RetentionPolicy,
                                                             field: str) -> None:
    """The service exits 2 with one line naming the stream and the field, and changes nothing."""
    prefix = fresh_prefix()
    name = subjects.stream_name(base, prefix)
    existing = StreamConfig(name=name, subjects=[f"{prefix}.{subject}"], retention=retention,
                            storage=StorageType.FILE, num_replicas=3, duplicate_window=600,
                            metadata={"kubus.partitions": "4"})  # what kubus checks first on KUBUS_EVENTS
    async with jetstream(cluster) as js:
        await js.add_stream(existing)
    result = subprocess.run(kubus_reconcile(cluster, prefix, tmp_path, "--metrics-port", "0", "--log-level", "error"),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"kubus reconcile: stream {name} does not fit kubus: {field.format(prefix=prefix)}; change the stream back, "
        "delete it (losing its messages), or give this kubus another --prefix"], result.stderr
    async with jetstream(cluster) as js:
        kept = (await js.stream_info(name)).config
        assert (kept.subjects, kept.retention) == (existing.subjects, retention)


async def test_the_executor_reads_a_pods_last_state_from_any_replica_of_kubus_state(cluster: NatsCluster) -> None:
    """On an R3 KUBUS_STATE every replica answers direct gets (allow_direct): the executor's read of a deleted pod's
    last state (executor/laststate.py) works through a connection to any server of the cluster. A follower may
    answer from behind: that is the stale version a delete's precondition catches (409, then the GET)."""
    prefix = fresh_prefix()
    nc = await connect(cluster.seeds, "test", reconnect=False)
    try:
        bus = await ensure_streams(nc, prefix=prefix, partitions=4, settings=StreamSettings(replicas=3))
        assert (await bus.js.stream_info(bus.stream(subjects.STATE_STREAM))).config.allow_direct is True
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "web-0", "namespace": "test", "uid": "uid-web-0", "resourceVersion": "7",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-uid",
                                 "controller": True}]}}
        event = ObservedEvent(kind="Pod", type="ADDED", namespace="test", name="web-0", uid="uid-web-0",
                              resource_version="7", observed_at="2026-01-01T00:00:00Z", ingest="ingest-0",
                              object=msgspec.Raw(msgspec.json.encode(pod)))
        await bus.js.publish(subjects.event_subject(bus.partition_of("test"), "Pod", "uid-web-0", prefix),
                             codec.encode(event))
        want = Controlled("test", "web-0", "uid-web-0", "7", "ReplicaSet", "web", "rs-uid")
        for url in (node.url for node in cluster.nodes.values()):
            server = await connect(url, "test", reconnect=False)
            try:
                states = LastStates(server, bus.stream(subjects.STATE_STREAM), prefix, bus.partitions)
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 30
                while (found := await states.controlled("Pod", "test", "uid-web-0")) != want:
                    assert loop.time() < deadline, f"{url}: {found}"
                    await asyncio.sleep(0.1)  # polling KUBUS_STATE's copy on that server's replica
            finally:
                await server.close()
    finally:
        await nc.close()
