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
from typing import Any

from messages import subjects
from runtime.bus import DEFAULT_EVENTS_MAX_BYTES, GiB, NatsAuth, StreamSettings
from runtime.running import Options

DEFAULT_DATA_DIR = "./.kubus"
DEFAULT_LEASE_TTL = 10.0
DEFAULT_STATEMENT_TIMEOUT = 30.0  # store.engine.DEFAULT_STATEMENT_TIMEOUT_S (runtime does not import store)

Flags = argparse._ActionsContainer  # an ArgumentParser or one of its argument groups


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def add_bus(flags: Flags, *, without: str) -> None:
    """--nats-url and --prefix; `without` says what the command does when no --nats-url is given."""
    flags.add_argument("--nats-url", default=_env("KUBUS_NATS_URL"), metavar="URL[,URL...]",
                       help="NATS with JetStream: one URL, or a cluster's seed URLs separated by commas "
                            f"(env KUBUS_NATS_URL); without it: {without}")
    flags.add_argument("--prefix", default=_env("KUBUS_PREFIX") or subjects.PREFIX,
                       help="subject and stream prefix, to run several kubus on one NATS (env KUBUS_PREFIX)")
    add_nats_auth(flags)


def add_nats_auth(flags: Flags) -> None:
    """How the command proves who it is to NATS. Secrets (a password, a token) are read from the environment
    only, never from flags, which every user of the machine can read in the process list; key material is
    read from files (docs/production.md, "Securing NATS")."""
    flags.add_argument("--nats-creds", default=_env("KUBUS_NATS_CREDS"), metavar="FILE",
                       help="a NATS .creds file (user JWT and nkey seed, from `nsc`) (env KUBUS_NATS_CREDS); other "
                            "credentials: env KUBUS_NATS_USER and KUBUS_NATS_PASSWORD, or KUBUS_NATS_TOKEN, or "
                            "user:password in --nats-url")
    flags.add_argument("--nats-nkey", default=_env("KUBUS_NATS_NKEY"), metavar="FILE",
                       help="a file holding this service's NATS nkey seed (env KUBUS_NATS_NKEY)")
    flags.add_argument("--nats-tls-ca", default=_env("KUBUS_NATS_TLS_CA"), metavar="FILE",
                       help="the CA certificate(s) NATS's server certificate is checked against (env "
                            "KUBUS_NATS_TLS_CA; default: the system's)")
    flags.add_argument("--nats-tls-cert", default=_env("KUBUS_NATS_TLS_CERT"), metavar="FILE",
                       help="a client certificate for NATS's TLS (env KUBUS_NATS_TLS_CERT), with --nats-tls-key")
    flags.add_argument("--nats-tls-key", default=_env("KUBUS_NATS_TLS_KEY"), metavar="FILE",
                       help="the client certificate's private key (env KUBUS_NATS_TLS_KEY)")


def nats_auth(args: argparse.Namespace) -> NatsAuth:
    """NatsAuth from the flags add_bus declared and the environment (KUBUS_NATS_USER, KUBUS_NATS_PASSWORD,
    KUBUS_NATS_TOKEN)."""
    return NatsAuth(user=_env("KUBUS_NATS_USER"), password=_env("KUBUS_NATS_PASSWORD"),
                    token=_env("KUBUS_NATS_TOKEN"), creds=args.nats_creds, nkey=args.nats_nkey,
                    tls_ca=args.nats_tls_ca, tls_cert=args.nats_tls_cert, tls_key=args.nats_tls_key)


def add_partitions(flags: Flags) -> None:
    flags.add_argument("--partitions", type=int, default=_env("KUBUS_PARTITIONS") or str(subjects.DEFAULT_PARTITIONS),
                       help="namespace partitions, fixed when the streams are first created: after that the "
                            "streams' own count wins (env KUBUS_PARTITIONS)")


