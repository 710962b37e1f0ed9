"""stepping.classify remembers the partition of a subject's head (all of it before the object's uid): every subject,
classified again and again in any order, gets what the subject alone says (stepping._classify)."""

from __future__ import annotations

import random

import pytest

from reconciler.core import stepping

PARTS = [["kubus", "bench", ""], ["events", "state", ""], ["0", "3", "15", "16", "cluster", "x", "03", ""],
         ["Pod", "Node", "ReplicaSet", ""]]
UIDS = ["u-1", "u-2", "", "a.b", "a.b.c", "."]


def _subjects(chooser: random.Random) -> list[str]:
    subjects = []
    for _ in range(3_000):
        parts = [chooser.choice(options) for options in PARTS]
        shape = chooser.random()
        if shape < 0.1:
            parts = parts[:chooser.randrange(len(parts))]  # too few parts
        subjects.append(".".join([*parts, chooser.choice(UIDS)]) if shape < 0.9 else chooser.choice(
            ["", "nodots", ".", "kubus.events.3.Pod", "kubus.events.3.Pod.u.v"]))
    return subjects


@pytest.mark.parametrize("count", [None, 16, 4])
def test_every_subject_is_classified_as_it_alone_says(monkeypatch: pytest.MonkeyPatch, count: int | None) -> None:
    monkeypatch.setattr(stepping, "_PARTITIONS", {})
    chooser = random.Random(10)
    subjects = _subjects(chooser)
    for subject in subjects + chooser.sample(subjects, len(subjects)):
        got, expected = stepping.classify(subject, count), stepping._classify(subject, count)
        assert got[0] == expected[0], subject
        assert (got[1] is None) == (expected[1] is None), subject
        if expected[1] is not None:
            assert got[1] is not None and (got[1].reason, str(got[1])) == (expected[1].reason, str(expected[1]))
    assert stepping._PARTITIONS[count], "nothing remembered"
