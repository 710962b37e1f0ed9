"""The subject KindWatcher publishes an event on: messages.subjects.event_subject of the object's partition (a hash
of its namespace), kind and uid, under the bus's prefix, for namespaced and cluster-scoped objects alike, however
many namespaces it has seen."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

import ingest.watching
from ingest.backoff import Backoff
from ingest.counting import Counters
from ingest.kinds import KINDS
from ingest.watching import KindWatcher
from messages import subjects
from messages.observed import ObservedEvent
from runtime.bus import Bus


class Recording:
    def __init__(self) -> None:
        self.subjects: list[str] = []

    async def publish(self, subject: str, *args: Any) -> None:
        self.subjects.append(subject)


def event(kind: str, namespace: str, uid: str) -> ObservedEvent:
    return ObservedEvent(kind=kind, type="ADDED", namespace=namespace, name="n", uid=uid, resource_version="1",
                         observed_at="2026-01-01T00:00:00.000000Z", ingest="i", object=msgspec.Raw(b"{}"))


@pytest.mark.parametrize("kind", ["Pod", "Node"])
async def test_the_subject_is_event_subject(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest.watching, "_SUBJECT_BASES", 3)  # forgets what it remembered, often
    nc = SimpleNamespace(max_payload=1 << 20)
    bus = Bus(nc=nc, js=None, prefix="pfx", partitions=7)  # type: ignore[arg-type]
    publisher = Recording()
    watcher = KindWatcher(KINDS[kind], bus=bus, publisher=publisher, call=None,  # type: ignore[arg-type]
                          checkpoints=None, counters=Counters(), instance="i",  # type: ignore[arg-type]
                          backoff=Backoff(), watch_timeout=1, list_page_size=1)
    wanted = []
    for i in range(40):
        namespace = "" if kind == "Node" else f"ns-{i % 9}"
        uid = f"uid-{i}"
        await watcher._publish(event(kind, namespace, uid), position=None)
        wanted.append(subjects.event_subject(subjects.partition_of(namespace, 7), kind, uid, "pfx"))
    assert publisher.subjects == wanted and len(watcher._subject_base) <= 3
    assert len({s.split(".")[2] for s in wanted}) > (1 if kind == "Pod" else 0)  # several partitions seen