def add_streams(flags: Flags) -> None:
    """--stream-replicas and --events-max-bytes: how the streams are created when they do not exist yet (an
    existing stream keeps its replicas and limits: they are its operator's; docs/production.md)."""
    flags.add_argument("--stream-replicas", type=stream_replicas, metavar="N",
                       default=_env("KUBUS_STREAM_REPLICAS") or "1",
                       help="replicas of every stream kubus creates, 1 to 5; 3 on a JetStream cluster survives the "
                            "loss of a server (env KUBUS_STREAM_REPLICAS, default 1)")
    flags.add_argument("--events-max-bytes", type=byte_size, metavar="SIZE",
                       default=_env("KUBUS_EVENTS_MAX_BYTES") or f"{DEFAULT_EVENTS_MAX_BYTES // GiB}GiB",
                       help="byte limit of KUBUS_EVENTS when kubus creates it, e.g. 512MiB or 4GiB; the oldest "
                            "events are discarded beyond it; -1: none (env KUBUS_EVENTS_MAX_BYTES, default "
                            f"{DEFAULT_EVENTS_MAX_BYTES // GiB}GiB)")


def stream_settings(args: argparse.Namespace) -> StreamSettings:
    """StreamSettings from the flags add_streams declared."""
    return StreamSettings(replicas=args.stream_replicas, events_max_bytes=args.events_max_bytes)


def add_database(flags: Flags) -> None:
    """--db-url and --data-dir."""
    flags.add_argument("--db-url", default=_env("KUBUS_DB_URL"), metavar="URL",
                       help="the SQL store, sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE, with libpq's "
                            "?sslmode=verify-full&sslrootcert=CA.pem&sslcert=...&sslkey=... if wanted (env "
                            "KUBUS_DB_URL); default: SQLite in the data directory. Keep the password off the command "
                            "line: PostgreSQL's is read from PGPASSWORD or the PGPASSFILE (default ~/.pgpass)")
    flags.add_argument("--data-dir", default=_env("KUBUS_DATA_DIR") or DEFAULT_DATA_DIR, metavar="DIR",
                       help="where the default SQLite database and the embedded nats-server keep their data "
                            f"(env KUBUS_DATA_DIR, default {DEFAULT_DATA_DIR})")
    flags.add_argument("--db-statement-timeout", type=seconds_or_off, metavar="SECONDS",
                       default=_env("KUBUS_DB_STATEMENT_TIMEOUT") or f"{DEFAULT_STATEMENT_TIMEOUT:g}",
                       help="PostgreSQL: seconds a statement (lock waits included) may take before it fails and "
                            "the service retries as if the database were away; 0: no limit (env "
                            f"KUBUS_DB_STATEMENT_TIMEOUT, default {DEFAULT_STATEMENT_TIMEOUT:g})")


def statement_timeout(args: argparse.Namespace) -> float | None:
    """open_store's statement_timeout from --db-statement-timeout (0: none)."""
    value: float = args.db_statement_timeout
    return value or None


KUBECONFIG_HELP = ("the cluster's kubeconfig file; without it, as kubectl: the files $KUBECONFIG lists, then "
                   "~/.kube/config, then the pod's ServiceAccount (in-cluster)")


def add_kubeconfig(flags: Flags, help: str = KUBECONFIG_HELP) -> None:
    """--kubeconfig and --context: the cluster a service watches or writes to (see runtime/kubeconfig.py). Only
    the commands that talk to the API take them (ingest, execute, up); reconcile and db never do."""
    flags.add_argument("--kubeconfig", default=None, metavar="PATH", help=help)
    add_context(flags)


def add_context(flags: Flags) -> None:
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
    add_streams(flags)
    add_metrics(flags)
    flags.add_argument("--instance", default=_env("KUBUS_INSTANCE") or f"{os.uname().nodename}-{os.getpid()}",
                       help="this process's name in messages and the audit trail (env KUBUS_INSTANCE)")


DEFAULT_METRICS_HOST, DEFAULT_METRICS_PORT = "127.0.0.1", 8080


