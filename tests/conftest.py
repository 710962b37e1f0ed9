from __future__ import annotations

import itertools
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from runtime.natsserver import EmbeddedNats
from tests import postgres
from tests.simulation import KUBECTL_MISSING, Kubectl, SimProcess

_namespaces = itertools.count()


class KubectlMissing(pytest.Item):
    """Stands for a module's kubectl-driven tests when there is no kubectl: one failure that says how to get one."""

    replaced = 0  # how many tests it stands for

    def runtest(self) -> None:
        pytest.fail(KUBECTL_MISSING, pytrace=False)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.path.name}: {self.replaced} tests need kubectl"


@pytest.hookimpl(trylast=True)  # after -m and -k have chosen the tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without kubectl on PATH, the tests marked `kubectl` of each module give way to one failing item, instead of
    each erroring with the same message: the run fails, once per module, with the line that says what to install."""
    if shutil.which("kubectl"):
        return
    kept: list[pytest.Item] = []
    replaced: list[pytest.Item] = []
    stand_ins: dict[str, KubectlMissing] = {}
    for item in items:
        module = item.getparent(pytest.Module)
        if item.get_closest_marker("kubectl") is None or module is None:
            kept.append(item)
            continue
        replaced.append(item)
        if module.nodeid not in stand_ins:
            stand_ins[module.nodeid] = KubectlMissing.from_parent(module, name="kubectl")
            stand_ins[module.nodeid].add_marker("kubectl")
            kept.append(stand_ins[module.nodeid])
        stand_ins[module.nodeid].replaced += 1
    if replaced:
        config.hook.pytest_deselected(items=replaced)
        items[:] = kept


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """A `kubus sim` with 4 nodes, a fast kubelet and short graceful deletions, shared by a module."""
    proc = SimProcess(tmp_path_factory.mktemp("sim"), "--nodes", "4", "--kubelet-delay", "0.05",
                      "--termination-seconds", "0.2", "--seed", "7")
    yield proc
    code = proc.stop()
    assert code == 0, f"kubus sim exited with {code}:\n{proc.log_path.read_text()}"


@pytest.fixture(scope="module")
def kubectl(sim: SimProcess) -> Kubectl:
    return Kubectl(sim.kubeconfig)


@pytest.fixture
def namespace(sim: SimProcess, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, deleted (without waiting) when the test ends."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{next(_namespaces)}"
    code, body = sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert code == 201, body
    yield name
    sim.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[EmbeddedNats]:
    """A nats-server with JetStream of this test's own, on a free port."""
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    yield server
    await server.stop()


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """The admin URL of the run's PostgreSQL (tests/postgres.py says which): started, if it is the tests' own, when
    the first test asks, and stopped when the run ends. Take a database of your own with
    `tests.postgres.fresh_database(pg_admin_url)`."""
    with postgres.server() as url:
        yield url
