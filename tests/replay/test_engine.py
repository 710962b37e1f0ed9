"""The replay engine over a recorded history: the same decisions, byte for byte, restarts included; a
one-line change in the controllers' logic shows as the first divergent decision; histories it cannot
follow are refused."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest

from kube.core import Pod
from kube.pods import PodFacts
from replay.bundles import Bundle
from replay.engine import Engine, ReplayError
from replay.synthetic import World
from tests.replay.conftest import NAMESPACE, read


def test_the_replay_decides_what_was_recorded(world: World, history: bytes) -> None:
    engine = Engine(compare=True)
    stats = engine.run(read(history))
    assert engine.divergence is None, engine.divergence.describe()
    assert stats.starts == 2
    assert stats.decisions == stats.compared == world.decisions
    assert stats.events == len(world.stream)  # every message replayed once, none twice
    assert stats.results == sum(len(r.tick.results) for r in world.recorded)


def test_the_history_holds_what_the_tests_rely_on(bundles: list[Bundle]) -> None:
    """Failed daemon pods deleted, a ReplicaSet scale-down with a ranking, refused creates, a restart."""
    decisions = [d for b in bundles for d in b.decisions or ()]
    agent = [d for d in decisions if d.controller_key == f"DaemonSet/{NAMESPACE}/agent"]
    assert any(isinstance(d.summary.get("rollout"), dict) and d.summary["rollout"]["deleting"] for d in agent)
    web = [d for d in decisions if d.controller_key == f"ReplicaSet/{NAMESPACE}/web"]
    assert any(len(d.summary.get("deletes") or ()) == 3 for d in web)
    assert any(r.outcome == "failed" for b in bundles for r in b.results)
    assert [b.tick.kind for b in bundles].count("start") == 2


def test_a_changed_ranking_diverges_at_the_scale_down(bundles: list[Bundle], monkeypatch: pytest.MonkeyPatch) -> None:
    """The test double: the ReplicaSet deletes the pods upstream's ranking keeps (one line: the order reversed)."""
    import reconciler.core.replicaset.sync as rs_sync
    from reconciler.core.ranking import pods_to_delete_order, ranks_by_related_pods_on_same_node

    def reversed_order(facts: list[PodFacts], related: list[Pod], diff: int, now: datetime) -> list[Pod]:
        pods = [f.pod for f in facts]
        return list(reversed(pods_to_delete_order(pods, ranks_by_related_pods_on_same_node(pods, related), now)))[:diff]

    monkeypatch.setattr(rs_sync, "pods_to_delete", reversed_order)
    expected = next((b, d) for b in bundles for d in b.decisions or () if d.summary.get("deletes")
                    and d.controller_key.startswith("ReplicaSet/"))
    engine = Engine(compare=True)
    engine.run(bundles)
    divergence = engine.divergence
    assert divergence is not None
    assert (divergence.tick, divergence.correlation_id) == (expected[0].tick.id, expected[1].correlation_id)
    assert divergence.what.startswith("actions[0]") or divergence.what.startswith("summary.deletes"), divergence.what
    assert divergence.index == expected[0].decisions.index(expected[1])  # type: ignore[union-attr]


def test_without_compare_nothing_is_checked(bundles: list[Bundle], monkeypatch: pytest.MonkeyPatch) -> None:
    import reconciler.core.daemonset.rollout as rollout
    import reconciler.core.daemonset.sync as ds_sync
    budgets = rollout.rollout_budgets
    monkeypatch.setattr(rollout, "rollout_budgets", lambda ds, desired: (budgets(ds, desired)[0], 4))
    monkeypatch.setattr(ds_sync, "rollout_budgets", lambda ds, desired: (budgets(ds, desired)[0], 4))
    engine = Engine()
    engine.run(bundles)
    assert engine.divergence is None and engine.stats.compared == 0


def test_a_restart_that_loaded_something_else_is_a_divergence(bundles: list[Bundle]) -> None:
    restart = [i for i, b in enumerate(bundles) if b.tick.kind == "start"][1]
    tick = bundles[restart].tick
    assert tick.state is not None
    state = {**tick.state, "positions": {**tick.state["positions"], "0": 1}}
    changed = [*bundles[:restart], dataclasses.replace(bundles[restart], tick=dataclasses.replace(tick, state=state)),
               *bundles[restart + 1:]]
    engine = Engine(compare=True)
    engine.run(changed)
    divergence = engine.divergence
    assert divergence is not None and divergence.index == -1 and divergence.tick == tick.id
    assert divergence.what.startswith("loaded positions.0: recorded 1, replayed")
    assert "a restart" in divergence.describe()


def test_a_history_must_begin_with_a_start(bundles: list[Bundle]) -> None:
    with pytest.raises(ReplayError, match=r"tick 2: the history must begin with a start tick"):
        Engine().run(bundles[1:])


def test_interleaved_reconcilers_are_refused(bundles: list[Bundle]) -> None:
    batch = next(i for i, b in enumerate(bundles) if b.tick.kind == "batch")
    other = dataclasses.replace(bundles[batch], tick=dataclasses.replace(bundles[batch].tick, instance="intruder"))
    with pytest.raises(ReplayError, match=r"a batch of reconciler 'intruder' while 'world-1' runs"):
        Engine().run([*bundles[:batch], other])


def test_a_replay_starting_at_a_restart_needs_what_it_loaded(bundles: list[Bundle]) -> None:
    restart = [i for i, b in enumerate(bundles) if b.tick.kind == "start"][1]
    engine = Engine(compare=True)
    engine.run(bundles[restart:])  # from the second start on: what it loaded is recorded, so this works
    assert engine.divergence is None and engine.stats.compared > 0
    tick = bundles[restart].tick
    blind = dataclasses.replace(bundles[restart], tick=dataclasses.replace(tick, state=None))
    with pytest.raises(ReplayError, match=r"without a record of what it loaded"):
        Engine().run([blind, *bundles[restart + 1:]])


def test_a_history_of_compressed_events_replays_the_same(world: World, bundles: list[Bundle]) -> None:
    """Issue 15: ingest publishes an object larger than max_payload compressed. A history holding such
    events (as data_b64 lines: they are not JSON) replays to the decisions recorded from the plain ones."""
    import io

    from messages import codec
    from messages.observed import ObservedEvent
    from replay import fileformat

    def packed(payload: bytes | ObservedEvent) -> bytes:
        return codec.compress(codec.encode(payload) if isinstance(payload, ObservedEvent) else payload)

    compressed = [dataclasses.replace(b, messages=[(seq, subject, packed(p)) for seq, subject, p in b.messages])
                  for b in bundles]
    assert any(b.messages for b in compressed)
    out = io.BytesIO()
    fileformat.write(out, compressed, {})
    assert b'"data_b64"' in out.getvalue()
    engine = Engine(compare=True)
    stats = engine.run(read(out.getvalue()))
    assert engine.divergence is None, engine.divergence.describe()
    assert stats.decisions == stats.compared == world.decisions
