"""The flags the kubus commands share, each declared once, here.

Each is also read from an environment variable, so that a compose file or a pod spec sets it once for
every command. A default taken from the environment is handed to argparse as text, so a bad value is
an error of the command that reads it, naming the flag (and no other command minds). An empty variable
counts as unset.

A command takes the flags it needs, on a parser or on one of its argument groups:

    g = parser.add_argument_group("pipeline")
    flags.add_bus(g, without="an embedded nats-server")
    flags.add_database(g)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from messages import subjects
from runtime.running import Options

DEFAULT_DATA_DIR = "./.kubus"
DEFAULT_LEASE_TTL = 10.0

Flags = argparse._ActionsContainer  # an ArgumentParser or one of its argument groups


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def add_bus(flags: Flags, *, without: str) -> None:
    """--nats-url and --prefix; `without` says what the command does when no --nats-url is given."""
    flags.add_argument("--nats-url", default=_env("KUBUS_NATS_URL"), metavar="URL",
                       help=f"NATS with JetStream (env KUBUS_NATS_URL); without it: {without}")
    flags.add_argument("--prefix", default=_env("KUBUS_PREFIX") or subjects.PREFIX,
                       help="subject and stream prefix, to run several kubus on one NATS (env KUBUS_PREFIX)")


def add_partitions(flags: Flags) -> None:
    flags.add_argument("--partitions", type=int, default=_env("KUBUS_PARTITIONS") or str(subjects.DEFAULT_PARTITIONS),
                       help="namespace partitions, fixed when the streams are first created: after that the "
                            "streams' own count wins (env KUBUS_PARTITIONS)")


def add_database(flags: Flags) -> None:
    """--db-url and --data-dir."""
    flags.add_argument("--db-url", default=_env("KUBUS_DB_URL"), metavar="URL",
                       help="the SQL store, sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DATABASE "
                            "(env KUBUS_DB_URL); default: SQLite in the data directory")
    flags.add_argument("--data-dir", default=_env("KUBUS_DATA_DIR") or DEFAULT_DATA_DIR, metavar="DIR",
                       help="where the default SQLite database and the embedded nats-server keep their data "
                            f"(env KUBUS_DATA_DIR, default {DEFAULT_DATA_DIR})")


def add_kubeconfig(flags: Flags) -> None:
    """--kubeconfig: the cluster a service watches or writes to (see runtime/kubeconfig.py)."""
    flags.add_argument("--kubeconfig", default=_env("KUBECONFIG") or "./kubeconfig", metavar="PATH",
                       help="the cluster's kubeconfig (env KUBECONFIG, default ./kubeconfig)")


def add_context(flags: Flags) -> None:
    """--context: separate from --kubeconfig, which `kubus up` declares with the sim's flags."""
    flags.add_argument("--context", default=None, metavar="NAME",
                       help="the kubeconfig context to use (default: its current-context)")


def add_lease_ttl(flags: Flags) -> None:
    flags.add_argument("--lease-ttl", type=positive_seconds, metavar="SECONDS",
                       default=_env("KUBUS_LEASE_TTL") or f"{DEFAULT_LEASE_TTL:g}",
                       help="seconds a reconciler's partition leases last without renewal: how soon the partitions "
                            "of a reconciler that died move to the others, and when `kubus status` counts it gone "
                            f"(env KUBUS_LEASE_TTL, default {DEFAULT_LEASE_TTL:g})")


def add_service(flags: Flags) -> None:
    """What runtime.running.run_service reads (options_of): the bus, the data directory, /metrics, the
    instance name; and the database, which every service but the executor opens."""
    add_bus(flags, without="start an embedded nats-server")
    add_database(flags)
    add_partitions(flags)
    flags.add_argument("--metrics-port", type=int, default=_env("KUBUS_METRICS_PORT") or "8080",
                       help="port for /metrics, /healthz and /readyz (env KUBUS_METRICS_PORT; 0 disables)")
    flags.add_argument("--instance", default=_env("KUBUS_INSTANCE") or f"{os.uname().nodename}-{os.getpid()}",
                       help="this process's name in messages and the audit trail (env KUBUS_INSTANCE)")


def options_of(args: argparse.Namespace) -> Options:
    """run_service's options from the flags add_service and runtime.logs.add_arguments declared."""
    return Options(nats_url=args.nats_url, data_dir=Path(args.data_dir), prefix=args.prefix,
                   partitions=args.partitions, metrics_port=args.metrics_port, instance=args.instance,
                   log_level=args.log_level, log_format=args.log_format)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return value
