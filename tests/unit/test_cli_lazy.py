"""`kubus <command>` builds the parser of that command alone (kubus.cli.command_parser), importing only its modules."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from kubus import cli

WHOLE_ONLY = {"version", "completion", "controlplane"}  # need the whole parser, or have a parser of their own


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_is_added_by_a_module_of_its_own_or_needs_the_whole_parser() -> None:
    assert set(_subcommands(cli.build_parser())) == set(cli.ADDED_BY) | WHOLE_ONLY


@pytest.mark.parametrize("command", sorted(cli.ADDED_BY))
def test_a_command_alone_parses_as_in_the_whole_parser(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBUS_LOG_LEVEL", "debug")  # a flag's variable applies alike
    alone = cli.command_parser(command)
    assert alone is not None
    whole = _subcommands(cli.build_parser())[command]
    assert _subcommands(alone)[command].format_help() == whole.format_help()
    assert {a.dest: a.default for a in _subcommands(alone)[command]._actions} == \
        {a.dest: a.default for a in whole._actions}


def test_the_sim_starts_without_the_store_or_the_controllers() -> None:
    code = ("import sys; from kubus import cli; cli.command_parser('sim'); "
            "print(sorted(m for m in ('sqlalchemy', 'alembic', 'reconciler.core.controllers', 'store.engine') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
