"""`run_executor`: the executor service, wired from its config (what `kubus execute` runs).

    stop = asyncio.Event()              # set it (e.g. on SIGTERM) for a clean shutdown
    metrics = ExecutorMetrics()         # metrics.snapshot() for /metrics
    await run_executor(ExecutorConfig(nats_url=..., kubeconfig=...), stop=stop, metrics=metrics)

Cancelling the task is a clean shutdown too. Start-up failures say what is wrong in one line:
`NatsUnavailable` when NATS does not answer, `runtime.kubeconfig.KubeconfigError` when the kubeconfig
cannot be used.
"""

from __future__ import annotations

import asyncio
import logging

from kubernetes import client as k8s
from nats.aio.client import Client

from executor.config import ExecutorConfig
from executor.consuming import Executor
from executor.kubeapi import KubeApi, load_client
from executor.metrics import ExecutorMetrics
from executor.ratelimit import TokenBucket
from messages import subjects
from runtime.bus import NatsUnavailable, close, connect, ensure_streams

log = logging.getLogger("kubus.executor")


async def run_executor(config: ExecutorConfig, *, stop: asyncio.Event | None = None,
                       metrics: ExecutorMetrics | None = None) -> None:
    stop = stop or asyncio.Event()
    metrics = metrics or ExecutorMetrics()
    client = await _client(config)
    stopping = asyncio.Event()
    api = KubeApi(client, workers=config.api_workers, limiter=TokenBucket(config.qps, config.burst),
                  metrics=metrics, stopping=stopping, request_timeout=config.request_timeout,
                  attempts=config.api_attempts, max_retries=config.api_max_retries,
                  backoff_initial=config.backoff_initial,
                  backoff_max=config.backoff_max)
    try:
        nc = await _connect(config)
        try:
            bus = await ensure_streams(nc, prefix=config.prefix, partitions=config.partitions)
            log.info("executor %s consuming %s (qps %s, burst %s, %d actions and %d API calls in flight)",
                     config.instance, bus.stream(subjects.ACTIONS_STREAM), config.qps, config.burst,
                     config.concurrency, config.api_workers)
            await Executor(bus, api, config, metrics, stopping).run(stop)
        finally:
            await close(nc)
    finally:
        # waits for calls still on worker threads (those of cancelled actions) to return
        await asyncio.to_thread(api.close)
    log.info("executor %s stopped", config.instance)


async def _connect(config: ExecutorConfig) -> Client:
    """runtime.bus.connect, bounded: with reconnects enabled nats-py retries a first connection forever."""
    try:
        return await asyncio.wait_for(connect(config.nats_url, name=config.instance),
                                      config.nats_connect_timeout)
    except TimeoutError:
        raise NatsUnavailable(
            f"cannot reach NATS at {config.nats_url} (nothing answered within {config.nats_connect_timeout}s); "
            f"start nats-server with JetStream (-js) there, or omit --nats-url to run an embedded one") from None


async def _client(config: ExecutorConfig) -> k8s.ApiClient:
    """Loads the kubeconfig on a thread: it reads files and may run an exec credential plugin."""
    return await asyncio.to_thread(load_client, config.kubeconfig, config.context, config.api_workers)
