"""A sync held back by its expectations says why, in `kubus replay --explain` and `kubus audit controller`
(issue 21, 7: the first printed `reason:` blank, the second a `-`).

The history is `replay.synthetic.World`'s with one message a batch, so that the reconciler syncs a ReplicaSet
and a DaemonSet between the watch events of the pods they created, while some are still to be observed.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from replay import fileformat, synthetic
from replay.synthetic import World, daemonset, replicaset

RS_HELD = ("expectations not satisfied: waiting to observe 2 creates, expected since 2026-01-01T00:00:00.500Z "
           "(300ms ago; they expire after 5m0s): status only")
DS_HELD = ("expectations not satisfied: waiting to observe 3 creates, expected since 2026-01-01T00:00:01.200Z "
           "(300ms ago; they expire after 5m0s): status only")


@pytest.fixture
async def history_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(synthetic, "BATCH_SIZE", 1)  # a batch a message: syncs between the pods' ADDED events
    world = World(nodes=3, seed=3)
    world.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}})
    world.create(replicaset("web", "demo", 4))
    world.create(daemonset("agent", "demo", "busybox:1"))
    world.settle()
    # the history holds what the test is about: a ReplicaSet sync that expectations kept from manageReplicas
    assert any(d.summary.get("needs_sync") is False for r in world.recorded for d in r.decisions)
    out = io.BytesIO()
    fileformat.write(out, await world.bundle_list(), {"test": "held back"})
    path = tmp_path / "history.jsonl"
    path.write_bytes(out.getvalue())
    return path


def kubus(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kubus", *argv], capture_output=True, text=True, timeout=120)


def test_replay_explain_says_why_a_sync_held_back(history_file: Path) -> None:
    for controller, held in (("demo/web", RS_HELD), ("demo/agent", DS_HELD)):
        done = kubus("replay", "--from-file", str(history_file), "--explain", "--controller", controller)
        assert done.returncode == 0, done.stdout + done.stderr
        reasons = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("reason:")]
        assert reasons, done.stdout
        assert f"reason: {held}" in [r.split("; revision ")[0] for r in reasons], done.stdout
        assert all(r not in ("reason:", "reason: None") for r in reasons), done.stdout
    # and a replay words it the same: recorded and replayed held-back decisions are equal
    done = kubus("replay", "--from-file", str(history_file), "--diff")
    assert done.returncode == 0 and "no divergence" in done.stdout, done.stdout + done.stderr


def test_audit_controller_says_why_a_sync_held_back(history_file: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = kubus("events", "import", str(history_file), "--no-stream", "--data-dir", str(data))
    assert done.returncode == 0, done.stdout + done.stderr
    for controller, held in (("demo/web", RS_HELD), ("demo/agent", DS_HELD)):
        # the whole reason in `-o wide` (the default table fits 120 columns, cutting free text)
        done = kubus("audit", "controller", controller, "--since", "2026-01-01T00:00:00Z", "--data-dir", str(data),
                     "-o", "wide")
        assert done.returncode == 0, done.stdout + done.stderr
        assert held in done.stdout, done.stdout
        done = kubus("audit", "controller", controller, "--since", "2026-01-01T00:00:00Z", "--data-dir", str(data),
                     "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        syncs = json.loads(done.stdout)["syncs"]
        assert held in [s["decision_reason"] for s in syncs]
        assert all(s["decision_reason"] for s in syncs), [s for s in syncs if not s["decision_reason"]]
