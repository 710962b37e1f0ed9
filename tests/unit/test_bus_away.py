"""Which errors mean NATS did not answer (a loop starts over after a backoff) and which are real."""

from __future__ import annotations

import nats.errors
import pytest
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from runtime.bus import bus_away


def _caused(outer: Exception, cause: BaseException) -> Exception:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(("error", "away"), [
    pytest.param(nats.errors.TimeoutError(), True, id="request-timeout"),
    pytest.param(nats.errors.NoRespondersError(), True, id="no-responders"),
    pytest.param(nats.errors.ConnectionClosedError(), True, id="connection-closed"),
    pytest.param(nats.errors.NoServersError(), True, id="no-servers"),
    pytest.param(ServiceUnavailableError(), True, id="jetstream-503"),
    pytest.param(APIError(code=503, description="JetStream system temporarily unavailable"), True, id="api-503"),
    pytest.param(_caused(RuntimeError("bootstrap failed"), nats.errors.TimeoutError()), True, id="as-a-cause"),
    pytest.param(NotFoundError(), False, id="stream-not-found"),
    pytest.param(APIError(code=400, description="bad request"), False, id="api-400"),
    pytest.param(ValueError("bug"), False, id="a-bug"),
])
def test_bus_away(error: BaseException, away: bool) -> None:
    assert bus_away(error) is away
