"""`kubus replay` decides with the settings the reconciler ran with: the feature gates and the informers' resync
period recorded in every start tick. A history recorded with TaintTolerationComparisonOperators on and a 30 s
resync replays decision for decision; the same history replayed with other settings diverges."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from kube.features import FeatureGates
from reconciler.core.controllers import RESYNC_TRIGGER, Settings
from replay.bundles import Bundle
from replay.engine import Engine
from replay.synthetic import World, daemonset, replicaset

NAMESPACE = "gated"
RESYNC = timedelta(seconds=30)
GATED = Settings(FeatureGates(taint_toleration_comparison_operators=True), RESYNC)


def recorded(settings: Settings) -> tuple[World, list[Bundle]]:
    """Three nodes, one tainted sla=950:NoSchedule; a DaemonSet tolerating it with `Gt 750`; a ReplicaSet; a
    restart in the middle; a minute and more of quiet after each start (two resyncs each)."""
    world = World(nodes=3, seed=5, settings=settings)
    world.update("Node", "", "node-2", {"spec": {"taints": [{"key": "sla", "value": "950", "effect": "NoSchedule"}]}})
    world.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    agent = daemonset("agent", NAMESPACE, "busybox:1")
    agent["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "sla", "operator": "Gt", "value": "750", "effect": "NoSchedule"}]
    world.create(agent)
    world.create(replicaset("web", NAMESPACE, 2))
    world.run(70)
    world.restart()
    world.update("ReplicaSet", NAMESPACE, "web", {"spec": {"replicas": 3}})
    world.run(70)
    return world, asyncio.run(world.bundle_list())


@pytest.fixture(scope="module")
def gated() -> tuple[World, list[Bundle]]:
    return recorded(GATED)


def decisions_of(bundles: list[Bundle]) -> list[Any]:
    return [d for b in bundles for d in b.decisions or ()]


def with_start_state(bundles: list[Bundle], **changes: Any) -> list[Bundle]:
    """The history with every start tick's recorded state changed."""
    out = []
    for bundle in bundles:
        tick = bundle.tick
        if tick.kind == "start":
            assert tick.state is not None
            bundle = dataclasses.replace(bundle, tick=dataclasses.replace(tick, state={**tick.state, **changes}))
        out.append(bundle)
    return out


def test_every_start_records_the_settings(gated: tuple[World, list[Bundle]]) -> None:
    _, bundles = gated
    starts = [b.tick for b in bundles if b.tick.kind == "start"]
    assert len(starts) == 2
    for tick in starts:
        assert tick.state is not None
        assert tick.state["feature_gates"] == {"DeploymentReplicaSetTerminatingReplicas": True,
                                               "TaintTolerationComparisonOperators": True}
        assert tick.state["resync_period_us"] == 30_000_000


def test_the_history_holds_gated_placements_and_resyncs(gated: tuple[World, list[Bundle]]) -> None:
    """What the other tests rely on: a pod made for the Gt-tolerated node, and resyncs in both generations."""
    _, bundles = gated
    decisions = decisions_of(bundles)
    assert any("node-2" in (d.summary.get("creates") or ()) for d in decisions
               if d.controller_key == f"DaemonSet/{NAMESPACE}/agent")
    resynced = [d for d in decisions if d.trigger == RESYNC_TRIGGER]
    assert {d.controller_key for d in resynced} == {f"DaemonSet/{NAMESPACE}/agent", f"ReplicaSet/{NAMESPACE}/web"}
    starts = [i for i, b in enumerate(bundles) if b.tick.kind == "start"]
    for begin, end in ((starts[0], starts[1]), (starts[1], len(bundles))):
        assert any(d.trigger == RESYNC_TRIGGER for b in bundles[begin:end] for d in b.decisions or ())


def test_the_replay_decides_with_the_recorded_settings(gated: tuple[World, list[Bundle]]) -> None:
    world, bundles = gated
    engine = Engine(compare=True)
    stats = engine.run(bundles)
    assert engine.divergence is None, engine.divergence.describe()
    assert stats.decisions == stats.compared == world.decisions
    assert engine.controllers is not None and engine.controllers.settings == GATED


@pytest.mark.parametrize(("changes", "diverges_at"), [
    pytest.param({"feature_gates": {"TaintTolerationComparisonOperators": False}}, "DaemonSet/gated/agent",
                 id="gate-off-places-no-pod-on-the-tainted-node"),
    pytest.param({"resync_period_us": None}, None, id="no-resync-misses-the-resync-decisions"),
])
def test_other_settings_diverge(gated: tuple[World, list[Bundle]], changes: dict[str, Any],
                                diverges_at: str | None) -> None:
    _, bundles = gated
    engine = Engine(compare=True)
    engine.run(with_start_state(bundles, **changes))
    divergence = engine.divergence
    assert divergence is not None
    if diverges_at is not None:
        assert diverges_at in divergence.describe()


def test_gate_off_by_default_no_pod_on_the_tainted_node() -> None:
    """The same world with the defaults: Gt tolerates nothing, so node-2 gets no daemon pod; it replays too."""
    world, bundles = recorded(Settings())
    decisions = decisions_of(bundles)
    creates = {n for d in decisions if d.controller_key == f"DaemonSet/{NAMESPACE}/agent"
               for n in d.summary.get("creates") or ()}
    assert creates == {"node-0", "node-1"}
    assert not any(d.trigger == RESYNC_TRIGGER for d in decisions)
    engine = Engine(compare=True)
    engine.run(bundles)
    assert engine.divergence is None, engine.divergence.describe()
    assert engine.stats.compared == world.decisions
