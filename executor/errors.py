"""What can go wrong talking to the API, sorted the way the executor must react (client-go's rules).

An answer is final unless client-go's rest client would send the request again:

- **Retry-After** (rest/with_retry.go `checkWait`: "any 500 error code and 429 can trigger a wait",
  and only when `retryAfterSeconds` finds a Retry-After header): the same request again after the
  wait the server asked for, whatever the verb, at most `maxRetries` (10) times; then that answer
  is final. kube-apiserver writes the header from the Status's `details.retryAfterSeconds`
  (responsewriters.ErrorNegotiated), so either one is read as the server's request.
- **No answer** (status 0: a refused or reset connection, a timeout) and **504** (the server timed
  the request out): the request may or may not have been applied. client-go retries only a GET on a
  reset connection and hands every other such error to the controller; the executor retries
  every verb, because each of its writes is idempotent (creates carry an idempotency key, deletes a
  uid precondition), and a create reported failed that did happen would make the controller create
  a surplus pod. It backs off within a delivery, then raises `TransientError` for a redelivery.
- Anything else (a 500 or 503 without Retry-After, 403, 422, ...) is final at once: a failed result
  with the API's own Status message and code, as client-go returns a StatusError.
"""

from __future__ import annotations

import msgspec

from kube import codec
from kube.meta import Status

NAMESPACE_TERMINATING = "NamespaceTerminating"  # v1.NamespaceTerminatingCause
MAX_RETRY_AFTER = 60.0
NO_ANSWER = 0  # a Reply's status when the server never answered


class Reply(msgspec.Struct, frozen=True, gc=False):
    """An HTTP answer, body unparsed: callers decode only the fields they need. A frozen msgspec Struct, built
    in C, for one is made per API call (a frozen dataclass sets each field through object.__setattr__)."""

    status: int
    data: bytes
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class TransientError(Exception):
    """No answer (or a 504) outlasted the retries of this delivery: the outcome is unknown."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class Interrupted(Exception):
    """The executor is stopping: the action is left for redelivery at a point where nothing is half-done."""


def outcome_unknown(code: int) -> bool:
    """No answer at all (timeout, refused or reset connection), or a 504: the request may have been
    applied, so only sending it again (idempotently) tells."""
    return code == NO_ANSWER or code == 504


def retry_wait(reply: Reply, status: Status | None = None) -> float | None:
    """client-go's checkWait: the seconds to wait before sending the request again when the server asked
    for a retry (a 429 or 5xx with Retry-After), None when the answer is final."""
    if reply.status != 429 and reply.status < 500:
        return None
    return retry_after_of(reply, status)


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
    """The server's requested wait: the Retry-After header, else the Status's `retryAfterSeconds` when
    positive (kube-apiserver writes the header from it; a proxy, or the sim, may pass only the body)."""
    if reply.retry_after is not None:
        return reply.retry_after
    if reply.status:
        status = status or api_status(reply)
        if status.details is not None and status.details.retry_after_seconds > 0:
            return min(float(status.details.retry_after_seconds), MAX_RETRY_AFTER)
    return None


_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
            410: "Gone", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
            502: "BadGateway", 503: "ServiceUnavailable", 504: "Timeout"}
