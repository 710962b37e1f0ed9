"""The history of a split deployment in a file: each member reads the whole of KUBUS_EVENTS, and a member
that takes partitions over re-reads the history from their committed positions, so its event lines go back
after such a start. The bundler gives every member's batches what that member read (a full export included),
the reader checks the order per member, and `--instance` picks one member out of a full export.

The input log here is written by hand (the shapes `reconciler.core.batch.start` and `run_batch` record), over
the messages of the synthetic world's stream; tests/split replays the files of a real deployment end to end."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reconciler.core.stepping import Message
from replay import fileformat
from replay.bundles import Bundle, RecordedDecision
from replay.fileformat import FormatError
from replay.source import EventReader, Recorded, SourceError, bundles, from_list, memory_opener, of_instance
from replay.synthetic import World
from store.ticks import Tick
from tests.replay.conftest import read

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def start(tick_id: int, instance: str, partitions: list[int], first_seq: int, last_seq: int,
          positions: dict[int, int]) -> Recorded:
    state: dict[str, Any] = {"positions": {str(p): s for p, s in positions.items()}, "expectations": {},
                             "backoff": {}, "partition_count": 4}
    return Recorded(Tick(id=tick_id, instance=instance, kind="start", at=T0 + timedelta(seconds=tick_id),
                         caught_up=False, first_seq=first_seq, last_seq=last_seq or None, partitions=partitions,
                         state=state), [])


def batch(tick_id: int, instance: str, partitions: list[int], first_seq: int, last_seq: int,
          decision_ids: tuple[int, ...] = ()) -> Recorded:
    at = T0 + timedelta(seconds=tick_id)
    decisions = [RecordedDecision(id=i, correlation_id=f"ReplicaSet/split/web@{last_seq}~{i}",
                                  controller_key="ReplicaSet/split/web", controller_kind="ReplicaSet", partition=0,
                                  stream_seq=last_seq, trigger=None, decided_at=at, summary={"reason": "synced"},
                                  actions=[]) for i in decision_ids]
    return Recorded(Tick(id=tick_id, instance=instance, kind="batch", at=at, caught_up=True, first_seq=first_seq,
                         last_seq=last_seq, partitions=partitions, decision_ids=list(decision_ids)), decisions)


def split_log() -> list[Recorded]:
    """Members a and b over 4 partitions: b starts after a has read some of the history (its bootstrap
    reflects up to 8), reads from 9 on, then takes over a's partitions after a dies, from a's committed
    position 15: it reads 16.. again after having read up to 20. Their transactions ran at once: b's drew
    decision id 12 before a's drew 30, a's committed first."""
    return [
        start(1, "a", [0, 1, 2, 3], 1, 0, {}),
        batch(2, "a", [0, 1, 2, 3], 1, 10),
        start(3, "a", [0, 1], 11, 10, {0: 10, 1: 9}),  # b joined: a hands partitions 2 and 3 over
        start(4, "b", [2, 3], 9, 8, {2: 8, 3: 10}),
        batch(5, "a", [0, 1], 11, 20, (30,)),
        batch(6, "b", [2, 3], 9, 20, (12,)),
        batch(7, "a", [0, 1], 21, 22),
        start(8, "b", [0, 1, 2, 3], 16, 22, {0: 15, 1: 22, 2: 20, 3: 20}),  # a died: b takes 0 and 1
        batch(9, "b", [0, 1, 2, 3], 16, 30, (31, 32)),
    ]


@pytest.fixture(scope="module")
def stream() -> list[Message]:
    world = World(nodes=4, seed=5)
    world.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "split"}})
    for i in range(30):
        world.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}", "namespace": "split"}})
    messages = list(world.stream)
    assert len(messages) >= 30, len(messages)
    return messages[:30]


def bundled(log: list[Recorded], stream: list[Message]) -> list[Bundle]:
    async def collect() -> list[Bundle]:
        return [b async for b in bundles(from_list(log), EventReader(memory_opener(stream), recent=8))]

    return asyncio.run(collect())


def seqs(found: list[Bundle]) -> dict[int, list[int]]:
    return {b.tick.id or 0: [m[0] for m in b.messages] for b in found if b.tick.kind == "batch"}


def written(found: list[Bundle]) -> bytes:
    out = io.BytesIO()
    fileformat.write(out, found, {"test": "split"})
    return out.getvalue()


def test_every_member_is_given_what_it_read_in_a_full_export(stream: list[Message]) -> None:
    log = split_log()
    full = seqs(bundled(log, stream))
    for member in ("a", "b"):
        alone = seqs(bundled([r for r in log if r.tick.instance == member], stream))
        assert {t: full[t] for t in alone} == alone, member
    # b read from 9 on, though a had taken up to 20 by then; and 16.. again after taking a's partitions over
    assert full[6] == list(range(9, 21)) and full[9] == list(range(16, 31))
    assert full[2] == list(range(1, 11)) and full[5] == list(range(11, 21)) and full[7] == [21, 22]


def test_a_member_that_took_over_reads_back_from_its_file(stream: list[Message]) -> None:
    log = [r for r in split_log() if r.tick.instance == "b"]
    data = written(bundled(log, stream))
    back = read(data)
    assert seqs(back) == {6: list(range(9, 21)), 9: list(range(16, 31))}
    assert [len(b.messages) for b in back if b.tick.kind == "start"] == [8, 22]  # the bootstraps


def test_one_member_out_of_a_full_export(stream: list[Message]) -> None:
    log = split_log()
    data = written(bundled(log, stream))
    for member in ("a", "b"):
        picked = list(of_instance(read(data), member, "full.jsonl"))
        alone = bundled([r for r in log if r.tick.instance == member], stream)
        assert [b.tick.id for b in picked] == [b.tick.id for b in alone]
        assert [[d.id for d in b.decisions or ()] for b in picked] == [[d.id for d in b.decisions or ()] for b in alone]
        assert seqs(picked) == seqs(alone)
    with pytest.raises(SourceError) as raised:
        list(of_instance(read(data), "c", "full.jsonl"))
    assert str(raised.value) == "full.jsonl holds no tick of reconciler instance 'c' (it holds: a, b)"


def edited(data: bytes, tick_id: int, **fields: Any) -> tuple[list[bytes], int]:
    """The file's lines with tick `tick_id`'s fields changed; the index of the first event line after it."""
    lines = data.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines)
              if json.loads(line).get("line") == "tick" and json.loads(line)["id"] == tick_id)
    tick = json.loads(lines[at])
    tick.update(fields)
    lines[at] = json.dumps(tick).encode() + b"\n"
    after = next(i for i in range(at + 1, len(lines)) if json.loads(lines[i]).get("line") == "event")
    return lines, after


def test_going_back_without_a_start_that_re_reads_is_out_of_order(stream: list[Message]) -> None:
    """The same file, but the takeover's start recorded as one that does not re-read (a reconciler alone,
    its bootstrap not behind): the events after it going back are a corrupted file, refused at the first
    of them."""
    log = [r for r in split_log() if r.tick.instance == "b"]
    lines, first = edited(written(bundled(log, stream)), 8, partitions=None)
    with pytest.raises(FormatError) as raised:
        read(b"".join(lines))
    assert raised.value.line == first + 1
    assert raised.value.reason == "event sequence 16 after 20: out of order (the batches of b before tick 9 took " \
                                  "up to 20)"


def test_a_batch_going_back_behind_its_own_member_is_out_of_order_in_a_full_export(stream: list[Message]) -> None:
    """In a full export, b's batch 6 (9..20) follows a's batch 5 (11..20): fine, each member has its own order.
    a's batch 7 holding 16..22 while a took up to 20 is not, nor is an event line going back within a batch."""
    found = bundled(split_log(), stream)
    (seventh,) = [i for i, b in enumerate(found) if b.tick.id == 7]
    found[seventh] = dataclasses.replace(found[seventh], tick=dataclasses.replace(found[seventh].tick, first_seq=16),
                                         messages=stream[15:22])
    lines = written(found).splitlines(keepends=True)
    tick = next(i for i, line in enumerate(lines) if json.loads(line).get("line") == "tick"
                and json.loads(line)["id"] == 7)
    first = tick - 7
    assert [json.loads(line)["seq"] for line in lines[first:tick]] == list(range(16, 23))
    with pytest.raises(FormatError) as raised:
        read(b"".join(lines))
    assert (raised.value.line, raised.value.reason) == (
        first + 1, "event sequence 16 after 20: out of order (the batches of a before tick 7 took up to 20)")
    lines[first], lines[first + 1] = lines[first + 1], lines[first]
    with pytest.raises(FormatError) as raised:
        read(b"".join(lines))
    assert (raised.value.line, raised.value.reason) == (first + 2, "event sequence 16 after 17: out of order")
