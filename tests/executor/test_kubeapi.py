"""KubeApi.call's retries on scripted answers: which answers are final, which are sent again and after how
long, when the outcome stays unknown (client-go rest/with_retry.go and request.go, see executor/errors.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
import pytest_asyncio

from executor.errors import Interrupted, Reply, TransientError
from executor.kubeapi import KubeApi
from executor.metrics import ExecutorMetrics
from kube.flowcontrol import TokenBucket

NO_ANSWER = Reply(0, b"ConnectionResetError: [Errno 104] Connection reset by peer")


def _status(code: int, reason: str, retry_after_seconds: int = 0) -> bytes:
    details = {"retryAfterSeconds": retry_after_seconds} if retry_after_seconds else {}
    return msgspec.json.encode({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                                "reason": reason, "message": f"{reason} happened", "details": details})


INTERNAL = Reply(500, _status(500, "InternalError"))
UNAVAILABLE = Reply(503, _status(503, "ServiceUnavailable"))
FORBIDDEN = Reply(403, _status(403, "Forbidden"))
INVALID = Reply(422, _status(422, "Invalid"))
THROTTLED = Reply(429, _status(429, "TooManyRequests", 1), retry_after=1.0)
THROTTLED_BODY_ONLY = Reply(429, _status(429, "TooManyRequests", 2))
SERVER_TIMEOUT = Reply(500, _status(500, "ServerTimeout", 3), retry_after=3.0)
TIMED_OUT = Reply(504, _status(504, "Timeout"))
CREATED = Reply(201, b"{}")
EXISTS = Reply(409, _status(409, "AlreadyExists"))


class ScriptedApi(KubeApi):
    """KubeApi with its HTTP exchange replaced by a script of answers and its pauses recorded, not slept."""

    def __init__(self, script: list[Reply], stopping: asyncio.Event | None = None, **limits: Any):
        limits.setdefault("limiter", TokenBucket(0, 1))
        super().__init__(None, metrics=ExecutorMetrics(), stopping=stopping or asyncio.Event(), backoff_initial=0.05,
                         backoff_max=5.0, **limits)
        self.script = list(script)
        self.sent: list[str] = []
        self.pauses: list[float] = []

    async def _send(self, method: str, path: str, body: bytes | None, content_type: str) -> Reply:
        self.sent.append(method)
        await asyncio.sleep(0)  # the request is out; its answer comes in a later turn of the loop, as over HTTP
        return self.script.pop(0)

    async def _pause(self, delay: float) -> None:
        if delay > 0:
            self.pauses.append(delay)
        await super()._pause(0)  # no sleep, but a stop still interrupts


@pytest_asyncio.fixture
async def scripted() -> AsyncIterator[Callable[..., ScriptedApi]]:
    made: list[ScriptedApi] = []

    def make(script: list[Reply], stopping: asyncio.Event | None = None, **limits: Any) -> ScriptedApi:
        made.append(ScriptedApi(script, stopping, **limits))
        return made[-1]

    yield make
    for api in made:
        await api.close()


@dataclass(frozen=True)
class Case:
    method: str
    script: list[Reply]
    answer: int | None  # the status call() returns; None: it raises TransientError
    pauses: list[float] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)


@pytest.mark.parametrize("case", [
    pytest.param(Case("POST", [INTERNAL], 500), id="a-500-without-retry-after-is-final-at-once"),
    pytest.param(Case("POST", [UNAVAILABLE], 503), id="a-503-without-retry-after-is-final-at-once"),
    pytest.param(Case("GET", [INTERNAL], 500), id="a-get-answered-500-too"),
    pytest.param(Case("DELETE", [FORBIDDEN], 403), id="a-403-is-final"),
    pytest.param(Case("PATCH", [INVALID], 422), id="a-422-is-final"),
    pytest.param(Case("POST", [THROTTLED, CREATED], 201, [1.0]), id="a-429-waits-its-retry-after"),
    pytest.param(Case("POST", [THROTTLED_BODY_ONLY, CREATED], 201, [2.0]), id="a-429-with-the-wait-in-its-body"),
    pytest.param(Case("POST", [SERVER_TIMEOUT, CREATED], 201, [3.0]), id="a-500-with-retry-after-is-sent-again"),
    pytest.param(Case("POST", [THROTTLED] * 11, 429, [1.0] * 10), id="retry-after-at-most-ten-times"),
    pytest.param(Case("POST", [THROTTLED] * 4, 429, [1.0] * 3, {"max_retries": 3}),
                 id="retry-after-at-most-max-retries"),
    pytest.param(Case("POST", [NO_ANSWER, CREATED], 201, [0.05]), id="no-answer-is-sent-again-after-a-backoff"),
    pytest.param(Case("POST", [TIMED_OUT, EXISTS], 409, [0.05]), id="a-504-is-sent-again"),
    pytest.param(Case("POST", [NO_ANSWER] * 6, None, [0.05, 0.1, 0.2, 0.4, 0.8]),
                 id="no-answer-six-times-is-left-for-a-redelivery"),
    pytest.param(Case("DELETE", [TIMED_OUT, NO_ANSWER], None, [0.05], {"attempts": 2}),
                 id="attempts-bound-the-unknown-outcomes"),
])
async def test_which_answers_are_retried(scripted: Callable[..., ScriptedApi], case: Case) -> None:
    api = scripted(case.script, **case.limits)
    if case.answer is None:
        with pytest.raises(TransientError) as raised:
            await api.call(case.method, "/api/v1/namespaces/ns/pods")
        assert raised.value.code == case.script[len(api.sent) - 1].status
    else:
        reply = await api.call(case.method, "/api/v1/namespaces/ns/pods")
        assert reply.status == case.answer
    assert api.sent == [case.method] * len(case.script)  # every scripted answer was asked for, no more
    assert api.pauses == pytest.approx(case.pauses)


async def test_a_stop_interrupts_a_retry(scripted: Callable[..., ScriptedApi]) -> None:
    """Shutdown begun: no request is sent again (the action is left for another executor)."""
    stopping = asyncio.Event()
    api = scripted([THROTTLED, CREATED], stopping=stopping)
    sent = asyncio.create_task(api.call("POST", "/api/v1/namespaces/ns/pods"))
    while not api.sent:  # the first answer is in: the retry is about to pause
        await asyncio.sleep(0)
    stopping.set()
    with pytest.raises(Interrupted):
        await sent
    assert api.sent == ["POST"] and api.script == [CREATED]


async def test_a_stop_before_a_call_sends_nothing(scripted: Callable[..., ScriptedApi]) -> None:
    """Shutdown begun: a call the rate limiter lets through at once still sends no request."""
    stopping = asyncio.Event()
    stopping.set()
    api = scripted([CREATED], stopping=stopping)
    with pytest.raises(Interrupted):
        await api.call("POST", "/api/v1/namespaces/ns/pods")
    assert api.sent == [] and api.script == [CREATED]


async def test_each_call_waits_for_the_rate_limiter_first(scripted: Callable[..., ScriptedApi]) -> None:
    """One request a second, a burst of one: the first call is sent at once, the second after its wait."""
    api = scripted([CREATED, CREATED], limiter=TokenBucket(1, 1))
    assert (await api.call("POST", "/api/v1/namespaces/ns/pods")).status == 201
    assert api.pauses == []
    assert (await api.call("POST", "/api/v1/namespaces/ns/pods")).status == 201
    assert len(api.pauses) == 1 and 0.5 < api.pauses[0] <= 1.0  # a second, less the moments the first call took
    assert api.sent == ["POST", "POST"]
