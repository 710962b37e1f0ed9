"""`kubus sim`: run the simulated cluster until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from runtime import logs
from runtime.running import install_fast_loop
from sim.faults import FAULTS
from sim.nodes import generate, load_file, parse_capacity, parse_labels, parse_taint
from sim.tls import TlsUnavailable

if TYPE_CHECKING:  # the cluster (the API server, the official client's models) is imported only to run one:
    from sim.cluster import SimConfig  # `kubus reconcile` and the other services parse `kubus up --sim`'s flags

log = logging.getLogger("kubus.sim")

SIM_KUBECONFIG = "./kubeconfig"


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "sim", help="run a simulated Kubernetes cluster (API server, scheduler, kubelets)",
        description="Run a simulated Kubernetes cluster that kubectl and client libraries accept as "
                    "kube-apiserver. Writes a kubeconfig for it and serves until SIGINT or SIGTERM.")
    add_sim_arguments(p)
    logs.add_arguments(p)
    p.set_defaults(run=run)


def add_sim_arguments(p: argparse.ArgumentParser, *, kubeconfig: bool = True) -> None:
    """The sim's flags; `kubeconfig=False` leaves out --kubeconfig, which `kubus up` declares itself."""
    g = p.add_argument_group("simulated cluster")
    g.add_argument("--nodes", type=int, default=3, help="number of nodes to create (default 3)")
    g.add_argument("--node-prefix", default="node-", help="node name prefix (default node-)")
    g.add_argument("--node-labels", default="", metavar="K=V,...", help="labels for every generated node")
    g.add_argument("--node-taint", action="append", default=[], metavar="KEY[=VALUE]:EFFECT",
                   help="a taint for every generated node (repeatable)")
    g.add_argument("--node-capacity", default="", metavar="cpu=4,memory=16Gi,pods=110",
                   help="capacity of every generated node")
    g.add_argument("--nodes-file", metavar="YAML", help="a YAML list of nodes (name, labels, taints, capacity, "
                                                         "unschedulable) added after the generated ones")
    if kubeconfig:
        g.add_argument("--kubeconfig", metavar="PATH", default=SIM_KUBECONFIG,
                       help=f"where to write the kubeconfig for the sim (default {SIM_KUBECONFIG})")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    g.add_argument("--port", type=int, default=0, help="port to listen on (default: a free port)")
    g.add_argument("--advertise-url", metavar="URL",
                   help="server URL to write into the kubeconfig (default: the address listened on), "
                        "e.g. http://sim:6443 for other containers")
    g.add_argument("--no-kubelet", action="store_true",
                   help="run no kubelets: pod status is left to clients (as upstream integration tests do)")
    g.add_argument("--kubelet-delay", type=float, default=0.5, metavar="SECONDS",
                   help="time from binding to Running and Ready (default 0.5)")
    g.add_argument("--termination-seconds", type=float, default=1.0, metavar="SECONDS",
                   help="longest time a kubelet takes to finish a graceful pod deletion (default 1)")
    g.add_argument("--watch-history", type=int, default=20_000, metavar="EVENTS",
                   help="events kept for watches to resume from; older versions get 410 Gone")
    g.add_argument("--bookmark-interval", type=float, default=60.0, metavar="SECONDS",
                   help="how often watches that allow bookmarks get one (default 60)")
    g.add_argument("--fault", action="append", default=[], metavar="RESOURCE:VERB:FRACTION:FAULT",
                   help=f"inject faults, e.g. pods:create:0.2:500 ({', '.join(FAULTS)})")
    g.add_argument("--seed", type=int, default=None,
                   help="seed for generated names, uids and faults (not kube-system's uid: it identifies the instance)")
    g.add_argument("--authz", choices=["rbac"], default=None,
                   help="authenticate every API request (anonymous ones get 401) and authorize it with RBAC; "
                        "the kubeconfig gets an admin token (group system:masters), and ServiceAccounts, "
                        "`kubectl create token`, Roles, ClusterRoles and their bindings are served")


def config_from_args(args: argparse.Namespace) -> SimConfig:
    from sim.cluster import SimConfig

    taints = [parse_taint(t) for t in args.node_taint]
    capacity = parse_capacity(args.node_capacity) if args.node_capacity else None
    nodes = generate(args.nodes, args.node_prefix, parse_labels(args.node_labels), taints, capacity)
    if args.nodes_file:
        nodes += load_file(args.nodes_file)
    return SimConfig(nodes=nodes, host=args.host, port=args.port, kubeconfig=args.kubeconfig,
                     advertise_url=args.advertise_url,
                     kubelet=not args.no_kubelet, kubelet_delay=args.kubelet_delay,
                     termination_seconds=args.termination_seconds, history_size=args.watch_history,
                     bookmark_interval=args.bookmark_interval, faults=args.fault, seed=args.seed,
                     authz=getattr(args, "authz", None))


async def serve(config: SimConfig) -> None:
    from sim.cluster import SimCluster

    cluster = SimCluster(config)
    try:
        url = await cluster.start()
    except TlsUnavailable as exc:
        print(f"kubus sim: {exc}", file=sys.stderr, flush=True)
        await cluster.stop()
        raise SystemExit(2) from None
    except OSError as exc:  # the port taken, the address not ours: a start-up error, one line
        why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        print(f"kubus sim: cannot serve the API on {config.host}:{config.port}: {why} (choose another --port or "
              "--host)", file=sys.stderr, flush=True)
        await cluster.stop()
        raise SystemExit(2) from None
    mode = " with RBAC (the kubeconfig's user is the admin)" if config.authz else ""
    print(f"kubus sim: {len(config.nodes)} nodes at {url}{mode}; kubeconfig written to {config.kubeconfig}\n"
          f"  try: kubectl --kubeconfig {config.kubeconfig} get nodes", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await cluster.stop()


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, args.log_format)
    try:
        config = config_from_args(args)
    except (ValueError, OSError) as exc:
        print(f"kubus sim: {exc}", file=sys.stderr)
        return 2
    install_fast_loop()
    asyncio.run(serve(config))
    return 0
