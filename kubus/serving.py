"""`/metrics`, `/healthz` and `/readyz` for every kubus service.

Metric names follow controller-runtime and client-go where a counterpart exists
(`controller_runtime_reconcile_total`, `workqueue_depth`, `rest_client_requests_total`), and
carry a `kubus_` prefix where it does not. Readiness is the AND of the checks each service
registers (connected to NATS, streams created, caught up after bootstrap ...).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger("kubus.serving")

EVENTS_PUBLISHED = Counter("kubus_ingest_events_total", "Watch events published to JetStream",
                           ["kind", "type"])
EVENTS_DUPLICATE = Counter("kubus_ingest_duplicates_total", "Publishes JetStream dropped as duplicates",
                           ["kind"])
EVENTS_CONSUMED = Counter("kubus_reconciler_events_total", "Observed events folded into the cache",
                          ["kind", "type"])
RECONCILES = Counter("controller_runtime_reconcile_total", "Syncs by controller and result",
                     ["controller", "result"])
RECONCILE_TIME = Histogram("controller_runtime_reconcile_time_seconds", "Time of one sync", ["controller"],
                           buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
WORKQUEUE_DEPTH = Gauge("workqueue_depth", "Keys waiting to be synced", ["name"])
STREAM_LAG = Gauge("kubus_stream_lag_messages", "Messages not yet processed by this consumer", ["stream"])
ACTIONS = Counter("kubus_actions_total", "Actions by kind and outcome", ["action", "outcome"])
OUTBOX_DEPTH = Gauge("kubus_outbox_pending", "Outbox rows not yet published")
REST_REQUESTS = Counter("rest_client_requests_total", "API requests by verb and status code", ["method", "code"])

Check = Callable[[], bool]


class Health:
    def __init__(self) -> None:
        self._ready: dict[str, Check] = {}
        self._alive: dict[str, Check] = {}

    def ready_when(self, name: str, check: Check) -> None:
        self._ready[name] = check

    def alive_when(self, name: str, check: Check) -> None:
        self._alive[name] = check

    def _report(self, checks: dict[str, Check]) -> tuple[bool, str]:
        lines, ok = [], True
        for name, check in sorted(checks.items()):
            try:
                passed = bool(check())
            except Exception:  # a failing check means "not ready", not a crashed endpoint
                passed = False
            ok = ok and passed
            lines.append(f"[{'+' if passed else '-'}]{name} {'ok' if passed else 'failed'}")
        return ok, "\n".join([*lines, "healthz check passed" if ok else "healthz check failed"])

    async def healthz(self, _request: web.Request) -> web.Response:
        ok, text = self._report(self._alive)
        return web.Response(text=text, status=200 if ok else 500)

    async def readyz(self, _request: web.Request) -> web.Response:
        ok, text = self._report(self._ready)
        return web.Response(text=text, status=200 if ok else 503)


async def metrics(_request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def serve(health: Health, host: str, port: int) -> web.AppRunner:
    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", health.healthz)
    app.router.add_get("/livez", health.healthz)
    app.router.add_get("/readyz", health.readyz)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    log.info("serving /metrics, /healthz and /readyz on %s:%d", host, port)
    return runner