class _FromFlag(argparse.Action):
    """Stores the value and notes that the command line gave it (so it wins over either variable)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.metrics_from_flag = self.dest


def add_api_limits(flags: Flags) -> None:
    """kube-controller-manager's --kube-api-qps and --kube-api-burst (the client-side rate limiter of every API call
    the command makes), with kubus's earlier --qps and --burst as aliases."""
    flags.add_argument("--kube-api-qps", "--qps", dest="qps", type=float, metavar="QPS",
                       default=_env("KUBUS_KUBE_API_QPS") or _env("KUBUS_QPS") or "20",
                       help="API requests per second, as kube-controller-manager's (env KUBUS_KUBE_API_QPS, or "
                            "KUBUS_QPS; default 20; 0 disables the limiter)")
    flags.add_argument("--kube-api-burst", "--burst", dest="burst", type=int, metavar="N",
                       default=_env("KUBUS_KUBE_API_BURST") or _env("KUBUS_BURST") or "30",
                       help="API request burst, as kube-controller-manager's (env KUBUS_KUBE_API_BURST, or "
                            "KUBUS_BURST; default 30)")


DEFAULT_CONCURRENT_SYNCS = 32  # each: today's 64 actions in flight per executor, half for either controller


def add_concurrency(flags: Flags) -> None:
    """--concurrent-daemonset-syncs and --concurrent-replicaset-syncs: what an executor applies at once, per
    controller. kube-controller-manager's bound the workers that each run a whole sync, API calls included; in kubus
    a sync is a pure decision (the reconciler runs them one after the other, in microseconds) and its API calls are
    the actions an executor applies, so these bound the actions of each controller an executor applies at once."""
    for kind in ("daemonset", "replicaset"):
        variable = f"KUBUS_CONCURRENT_{kind.upper()}_SYNCS"
        flags.add_argument(f"--concurrent-{kind}-syncs", type=positive_int, metavar="N",
                           default=_env(variable) or str(DEFAULT_CONCURRENT_SYNCS),
                           help=f"actions of {kind.replace('set', ' set')}s (creates, deletes, patches, status "
                                "writes, each with its own slow-start batches) this executor applies at once; "
                                "kube-controller-manager's flag of the name bounds its syncs, whose API calls these "
                                f"actions are (env {variable}, default {DEFAULT_CONCURRENT_SYNCS})")


CONTROLLER_NAMES = {"daemonset": "DaemonSet", "daemonset-controller": "DaemonSet",
                    "replicaset": "ReplicaSet", "replicaset-controller": "ReplicaSet"}


