"""What can go wrong talking to the API, sorted the way the executor must react.

Transient (429, 5xx, timeouts, connection errors) is retried with backoff within a delivery, then
redelivered by JetStream; anything else the API answers is permanent and becomes a failed result
carrying the API's own Status message and code.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from kube import codec
from kube.meta import Status

NAMESPACE_TERMINATING = "NamespaceTerminating"  # v1.NamespaceTerminatingCause
MAX_RETRY_AFTER = 60.0


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP answer, body unparsed: callers decode only the fields they need."""

    status: int
    data: bytes
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class TransientError(Exception):
    """A transient failure that outlasted the retries of this delivery."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class Interrupted(Exception):
    """The executor is stopping: the action is left for redelivery at a point where nothing is half-done."""


def is_transient(code: int) -> bool:
    """429 and 5xx are worth retrying; 0 stands for no answer at all (timeout, refused connection)."""
    return code == 0 or code == 429 or code >= 500


def backoff_delay(attempt: int, initial: float, cap: float) -> float:
    """Seconds before retry number `attempt` (1-based): initial, doubling, capped."""
    return min(cap, initial * 2.0 ** (attempt - 1))


def parse_retry_after(value: str | None) -> float | None:
    """A Retry-After header in seconds (the only form kube-apiserver sends); None when absent or odd."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def api_status(reply: Reply) -> Status:
    """The Status an error answer carries, or one made up from the code when the body is not a Status
    (a proxy's HTML 502, an empty 504)."""
    try:
        status = codec.decode(reply.data, Status)
    except (codec.DecodeError, msgspec.DecodeError):
        status = None
    if status is None or status.kind != "Status":
        text = reply.data[:200].decode("utf-8", "replace").strip()
        return Status(status="Failure", code=reply.status, reason=_REASONS.get(reply.status, "Unknown"),
                      message=text or f"HTTP {reply.status}")
    if not status.code:
        status.code = reply.status
    return status


def has_cause(status: Status, reason: str) -> bool:
    """apierrors.HasStatusCause."""
    return status.details is not None and any(c.reason == reason for c in status.details.causes)


def retry_after_of(reply: Reply, status: Status | None = None) -> float | None:
    """The server's requested wait: the Retry-After header, else the Status's retryAfterSeconds on a 429
    (kube-apiserver sets both; some servers only the body)."""
    if reply.retry_after is not None:
        return reply.retry_after
    if reply.status == 429:
        status = status or api_status(reply)
        if status.details is not None and status.details.retry_after_seconds > 0:
            return min(float(status.details.retry_after_seconds), MAX_RETRY_AFTER)
    return None


_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
            410: "Gone", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
            502: "BadGateway", 503: "ServiceUnavailable", 504: "Timeout"}
