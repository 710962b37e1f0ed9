"""`kill -USR1` makes a running service log what each of its asyncio tasks is waiting on and where each thread is,
and keep running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from runtime.natsserver import EmbeddedNats
from tests.simulation import wait_for


async def test_sigusr1_logs_every_task_and_the_service_runs_on(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    log_path = tmp_path / "reconcile.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kubus", "reconcile", "--nats-url", nats_server.url, "--data-dir", str(tmp_path),
             "--metrics-port", "0", "--lease-ttl", "3", "--instance", "dump"],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "deciding for partition(s)" in log_path.read_text(), timeout=30,
                 what="the reconciler to hold its partitions")
        os.kill(proc.pid, signal.SIGUSR1)
        def dumped() -> str | None:
            text = log_path.read_text()
            return text if "asyncio tasks:" in text else None

        dump = wait_for(dumped, timeout=15, what="the task dump in the log")
        for task in ("--- lease-keeper", "--- reconciler-partitions", "--- outbox-relay"):
            assert task in dump, f"{task} missing from the dump:\n{dump}"
        # and every thread, the store driver's workers too: a worker blocked on a lock, or one the exit would wait for
        assert "--- thread MainThread (non-daemon)" in dump, dump
        assert "_connection_worker_thread" in dump, f"no aiosqlite worker thread in the dump:\n{dump}"
        assert proc.poll() is None, "the service stopped after the dump"
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0
