"""The `kubus` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kubus import pipeline_command, replay_command, sim_command, streams_command, version_command
from runtime import flags


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubus", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim_command.add_parser(sub)
    pipeline_command.add_parsers(sub)
    replay_command.add_parsers(sub)
    streams_command.add_parser(sub)
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
    flags.from_environment(parser)  # every flag's KUBUS_<FLAG>, last: after every command has declared its flags
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
