"""`kubus up`, `kubus ingest`, `kubus reconcile`, `kubus execute`: the pipeline's services.

`up` runs all three in one process (and, with `--sim`, a `kubus sim` beside it); the others run
one service each, for split deployments. They share the flags below, each also read from an
environment variable, so a compose file or a pod spec sets them once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from kube.features import KNOWN as KNOWN_GATES
from kube.features import FeatureGateError, FeatureGates, parse_feature_gates
from kube.times import parse_go_duration
from kubus.sim_command import add_sim_arguments
from messages import subjects
from runtime import logs, serving
from runtime.bus import Bus, NatsUnavailable, close, connect, ensure_streams
from runtime.natsserver import EmbeddedNats

log = logging.getLogger("kubus")


def add_parsers(sub: Any) -> None:
    for name, helptext in (("up", "run ingest, reconciler and executor together (with --sim: and a sim)"),
                           ("ingest", "list and watch the API and publish every event to JetStream"),
                           ("reconcile", "run the controllers over the event stream"),
                           ("execute", "apply the controllers' actions to the API")):
        p: argparse.ArgumentParser = sub.add_parser(name, help=helptext, description=helptext)
        _common(p)
        if name in ("up", "execute"):
            p.add_argument("--qps", type=float, default=str(os.environ.get("KUBUS_QPS", "20")),
                           help="API requests per second, as kube-controller-manager's --kube-api-qps "
                                "(env KUBUS_QPS; 0 disables the limiter)")
            p.add_argument("--burst", type=int, default=str(os.environ.get("KUBUS_BURST", "30")),
                           help="API request burst, as --kube-api-burst (env KUBUS_BURST)")
            p.add_argument("--ack-wait", type=float, default=30.0,
                           help="seconds before an action held by a dead executor is redelivered")
        if name in ("up", "reconcile"):
            p.add_argument("--retention", type=_retention, metavar="DURATION",
                           default=os.environ.get("KUBUS_RETENTION") or DEFAULT_RETENTION,
                           help="how long the audit trail keeps events, decisions, actions and results, e.g. 7d; "
                                f"off keeps everything (env KUBUS_RETENTION, default {DEFAULT_RETENTION})")
        if name in ("up", "reconcile"):
            p.add_argument("--feature-gates", type=_feature_gates, metavar="NAME=BOOL,...",
                           default=os.environ.get("KUBUS_FEATURE_GATES") or "",
                           help="feature gates the controllers' decisions depend on, as kube-controller-manager's "
                                "(env KUBUS_FEATURE_GATES), e.g. TaintTolerationComparisonOperators=true; known: "
                                + ", ".join(f"{g}={str(d).lower()}" for g, d in sorted(KNOWN_GATES.items())))
            p.add_argument("--min-resync-period", type=_resync, metavar="DURATION",
                           default=os.environ.get("KUBUS_MIN_RESYNC_PERIOD") or "12h",
                           help="the informers' resync period is between this and twice it, as "
                                "kube-controller-manager's: every ReplicaSet and DaemonSet is synced again then "
                                "(env KUBUS_MIN_RESYNC_PERIOD, default 12h; 0 disables)")
        if name == "reconcile":
            p.add_argument("--lease-ttl", type=_positive, metavar="SECONDS",
                           default=os.environ.get("KUBUS_LEASE_TTL") or "10",
                           help="seconds a partition lease lasts without renewal: how soon the partitions of a "
                                "reconciler that died move to the others (env KUBUS_LEASE_TTL, default 10)")
        if name == "up":
            p.add_argument("--sim", action="store_true", help="also run `kubus sim` and use it as the cluster")
            add_sim_arguments(p)
        else:
            p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", "./kubeconfig"),
                           help="the cluster's kubeconfig (env KUBECONFIG)")
        logs.add_arguments(p)
        p.set_defaults(run=lambda args, name=name: run(name, args))


DEFAULT_RETENTION = "30d"


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return value


def _feature_gates(text: str) -> FeatureGates:
    try:
        return parse_feature_gates(text)
    except FeatureGateError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _resync(text: str) -> timedelta:
    try:
        period = parse_go_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if period < timedelta(0):
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return period


def _retention(text: str) -> timedelta | None:
    from store.retention import parse_retention

    try:
        return parse_retention(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _common(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    g = p.add_argument_group("pipeline")
    g.add_argument("--nats-url", default=env("KUBUS_NATS_URL"),
                   help="NATS with JetStream (env KUBUS_NATS_URL); default: start an embedded nats-server")
    g.add_argument("--db-url", default=env("KUBUS_DB_URL"),
                   help="SQLAlchemy URL, e.g. postgresql://user@host/db (env KUBUS_DB_URL); default: SQLite "
                        "in the data directory")
    g.add_argument("--data-dir", default=env("KUBUS_DATA_DIR", "./.kubus"),
                   help="where the embedded NATS and SQLite keep their data (env KUBUS_DATA_DIR)")
    g.add_argument("--prefix", default=env("KUBUS_PREFIX", subjects.PREFIX),
                   help="subject and stream prefix, to run several kubus on one NATS (env KUBUS_PREFIX)")
    g.add_argument("--partitions", type=int, default=str(env("KUBUS_PARTITIONS", subjects.DEFAULT_PARTITIONS)),
                   help="namespace partitions, fixed when the streams are first created (env KUBUS_PARTITIONS)")
    g.add_argument("--metrics-port", type=int, default=str(env("KUBUS_METRICS_PORT", "8080")),
                   help="port for /metrics, /healthz and /readyz (env KUBUS_METRICS_PORT; 0 disables)")
    g.add_argument("--instance", default=env("KUBUS_INSTANCE", f"{os.uname().nodename}-{os.getpid()}"),
                   help="this process's name in messages and the audit trail (env KUBUS_INSTANCE)")


def run(name: str, args: argparse.Namespace) -> int:
    logs.configure(args.log_level, args.log_format)
    from kubus.sim_command import install_fast_loop

    install_fast_loop()
    try:
        asyncio.run(_main(name, args))
    except (NatsUnavailable, StartupError) as exc:
        print(f"kubus {name}: {exc}", file=sys.stderr)
        return 2
    except ServiceFailed as exc:  # after a clean stop of the rest: a supervisor (systemd, the kubelet) restarts it
        print(f"kubus {name}: {exc}", file=sys.stderr)
        return 1
    return 0


def _dump_tasks() -> None:
    """`kill -USR1 <pid>`: what every task of the service is waiting on, in its log (a stuck service)."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        out.write(f"--- {task.get_name()}\n")
        task.print_stack(limit=12, file=out)
    log.warning("asyncio tasks:\n%s", out.getvalue())


