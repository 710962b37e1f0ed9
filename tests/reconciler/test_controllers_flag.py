"""--controllers, kube-controller-manager's syntax (issue 24): the flag, and a controller turned off syncs nothing,
whatever wakes its objects; a replay takes the choice from the start record."""

from __future__ import annotations

import pytest

from kube.testing import daemonset, node, replicaset
from kube.times import format_micro_time
from kubus.cli import build_parser
from messages.keys import ControllerKey, ControllerKind
from reconciler.core.controllers import Controllers, Settings
from runtime.flags import controllers as parse_controllers
from tests.reconciler.builders import NOW, Cluster

BOTH = frozenset({"DaemonSet", "ReplicaSet"})


@pytest.mark.parametrize(("text", "enabled"), [
    ("*", BOTH),
    ("daemonset", {"DaemonSet"}),
    ("replicaset-controller", {"ReplicaSet"}),
    ("*,-replicaset", {"DaemonSet"}),
    ("*,-daemonset-controller", {"ReplicaSet"}),
    ("daemonset, replicaset", BOTH),
    ("-replicaset,*", {"DaemonSet"}),
])
def test_the_syntax(text: str, enabled: set[str]) -> None:
    assert parse_controllers(text) == enabled


@pytest.mark.parametrize("command", ["up", "reconcile"])
def test_the_default_is_every_controller(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBUS_CONTROLLERS", raising=False)
    assert build_parser().parse_args([command]).controllers == BOTH
    monkeypatch.setenv("KUBUS_CONTROLLERS", "*,-daemonset")
    assert build_parser().parse_args([command]).controllers == {"ReplicaSet"}


@pytest.mark.parametrize(("text", "said"), [
    ("deployment", "unknown controller 'deployment'"),
    ("*,-cronjob", "unknown controller 'cronjob'"),
    ("-daemonset,-replicaset", "enables no controller"),
    ("", "empty"),
])
def test_an_unknown_name_is_a_start_up_error_naming_it(text: str, said: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["reconcile", f"--controllers={text}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--controllers" in err and said in err, err


def test_a_controller_turned_off_syncs_nothing() -> None:
    cluster = Cluster()
    controllers = Controllers(cluster.cache, settings=Settings(controllers=frozenset({ControllerKind.DAEMON_SET})))
    rs = replicaset("web").replicas(2).build()
    controllers.observe([cluster.add(o) for o in (node("n1").ready().build(), rs, daemonset("agent").build())], NOW)
    controllers.resync_all()
    controllers.enqueue(ControllerKey(ControllerKind.REPLICA_SET, rs.metadata.namespace, "web"))
    decided = controllers.sync_ready(NOW, format_micro_time(NOW)).decisions
    assert [d.controller_kind for d in decided] == ["DaemonSet"], [d.controller_key for d in decided]


def test_both_run_by_default() -> None:
    cluster = Cluster()
    controllers = Controllers(cluster.cache)
    controllers.observe([cluster.add(o) for o in (node("n1").ready().build(), replicaset("web").replicas(2).build(),
                                                  daemonset("agent").build())], NOW)
    decided = controllers.sync_ready(NOW, format_micro_time(NOW)).decisions
    assert sorted(d.controller_kind for d in decided) == ["DaemonSet", "ReplicaSet"]


def test_the_choice_is_recorded_for_replay() -> None:
    settings = Settings(controllers=frozenset({ControllerKind.REPLICA_SET}))
    assert settings.start_state()["controllers"] == ["ReplicaSet"]
    assert Settings.from_start_state(settings.start_state()) == settings
    assert Settings.from_start_state({}).controllers == BOTH  # recorded before the flag: both ran
