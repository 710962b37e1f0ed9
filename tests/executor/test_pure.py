"""Table-driven tests of the executor's pure parts: batching, backoff, rate limiting, error reading, paths."""

from __future__ import annotations

from urllib.parse import quote

import msgspec
import pytest

from executor.consuming import redelivery_delay
from executor.creating import batch_sizes
from executor.errors import (
    NAMESPACE_TERMINATING,
    Reply,
    api_status,
    has_cause,
    outcome_unknown,
    parse_retry_after,
    retry_after_of,
    retry_wait,
)
from executor.resources import KINDS, segment
from kube.flowcontrol import TokenBucket, doubled


@pytest.mark.parametrize(("count", "sizes"), [
    pytest.param(0, [], id="nothing"),
    pytest.param(1, [1], id="one"),
    pytest.param(3, [1, 2], id="exact-doublings"),
    pytest.param(10, [1, 2, 4, 3], id="last-batch-is-the-rest"),
    pytest.param(50, [1, 2, 4, 8, 16, 19], id="fifty"),
])
def test_slow_start_batch_sizes_double_from_one(count: int, sizes: list[int]) -> None:
    """As upstream's slowStartBatch with SlowStartInitialBatchSize 1."""
    assert batch_sizes(count) == sizes


@pytest.mark.parametrize(("qps", "burst", "calls_at", "waits"), [
    pytest.param(10, 2, [0, 0, 0, 0], [0, 0, 0.1, 0.2], id="burst-then-queue-in-arrival-order"),
    pytest.param(10, 2, [0, 0, 1, 1, 1], [0, 0, 0, 0, 0.1], id="refills-up-to-burst-only"),
    pytest.param(20, 30, [0] * 31, [0] * 30 + [0.05], id="kube-controller-manager-defaults"),
    pytest.param(0, 1, [0] * 5, [0] * 5, id="disabled-at-zero"),
    pytest.param(-1, 1, [0] * 5, [0] * 5, id="disabled-when-negative"),
])
def test_token_bucket_tells_each_caller_how_long_to_wait(qps: float, burst: int, calls_at: list[float],
                                                          waits: list[float]) -> None:
    """Reservations drain the bucket, then queue behind each other at 1/QPS."""
    bucket: TokenBucket[float] = TokenBucket(qps, burst)
    assert [round(bucket.reserve(at), 6) for at in calls_at] == waits


@pytest.mark.parametrize(("attempt", "delay"), [(1, 0.05), (2, 0.1), (5, 0.8), (7, 3.2), (8, 5.0), (20, 5.0)])
def test_backoff_doubles_from_50ms_to_a_5s_cap(attempt: int, delay: float) -> None:
    assert doubled(0.05, attempt - 1, 5.0) == pytest.approx(delay)


@pytest.mark.parametrize(("delivery", "delay"), [(1, 1.0), (2, 2.0), (5, 16.0), (6, 30.0), (10, 30.0)])
def test_redelivery_delay_doubles_to_30s(delivery: int, delay: float) -> None:
    assert redelivery_delay(delivery, 1.0) == delay


def _status(code: int, reason: str, **extra: object) -> bytes:
    return msgspec.json.encode({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                                "reason": reason, "message": f"{reason} happened", **extra})


@pytest.mark.parametrize(("code", "unknown"), [
    (0, True), (504, True),
    (200, False), (400, False), (403, False), (404, False), (409, False), (422, False), (429, False),
    (500, False), (502, False), (503, False),
])
def test_which_answers_leave_the_outcome_unknown(code: int, unknown: bool) -> None:
    """No answer, or the server's own timeout: the request may have been applied."""
    assert outcome_unknown(code) is unknown