class StartupError(RuntimeError):
    """A dependency is missing or unreachable at start; the message says which and how to fix it."""


class ServiceFailed(RuntimeError):
    """A part of the service ended on its own (it crashed, or returned while it should run): the process
    stops the rest cleanly and exits non-zero, with this one line."""


async def _main(name: str, args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
    failures: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        data_dir = Path(args.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        if name == "up" and args.sim:
            args.kubeconfig = await _start_sim(stack, args)
        nats_url = args.nats_url
        if not nats_url:
            embedded = EmbeddedNats(data_dir / "nats")
            nats_url = await embedded.start()
            stack.push_async_callback(embedded.stop)
            log.info("embedded nats-server with JetStream at %s", nats_url)
        nc = await connect(nats_url, f"kubus-{name}-{args.instance}")
        stack.push_async_callback(close, nc)
        bus = await ensure_streams(nc, prefix=args.prefix, partitions=args.partitions)
        health = serving.Health()
        if args.metrics_port:
            runner = await serving.serve(health, "0.0.0.0", args.metrics_port)
            stack.push_async_callback(runner.cleanup)
        services = await _services(name, args, bus, health, stack, str(data_dir), nats_url)
        tasks = [asyncio.create_task(s(), name=n) for n, s in services.items()]
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        # a part that ended before we were asked to stop failed, whatever it returned
        ended = [task for task in tasks if task.done()] if not stop.is_set() else []
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for task, result in zip(tasks, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                failures.append(f"{task.get_name()} stopped: {_reason(result)}")
                log.debug("%s stopped", task.get_name(), exc_info=result)
            elif task in ended:
                failures.append(f"{task.get_name()} ended on its own")
        for failure in failures:
            log.error("%s", failure)
        stopper.cancel()
        log.info("stopped")
    if failures:
        raise ServiceFailed("; ".join(failures))


def _reason(exc: BaseException) -> str:
    """One line: the message, with the exception's type where the message alone does not say what failed."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _services(name: str, args: argparse.Namespace, bus: Bus, health: serving.Health,
                    stack: contextlib.AsyncExitStack, data_dir: str,
                    nats_url: str) -> dict[str, Callable[[], Awaitable[None]]]:
    services: dict[str, Callable[[], Awaitable[None]]] = {}
    store = None
    if name in ("up", "reconcile", "ingest"):
        from store.engine import open_store
        from store.errors import DatabaseUnavailable

        try:
            store = await open_store(args.db_url, data_dir)
        except DatabaseUnavailable as exc:
            raise StartupError(str(exc)) from None
        stack.push_async_callback(store.close)
    if name in ("up", "ingest"):
        from ingest.config import IngestConfig
        from ingest.service import Ingest
        from store.checkpoints import SqlCheckpoints

        ingest = Ingest(IngestConfig(nats_url=nats_url, prefix=args.prefix,
                                     partitions=args.partitions, kubeconfig=args.kubeconfig,
                                     instance=f"ingest-{args.instance}", checkpoints=SqlCheckpoints(store)))
        health.ready_when("ingest-synced", ingest.synced)
        serving.COUNTERS.ingest = ingest.counters
        services["ingest"] = ingest.run
    if name in ("up", "reconcile"):
        from reconciler.service import run_reconciler

        # `kubus up` is alone by construction; `kubus reconcile` shares the partitions with its peers
        lease_ttl = args.lease_ttl if name == "reconcile" else None
        services["reconciler"] = lambda: run_reconciler(bus, store, health, f"reconciler-{args.instance}",
                                                        retention=args.retention, lease_ttl=lease_ttl,
                                                        feature_gates=args.feature_gates,
                                                        min_resync_period=args.min_resync_period)
    if name in ("up", "execute"):
        from executor.config import ExecutorConfig
        from executor.service import run_executor

        config = ExecutorConfig(nats_url=nats_url, prefix=args.prefix,
                                partitions=args.partitions, kubeconfig=args.kubeconfig,
                                instance=f"executor-{args.instance}", qps=args.qps, burst=args.burst,
                                ack_wait=args.ack_wait)
        from executor.metrics import ExecutorMetrics

        metrics = ExecutorMetrics()
        serving.COUNTERS.executor = metrics.snapshot
        health.ready_when("nats", lambda: bus.nc.is_connected)
        services["executor"] = lambda: run_executor(config, metrics=metrics)
    return services


async def _start_sim(stack: contextlib.AsyncExitStack, args: argparse.Namespace) -> str:
    """`kubus sim` in its own process (it gets a core of its own), with the sim flags passed on."""
    kubeconfig = Path(args.kubeconfig)
    if kubeconfig.exists():
        kubeconfig.unlink()  # so we notice when the new sim has written its own
    flags = ["--nodes", str(args.nodes), "--kubeconfig", str(kubeconfig), "--port", str(args.port),
             "--host", args.host, "--kubelet-delay", str(args.kubelet_delay),
             "--termination-seconds", str(args.termination_seconds), "--watch-history", str(args.watch_history),
             "--node-prefix", args.node_prefix]
    for option, value in (("--node-labels", args.node_labels), ("--node-capacity", args.node_capacity),
                          ("--nodes-file", args.nodes_file), ("--seed", args.seed)):
        if value:
            flags += [option, str(value)]
    for taint in args.node_taint:
        flags += ["--node-taint", taint]
    for fault in args.fault:
        flags += ["--fault", fault]
    if args.no_kubelet:
        flags.append("--no-kubelet")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "kubus", "sim", *flags,
                                                "--log-level", args.log_level, "--log-format", args.log_format)

    async def stop_sim() -> None:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()

    stack.push_async_callback(stop_sim)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not kubeconfig.exists():
        if proc.returncode is not None:
            raise StartupError(f"kubus sim exited with {proc.returncode}")
        if loop.time() > deadline:
            raise StartupError("kubus sim did not start within 30 s")
        await asyncio.sleep(0.05)  # polling for the kubeconfig the sim writes once it listens
    return str(kubeconfig)
