"""The controllers' settings: kube-controller-manager's --feature-gates and --min-resync-period, as the services
take them, as the controllers use them (the informers' periodic resync, the gated toleration operators) and as
every reconciler start records them for `kubus replay`."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kube.core import Toleration
from kube.features import FeatureGateError, FeatureGates
from kube.testing import daemonset, node, pod, replicaset
from kube.times import format_micro_time
from kubus.cli import build_parser
from messages.actions import CreatePods
from reconciler.core import stepping
from reconciler.core.cache import Cache
from reconciler.core.controllers import (
    DEFAULT_MIN_RESYNC_PERIOD,
    RESYNC_TRIGGER,
    Controllers,
    Outcome,
    Settings,
    resync_period,
)
from reconciler.core.daemonset.handlers import controller_key as ds_key
from reconciler.core.replicaset.handlers import controller_key as rs_key
from reconciler.service import settings_of
from tests.reconciler.builders import NOW, Cluster
from tests.reconciler.test_daemonset_sync import revision_of

HOUR = timedelta(hours=1)
GATE_ON = FeatureGates(taint_toleration_comparison_operators=True)


# --- ResyncPeriod ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", ["reconciler-a", "reconciler-b", "reconciler-host-1234", ""])
def test_resync_period_is_between_the_minimum_and_twice_it(seed: str) -> None:
    """ResyncPeriod: MinResyncPeriod * (rand.Float64() + 1), a factor in [1, 2)."""
    period = resync_period(DEFAULT_MIN_RESYNC_PERIOD, seed)
    assert period is not None
    assert DEFAULT_MIN_RESYNC_PERIOD <= period < 2 * DEFAULT_MIN_RESYNC_PERIOD
    assert resync_period(DEFAULT_MIN_RESYNC_PERIOD, seed) == period  # derived from the seed, not drawn


def test_resync_periods_of_different_instances_differ() -> None:
    """So that several processes do not resync in lock-step (why upstream randomizes it)."""
    periods = {resync_period(DEFAULT_MIN_RESYNC_PERIOD, f"reconciler-{i}") for i in range(20)}
    assert len(periods) == 20


@pytest.mark.parametrize("minimum", [timedelta(0), -HOUR])
def test_no_minimum_no_resync(minimum: timedelta) -> None:
    """--min-resync-period 0: informers without a resync period never resync."""
    assert resync_period(minimum, "reconciler-a") is None


# --- the record a start keeps -----------------------------------------------------------------------------

@pytest.mark.parametrize("settings", [
    pytest.param(Settings(), id="defaults"),
    pytest.param(Settings(GATE_ON, timedelta(hours=17, microseconds=3)), id="gate-on-resync"),
])
def test_settings_survive_the_start_tick(settings: Settings) -> None:
    """What a start records is what a replay of it decides with."""
    state = settings.start_state()
    assert state["feature_gates"] == {
        "DeploymentReplicaSetTerminatingReplicas": settings.feature_gates.deployment_replica_set_terminating_replicas,
        "TaintTolerationComparisonOperators": settings.feature_gates.taint_toleration_comparison_operators}
    assert Settings.from_start_state({"positions": {}, **state}) == settings


def test_a_start_recorded_before_settings_were_recorded_replays_with_the_old_defaults() -> None:
    """Histories from before: no gate on, no periodic resync (what the reconciler did then)."""
    assert Settings.from_start_state({"positions": {}}) == Settings()
    assert Settings.from_start_state(None) == Settings()


def test_a_start_record_with_an_unknown_gate_is_refused() -> None:
    with pytest.raises(FeatureGateError, match="unrecognized feature gate: Nope"):
        Settings.from_start_state({"feature_gates": {"Nope": True}})


# --- the flags -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["up", "reconcile"])
def test_the_flags_of_the_deciding_services(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBUS_FEATURE_GATES", raising=False)
    monkeypatch.delenv("KUBUS_MIN_RESYNC_PERIOD", raising=False)
    args = build_parser().parse_args([command])
    assert (args.feature_gates, args.min_resync_period) == (FeatureGates(), timedelta(hours=12))
    args = build_parser().parse_args([command, "--feature-gates", "TaintTolerationComparisonOperators=true",
                                      "--min-resync-period", "30m"])
    assert (args.feature_gates, args.min_resync_period) == (GATE_ON, timedelta(minutes=30))


def test_the_flags_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBUS_FEATURE_GATES", " TaintTolerationComparisonOperators = True ")
    monkeypatch.setenv("KUBUS_MIN_RESYNC_PERIOD", "0")
    args = build_parser().parse_args(["reconcile"])
    assert (args.feature_gates, args.min_resync_period) == (GATE_ON, timedelta(0))


@pytest.mark.parametrize(("flag", "value", "message"), [
    pytest.param("--feature-gates", "SidecarContainers=true", "unrecognized feature gate: SidecarContainers",
                 id="unknown-gate-named"),
    pytest.param("--feature-gates", "TaintTolerationComparisonOperators",
                 "missing bool value for TaintTolerationComparisonOperators", id="no-value"),
    pytest.param("--feature-gates", "TaintTolerationComparisonOperators=yes",
                 "invalid value of TaintTolerationComparisonOperators=yes", id="not-a-bool"),
    pytest.param("--min-resync-period", "7d", 'time: unknown unit "d" in duration "7d"', id="not-a-go-duration"),
    pytest.param("--min-resync-period", "-1h", "must not be negative", id="negative"),
])
@pytest.mark.parametrize("command", ["up", "reconcile"])
def test_bad_flags_exit_2_naming_what_is_wrong(command: str, flag: str, value: str, message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([command, f"{flag}={value}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and message in err


@pytest.mark.parametrize(("variable", "value", "flag"), [
    ("KUBUS_FEATURE_GATES", "Bogus=true", "--feature-gates"),
    ("KUBUS_MIN_RESYNC_PERIOD", "soon", "--min-resync-period"),
])
def test_a_bad_variable_fails_the_deciding_services_only(variable: str, value: str, flag: str,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["reconcile"])
    assert exited.value.code == 2 and flag in capsys.readouterr().err
    assert build_parser().parse_args(["execute"]).command == "execute"


def test_the_service_turns_the_flags_into_settings() -> None:
    settings = settings_of(GATE_ON, timedelta(hours=12), "reconciler-a")
    assert settings == Settings(GATE_ON, resync_period(timedelta(hours=12), "reconciler-a"))
    assert settings_of(None, timedelta(0), "reconciler-a") == Settings()


async def test_every_loop_a_split_reconciler_builds_takes_the_service_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The split reconciler builds a new loop (and its controllers) per change of its partitions: each gets
    the service's settings, passed down explicitly."""
    from reconciler import partitioned

    ours = Settings(GATE_ON, HOUR)
    built: list[Settings | None] = []

    class Loop:
        def __init__(self, *args: object, settings: Settings | None = None, **kwargs: object) -> None:
            built.append(settings)

        async def run(self) -> None:
            return None

        def stop(self) -> None:
            return None

    async def no_results(*args: object, **kwargs: object) -> None:
        return None

    class Keeper:
        ttl = 3.0
        listener: object = None

    monkeypatch.setattr(partitioned, "Reconciler", Loop)
    monkeypatch.setattr(partitioned, "record_results", no_results)
    split = partitioned.PartitionedReconciler(object(), object(), Keeper(), "r", settings=ours)  # type: ignore[arg-type]
    for fence in ({0: 1}, {0: 1, 1: 2}):
        await split._run_generation(fence)
    assert built == [ours, ours]
    assert Controllers(Cache()).settings == Settings()  # nothing global: no settings, the defaults


