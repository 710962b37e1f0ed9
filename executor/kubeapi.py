"""The API server on the event loop (runtime/kubehttp.py: HTTP/1.1 with the kubeconfig's TLS and credentials).

Bodies go out as pre-encoded JSON bytes and come back as bytes for msgspec; the official client only reads
the kubeconfig (runtime/kubeconfig.py). Until issue 25 the official client sent every request from a pool of
threads through urllib3; on two cores those threads and urllib3 were most of the executor's CPU.

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
from runtime.kubehttp import KubeHttp
from runtime.metrics import host_of

log = logging.getLogger("kubus.executor.api")

JSON = "application/json"


class KubeApi:
    def __init__(self, http: KubeHttp | None, *, limiter: TokenBucket[float], metrics: ExecutorMetrics,
                 stopping: asyncio.Event, attempts: int = 6,
                 max_retries: int = 10, backoff_initial: float = 0.05, backoff_max: float = 5.0):
        self._http = http
        self._host = host_of(http.host) if http is not None else ""
        self._limiter = limiter
        self._metrics = metrics
        self._stopping = stopping
        self._attempts = attempts
        self._max_retries = max_retries
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def call(self, method: str, path: str, *, body: bytes | None = None,
                   content_type: str = JSON) -> Reply:
        """The API's answer to `method path`: final, or the last one the server asked to retry; raises
        TransientError (no answer, or a 504, on every attempt) and Interrupted."""
        unknown = retried = 0
        while True:
            delay = self._limiter.reserve(time.monotonic())
            if delay > 0 or self._stopping.is_set():  # else no coroutine to await: most calls
                await self._pause(delay)
            reply = await self._send(method, path, body, content_type)
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

    async def _send(self, method: str, path: str, body: bytes | None, content_type: str) -> Reply:
        """One HTTP exchange; no answer at all becomes status 0."""
        assert self._http is not None
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        started = time.monotonic()
        answer = await self._http.request(method, path, body=body, headers=headers)
        self._metrics.api_request(method, self._host, answer.status, time.monotonic() - started)
        return Reply(answer.status, answer.body, parse_retry_after(answer.retry_after))
