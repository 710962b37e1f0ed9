"""Cluster identity (issue 15): the streams belong to the cluster whose ingest recorded its kube-system uid first;
an ingest pointed at another cluster publishes nothing and stops with one line naming both uids (exit 2)."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from ingest.config import IngestConfig
from ingest.identity import ClusterMismatch, claim
from messages import subjects
from reconciler.bootstrapping import bootstrap
from reconciler.core.cache import Cache
from runtime.bus import StreamSettings, ensure_streams, wanted
from runtime.natsserver import EmbeddedNats
from tests.ingest.harness import Running, api, bus_events, eventually
from tests.simulation import SimProcess


@pytest.fixture(scope="module")
def other_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """Another cluster, started with the same seed as the module's `sim`: every seeded uid alike but kube-system's."""
    proc = SimProcess(tmp_path_factory.mktemp("other-sim"), "--nodes", "1", "--kubelet-delay", "0.05",
                      "--seed", "11")
    yield proc
    code = proc.stop()
    assert code == 0, f"kubus sim exited with {code}:\n{proc.log_path.read_text()}"


async def kube_system(sim: SimProcess) -> str:
    return str((await api(sim, "GET", "/api/v1/namespaces/kube-system"))["metadata"]["uid"])


async def test_each_sim_is_a_cluster_of_its_own(sim: SimProcess, other_sim: SimProcess) -> None:
    first, other = await kube_system(sim), await kube_system(other_sim)
    assert first != other
    assert await kube_system(sim) == first  # stable for the instance's life


async def test_an_ingest_of_another_cluster_publishes_nothing(
        sim: SimProcess, other_sim: SimProcess, js: JetStreamContext, config: IngestConfig, prefix: str) -> None:
    """The first ingest records its cluster; a second pointed at another sim stops before publishing, naming both."""
    ours, theirs = await kube_system(sim), await kube_system(other_sim)
    first = Running(config)
    try:
        await first.synced()
        published = len(await bus_events(js, prefix))
        assert first.ingest.cluster == ours
        record = await js.get_last_msg(subjects.stream_name(subjects.STATE_STREAM, prefix),
                                       subjects.cluster_subject(prefix))
        assert f'"uid":"{ours}"'.encode() in record.data

        stray = Running(dataclasses.replace(config, kubeconfig=str(other_sim.kubeconfig), instance="ingest-stray"))
        with pytest.raises(ClusterMismatch) as refused:
            await asyncio.wait_for(stray.task, 30)
        message = str(refused.value)
        assert ours in message and theirs in message and "\n" not in message
        assert stray.counters()["published_total"] == 0
        assert len(await bus_events(js, prefix)) == published

        again = Running(dataclasses.replace(config, instance="ingest-b"))  # the same cluster again: welcome
        await again.synced()
        await again.stop()
    finally:
        await first.stop()


async def test_two_clusters_starting_at_once_record_one(nc: Client, prefix: str) -> None:
    bus = await ensure_streams(nc, prefix=prefix, partitions=4)
    outcomes = await asyncio.gather(claim(bus, "uid-a", "a", "t"), claim(bus, "uid-b", "b", "t"),
                                    return_exceptions=True)
    claims = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(claims) == 1 and claims[0].recorded
    [refusal] = [o for o in outcomes if isinstance(o, ClusterMismatch)]
    assert "uid-a" in str(refusal) and "uid-b" in str(refusal)


async def test_kubus_ingest_of_another_cluster_exits_2_with_one_line(
        sim: SimProcess, other_sim: SimProcess, nats_server: EmbeddedNats, js: JetStreamContext, prefix: str,
        tmp_path: Path) -> None:
    async def ingest(target: SimProcess, data: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kubus", "ingest", "--nats-url", nats_server.url, "--prefix", prefix,
            "--kubeconfig", str(target.kubeconfig), "--data-dir", str(tmp_path / data), "--metrics-port", "0",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)

    ours = await ingest(sim, "ours")
    try:
        async def recorded() -> bool:
            assert ours.returncode is None, "the first ingest stopped"
            try:
                await js.get_last_msg(subjects.stream_name(subjects.STATE_STREAM, prefix),
                                      subjects.cluster_subject(prefix))
            except NotFoundError:
                return False
            return True
        await eventually(recorded, 60, what="the first ingest to record its cluster")
        stray = await ingest(other_sim, "stray")
        _, err_bytes = await asyncio.wait_for(stray.communicate(), 60)
        err = err_bytes.decode()
        assert stray.returncode == 2, err
        lines = err.strip().splitlines()
        assert lines[-1].startswith(f"kubus ingest: the streams under prefix '{prefix}' belong to cluster "
                                    f"{await kube_system(sim)} "), lines
        assert f"reaches cluster {await kube_system(other_sim)}: refusing to publish" in lines[-1]
        # the way out where this is the cluster meant: state of its own, both its streams and its store (a new
        # --prefix alone would mix two clusters' histories in one audit trail)
        assert (f"give its kubus state of its own: another --prefix for its streams and another --data-dir for its "
                f"audit trail (SQLite, in {tmp_path / 'stray'}); if not, point --kubeconfig (or --context) at cluster "
                f"{await kube_system(sim)}") in lines[-1], lines
        assert "Traceback" not in err
    finally:
        ours.terminate()
        await asyncio.wait_for(ours.wait(), 15)


async def test_streams_made_before_the_identity_get_its_subject(nc: Client, prefix: str) -> None:
    """KUBUS_STATE created by an earlier kubus (no subject of its own) gains `<prefix>.cluster` at the next start,
    keeping what the operator set; a reconciler bootstrapping from a state that holds only the identity is done."""
    js = nc.jetstream()
    for config in wanted(prefix, 4, 3600.0, StreamSettings()):
        if config.name == subjects.stream_name(subjects.STATE_STREAM, prefix):
            config = dataclasses.replace(config, subjects=None, max_bytes=64 * 1024 * 1024)
        await js.add_stream(config)
    bus = await ensure_streams(nc, prefix=prefix, partitions=4)
    state: StreamConfig = (await js.stream_info(bus.stream(subjects.STATE_STREAM))).config
    assert state.subjects == [subjects.cluster_subject(prefix)]
    assert state.max_bytes == 64 * 1024 * 1024
    assert (await claim(bus, "uid-a", "a", "t")).recorded
    loaded = await asyncio.wait_for(bootstrap(bus, Cache(), lambda subject: True), 30)
    assert loaded.loaded == 0
