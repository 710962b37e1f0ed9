"""What the command line imports before it knows the command: every service process (`kubus reconcile`,
`kubus ingest`, `kubus execute`) builds the whole parser, so what it imports is paid at each start."""

from __future__ import annotations

import json
import subprocess
import sys

# the simulated API server and (every `kubernetes` module, below) the official client's models: ~0.3 s of CPU
# that only `kubus sim`, `kubus up --sim` and the services that talk to an API server at run time need
HEAVY = ("sim.cluster", "sim.apiserver")


def _imported_by(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"],
        check=True, capture_output=True, text=True, timeout=60)
    modules: list[str] = json.loads(out.stdout.splitlines()[-1])
    return modules


def test_building_the_parser_imports_neither_the_sim_nor_the_official_client() -> None:
    modules = _imported_by("from kubus.cli import build_parser\nbuild_parser()")
    assert [m for m in modules if m.split(".")[0] == "kubernetes" or m in HEAVY] == []


def test_running_a_sim_still_finds_the_cluster() -> None:
    """The imports moved into the functions that need them: building a sim's config imports the cluster."""
    modules = _imported_by(
        "from kubus.cli import build_parser\n"
        "from kubus.sim_command import config_from_args\n"
        "config = config_from_args(build_parser().parse_args(['sim', '--nodes', '2']))\n"
        "assert len(config.nodes) == 2, config")
    assert "sim.cluster" in modules
