from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import pytest

from tests.simulation import SimProcess

_counter = itertools.count()


@pytest.fixture
def namespace(sim: SimProcess, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, deleted (without waiting) when the test ends."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{next(_counter)}"
    code, body = sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert code == 201, body
    yield name
    sim.request("DELETE", f"/api/v1/namespaces/{name}")
