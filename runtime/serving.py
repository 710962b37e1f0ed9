"""`/metrics`, `/healthz` and `/readyz` for every kubus service.

/metrics serves the process's one prometheus registry (runtime/metrics.py). Metric names follow
controller-runtime and client-go where a counterpart exists (`controller_runtime_reconcile_total`,
`workqueue_*`, `rest_client_*`: reconciler/metrics.py, runtime/metrics.py), and carry a `kubus_` prefix where
it does not (those every service may report are here; ingest/counting.py, executor/metrics.py have theirs).
Readiness is the AND of the checks each service
registers (connected to NATS, streams created, caught up after bootstrap ...). Every service serving
/metrics also reports how full kubus's streams are (`kubus_stream_*`, refreshed by `watch_streams`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from aiohttp import web
from nats.js.errors import NotFoundError
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest

from runtime.bus import Bus
from runtime.metrics import REGISTRY

log = logging.getLogger("kubus.serving")

EVENTS_CONSUMED = Counter("kubus_reconciler_events_total", "Observed events folded into the cache",
                          ["kind", "type"])
STREAM_LAG = Gauge("kubus_stream_lag_messages", "Messages of the stream not yet delivered to this consumer (its "
                   "num_pending at the last message it took)", ["stream"])
ACTIONS = Counter("kubus_action_results_recorded_total", "Action results the reconciler recorded",
                  ["action", "outcome"])
OUTBOX_DEPTH = Gauge("kubus_outbox_pending", "Outbox rows not yet published (at the relay's last round, at most "
                     "one round's batch of 500)")
OUTBOX_OLDEST = Gauge("kubus_outbox_oldest_pending_seconds",
                      "Age of the oldest outbox row not yet published, at the relay's last round (0: none)")
# poison (runtime/deadletter.py): one counter for every consumer, the executor's included
DEAD_LETTERED = Counter("kubus_dead_lettered_total", "Messages copied to KUBUS_DEAD and skipped, by the subject "
                        "family they came from and why they could not be used", ["origin", "reason"])
HALTED = Gauge("kubus_consumer_halted", "1 while a consumer is stopped at a message of a newer schema version than "
               "this process understands: upgrade the process", ["consumer"])
RELAY_STALLED = Gauge("kubus_outbox_relay_stalled_seconds",
                      "How long the outbox relay's rounds have been failing (0 while they succeed)")
# how full each of kubus's streams is, refreshed every STREAMS_REFRESH seconds by every service serving /metrics
STREAM_MESSAGES = Gauge("kubus_stream_messages", "Messages a stream holds", ["stream"])
STREAM_BYTES = Gauge("kubus_stream_bytes", "Bytes a stream holds", ["stream"])
STREAM_FULLNESS = Gauge("kubus_stream_fullness_ratio",
                        "A stream's bytes over its max_bytes (only streams with a byte limit): at 1 a history "
                        "stream discards its oldest messages, KUBUS_ACTIONS refuses new actions", ["stream"])
STREAM_RESETS = Counter("kubus_stream_resets_total",
                        "Times this process found KUBUS_EVENTS reset (created anew, or it lost events it had "
                        "stored) and started over from a fresh relist", ["stream", "service"])
SHADOW_DIVERGENCES = Counter("kubus_shadow_divergences_total",
                             "Decisions a shadow would have taken that the acting controller did not (kind "
                             "kubus-only), and acts of the acting controller the shadow would not have taken "
                             "(upstream-only), "
                             "counted once per closed comparison window (docs/shadow.md)",
                             ["controller", "kind"])
STREAMS_REFRESH = 15.0  # seconds; Prometheus's default scrape interval


async def watch_streams(bus: Bus, interval: float = STREAMS_REFRESH) -> None:
    """Refreshes the streams' gauges until cancelled; a round NATS cannot answer keeps the last values."""
    while True:
        try:
            await refresh_streams(bus)
        except Exception as exc:  # NATS reconnecting, a leader being elected: the next round will do
            log.debug("stream gauges not refreshed: %s", exc or type(exc).__name__)
        await asyncio.sleep(interval)  # the refresh period, not a wait for a condition


async def refresh_streams(bus: Bus) -> None:
    """Reads each of kubus's streams' state into STREAM_MESSAGES, STREAM_BYTES and STREAM_FULLNESS."""
    for name in bus.streams():
        try:
            info = await bus.js.stream_info(name)
        except NotFoundError:  # deleted under us: say nothing rather than stale numbers
            for gauge in (STREAM_MESSAGES, STREAM_BYTES, STREAM_FULLNESS):
                with contextlib.suppress(KeyError):
                    gauge.remove(name)
            continue
        STREAM_MESSAGES.labels(name).set(info.state.messages)
        STREAM_BYTES.labels(name).set(info.state.bytes)
        limit = info.config.max_bytes or -1
        if limit > 0:
            STREAM_FULLNESS.labels(name).set(info.state.bytes / limit)
        else:
            with contextlib.suppress(KeyError):
                STREAM_FULLNESS.remove(name)


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
        # not ready until a part of the service has said what ready means: each registers its checks as
        # it starts, after the runtime serves these endpoints (and, with `kubus up --sim`, starts the sim)
        ok, text = self._report(self._ready) if self._ready else (False, "[-]started failed\nhealthz check failed")
        return web.Response(text=text, status=200 if ok else 503)


async def metrics(_request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def serve(health: Health, host: str, port: int, *, metrics_too: bool = True,
                probes_too: bool = True) -> web.AppRunner:
    """Serves /metrics and the probes (/healthz, /livez, /readyz) on host:port, or one of the two: with
    --health-probe-bind-address the probes have a server of their own."""
    app = web.Application()
    if metrics_too:
        app.router.add_get("/metrics", metrics)
    if probes_too:
        app.router.add_get("/healthz", health.healthz)
        app.router.add_get("/livez", health.healthz)
        app.router.add_get("/readyz", health.readyz)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host or None, port)  # "": every interface
    await site.start()
    log.info("serving %s on %s:%d", served(metrics_too, probes_too), f"[{host}]" if ":" in host else host, port)
    return runner


def served(metrics_too: bool, probes_too: bool) -> str:
    return ", ".join([*(["/metrics"] if metrics_too else []), *(["/healthz", "/readyz"] if probes_too else [])]
                     ).replace(", /readyz", " and /readyz")
