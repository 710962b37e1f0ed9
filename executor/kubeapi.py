"""The API server through the official `kubernetes` client, made asyncio-friendly and cheap per call.

The official client is synchronous, so every request runs on a bounded thread pool and the event
loop never blocks. Its model classes stay off the hot path: bodies go out as pre-encoded JSON bytes
and come back as bytes for msgspec. `ApiClient.call_api` (kubernetes 37) re-encodes any JSON body
with `json.dumps` and refuses bytes, so requests go one layer down: `ApiClient.param_serialize`
builds the URL and the auth headers (refreshing tokens as the client does), and the client's own
urllib3 pool sends them, with its TLS settings from the kubeconfig.

Every call, and every retry, passes the process-wide token bucket. Retries follow client-go's rest
client (see executor/errors.py): an answer with Retry-After (a 429 or 5xx asking for it) is sent
again after that wait, at most `max_retries` times (client-go's 10), and its last answer is returned
as final; any other answer, a 500 or 503 without Retry-After among them, is returned at once, for
the caller to report as a failure. Only when the outcome is unknown (no answer, or a 504) does a
call back off (exponentially, or as Retry-After says) and retry up to `attempts` times, then raise
`TransientError` for the caller to turn into a redelivery.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import urllib3
from kubernetes import client as k8s

from executor.errors import (
    Interrupted,
    Reply,
    TransientError,
    api_status,
    outcome_unknown,
    parse_retry_after,
    retry_after_of,
    retry_wait,
)
from executor.metrics import ExecutorMetrics
from kube.flowcontrol import TokenBucket, doubled
from runtime.kubeconfig import load_kubeconfig
from runtime.metrics import host_of

log = logging.getLogger("kubus.executor.api")

JSON = "application/json"
# built once: urllib3 would convert `retries=False` into a Retry (and log it) on every request
NO_RETRIES = urllib3.Retry(total=False, redirect=False)


def load_client(kubeconfig: str | None, context: str | None, pool_size: int) -> k8s.ApiClient:
    """An ApiClient on a Configuration of its own; raises runtime.kubeconfig.KubeconfigError."""
    cfg = load_kubeconfig(kubeconfig, context)
    cfg.connection_pool_maxsize = pool_size  # one kept-alive connection per worker thread
    cfg.retries = False  # retries are ours: counted, backed off and interruptible
    return k8s.ApiClient(cfg)


class KubeApi:
    def __init__(self, client: k8s.ApiClient, *, workers: int, limiter: TokenBucket[float], metrics: ExecutorMetrics,
                 stopping: asyncio.Event, request_timeout: float = 30.0, attempts: int = 6,
                 max_retries: int = 10, backoff_initial: float = 0.05, backoff_max: float = 5.0):
        self._client = client
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube-api")
        self._limiter = limiter
        self._metrics = metrics
        self._stopping = stopping
        self._timeout = urllib3.Timeout(total=request_timeout)
        self._attempts = attempts
        self._max_retries = max_retries
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()  # type: ignore[no-untyped-call]

    async def call(self, method: str, path: str, *, body: bytes | None = None,
                   content_type: str = JSON) -> Reply:
        """The API's answer to `method path`: final, or the last one the server asked to retry; raises
        TransientError (no answer, or a 504, on every attempt) and Interrupted."""
        loop = asyncio.get_running_loop()
        unknown = retried = 0
        while True:
            await self._pause(self._limiter.reserve(time.monotonic()))
            reply = await loop.run_in_executor(self._pool, self._send, method, path, body, content_type)
            if reply.ok or (0 < reply.status < 500 and reply.status != 429):
                return reply  # final: only no answer, a 429 or a 5xx may be worth sending again
            status = api_status(reply) if reply.status else None
            if outcome_unknown(reply.status):
                unknown += 1
                reason = status.reason if status else "ConnectionError"
                message = status.message if status else reply.data.decode("utf-8", "replace")
                if unknown >= self._attempts:
                    raise TransientError(reply.status, reason, message)
                wait = retry_after_of(reply, status) if status else None
                delay = wait if wait is not None else doubled(self._backoff_initial, unknown - 1, self._backoff_max)
            else:
                wait = retry_wait(reply, status)
                if wait is None or retried >= self._max_retries:
                    return reply
                retried += 1
                delay = wait
            log.debug("%s %s: %s, retrying in %.2fs", method, path, reply.status or "no answer", delay)
            await self._pause(delay)

    async def _pause(self, delay: float) -> None:
        """Sleeps `delay` seconds unless the executor stops first; a stop raises Interrupted, even with
        no delay, so no new request starts once shutdown has begun."""
        if self._stopping.is_set():
            raise Interrupted()
        if delay <= 0:
            return
        try:
            await asyncio.wait_for(self._stopping.wait(), delay)
        except TimeoutError:
            return
        raise Interrupted()

    def _send(self, method: str, path: str, body: bytes | None, content_type: str) -> Reply:
        """One HTTP exchange, on a worker thread; no answer at all becomes status 0."""
        headers: dict[str, Any] = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        _, url, headers, _, _ = self._client.param_serialize(method, path, header_params=headers,
                                                            auth_settings=["BearerToken"])
        started = time.monotonic()
        try:
            resp = self._client.rest_client.pool_manager.request(
                method, url, body=body, headers=headers, timeout=self._timeout, retries=NO_RETRIES,
                preload_content=True)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._metrics.api_request(method, host_of(url), 0, time.monotonic() - started)
            return Reply(0, f"{type(exc).__name__}: {exc}".encode())
        self._metrics.api_request(method, host_of(url), resp.status, time.monotonic() - started)
        return Reply(resp.status, resp.data, parse_retry_after(resp.headers.get("Retry-After")))
