"""--kubeconfig and --context on exactly the commands that talk to the API; `kubus up`'s --kubeconfig is the
cluster's, and with --sim where the sim writes its own."""

from __future__ import annotations

import pytest

from kubus.cli import build_parser
from kubus.sim_command import SIM_KUBECONFIG


@pytest.mark.parametrize("command", [["ingest"], ["execute"], ["up"]])
def test_the_api_commands_take_kubeconfig_and_context(command: list[str]) -> None:
    args = build_parser().parse_args([*command, "--kubeconfig", "/k", "--context", "prod"])
    assert (args.kubeconfig, args.context) == ("/k", "prod")


@pytest.mark.parametrize("command", [["ingest"], ["execute"], ["up"]])
def test_without_kubeconfig_the_loader_resolves_it(command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """No ./kubeconfig default and KUBECONFIG not copied into the flag: runtime/kubeconfig.py reads KUBECONFIG
    (a list), ~/.kube/config and the ServiceAccount itself."""
    monkeypatch.setenv("KUBECONFIG", "/a:/b")
    args = build_parser().parse_args(command)
    assert (args.kubeconfig, args.context) == (None, None)


@pytest.mark.parametrize("command", [["reconcile"], ["db", "upgrade"], ["db", "current"],
                                     ["db", "prune", "--older-than", "1d"]])
@pytest.mark.parametrize("flag", ["--kubeconfig", "--context"])
def test_the_commands_that_never_call_the_api_take_neither(command: list[str], flag: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*command, flag, "x"])
    assert exited.value.code == 2
    assert f"unrecognized arguments: {flag} x" in capsys.readouterr().err


def test_up_sim_writes_the_kubeconfig_the_services_use(capsys: pytest.CaptureFixture[str]) -> None:
    """`kubus up --sim --kubeconfig PATH` as in the README: the sim writes PATH (default ./kubeconfig)."""
    assert build_parser().parse_args(["up", "--sim", "--kubeconfig", "/tmp/k"]).kubeconfig == "/tmp/k"
    assert build_parser().parse_args(["up", "--sim"]).kubeconfig is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    assert f"With --sim: where the sim writes its kubeconfig, which the services then use (default " \
           f"{SIM_KUBECONFIG})" in helptext
    assert helptext.count("--kubeconfig PATH") == 2  # usage line and the one description
