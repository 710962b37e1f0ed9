"""The store and JetStream as a replay's source: `kubus events import` loads a file into an empty store and
an empty KUBUS_EVENTS (every message at its recorded sequence), the replay reads them back, the export
writes the same file again, and a window starting after a restart replays from that restart."""

from __future__ import annotations

import io
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from messages import subjects
from replay import exporting, fileformat
from replay.bundles import Bundle
from replay.engine import Engine
from replay.source import Window, live_bundles
from runtime.bus import Bus, connect, ensure_streams
from runtime.natsserver import EmbeddedNats
from store.engine import Store, open_store
from tests.replay.conftest import read


@pytest.fixture
async def bus(nats_server: EmbeddedNats) -> AsyncIterator[Bus]:
    nc = await connect(nats_server.url, "test")
    yield await ensure_streams(nc, prefix=f"r{uuid.uuid4().hex[:8]}", partitions=4)
    await nc.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await open_store(f"sqlite:///{tmp_path / 'kubus.db'}", str(tmp_path))
    yield opened
    await opened.close()


async def replayed(store: Store, bus: Bus, window: Window) -> tuple[Engine, list[Bundle]]:
    found = await live_bundles(store, bus, window)
    assert found is not None
    bundles, close = found
    seen = [b async for b in bundles]
    await close()
    engine = Engine(compare=True)
    engine.run(seen)
    return engine, seen


async def test_import_then_replay_and_export_from_the_store_and_jetstream(
        store: Store, bus: Bus, history_file: Path, history: bytes) -> None:
    counts = await exporting.import_file(str(history_file), store, bus)
    original = read(history)
    assert counts["ticks"] == len(original)
    stream = await bus.js.stream_info(bus.stream(subjects.EVENTS_STREAM))
    top = max(seq for b in original for seq, _, _ in b.messages)
    assert stream.state.last_seq == top  # every message at its own sequence
    engine, seen = await replayed(store, bus, Window())
    assert engine.divergence is None
    assert engine.stats.compared == sum(len(b.decisions or ()) for b in original) > 0
    assert [b.tick.id for b in seen] == [b.tick.id for b in original]
    assert [[m[0] for m in b.messages] for b in seen] == [[m[0] for m in b.messages] for b in original]
    out = io.BytesIO()
    assert await exporting.export(store, bus, out, Window()) is not None
    again = read(out.getvalue())
    assert [(b.tick, [m[0] for m in b.messages], b.results, b.decisions) for b in again] == \
        [(b.tick, [m[0] for m in b.messages], b.results, b.decisions) for b in original]
    with pytest.raises(exporting.ImportRefused, match="already holds an input log"):
        await exporting.import_file(str(history_file), store, None)
    with pytest.raises(exporting.ImportRefused, match="is not empty"):
        await exporting.import_file(str(history_file), None, bus)


async def test_a_window_after_a_restart_replays_from_that_restart(
        store: Store, bus: Bus, history_file: Path, history: bytes) -> None:
    await exporting.import_file(str(history_file), store, bus)
    original = read(history)
    restart = [i for i, b in enumerate(original) if b.tick.kind == "start"][1]
    after = next(b.tick.last_seq for b in original[restart + 1:] if b.tick.last_seq)
    assert after is not None
    engine, seen = await replayed(store, bus, Window(since_seq=after))
    assert seen[0].tick.id == original[restart].tick.id  # the nearest start that recorded what it loaded
    assert seen[0].messages  # its bootstrap: the last event of every object, read back from KUBUS_EVENTS
    assert engine.divergence is None and engine.stats.compared > 0
    out = io.BytesIO()
    await exporting.export(store, bus, out, Window(since_seq=after))
    engine = Engine(compare=True)
    engine.run(read(out.getvalue()))
    assert engine.divergence is None and engine.stats.starts == 1


async def test_the_commands(store: Store, bus: Bus, nats_server: EmbeddedNats, history_file: Path,
                            tmp_path: Path) -> None:
    source = ["--nats-url", nats_server.url, "--prefix", bus.prefix, "--data-dir", str(tmp_path)]
    done = subprocess.run([sys.executable, "-m", "kubus", "events", "import", str(history_file), *source],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-m", "kubus", "replay", *source, "--diff", "--controller", "demo/web"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "too many replicas: deleting 3" in done.stdout and "no divergence" in done.stdout
    exported = tmp_path / "again.jsonl"
    done = subprocess.run([sys.executable, "-m", "kubus", "events", "export", *source, "-o", str(exported)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert fileformat.read_file(str(exported))[0].kubus_events == fileformat.FORMAT
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"".join(exported.read_bytes().splitlines(keepends=True)[:-1]))
    done = subprocess.run([sys.executable, "-m", "kubus", "replay", "--from-file", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = len(exported.read_bytes().splitlines())
    assert done.stderr.strip() == f"kubus replay: {bad}: line {lines}: the file ends without its end line: truncated"
