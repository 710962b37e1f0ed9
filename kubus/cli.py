"""The `kubus` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kubus import controlplane_command


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
    parser = controlplane_parser() if words[:1] == ["controlplane"] else build_parser()
    args = parser.parse_args(words)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
