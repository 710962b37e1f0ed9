"""`kubus sim`: one process that is a whole simulated cluster.

The API server, scheduler, kubelets and garbage collector share one in-memory store and one
event loop. Admin endpoints under `/sim/` steer what a real cluster's nodes would do on their own:

- `PUT|GET|DELETE /sim/faults`: fault injection rules (see sim.faults).
- `POST /sim/nodes/{name}/ready` with `{"ready": false}`: the node goes NotReady (and back).
- `POST /sim/pods/{namespace}/{name}/fail`: the pod's containers exit with an error.
- `POST /sim/unvalidated` with an object: stored without validation, as if written before
  validation tightened (see sim.unvalidated).

With `authz="rbac"` (`kubus sim --authz rbac`) the Kubernetes API authenticates and authorizes every
request (sim.auth, sim.rbac), is served over HTTPS (sim.tls: clients send credentials only over TLS),
and the kubeconfig carries the CA and the admin's token; the `/sim/` endpoints, which stand for what
nodes do on their own, need no credentials.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml
from aiohttp import web

from kube.times import utcnow
from runtime import collecting
from sim import resources as R
from sim import status as errors
from sim.apiserver import ApiServer
from sim.auth import Authenticator
from sim.faults import FaultInjector, FaultRule
from sim.gc import GarbageCollector
from sim.kubelet import Kubelets
from sim.nodes import InitialNode, node_object
from sim.rbac import bootstrap_policy
from sim.registry import Decoding, Registry, format_time
from sim.scheduler import Scheduler
from sim.store import ObjectStore
from sim.tls import ServingCerts, serving_certs
from sim.unvalidated import PATH as UNVALIDATED_PATH
from sim.unvalidated import create_unvalidated

log = logging.getLogger("kubus.sim")

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
CLUSTER_NAMESPACE = "kube-system"


@dataclass
class SimConfig:
    nodes: list[InitialNode] = field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 0
    kubeconfig: str | None = None
    advertise_url: str | None = None  # the server URL written into the kubeconfig, if not the bound one
    kubelet: bool = True
    kubelet_delay: float = 0.5
    termination_seconds: float = 1.0
    history_size: int = 20_000
    bookmark_interval: float = 60.0
    faults: list[str] = field(default_factory=list)
    fault_timeout: float = 5.0
    seed: int | None = None
    authz: str | None = None  # "rbac": authenticate and authorize every API request
    admin_token: str | None = None  # the admin's bearer token with authz (default: a random one)

    def __post_init__(self) -> None:
        if self.authz not in (None, "rbac"):
            raise ValueError(f"--authz: unsupported mode {self.authz!r}; the sim supports: rbac")


class SimCluster:
    def __init__(self, config: SimConfig):
        self.config = config
        self.store = ObjectStore(config.history_size)
        self.registry = Registry(self.store, utcnow, config.seed)
        self.faults = FaultInjector([FaultRule.parse(r) for r in config.faults], config.seed,
                                    config.fault_timeout)
        self.authenticator = (Authenticator(self.store, config.admin_token) if config.authz == "rbac" else None)
        self.api = ApiServer(self.registry, self.faults, bookmark_interval=config.bookmark_interval,
                             authenticator=self.authenticator)
        self.scheduler = Scheduler(self.registry)
        self.kubelets = Kubelets(self.registry, start_delay=config.kubelet_delay,
                                 termination_seconds=config.termination_seconds, enabled=config.kubelet)
        self.gc = GarbageCollector(self.registry)
        self.certs: ServingCerts | None = None
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.url = ""

    def _seed(self) -> None:
        for ns in SYSTEM_NAMESPACES:
            # kube-system's uid is the cluster's identity (kubus ingest records it in the streams): every sim is a
            # cluster of its own, even two started with the same --seed
            uid = str(uuid.uuid4()) if ns == CLUSTER_NAMESPACE else None
            self.registry.create(R.NAMESPACES, "", {"metadata": {"name": ns}}, uid=uid)
        now = format_time(self.registry.clock())
        for i, spec in enumerate(self.config.nodes):
            self.registry.create(R.NODES, "", node_object(spec, i, now))
        if self.authenticator is not None:
            for resource, obj in bootstrap_policy():
                self.registry.create(resource, "", obj)
            for ns in SYSTEM_NAMESPACES:  # the ServiceAccount controller's `default` in every namespace
                self.registry.create(R.SERVICEACCOUNTS, ns, {"metadata": {"name": "default"}})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/sim/faults", self._faults)
        app.router.add_post("/sim/nodes/{name}/ready", self._node_ready)
        app.router.add_post("/sim/pods/{namespace}/{name}/fail", self._fail_pod)
        app.router.add_post(UNVALIDATED_PATH, self._unvalidated)
        app.router.add_route("*", "/{tail:.*}", self.api.handle)
        return app

    async def start(self) -> str:
        # The sim keeps every object and its watch history for its life: nodes, pods and their versions, trees that
        # reference counting frees by itself. Full collections scanned them all again and again (~4% of the sim's
        # CPU per pod at 1,000 nodes, more at 5,000: issue 25), so their survivors are frozen as the reconciler's are.
        collecting.install()
        self._seed()
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False,
                                     shutdown_timeout=1.0)
        await self._runner.setup()
        if self.authenticator is not None:
            hosts = [self.config.host]
            if self.config.advertise_url:
                hosts.append(urlsplit(self.config.advertise_url).hostname or "")
            self.certs = serving_certs(hosts)
        site = web.TCPSite(self._runner, self.config.host, self.config.port, backlog=1024,
                           ssl_context=self.certs.context if self.certs else None)
        await site.start()
        sockets = site._server.sockets if site._server else []  # the bound port when 0 was asked
        port = sockets[0].getsockname()[1]
        self.url = f"{'https' if self.certs else 'http'}://{self.config.host}:{port}"
        self.api.address = f"{self.config.host}:{port}"
        self._tasks = [asyncio.create_task(self.scheduler.run(), name="sim-scheduler"),
                       asyncio.create_task(self.gc.run(), name="sim-gc")]
        self.kubelets.start()
        if self.config.kubeconfig:
            token = self.authenticator.admin_token if self.authenticator is not None else None
            write_kubeconfig(self.config.kubeconfig, self.config.advertise_url or self.url, token,
                             self.certs.ca_pem if self.certs else None)
        log.info("kubus sim serving %s with %d nodes", self.url, len(self.config.nodes))
        return self.url

    async def stop(self) -> None:
        self.api.stopping.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()

    # --- admin endpoints -------------------------------------------------------------------------
    async def _faults(self, request: web.Request) -> web.Response:
        if request.method == "PUT":
            body = await request.json()
            try:
                rules = [FaultRule.parse(r) for r in body.get("rules", [])]
            except ValueError as exc:
                return web.json_response({"error": str(exc)}, status=400)
            self.faults.configure(rules, body.get("seed"))
            if "timeoutSeconds" in body:
                self.faults.timeout_seconds = float(body["timeoutSeconds"])
        elif request.method == "DELETE":
            self.faults.configure([])
        elif request.method != "GET":
            return web.json_response({"error": "use GET, PUT or DELETE"}, status=405)
        return web.json_response({"rules": [r.describe() for r in self.faults.rules]})

    async def _node_ready(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        try:
            self.kubelets.set_node_ready(request.match_info["name"], bool(body.get("ready", True)))
        except errors.ApiError as exc:
            return web.json_response(exc.status(), status=exc.code)
        return web.json_response({"ok": True})

    async def _unvalidated(self, request: web.Request) -> web.Response:
        """POST /sim/unvalidated: the object created without validation (sim.unvalidated); the
        answer is what a create answers, with the dropped unknown fields in Warning headers."""
        decoding = Decoding("Warn")
        try:
            body = await ApiServer._body(request)
            entry = create_unvalidated(self.registry, body, decoding)
        except errors.ApiError as exc:
            return web.json_response(exc.status(), status=exc.code)
        response = web.Response(body=entry.raw, status=201, content_type="application/json")
        return ApiServer._warn(response, decoding)

    async def _fail_pod(self, request: web.Request) -> web.Response:
        try:
            self.kubelets.fail_pod(request.match_info["namespace"], request.match_info["name"])
        except errors.ApiError as exc:
            return web.json_response(exc.status(), status=exc.code)
        return web.json_response({"ok": True})


def kubeconfig_document(url: str, name: str = "kubus-sim", token: str | None = None,
                        ca_pem: bytes | None = None) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": url}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token} if token else {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
    }


def write_kubeconfig(path: str, url: str, token: str | None = None, ca_pem: bytes | None = None) -> None:
    """The kubeconfig (0600 when it holds the admin's token, which is as good as cluster-admin)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if token else 0o644)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(kubeconfig_document(url, token=token, ca_pem=ca_pem), handle, sort_keys=False)
    os.replace(tmp, path)  # readers never see a half-written file