# --- the periodic resync ---------------------------------------------------------------------------------------

def world(settings: Settings) -> tuple[Cluster, Controllers]:
    """Two ReplicaSets, a DaemonSet, a node and a pod, every controller synced once (caught up, at NOW)."""
    rs_a, rs_b = replicaset("a").replicas(0).build(), replicaset("b").ns("z").replicas(0).build()
    cluster = Cluster()
    controllers = Controllers(cluster.cache, settings=settings)
    controllers.observe([cluster.add(o) for o in (node("n1").ready().build(), rs_b, rs_a, daemonset("d").build(),
                                                  pod("loner").build())], NOW)
    controllers.resync_all()
    controllers.sync_ready(NOW, format_micro_time(NOW))
    return cluster, controllers


def synced(controllers: Controllers, at: timedelta) -> list[tuple[str, str | None]]:
    now = NOW + at
    return [(d.controller_key, d.trigger) for d in controllers.sync_ready(now, format_micro_time(now)).decisions]


def test_every_replicaset_and_daemonset_is_synced_each_resync_period() -> None:
    """The informers resync every period: updateRS and updateDaemonset enqueue on every update (old == new);
    updatePod (same resourceVersion) and updateNode (labels and taints unchanged) ignore it."""
    _, controllers = world(Settings(resync_period=HOUR))
    assert controllers.next_resync == NOW + HOUR  # armed by the first sync after catching up
    assert controllers.next_ready_at() == NOW + HOUR
    assert synced(controllers, HOUR - timedelta(microseconds=1)) == []
    everything = [(str(rs_key("default", "a")), RESYNC_TRIGGER), (str(rs_key("z", "b")), RESYNC_TRIGGER),
                  (str(ds_key("default", "d")), RESYNC_TRIGGER)]
    assert synced(controllers, HOUR) == everything
    assert controllers.next_resync == NOW + 2 * HOUR  # again one period after the resync
    assert synced(controllers, 2 * HOUR - timedelta(seconds=1)) == []
    assert synced(controllers, 2 * HOUR + timedelta(seconds=3)) == everything  # a late loop: now + period
    assert controllers.next_resync == NOW + 3 * HOUR + timedelta(seconds=3)


