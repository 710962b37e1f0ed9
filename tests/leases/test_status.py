"""`kubus status`: members, partitions with owner, epoch, expiry, position and lag, and the outbox,
from a scripted store (and a real nats-server for the lag)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from kubus import cli, status_command
from messages import subjects
from runtime.bus import connect, ensure_streams
from runtime.natsserver import EmbeddedNats
from runtime.ports import free_port
from store import leases
from store.engine import Store, open_store, upgrade
from store.leases import LeaseClock
from store.outbox import OutboxRow
from store.tables import metadata
from tests.store.builders import T0, decision

TTL = 10.0


@pytest.fixture
def lease_clock() -> LeaseClock:
    """The scripted store is written at T0, long past: leases measured on the test's clock, on PostgreSQL too
    (test_clock_skew.py checks that `kubus status` reads PostgreSQL's clock)."""
    return "local"


async def script(store: Store, now: datetime, prefix: str = "kubus") -> None:
    """Two live reconcilers and a dead one; partitions 0-3: a holds 0 and 1, b holds 2, 3's lease
    expired 4 s ago with its holder gone; positions for 0, 1 and the cluster partition; three pending
    actions (two of partition 0, one of 2) and a sent one."""
    def ago(seconds: float) -> datetime:
        return now - timedelta(seconds=seconds)

    async with store.transaction() as tx:
        await leases.join(tx.conn, "reconciler-a", now=ago(60), info={"host": "h1"})
        await leases.heartbeat(tx.conn, "reconciler-a", now=ago(2), info={"host": "h1"})
        await leases.join(tx.conn, "reconciler-b", now=ago(30))
        await leases.join(tx.conn, "reconciler-c", now=ago(40))
        await leases.heartbeat(tx.conn, "reconciler-c", now=ago(14))
        await leases.acquire(tx.conn, "reconciler-c", [3], now=ago(14), ttl=TTL)
        await leases.acquire(tx.conn, "reconciler-a", [0, 1, 2], now=ago(30), ttl=TTL)
        await leases.acquire(tx.conn, "reconciler-b", [2], now=ago(5), ttl=TTL)  # a's expired at -20
        await leases.heartbeat(tx.conn, "reconciler-b", now=ago(1))
        await leases.renew(tx.conn, "reconciler-a", {0: 1, 1: 1}, now=ago(20), ttl=TTL)
        await leases.acquire(tx.conn, "reconciler-a", [0, 1], now=ago(2), ttl=TTL)  # epoch 2 (own, expired)
        await leases.renew(tx.conn, "reconciler-b", {2: 2}, now=ago(1), ttl=TTL)
        await tx.advance("reconciler", 0, 5)
        await tx.advance("reconciler", 1, 3)
        await tx.advance("reconciler", -1, 4)
        ids = await tx.insert_decisions([decision("c-1"), decision("c-2", partition=2)])
        await tx.enqueue([
            OutboxRow(key="a-1", decision_id=ids[0], subject=f"{prefix}.actions.0", payload=b"{}", created_at=ago(9)),
            OutboxRow(key="a-2", decision_id=ids[0], subject=f"{prefix}.actions.0", payload=b"{}", created_at=ago(3)),
            OutboxRow(key="a-3", decision_id=ids[1], subject=f"{prefix}.actions.2", payload=b"{}", created_at=ago(5)),
            OutboxRow(key="a-4", decision_id=ids[1], subject=f"{prefix}.actions.2", payload=b"{}", created_at=ago(7)),
        ])
    await store.mark_sent(["a-4"])


async def test_report_from_the_store(store: Store) -> None:
    """Without NATS: who holds what under which epoch, expiries, positions and the outbox; no lag."""
    await script(store, T0)
    snap = await status_command.read_store(store)
    status = status_command.build(snap, None, status_command.NatsStatus(url=None, reachable=False, error="no nats"),
                                  now=T0, ttl=TTL, partitions=4, prefix="kubus")
    assert [(m.instance, m.live, m.heartbeat_age_s, m.partitions) for m in status.members] == [
        ("reconciler-a", True, 2.0, {"0": 2, "1": 2}),
        ("reconciler-b", True, 1.0, {"2": 2}),
        ("reconciler-c", False, 14.0, {}),
    ]
    assert status.members[0].info == {"host": "h1"}
    assert [(p.partition, p.owner, p.epoch, p.expires_in_s, p.position, p.lag, p.outbox_pending,
             p.outbox_oldest_age_s) for p in status.partitions] == [
        ("0", "reconciler-a", 2, 8.0, 5, None, 2, 9.0),
        ("1", "reconciler-a", 2, 8.0, 3, None, 0, None),
        ("2", "reconciler-b", 2, 9.0, None, None, 1, 5.0),
        ("3", "reconciler-c", 1, -4.0, None, None, 0, None),
        ("cluster", None, None, None, 4, None, 0, None),
    ]
    assert (status.outbox_pending, status.outbox_oldest_age_s) == (3, 9.0)
    text = status_command.render(status)
    rows = [line.split() for line in text.splitlines()]
    assert "nats:  no nats" in text
    assert "MEMBERS (2 live, lease ttl 10s)" in text
    assert ["reconciler-a", "live", "2s", "ago", "0(2)", "1(2)"] in rows
    assert ["reconciler-c", "gone", "14s", "ago", "-"] in rows
    assert ["PARTITION", "OWNER", "EPOCH", "EXPIRES", "POSITION", "LAG", "OUTBOX", "OLDEST"] in rows
    assert ["0", "reconciler-a", "2", "8s", "5", "-", "2", "9s"] in rows
    assert ["3", "reconciler-c", "1", "expired", "4s", "ago", "-", "-", "0", "-"] in rows
    assert ["cluster", "(every", "member)", "-", "-", "4", "-", "0", "-"] in rows
    assert text.endswith("OUTBOX: 3 pending, oldest 9s\n")


def test_cli_prints_the_store_even_when_nats_is_unreachable(db_url: str, backend: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`kubus status --json` against a scripted store and a NATS URL where nothing listens."""
    async def prepare() -> None:
        if backend == "postgresql":
            await upgrade(db_url, str(tmp_path))
        store = await open_store(db_url, str(tmp_path))
        try:
            async with store.engine.begin() as conn:
                for table in reversed(metadata.sorted_tables):
                    await conn.execute(sa.delete(table))
            await script(store, datetime.now(UTC))
        finally:
            await store.close()

    asyncio.run(prepare())
    port = free_port()
    code = cli.main(["status", "--db-url", db_url, "--data-dir", str(tmp_path), "--partitions", "4",
                     "--nats-url", f"nats://127.0.0.1:{port}", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["nats"]["reachable"] is False
    assert report["nats"]["error"].startswith(f"NATS unreachable: cannot reach NATS at nats://127.0.0.1:{port}")
    assert [(m["instance"], m["live"], m["partitions"]) for m in report["members"]] == [
        ("reconciler-a", True, {"0": 2, "1": 2}), ("reconciler-b", True, {"2": 2}), ("reconciler-c", False, {})]
    assert [(p["partition"], p["owner"], p["position"], p["outbox_pending"]) for p in report["partitions"]] == [
        ("0", "reconciler-a", 5, 2), ("1", "reconciler-a", 3, 0), ("2", "reconciler-b", None, 1),
        ("3", "reconciler-c", None, 0), ("cluster", None, 4, 0)]
    assert report["outbox_pending"] == 3

    assert cli.main(["status", "--db-url", db_url, "--data-dir", str(tmp_path), "--partitions", "4"]) == 0
    text = capsys.readouterr().out
    assert "nats:  no --nats-url given" in text and "PARTITIONS (4)" in text


def test_cli_without_a_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status", "--data-dir", str(tmp_path / "nothing")]) == 2  # a dependency missing at start: exit 2
    assert "no kubus database in" in capsys.readouterr().err
    assert not (tmp_path / "nothing").exists()


async def test_lag_per_partition_and_the_work_queue(store: Store, nats_server: EmbeddedNats) -> None:
    """Lag counts the events of each partition after its committed position; the executors' work
    queue shows what is queued. The partition count comes from the streams."""
    prefix = "stat"
    nc = await connect(nats_server.url, "test")
    try:
        bus = await ensure_streams(nc, prefix=prefix, partitions=3)
        events = [("0", 1), ("1", 2), ("0", 3), ("cluster", 4), ("0", 5), ("2", 6), ("cluster", 7)]
        for partition, n in events:
            await bus.js.publish(subjects.event_subject(partition, "Pod", f"uid-{n}", prefix), b"{}")
        from nats.js.api import AckPolicy, ConsumerConfig

        await bus.js.add_consumer(bus.stream(subjects.ACTIONS_STREAM), ConsumerConfig(
            durable_name="executor", ack_policy=AckPolicy.EXPLICIT, filter_subject=f"{prefix}.actions.>"))
        for n in range(2):
            await bus.js.publish(subjects.action_subject("0", prefix), b"{}", headers={"Nats-Msg-Id": f"x{n}"})
    finally:
        await nc.close()
    async with store.transaction() as tx:
        await tx.advance("reconciler", 0, 3)  # one event of partition 0 left (seq 5)
        await tx.advance("reconciler", -1, 4)  # one cluster event left (seq 7)
    status = await status_command.collect(db_url=str(store.engine.url.render_as_string(hide_password=False)),
                                          data_dir=".", nats_url=nats_server.url, prefix=prefix, partitions=16,
                                          ttl=TTL, now=T0)
    assert status.nats.reachable and status.nats.error is None
    assert status.partition_count == 3 and status.nats.events_last_seq == 7
    assert [(p.partition, p.position, p.lag) for p in status.partitions] == [
        ("0", 3, 1), ("1", None, 1), ("2", None, 1), ("cluster", 4, 1)]
    assert status.nats.executors == status_command.ExecutorQueue(consumer="executor", pending=2, in_flight=0,
                                                                 waiting_pulls=0)
    text = status_command.render(status)
    assert "KUBUS_EVENTS at sequence 7" in text
    assert "EXECUTORS: 2 actions queued, 0 in flight" in text


async def test_nats_without_kubus_streams(store: Store, nats_server: EmbeddedNats) -> None:
    status = await status_command.collect(db_url=str(store.engine.url.render_as_string(hide_password=False)),
                                          data_dir=".", nats_url=nats_server.url, prefix="none", partitions=2,
                                          ttl=TTL, now=T0)
    assert status.nats.reachable and status.nats.error == (
        "NATS reachable, but it holds no kubus streams for this --prefix")
    assert [p.partition for p in status.partitions] == ["0", "1", "cluster"]
