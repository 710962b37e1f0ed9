"""The flags of issue 24: every flag has its KUBUS_<FLAG> variable, said in its help; kube-controller-manager's
--kube-api-qps/--kube-api-burst (--qps/--burst kept); the executor's concurrency per controller;
--health-probe-bind-address beside --metrics-bind-address, /healthz and /readyz served there."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

import aiohttp
import pytest

from kubus.cli import build_parser
from runtime import flags
from runtime.natsserver import EmbeddedNats
from runtime.ports import free_port
from runtime.running import Options, Runtime, run_service

PROBE = "__probe__"


def _positionals(path: list[str], flag: str) -> list[str]:
    """What each command needs besides the flag under test."""
    needs = {("audit", "pod"): ["ns/pod"], ("audit", "controller"): ["ns/web"], ("audit", "timeline"): ["ds/web"],
             ("events", "import"): ["f.jsonl"],
             ("completion",): ["bash"], ("db", "prune"): ["--older-than", "7d"]}.get(tuple(path), [])
    return needs if flag not in needs else []


def _every_flag() -> list[tuple[list[str], argparse.Action]]:
    return flags.flag_actions(build_parser())


def test_there_are_flags_to_walk() -> None:
    commands = {tuple(path) for path, _ in _every_flag()}
    assert {("up",), ("sim",), ("audit", "pod"), ("replay",), ("events", "export"), ("db", "prune")} <= commands


@pytest.mark.parametrize(("path", "flag"), [(path, action.option_strings[0]) for path, action in _every_flag()],
                         ids=lambda value: " ".join(value) if isinstance(value, list) else value)
def test_every_flag_has_its_variable_said_in_its_help_and_read(path: list[str], flag: str,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    for name in [n for n in os.environ if n.startswith("KUBUS_")]:
        monkeypatch.delenv(name)
    action = next(a for p, a in _every_flag() if p == path and a.option_strings[0] == flag)
    variable = flags.env_name(action)
    assert f"env {variable}" in (action.help or ""), (flag, action.help)
    argv = [*path, *_positionals(path, flag)]
    unset = None if action.required else vars(build_parser().parse_args(argv)).get(action.dest)
    monkeypatch.setenv(variable, PROBE)  # read: either the value changes, or the command refuses it, naming the flag
    try:
        probed = vars(build_parser().parse_args(argv)).get(action.dest)
    except SystemExit as exited:
        assert exited.code == 2
        assert any(option in capsys.readouterr().err for option in action.option_strings), flag
    else:
        assert probed != unset, (flag, variable, probed)


def test_a_switch_and_a_repeatable_flag_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBUS_NO_KUBELET", "true")
    monkeypatch.setenv("KUBUS_NODE_TAINT", "a=b:NoSchedule; c:NoExecute")
    monkeypatch.setenv("KUBUS_LOG_FORMAT", "json")
    args = build_parser().parse_args(["sim"])
    assert (args.no_kubelet, args.node_taint, args.log_format) == (True, ["a=b:NoSchedule", "c:NoExecute"], "json")
    args = build_parser().parse_args(["sim", "--log-format", "text", "--node-taint", "x:NoSchedule"])
    # the flag wins over the variable; a repeatable flag adds to the variable's values
    assert (args.log_format, args.node_taint) == ("text", ["a=b:NoSchedule", "c:NoExecute", "x:NoSchedule"])


def test_a_bad_choice_in_a_variable_fails_only_the_commands_that_have_the_flag(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBUS_LOG_LEVEL", "loud")
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["reconcile"])
    assert exited.value.code == 2 and "--log-level" in capsys.readouterr().err
    assert build_parser().parse_args(["audit", "failures"]).audit_command == "failures"


# --- --kube-api-qps, --kube-api-burst ---------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["up", "execute"])
@pytest.mark.parametrize(("argv", "env", "qps", "burst"), [
    ([], {}, 20.0, 30),
    (["--kube-api-qps", "50", "--kube-api-burst", "100"], {}, 50.0, 100),
    (["--qps", "5", "--burst", "7"], {}, 5.0, 7),
    ([], {"KUBUS_KUBE_API_QPS": "40", "KUBUS_KUBE_API_BURST": "60"}, 40.0, 60),
    ([], {"KUBUS_QPS": "3", "KUBUS_BURST": "4"}, 3.0, 4),
    ([], {"KUBUS_QPS": "3", "KUBUS_KUBE_API_QPS": "9"}, 9.0, 30),
])
def test_the_api_limits(command: str, argv: list[str], env: dict[str, str], qps: float, burst: int,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KUBUS_QPS", "KUBUS_BURST", "KUBUS_KUBE_API_QPS", "KUBUS_KUBE_API_BURST"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args([command, *argv])
    assert (args.qps, args.burst) == (qps, burst)


@pytest.mark.parametrize("command", ["up", "execute"])
def test_the_concurrent_syncs(command: str, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("KUBUS_CONCURRENT_DAEMONSET_SYNCS", raising=False)
    monkeypatch.setenv("KUBUS_CONCURRENT_REPLICASET_SYNCS", "5")
    args = build_parser().parse_args([command, "--concurrent-daemonset-syncs", "2"])
    assert (args.concurrent_daemonset_syncs, args.concurrent_replicaset_syncs) == (2, 5)
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--concurrent-daemonset-syncs", "0"])
    assert "--concurrent-daemonset-syncs: must be at least 1" in capsys.readouterr().err


# --- --health-probe-bind-address ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "probes"), [
    ([], None),
    (["--health-probe-bind-address", ":8081"], ("", 8081)),
    (["--health-probe-bind-address", "127.0.0.1:9440"], ("127.0.0.1", 9440)),
    (["--health-probe-bind-address", "0"], ("", 0)),
])
def test_where_the_probes_are_served(argv: list[str], probes: tuple[str, int] | None,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBUS_HEALTH_PROBE_BIND_ADDRESS", raising=False)
    assert flags.options_of(build_parser().parse_args(["reconcile", *argv])).probes == probes


async def _status(url: str) -> int | None:
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status
    except aiohttp.ClientConnectionError:
        return None


def _serve_until_asked(options: Options, ask: object) -> int:
    """Runs a service whose one part runs `ask` (an async function of nothing) and then returns, which ends it."""
    async def build(_: Runtime) -> dict[str, object]:
        async def part() -> None:
            await ask()  # type: ignore[operator]
            raise asyncio.CancelledError  # a clean stop, as on SIGTERM

        return {"asker": part}

    return run_service("reconcile", options, build)  # type: ignore[arg-type]


@pytest.mark.parametrize("probes", ["own-port", "off", "beside-metrics"])
def test_probes_on_their_own_address_metrics_on_theirs(probes: str, nats_server: EmbeddedNats, tmp_path: Path) -> None:
    metrics_port, probe_port = free_port(), free_port()
    seen: dict[str, int | None] = {}

    async def ask() -> None:
        for name, port, path in (("metrics", metrics_port, "/metrics"), ("metrics-healthz", metrics_port, "/healthz"),
                                 ("probe-healthz", probe_port, "/healthz"), ("probe-readyz", probe_port, "/readyz"),
                                 ("probe-metrics", probe_port, "/metrics")):
            seen[name] = await _status(f"http://127.0.0.1:{port}{path}")

    where = {"own-port": ("127.0.0.1", probe_port), "off": ("", 0), "beside-metrics": None}[probes]
    options = Options(nats_url=nats_server.url, data_dir=tmp_path / "data", prefix="kubus", partitions=1,
                      metrics_port=metrics_port, probes=where, instance="t")
    _serve_until_asked(options, ask)
    assert seen["metrics"] == 200, seen
    if probes == "own-port":
        assert (seen["probe-healthz"], seen["probe-readyz"], seen["probe-metrics"], seen["metrics-healthz"]) == \
            (200, 503, 404, 404), seen
    elif probes == "off":
        assert (seen["probe-healthz"], seen["metrics-healthz"]) == (None, 404), seen
    else:
        assert (seen["probe-healthz"], seen["metrics-healthz"]) == (None, 200), seen


# --- the README's commands table ---------------------------------------------------------------------------------

def _commands(parser: argparse.ArgumentParser, path: list[str]) -> list[list[str]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [path]
    return [leaf for name, child in subs[0].choices.items() for leaf in _commands(child, [*path, name])]


def test_the_readme_lists_every_command_with_its_exit_codes() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| `kubus ")]
    for path in _commands(build_parser(), []):
        row = next((r for r in rows if f"`kubus {path[0]}" in r and all(word in r for word in path[1:])), None)
        assert row is not None, f"kubus {' '.join(path)} is not in the README's commands table"
        codes = row.rstrip(" |").rsplit("|", 1)[1]
        assert codes.strip().startswith("0"), (path, codes)
