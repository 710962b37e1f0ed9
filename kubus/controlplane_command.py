"""`kubus controlplane build|up`: a real Kubernetes control plane, built from Go modules, to run kubus on."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from controlplane.building import BuildError, build, cache_root, find_or_fail
from controlplane.certificates import CertificateError
from controlplane.processes import ControlPlane, ControlPlaneConfig, ControlPlaneError

DEFAULT_KUBECONFIG = "./kubeconfig"
DEFAULT_DATA_DIR = "./.kubus/controlplane"


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "controlplane", help="build and run a real Kubernetes control plane (etcd, kube-apiserver, "
                             "kube-controller-manager, kube-scheduler, kwok nodes)",
        description="A real Kubernetes control plane built from the Go modules pinned in controlplane/go/, "
                    "on loopback, for kubus to be the cluster's DaemonSet and ReplicaSet controllers.")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    b = verbs.add_parser("build", help="build the binaries (tens of minutes the first time) or find them built",
                         description=f"Build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd "
                                     f"and kwok with the Go toolchain into a cache keyed by their versions and "
                                     f"go.sum ({cache_root()}; KUBUS_CONTROLPLANE_CACHE overrides it), or find "
                                     f"them there. Prints the versions and the bin directory.")
    b.set_defaults(run=run_build)
    u = verbs.add_parser("up", help="run the control plane in the foreground until SIGINT or SIGTERM",
                         description="Start etcd, kube-apiserver, kube-controller-manager (without its DaemonSet "
                                     "and ReplicaSet controllers: run `kubus up --kubeconfig FILE` to be them), "
                                     "kube-scheduler and kwok with N nodes on loopback; write the admin kubeconfig "
                                     "once every node is Ready; stop them all at SIGINT or SIGTERM. Needs "
                                     "`kubus controlplane build` first.")
    u.add_argument("--nodes", type=int, default=3, help="kwok nodes to create (default 3)")
    u.add_argument("--kubeconfig", default=DEFAULT_KUBECONFIG, metavar="FILE",
                   help=f"where to write the admin kubeconfig (default {DEFAULT_KUBECONFIG})")
    u.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR",
                   help=f"etcd's data, the certificates and every log (default {DEFAULT_DATA_DIR}); wiped at "
                        "start if a previous control plane left it, refused if it holds anything else")
    u.add_argument("--upstream-controllers", action="store_true",
                   help="run kube-controller-manager's own DaemonSet and ReplicaSet controllers too")
    u.add_argument("--audit-reads-of", action="append", default=[], metavar="GROUP",
                   help="log the reads (get, list, watch) of this user group too, e.g. "
                        "system:serviceaccounts:kubus-system (repeatable; by default the audit log has writes only)")
    u.set_defaults(run=run_up)


def _say(line: str) -> None:
    print(f"kubus controlplane: {line}", flush=True)


def run_build(args: argparse.Namespace) -> int:
    try:
        made = build(_say)
    except BuildError as exc:
        print(f"kubus controlplane build: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"kubus controlplane: {made.describe()}\n  bin: {made.bin_dir}", flush=True)
    return 0


class _Stop(Exception):
    pass


def run_up(args: argparse.Namespace) -> int:
    try:
        config = ControlPlaneConfig(nodes=args.nodes, data_dir=Path(args.data_dir), kubeconfig=Path(args.kubeconfig),
                                    upstream_controllers=args.upstream_controllers,
                                    audit_reads_of=tuple(args.audit_reads_of))
        config.validate()  # bad input is said before the build is looked for
        made = find_or_fail()
        plane = ControlPlane(made, config, _say)
    except (BuildError, ControlPlaneError) as exc:
        print(f"kubus controlplane up: {exc}", file=sys.stderr, flush=True)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not stop.is_set():
            stop.set()
            raise _Stop  # interrupts a start in progress too: start() then stops what it started

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        _say(f"{made.describe()}; starting {args.nodes} nodes under {plane.data_dir}")
        try:
            plane.start()
        except (ControlPlaneError, CertificateError) as exc:
            print(f"kubus controlplane up: {exc}", file=sys.stderr, flush=True)
            return 1
        controllers = "with" if args.upstream_controllers else "without"
        _say(f"up at {plane.server} ({controllers} the upstream DaemonSet and ReplicaSet controllers)\n"
             f"  kubeconfig: {plane.kubeconfig}\n"
             + "".join(f"  log of {name}: {path}\n" for name, path in plane.logs.items())
             + f"  audit log: {plane.audit_log}\n"
             f"  try: kubectl --kubeconfig {plane.kubeconfig} get nodes; "
             f"kubus up --kubeconfig {plane.kubeconfig}")
        stop.wait()
    except _Stop:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not interrupt the stopping
            signal.signal(sig, signal.SIG_IGN)
        _say("stopping")
        plane.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _say("stopped")
    return 0