def controllers(text: str) -> frozenset[str]:
    """kube-controller-manager's --controllers: `*` every controller, `name` one, `-name` not that one, separated by
    commas (`*,-replicaset`); names `daemonset` and `replicaset`, or upstream's `daemonset-controller` and
    `replicaset-controller`. The kinds enabled (ControllerKind values)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError("empty: give * (every controller), NAME or -NAME, separated by commas")
    enabled: set[str] = set()
    disabled: set[str] = set()
    star = False
    for item in items:
        if item == "*":
            star = True
            continue
        name = item[1:] if item.startswith("-") else item
        kind = CONTROLLER_NAMES.get(name)
        if kind is None:
            raise argparse.ArgumentTypeError(
                f"unknown controller {name!r} in {text!r}: known are {', '.join(CONTROLLER_NAMES)} (and *)")
        (disabled if item.startswith("-") else enabled).add(kind)
    chosen = (set(CONTROLLER_NAMES.values()) if star else enabled) - disabled
    if not chosen:
        raise argparse.ArgumentTypeError(f"{text!r} enables no controller")
    return frozenset(chosen)


def add_controllers(flags: Flags) -> None:
    flags.add_argument("--controllers", type=controllers, metavar="NAME,...", default=_env("KUBUS_CONTROLLERS") or "*",
                       help="the controllers to run, as kube-controller-manager's: * for all, NAME to run one, -NAME "
                            "not to run it (e.g. *,-replicaset); names daemonset (daemonset-controller) and "
                            "replicaset (replicaset-controller) (env KUBUS_CONTROLLERS, default *)")


def add_metrics(flags: Flags) -> None:
    """--metrics-bind-address (as controller-runtime's) and --metrics-port (the port on loopback), one or the other.
    Loopback by default: a laptop's kubus serves nothing on its other interfaces; a pod's probes need
    `:8080` (deploy/config.yaml)."""
    group = flags.add_mutually_exclusive_group()
    group.add_argument("--metrics-bind-address", type=bind_address, action=_FromFlag, metavar="HOST:PORT",
                       default=_env("KUBUS_METRICS_BIND_ADDRESS"),
                       help="where to serve /metrics, /healthz and /readyz: HOST:PORT, :PORT for every interface, 0 "
                            "for nowhere (env KUBUS_METRICS_BIND_ADDRESS; default "
                            f"{DEFAULT_METRICS_HOST}:{DEFAULT_METRICS_PORT})")
    group.add_argument("--metrics-port", type=port_number, action=_FromFlag, metavar="PORT",
                       default=_env("KUBUS_METRICS_PORT"),
                       help=f"the same on {DEFAULT_METRICS_HOST}: --metrics-port N is --metrics-bind-address "
                            f"{DEFAULT_METRICS_HOST}:N, 0 serves none (env KUBUS_METRICS_PORT; "
                            "KUBUS_METRICS_BIND_ADDRESS wins over it)")
    flags.set_defaults(metrics_from_flag=None)
    flags.add_argument("--health-probe-bind-address", type=bind_address, metavar="HOST:PORT",
                       default=_env("KUBUS_HEALTH_PROBE_BIND_ADDRESS"),
                       help="serve /healthz and /readyz here instead, as controller-runtime's flag: HOST:PORT, :PORT "
                            "for every interface, 0 for nowhere (env KUBUS_HEALTH_PROBE_BIND_ADDRESS; default: "
                            "beside /metrics, on --metrics-bind-address)")


def metrics_address(args: argparse.Namespace) -> tuple[str, int]:
    """(host, port) from add_metrics's flags: the flag given, else KUBUS_METRICS_BIND_ADDRESS, else
    KUBUS_METRICS_PORT, else the default; host "" is every interface, port 0 none."""
    chosen = args.metrics_from_flag or ("metrics_bind_address" if args.metrics_bind_address is not None
                                        else "metrics_port" if args.metrics_port is not None else None)
    if chosen == "metrics_bind_address":
        host, port = args.metrics_bind_address
        return host, port
    if chosen == "metrics_port":
        return DEFAULT_METRICS_HOST, int(args.metrics_port)
    return DEFAULT_METRICS_HOST, DEFAULT_METRICS_PORT


def bind_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` (every interface), `[IPv6]:PORT`, or `0` (serve nothing)."""
    if text.strip() == "0":
        return "", 0
    host, colon, port = text.strip().rpartition(":")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not colon or not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"not HOST:PORT, :PORT (every interface) or 0 (none): {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, number


def probe_address(args: argparse.Namespace) -> tuple[str, int] | None:
    """(host, port) of /healthz and /readyz from --health-probe-bind-address (port 0: none), or None when they are
    served beside /metrics."""
    address: tuple[str, int] | None = args.health_probe_bind_address
    return address


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def port_number(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"not a port (0 to 65535; 0 serves none): {text!r}")
    return number


def options_of(args: argparse.Namespace) -> Options:
    """run_service's options from the flags add_service and runtime.logs.add_arguments declared."""
    metrics_host, metrics_port = metrics_address(args)
    return Options(nats_url=args.nats_url, nats_auth=nats_auth(args), data_dir=Path(args.data_dir), prefix=args.prefix,
                   partitions=args.partitions, streams=stream_settings(args), metrics_host=metrics_host,
                   metrics_port=metrics_port, probes=probe_address(args),
                   instance=args.instance,
                   log_level=args.log_level, log_format=args.log_format)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return value


def seconds_or_off(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 (off) or more seconds: {text!r}")
    return value


def stream_replicas(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of replicas: {text!r}") from None
    if not 1 <= value <= 5:  # JetStream's own bounds
        raise argparse.ArgumentTypeError(f"must be 1 to 5: {text!r}")
    return value


UNITS = {"": 1, "B": 1, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3, "TIB": 1024**4,
         "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4}


def byte_size(text: str) -> int:
    """A size in bytes: `1073741824`, `512MiB`, `4GiB`, `2GB` (a unit of 1000s); -1 means no limit."""
    stripped = text.strip()
    if stripped == "-1":
        return -1
    number = stripped.rstrip("BbIiKkMmGgTt ")
    unit = stripped[len(number):].strip().upper()
    try:
        value = float(number) * UNITS[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512MiB, 4GiB, or -1 for none)") from None
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, or -1 for none: {text!r}")
    return int(value)


# --- every flag's environment variable ---------------------------------------------------------------------------
ENV_PREFIX = "KUBUS_"
LIST_SEPARATOR = ";"  # a repeatable flag's values in its variable


def env_name(action: argparse.Action) -> str:
    """KUBUS_ and the flag's first long name: --kube-api-qps -> KUBUS_KUBE_API_QPS."""
    long = next(option for option in action.option_strings if option.startswith("--"))
    return ENV_PREFIX + long[2:].upper().replace("-", "_")


def flag_actions(parser: argparse.ArgumentParser) -> list[tuple[list[str], argparse.Action]]:
    """Every flag of `parser` and of its subcommands, with the command path that has it; not --help and --version,
    not the hidden ones (help=SUPPRESS: deprecated spellings and internals)."""
    found: list[tuple[list[str], argparse.Action]] = []

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, [*path, name])
            elif (action.option_strings and action.help != argparse.SUPPRESS
                  and not isinstance(action, argparse._HelpAction | argparse._VersionAction)):
                found.append((path, action))

    walk(parser, [])
    return found


def _truth(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"not true or false: {text!r}")


def _checked(convert: Any, choices: Any) -> Any:
    """`convert`, then a check against `choices`: argparse checks a default's choices never, and converts a text
    default only when the command that has it is parsed (so a bad variable fails that command alone)."""
    def check(text: str) -> Any:
        value = convert(text) if convert is not None else text
        if value not in choices:
            raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(map(str, choices))}")
        return value

    check.__name__ = getattr(convert, "__name__", "value")
    return check


def from_environment(parser: argparse.ArgumentParser) -> None:
    """Gives every flag of `parser` and its subcommands that declares no variable of its own (its help says `env
    KUBUS_...`) the variable env_name names, said in its help: a set variable is the flag's default, a flag given on
    the command line wins. A switch takes true/false (1/0, yes/no, on/off); a repeatable flag its values separated by
    `;` (the flag given on the command line adds to them). As for the variables runtime.flags declares itself, a bad
    value fails only the commands that have the flag, naming it."""
    for _path, action in flag_actions(parser):
        name = env_name(action)
        if f"env {name}" in (action.help or ""):
            continue  # declared with its variable (and its precedence) where it is added
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            note = f"env {name}=true|false"
        elif isinstance(action, argparse._AppendAction):
            note = f"env {name}, several separated by {LIST_SEPARATOR}"
        else:
            note = f"env {name}"
        action.help = f"{action.help} ({note})" if action.help else f"({note})"
        value = _env(name)
        if value is None:
            continue
        action.required = False  # given by its variable
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            action.type = _truth if isinstance(action, argparse._StoreTrueAction) \
                else (lambda text: not _truth(text))
            action.default = value
        elif isinstance(action, argparse._AppendAction):
            if action.type is not None:
                raise TypeError(f"{action.option_strings[0]}: a repeatable flag with a type has no variable yet")
            action.default = [part.strip() for part in value.split(LIST_SEPARATOR) if part.strip()]
        elif isinstance(action, argparse._StoreAction):
            if action.choices is not None:
                action.type = _checked(action.type, action.choices)
            action.default = value
        else:
            raise TypeError(f"{action.option_strings[0]}: {type(action).__name__} has no variable yet")
