"""PostgreSQL restarted in the middle of a reconciler's commit, the pipeline running as deployed (nats-server,
`kubus sim`, `kubus ingest`, a split `kubus reconcile`, `kubus execute`, separate processes) on a PostgreSQL of
the test's own (tests/postgres.py), so that it can be stopped and started.

The reconciler pauses with a batch of decisions written in its open transaction (the failpoint
`reconciler.before-commit=pause:FILE`); the test stops PostgreSQL (`-m fast`: sessions terminated, open
transactions rolled back; `-m immediate`: a crash, recovered from the WAL at the next start), starts it
again and lets the reconciler go on into its dead connection. Afterwards: the pods exactly as asked, each
decided and created once, every event of KUBUS_EVENTS observed and the positions at its end, every action
sent, and no service restarted: they recovered on their own.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
import sqlalchemy as sa

from messages import subjects
from runtime.bus import connect
from tests import postgres
from tests.pipeline.harness import SERVICES, Pipeline
from tests.simulation import wait_for

PODS = 24
pytestmark = pytest.mark.slow


@pytest.fixture
def embedded() -> Iterator[postgres.EmbeddedPostgres]:
    try:
        server = postgres.EmbeddedPostgres()
        server.start()
    except RuntimeError as exc:
        pytest.fail(f"cannot start the test's own PostgreSQL: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def db_url(embedded: postgres.EmbeddedPostgres, tmp_path: Path) -> str:
    asyncio.run(_execute(embedded.url, 'CREATE DATABASE "kubus"'))
    url = sa.make_url(embedded.url).set(database="kubus").render_as_string(hide_password=False)
    subprocess.run([sys.executable, "-m", "kubus", "db", "upgrade", "--db-url", url, "--data-dir", str(tmp_path)],
                   check=True, capture_output=True, timeout=120)
    return url


@pytest.fixture
def pipeline(tmp_path: Path, db_url: str) -> Iterator[Pipeline]:
    p = Pipeline(tmp_path, service_args=("--db-url", db_url))
    yield p
    p.stop()


async def _execute(url: str, statement: str) -> None:
    conn = await asyncpg.connect(url, timeout=10)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def sql(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    async def run() -> list[tuple[Any, ...]]:
        conn = await asyncpg.connect(url, timeout=10)
        try:
            return [tuple(row.values()) for row in await conn.fetch(query, *params)]
        finally:
            await conn.close()

    return asyncio.run(run())


def events_last_seq(p: Pipeline) -> int:
    async def run() -> int:
        nc = await connect(p.nats_url, "test-probe", reconnect=False)
        try:
            info = await nc.jetstream().stream_info(subjects.stream_name(subjects.EVENTS_STREAM, p.prefix))
            return int(info.state.last_seq)
        finally:
            await nc.close()

    return asyncio.run(run())


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_postgresql_restart_mid_commit_loses_and_duplicates_nothing(
        pipeline: Pipeline, embedded: postgres.EmbeddedPostgres, db_url: str, tmp_path: Path, mode: str) -> None:
    marker = tmp_path / "paused-in-commit"
    pipeline.start("ingest")
    pipeline.start("execute")
    pipeline.start("reconcile", f"reconciler.before-commit=pause:{marker}")
    pipeline.ask_for_pods("restart", PODS)
    wait_for(marker.exists, timeout=60, what="the reconciler paused inside a commit of decisions")

    embedded.stop_server(mode)
    embedded.start_server()
    marker.unlink()  # the reconciler goes on: its COMMIT meets a connection PostgreSQL closed

    def converged() -> bool:
        dead = {s: proc.returncode for s, proc in pipeline.procs.items() if proc.poll() is not None}
        assert not dead, f"services exited: {dead}"
        pods = pipeline.pods("restart")
        assert len(pods) <= PODS, f"{len(pods)} pods, more than the {PODS} asked for"
        return len(pods) == PODS

    try:
        wait_for(converged, timeout=120, interval=0.2, what=f"{PODS} pods")

        def caught_up() -> bool:
            last = events_last_seq(pipeline)  # the pods' later status changes still come in
            # from the first event a committed batch observed (the start before may skip what the cache
            # was bootstrapped with) every event to the stream's end, without a gap, and the positions there
            observed = {seq for (seq,) in sql(db_url, "select stream_seq from observed_events")}
            positions = [seq for (seq,) in sql(db_url, "select stream_seq from consumer_positions")]
            missing = sorted(set(range(min(observed, default=1), last + 1)) - observed)
            assert not missing and max(positions, default=0) == last, \
                f"events not observed: {missing}; positions {sorted(positions)}"
            return True

        wait_for(caught_up, timeout=60, interval=0.2,
                 what="every event observed without a gap, and the positions at the stream's end")
        wait_for(lambda: not sql(db_url, "select key from outbox where state <> 'sent'"), timeout=60, interval=0.2,
                 what="every action sent")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{pipeline.logs()}") from None

    pods = pipeline.pods("restart")
    keys = sorted(pod["metadata"]["annotations"]["kubus.io/idempotency-key"] for pod in pods)
    assert len(set(keys)) == PODS, "two pods carry the same idempotency key"
    decided = sorted(str(k) for (k,) in sql(
        db_url, "select t.key from action_targets t join outbox o on o.key = t.action_key "
                "join decisions d on d.id = o.decision_id where t.action = 'create_pods' "
                "and d.controller_key = 'ReplicaSet/restart/web'"))
    assert decided == keys, "every pod decided once, and no pod decided that was not created"
    # a batch committed twice would record its events' decisions twice: one event, one sync of a key. (Two syncs
    # at one stream position with equal outcomes are no such thing: a requeue without an event, e.g. when the
    # last result of a round comes in, syncs again at the same position; its trigger is none.)
    triggers = sql(db_url, "select controller_key, trigger, count(*) from decisions where trigger not in ('resync') "
                           "group by controller_key, trigger having count(*) > 1")
    assert triggers == [], f"a decision committed twice: {triggers}"
    assert all(pipeline.restarts[s] == 0 and pipeline.procs[s].poll() is None for s in SERVICES), \
        "a service restarted"
    log = (tmp_path / "reconcile.log").read_text()
    assert "the database is away" in log, "the reconciler never saw the restart"
