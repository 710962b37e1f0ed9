"""`kubus up`, `kubus ingest`, `kubus reconcile`, `kubus execute`: the pipeline's services.

`up` runs all three in one process (and, with `--sim`, a `kubus sim` beside it); the others run
one service each, for split deployments. They share their flags (runtime/flags.py), each also read
from an environment variable, so a compose file or a pod spec sets them once, and they all start the
same way: runtime.running.run_service, with the parts `_build` makes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from kube.features import KNOWN as KNOWN_GATES
from kube.features import FeatureGateError, FeatureGates, parse_feature_gates
from kube.times import parse_go_duration
from kubus.sim_command import SIM_KUBECONFIG, add_sim_arguments
from messages.keys import ControllerKind
from runtime import datadir, flags, logs
from runtime.running import Part, Runtime, StartupError, run_service


def add_parsers(sub: Any) -> None:
    for name, helptext in (("up", "run ingest, reconciler and executor together (with --sim: and a sim)"),
                           ("ingest", "list and watch the API and publish every event to JetStream"),
                           ("reconcile", "run the controllers over the event stream"),
                           ("execute", "apply the controllers' actions to the API")):
        p: argparse.ArgumentParser = sub.add_parser(name, help=helptext, description=helptext)
        flags.add_service(p.add_argument_group("pipeline"))
        if name in ("up", "execute"):
            flags.add_api_limits(p)
            flags.add_concurrency(p)
            p.add_argument("--ack-wait", type=float, default=30.0,
                           help="seconds before an action held by a dead executor is redelivered")
        if name in ("up", "reconcile"):
            p.add_argument("--retention", type=_retention, metavar="DURATION",
                           default=os.environ.get("KUBUS_RETENTION") or DEFAULT_RETENTION,
                           help="how long the audit trail keeps events, decisions, actions and results, e.g. 7d; "
                                f"off keeps everything (env KUBUS_RETENTION, default {DEFAULT_RETENTION})")
        if name in ("up", "reconcile"):
            flags.add_controllers(p)
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
        if name in ("up", "ingest"):
            p.add_argument("--state-tombstone-ttl", type=_tombstone_ttl, metavar="DURATION",
                           default=os.environ.get("KUBUS_STATE_TOMBSTONE_TTL") or DEFAULT_TOMBSTONE_TTL,
                           help="how long KUBUS_STATE keeps a deleted object's last event, e.g. 1h; off keeps them "
                                "for ever (env KUBUS_STATE_TOMBSTONE_TTL, default "
                                f"{DEFAULT_TOMBSTONE_TTL}; keep it well above the 120 s duplicate window and any "
                                "ingest lag)")
        if name in ("up", "reconcile"):
            from kubus.shadow_command import add_shadow_arguments

            add_shadow_arguments(p)
        if name == "reconcile":
            flags.add_lease_ttl(p)
        if name == "up":
            p.add_argument("--sim", action="store_true", help="also run `kubus sim` and use it as the cluster")
            add_sim_arguments(p, kubeconfig=False)
            flags.add_kubeconfig(p, help=f"{flags.KUBECONFIG_HELP}. With --sim: where the sim writes its kubeconfig, "
                                         f"which the services then use (default {SIM_KUBECONFIG})")
        elif name in ("ingest", "execute"):  # the reconciler never talks to the API
            flags.add_kubeconfig(p)
        logs.add_arguments(p)
        p.set_defaults(run=lambda args, name=name: run(name, args))


DEFAULT_RETENTION = "30d"
DEFAULT_TOMBSTONE_TTL = "1h"


def _tombstone_ttl(text: str) -> float | None:
    if text.strip().lower() == "off":
        return None
    try:
        ttl = parse_go_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if ttl <= timedelta(0):
        raise argparse.ArgumentTypeError(f"must be more than 0 (or off): {text!r}")
    return ttl.total_seconds()


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


def run(name: str, args: argparse.Namespace) -> int:
    async def build(runtime: Runtime) -> dict[str, Part]:
        return await _build(name, args, runtime)

    prepare = None
    if name == "up" and args.sim and not args.nats_url and not args.db_url:
        # a new simulated cluster, with the streams and the store in the data directory (the defaults): what the
        # data directory holds is an earlier sim's, which is gone. Moved aside, not refused, mixed in or deleted
        # (runtime/datadir.py). With a NATS or a database of the user's, nothing is moved: ingest refuses the
        # other cluster's streams, saying how to give this one state of its own.
        async def prepare(data_dir: Path) -> None:
            from store.urls import DB_FILE

            sqlite = [DB_FILE, f"{DB_FILE}-wal", f"{DB_FILE}-shm", f"{DB_FILE}-journal"]  # and its journals
            try:
                await datadir.set_aside(data_dir, [datadir.NATS_DIR, *sqlite], args.prefix)
            except OSError as exc:
                raise StartupError(f"cannot move the earlier cluster's state in {data_dir} aside ({exc}); move it "
                                   "yourself, or give another --data-dir") from None

    return run_service(name, flags.options_of(args), build, prepare)


def own_state(args: argparse.Namespace) -> str:
    """How the kubus of another cluster than the streams' gets state of its own: where this process keeps its
    streams (the embedded nats-server's in --data-dir, or --prefix on a NATS) and its store (SQLite in --data-dir,
    or --db-url). The ingest's message refusing the streams says it (ingest/identity.py)."""
    data_dir = args.data_dir
    if not args.nats_url and not args.db_url:
        return (f"another --data-dir (its embedded nats-server's streams and its SQLite audit trail are in "
                f"{data_dir}), or move {data_dir} aside (kubus audit and kubus replay still read it, with "
                "--data-dir)")
    streams = ("another --prefix for its streams" if args.nats_url
               else f"another --data-dir for its streams (the embedded nats-server's, in {data_dir})")
    store = ("another database (--db-url) for its audit trail" if args.db_url
             else f"another --data-dir for its audit trail (SQLite, in {data_dir})")
    return f"{streams} and {store}"