@pytest.mark.parametrize(("reply", "wait"), [
    pytest.param(Reply(429, b"", retry_after=2.0), 2.0, id="429-with-retry-after"),
    pytest.param(Reply(500, b"", retry_after=1.0), 1.0, id="500-with-retry-after"),
    pytest.param(Reply(503, b"", retry_after=0.0), 0.0, id="503-retry-after-zero-means-now"),
    pytest.param(Reply(500, _status(500, "ServerTimeout", details={"retryAfterSeconds": 2})), 2.0,
                 id="server-timeout-status-asks-in-its-body"),
    pytest.param(Reply(429, _status(429, "TooManyRequests", details={"retryAfterSeconds": 1})), 1.0,
                 id="429-status-asks-in-its-body"),
    pytest.param(Reply(500, _status(500, "InternalError")), None, id="500-without-retry-after-is-final"),
    pytest.param(Reply(503, _status(503, "ServiceUnavailable")), None, id="503-without-retry-after-is-final"),
    pytest.param(Reply(429, b""), None, id="429-without-retry-after-is-final"),
    pytest.param(Reply(500, _status(500, "InternalError", details={"retryAfterSeconds": 0})), None,
                 id="retry-after-seconds-zero-is-no-header"),
    pytest.param(Reply(409, b"", retry_after=1.0), None, id="a-409-is-final-whatever-it-says"),
    pytest.param(Reply(422, b"", retry_after=1.0), None, id="a-422-is-final-whatever-it-says"),
])
def test_which_answers_are_sent_again(reply: Reply, wait: float | None) -> None:
    """client-go's checkWait: a 429 or 5xx with Retry-After (kube-apiserver writes the header from the
    Status's retryAfterSeconds when positive)."""
    assert retry_wait(reply) == wait


@pytest.mark.parametrize(("header", "seconds"), [
    (None, None), ("", None), ("2", 2.0), ("0.5", 0.5), ("-3", 0.0), ("3600", 60.0),
    ("Wed, 21 Oct 2015 07:28:00 GMT", None),
])
def test_retry_after_header(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header) == seconds


def test_a_429_without_a_header_waits_as_its_status_says() -> None:
    """kube-apiserver sets both; the body's retryAfterSeconds is honoured when the header is missing."""
    reply = Reply(429, _status(429, "TooManyRequests", details={"retryAfterSeconds": 1}))
    assert retry_after_of(reply) == 1.0
    assert retry_after_of(Reply(429, reply.data, retry_after=3.0)) == 3.0
    assert retry_after_of(Reply(500, _status(500, "InternalError"))) is None


@pytest.mark.parametrize(("reply", "code", "reason", "message"), [
    pytest.param(Reply(422, _status(422, "Invalid")), 422, "Invalid", "Invalid happened", id="a-status"),
    pytest.param(Reply(502, b"<html>bad gateway</html>"), 502, "BadGateway", "<html>bad gateway</html>",
                 id="a-proxy-page"),
    pytest.param(Reply(504, b""), 504, "Timeout", "HTTP 504", id="empty"),
    pytest.param(Reply(409, b'{"kind": "Status", "reason": "Conflict", "message": "m"}'), 409, "Conflict", "m",
                 id="status-without-code"),
])
def test_error_answers_become_a_status(reply: Reply, code: int, reason: str, message: str) -> None:
    status = api_status(reply)
    assert (status.code, status.reason, status.message) == (code, reason, message)


def test_namespace_terminating_is_read_from_the_status_causes() -> None:
    terminating = api_status(Reply(403, _status(403, "Forbidden", details={
        "causes": [{"reason": NAMESPACE_TERMINATING, "message": "namespace x is being terminated"}]})))
    assert has_cause(terminating, NAMESPACE_TERMINATING)
    assert not has_cause(api_status(Reply(403, _status(403, "Forbidden"))), NAMESPACE_TERMINATING)


@pytest.mark.parametrize(("kind", "namespace", "name", "subresource", "path"), [
    ("Pod", "ns", "", "", "/api/v1/namespaces/ns/pods"),
    ("Pod", "ns", "web-0", "", "/api/v1/namespaces/ns/pods/web-0"),
    ("ReplicaSet", "ns", "web", "status", "/apis/apps/v1/namespaces/ns/replicasets/web/status"),
    ("ControllerRevision", "ns", "web-5d8f", "", "/apis/apps/v1/namespaces/ns/controllerrevisions/web-5d8f"),
])
def test_rest_paths(kind: str, namespace: str, name: str, subresource: str, path: str) -> None:
    assert KINDS[kind].path(namespace, name, subresource) == path


@pytest.mark.parametrize("text", [
    "", "web-0", "a.b_c~d", "a b", "a/b", "50%", "ü", "web-0/status", "..", "~", "-", "a\x00b", "A-Z_0.9~",
    *(chr(c) for c in range(128)), *(f"pod-{chr(c)}-x" for c in range(128)),
])
def test_a_path_segment_is_quoted_as_quote_does(text: str) -> None:
    """Texts quote leaves alone are not passed to it; every other is quoted by it (the two must agree)."""
    assert segment(text) == quote(text, safe="")