def test_a_key_already_waiting_is_synced_once() -> None:
    """The work queue keeps one entry per key: a resync of a key already queued adds nothing."""
    cluster, controllers = world(Settings(resync_period=HOUR))
    controllers.observe([cluster.update(replicaset("a").replicas(1).rv("7").build())], NOW + HOUR)
    keys = [k for k, _ in synced(controllers, HOUR)]
    assert keys.count(str(rs_key("default", "a"))) == 1 and len(keys) == 3


def test_without_a_resync_period_nothing_is_synced_again() -> None:
    _, controllers = world(Settings())
    assert controllers.next_resync is None and controllers.next_ready_at() is None
    assert synced(controllers, 100 * HOUR) == []


def test_the_batch_that_arms_the_resync_is_recorded() -> None:
    """stepping.decide says the batch touched the controllers' memory when it (re)arms the resync, even with
    nothing else to do: the live loop then records it, and a replay arms the resync at the same clock."""
    controllers = Controllers(Cache(), settings=Settings(resync_period=HOUR))
    stepping.decide(controllers, [], [], NOW, caught_up=False)  # not caught up: no syncs, nothing armed
    assert controllers.next_resync is None and controllers.next_ready_at() is None
    second = NOW + timedelta(seconds=1)
    quiet = stepping.decide(controllers, [], [], second, caught_up=True)  # nothing queued, no backoff GC due
    assert quiet.touched and quiet.outcome.decisions == [] and controllers.next_resync == second + HOUR
    assert not stepping.decide(controllers, [], [], second + timedelta(seconds=30), caught_up=True).touched
    assert stepping.decide(controllers, [], [], second + HOUR, caught_up=True).touched
    assert controllers.next_resync == second + 2 * HOUR


# --- the gate through the controllers ---------------------------------------------------------------------------

@pytest.mark.parametrize(("settings", "woken", "created_on"), [
    pytest.param(Settings(), [], [], id="gate-off"),
    pytest.param(Settings(GATE_ON), [ds_key("default", "d")], ["tainted"], id="gate-on"),
])
def test_the_gate_reaches_the_node_handler_and_the_sync(settings: Settings, woken: list[str],
                                                        created_on: list[str]) -> None:
    """addNode enqueues the DaemonSets that should run on the new node: with Lt/Gt gated off, a node whose taint
    only a Gt toleration tolerates wakes none, and a sync creates nothing there."""
    ds = daemonset("d").uid("ds-uid").tolerations(
        Toleration(key="sla", operator="Gt", value="750", effect="NoSchedule")).build()
    cluster = Cluster(ds, revision_of(ds))
    controllers = Controllers(cluster.cache, settings=settings)
    controllers.take_changes(Outcome())
    controllers.observe([cluster.add(node("tainted").ready().taint("sla", "950", "NoSchedule").build())], NOW)
    assert controllers.queue.pop_ready(NOW) == woken
    controllers.resync_all()
    decided = controllers.sync_ready(NOW, format_micro_time(NOW)).decisions
    creates = [a for d in decided for a in d.actions if isinstance(a, CreatePods)]
    assert [n for d in decided for n in d.summary["creates"]] == created_on
    assert len(creates) == len(created_on)
