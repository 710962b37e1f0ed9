"""The `kubus` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kubus import sim_command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubus", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim_command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
