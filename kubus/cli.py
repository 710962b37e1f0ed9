"""The `kubus` command line."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Final

from kubus import controlplane_command

# the module that adds each command, imported only when that command runs: the whole parser imports every command's
# modules (SQLAlchemy and alembic for the store's, the controllers for shadow's...), ~1 CPU s more for each
# service's start than its own (`kubus sim` 1.75 CPU s in all), and a busy machine's tests wait for it
ADDED_BY: Final = {
    "sim": "sim_command", "up": "pipeline_command", "ingest": "pipeline_command", "reconcile": "pipeline_command",
    "execute": "pipeline_command", "replay": "replay_command", "events": "replay_command",
    "streams": "streams_command", "db": "db_command", "status": "status_command", "audit": "audit_command",
    "shadow": "shadow_command",
}


def command_parser(command: str) -> argparse.ArgumentParser | None:
    """The command line with ``command`` alone (one of ADDED_BY), as build_parser has it; None without its
    module (the store's commands, when the store package is not installed)."""
    try:
        module = importlib.import_module(f"kubus.{ADDED_BY[command]}")
    except ImportError:
        return None
    from runtime import flags

    parser = argparse.ArgumentParser(prog="kubus", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add = getattr(module, "add_parsers", None) or module.add_parser
    add(sub)
    flags.from_environment(parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    from kubus import (  # see controlplane_parser
        pipeline_command,
        replay_command,
        sim_command,
        streams_command,
        version_command,
    )
    from runtime import flags

    parser = argparse.ArgumentParser(prog="kubus", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim_command.add_parser(sub)
    pipeline_command.add_parsers(sub)
    replay_command.add_parsers(sub)
    streams_command.add_parser(sub)
    controlplane_command.add_parser(sub)
    version_command.add_parsers(sub, parser)
    try:
        from kubus.db_command import add_parser as add_db_parser
    except ImportError:  # the store package is optional for `kubus sim` alone
        pass
    else:
        add_db_parser(sub)
        from kubus import status_command

        status_command.add_parser(sub)
        from kubus.audit_command import add_parser as add_audit_parser

        add_audit_parser(sub)
        from kubus.shadow_command import add_parser as add_shadow_parser

        add_shadow_parser(sub)
    flags.from_environment(parser)  # every flag's KUBUS_<FLAG>, last: after every command has declared its flags
    return parser


def controlplane_parser() -> argparse.ArgumentParser:
    """`kubus controlplane` alone: a warm `kubus controlplane build` is a stat, which the services' imports (the
    official client, SQLAlchemy, the sim: seconds on a busy machine) would swamp."""
    parser = argparse.ArgumentParser(prog="kubus", description=__doc__)
    controlplane_command.add_parser(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = words[0] if words else ""
    parser = controlplane_parser() if command == "controlplane" else (
        command in ADDED_BY and command_parser(command)) or build_parser()
    args = parser.parse_args(words)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
