from __future__ import annotations

import itertools
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from controlplane.building import Build, BuildError, find_or_fail
from controlplane.processes import ControlPlane, ControlPlaneConfig
from runtime.natsserver import EmbeddedNats
from tests import postgres
from tests.cluster import KUBUS_SERVICE_ACCOUNTS, NODES, REAL_START_LIMIT_S, RealCluster
from tests.simulation import KUBECTL_MISSING, Kubectl, SimProcess

_namespaces = itertools.count()


class KubectlMissing(pytest.Item):
    """Stands for a module's kubectl-driven tests when there is no kubectl: one failure that says how to get one."""

    replaced = 0  # how many tests it stands for

    def runtest(self) -> None:
        pytest.fail(KUBECTL_MISSING, pytrace=False)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.path.name}: {self.replaced} tests need kubectl"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes `cluster` runs on the sim (id `sim`), and, if marked `real`, on the real control plane too
    (id `real`): the same test, the same assertions. Module-scoped, so a module's pipeline serves each kind once."""
    if "cluster" in metafunc.fixturenames:
        kinds = ["sim", "real"] if metafunc.definition.get_closest_marker("real") else ["sim"]
        metafunc.parametrize("cluster", kinds, indirect=True, scope="module", ids=kinds)


@pytest.hookimpl(trylast=True)  # after -m and -k have chosen the tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test on the real control plane may be the first to ask for it: its setup may start it (hang_limit).
    Without kubectl on PATH, the tests marked `kubectl` of each module give way to one failing item, instead of
    each erroring with the same message: the run fails, once per module, with the line that says what to install."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("cluster") == "real" \
                and item.get_closest_marker("hang_limit") is None:
            item.add_marker(pytest.mark.hang_limit(setup=REAL_START_LIMIT_S))
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


@pytest.fixture(scope="session")
def controlplane_build() -> Build:
    try:
        return find_or_fail()
    except BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def controlplane(controlplane_build: Build, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One real control plane per test session (built beforehand: `kubus controlplane build`, which .ci/run runs;
    a cold build takes tens of minutes and never happens inside pytest), shared by the tests that ask for it."""
    plane = ControlPlane(controlplane_build, ControlPlaneConfig(nodes=NODES,
                                                                data_dir=tmp_path_factory.mktemp("controlplane"),
                                                                audit_reads_of=(KUBUS_SERVICE_ACCOUNTS,)))
    plane.start()  # a failed start has stopped what it started, and says why
    yield plane
    plane.stop()


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> RealCluster | None:
    """`sim` (None: the module's harness starts its own `kubus sim`) or `real` (the session's control plane); see
    pytest_generate_tests."""
    if request.param == "real":
        return RealCluster(request.getfixturevalue("controlplane"))
    return None


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