async def _build(name: str, args: argparse.Namespace, runtime: Runtime) -> dict[str, Part]:
    """The service's parts, each started the same way: on the runtime's bus, with its health checks."""
    bus, health, stack = runtime.bus, runtime.health, runtime.stack
    if name == "up" and args.sim:
        args.kubeconfig = await _start_sim(stack, args)
    parts: dict[str, Part] = {}
    store = None
    if name in ("up", "reconcile", "ingest"):
        from store.engine import open_store
        from store.errors import DatabaseUnavailable

        try:
            store = await open_store(args.db_url, str(runtime.data_dir),
                                   statement_timeout=flags.statement_timeout(args))
        except DatabaseUnavailable as exc:
            raise StartupError(str(exc)) from None
        stack.push_async_callback(store.close)
    if name in ("up", "ingest"):
        from ingest.config import IngestConfig
        from ingest.service import Ingest
        from runtime.metrics import REGISTRY
        from store.checkpoints import SqlCheckpoints

        assert store is not None
        ingest = Ingest(IngestConfig(prefix=bus.prefix, partitions=bus.partitions, kubeconfig=args.kubeconfig,
                                     context=args.context, instance=f"ingest-{args.instance}",
                                     checkpoints=SqlCheckpoints(store), tombstone_ttl=args.state_tombstone_ttl,
                                     own_state=own_state(args)), registry=REGISTRY)
        parts["ingest"] = lambda: ingest.run(bus, health)
    if name in ("up", "reconcile"):
        from reconciler.service import run_reconciler

        # `kubus up` is alone by construction; `kubus reconcile` shares the partitions with its peers
        lease_ttl = args.lease_ttl if name == "reconcile" else None
        parts["reconciler"] = lambda: run_reconciler(bus, store, health, f"reconciler-{args.instance}",
                                                     retention=args.retention, lease_ttl=lease_ttl,
                                                     feature_gates=args.feature_gates,
                                                     min_resync_period=args.min_resync_period,
                                                     shadow=args.shadow_window if args.shadow else None,
                                                     controllers=args.controllers)
    if name == "execute" or (name == "up" and not args.shadow):  # a shadow executes nothing
        from executor.config import ExecutorConfig
        from executor.metrics import ExecutorMetrics
        from executor.service import run_executor
        from runtime.metrics import REGISTRY

        config = ExecutorConfig(prefix=bus.prefix, partitions=bus.partitions, kubeconfig=args.kubeconfig,
                                context=args.context, instance=f"executor-{args.instance}", qps=args.qps,
                                burst=args.burst, ack_wait=args.ack_wait,
                                concurrency=args.concurrent_daemonset_syncs + args.concurrent_replicaset_syncs,
                                concurrent_syncs=((ControllerKind.DAEMON_SET, args.concurrent_daemonset_syncs),
                                                  (ControllerKind.REPLICA_SET, args.concurrent_replicaset_syncs)))
        executor_metrics = ExecutorMetrics(REGISTRY)  # the process's one registry, which /metrics serves
        parts["executor"] = lambda: run_executor(config, bus, health, metrics=executor_metrics)
    return parts


async def _start_sim(stack: contextlib.AsyncExitStack, args: argparse.Namespace) -> str:
    """`kubus sim` in its own process (it gets a core of its own), with the sim flags passed on."""
    kubeconfig = Path(args.kubeconfig or SIM_KUBECONFIG)
    if kubeconfig.exists():
        kubeconfig.unlink()  # so we notice when the new sim has written its own
    sim_flags = ["--nodes", str(args.nodes), "--kubeconfig", str(kubeconfig), "--port", str(args.port),
                 "--host", args.host, "--kubelet-delay", str(args.kubelet_delay),
                 "--termination-seconds", str(args.termination_seconds), "--watch-history", str(args.watch_history),
                 "--node-prefix", args.node_prefix]
    for option, value in (("--node-labels", args.node_labels), ("--node-capacity", args.node_capacity),
                          ("--nodes-file", args.nodes_file), ("--seed", args.seed)):
        if value:
            sim_flags += [option, str(value)]
    for taint in args.node_taint:
        sim_flags += ["--node-taint", taint]
    for fault in args.fault:
        sim_flags += ["--fault", fault]
    if args.no_kubelet:
        sim_flags.append("--no-kubelet")
    if args.authz:
        sim_flags += ["--authz", args.authz]  # the kubeconfig it writes is then the admin's
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "kubus", "sim", *sim_flags,
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
