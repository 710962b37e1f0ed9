from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.simulation import Kubectl, SimProcess


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
