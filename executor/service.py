"""`run_executor`: the executor service, wired from its config (what `kubus execute` runs).

    stop = asyncio.Event()              # set it (e.g. on SIGTERM) for a clean shutdown
    metrics = ExecutorMetrics()         # on a registry of its own; metrics.snapshot() reads it
    await run_executor(ExecutorConfig(nats_url=..., kubeconfig=...), stop=stop, metrics=metrics)
    # on the runtime's connection, counting on the process's registry (what `kubus execute` does)
    await run_executor(config, bus, health, metrics=ExecutorMetrics(runtime.metrics.REGISTRY))

Cancelling the task is a clean shutdown too. Start-up failures say what is wrong in one line:
`NatsUnavailable` when NATS does not answer, `runtime.kubeconfig.KubeconfigError` when the kubeconfig
cannot be used.
"""

from __future__ import annotations

import asyncio
import logging

from executor.config import ExecutorConfig
from executor.consuming import Executor
from executor.kubeapi import KubeApi
from executor.laststate import LastStates
from executor.metrics import ExecutorMetrics
from kube.flowcontrol import TokenBucket
from messages import subjects
from runtime.bus import Bus, connected
from runtime.deadletter import Halts
from runtime.kubeconfig import load_kubeconfig, user_agent
from runtime.kubehttp import KubeHttp
from runtime.serving import Health

log = logging.getLogger("kubus.executor")


async def run_executor(config: ExecutorConfig, bus: Bus | None = None, health: Health | None = None, *,
                       stop: asyncio.Event | None = None, metrics: ExecutorMetrics | None = None,
                       halts: Halts | None = None) -> None:
    """Until `stop` is set or the task is cancelled, on `bus`, with the executor's readiness in `health` and its
    metrics on `metrics`'s registry (the process's, runtime.metrics.REGISTRY, for /metrics): how
    runtime.running.run_service starts it. Without a bus (tests, benchmarks) it connects to config.nats_url itself."""
    stop = stop or asyncio.Event()
    metrics = metrics or ExecutorMetrics()
    halts = halts or Halts()
    if health is not None:
        health.ready_when("executor-no-newer-messages", halts.ready)  # not ready once it met an action of a newer kubus
    http = await connect(config)
    stopping = asyncio.Event()
    api = KubeApi(http, limiter=TokenBucket(config.qps, config.burst),
                  metrics=metrics, stopping=stopping,
                  attempts=config.api_attempts, max_retries=config.api_max_retries,
                  backoff_initial=config.backoff_initial,
                  backoff_max=config.backoff_max)
    try:
        if bus is None:
            async with connected(config.nats_url, config.instance, prefix=config.prefix,
                                 partitions=config.partitions, timeout=config.nats_connect_timeout) as own:
                await _consume(config, own, health, api, metrics, stopping, stop, halts)
        else:
            await _consume(config, bus, health, api, metrics, stopping, stop, halts)
    finally:
        await api.close()
    log.info("executor %s stopped", config.instance)


async def _consume(config: ExecutorConfig, bus: Bus, health: Health | None, api: KubeApi,
                   metrics: ExecutorMetrics, stopping: asyncio.Event, stop: asyncio.Event, halts: Halts) -> None:
    if health is not None:
        health.ready_when("nats", lambda: bus.nc.is_connected)
    per_kind = "".join(f", {n} of {kind}s" for kind, n in config.concurrent_syncs)
    log.info("executor %s consuming %s (qps %s, burst %s, %d actions%s and %d API calls in flight)",
             config.instance, bus.stream(subjects.ACTIONS_STREAM), config.qps, config.burst,
             config.concurrency, per_kind, config.api_workers)
    # who controls a deleted pod or ControllerRevision, read from KUBUS_STATE: saves its GET (executor/laststate.py)
    await Executor(bus, api, config, metrics, stopping, halts=halts, states=LastStates.of(bus)).run(stop)


async def connect(config: ExecutorConfig) -> KubeHttp:
    """The executor's HTTP session to the API server of its kubeconfig. The kubeconfig is read on a thread: it
    reads files and may run an exec credential plugin."""
    cfg = await asyncio.to_thread(load_kubeconfig, config.kubeconfig, config.context)
    return await KubeHttp.open(cfg, connections=config.api_workers, request_timeout=config.request_timeout,
                               user_agent=user_agent("executor"))  # kube-apiserver's field manager: "kubus"
