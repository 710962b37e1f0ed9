"""/readyz passes once the service's parts have registered their checks and every one passes."""

from __future__ import annotations

from typing import Any

from runtime.serving import Health

NO_REQUEST: Any = None  # the handlers do not read the request


async def test_not_ready_before_a_part_registered_a_check() -> None:
    """Between serving the endpoints and the parts' start (a sim starting, a kubeconfig loading)."""
    assert (await Health().readyz(NO_REQUEST)).status == 503


async def test_ready_when_every_check_passes() -> None:
    health = Health()
    synced = False
    health.ready_when("nats", lambda: True)
    health.ready_when("ingest-synced", lambda: synced)
    response = await health.readyz(NO_REQUEST)
    assert response.status == 503 and "[-]ingest-synced failed" in str(response.text)
    synced = True
    assert (await health.readyz(NO_REQUEST)).status == 200


async def test_alive_without_checks() -> None:
    """Liveness is not start-up: a process with no liveness checks is alive."""
    assert (await Health().healthz(NO_REQUEST)).status == 200
