"""The one kubeconfig loader picks the cluster by --context as kubectl does, and refuses a context it lacks."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from runtime.kubeconfig import KubeconfigError, Sources, load_kubeconfig


def server(name: str) -> str:
    return f"https://{name}.example:6443"


def write_kubeconfig(path: Path, contexts: list[str], current: str | None) -> str:
    """A kubeconfig with one cluster and one user per context, all named after the context."""
    document: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": c, "cluster": {"server": server(c), "insecure-skip-tls-verify": True}} for c in contexts],
        "users": [{"name": c, "user": {"token": f"token-{c}"}} for c in contexts],
        "contexts": [{"name": c, "context": {"cluster": c, "user": c}} for c in contexts],
    }
    if current is not None:
        document["current-context"] = current
    path.write_text(yaml.safe_dump(document))
    return str(path)


@pytest.mark.parametrize(("current", "context", "expected"), [
    pytest.param("a", None, "a", id="no-context-takes-the-current-one"),
    pytest.param("a", "b", "b", id="context-wins-over-the-current-one"),
    pytest.param(None, "b", "b", id="context-without-a-current-one"),
])
def test_the_context_picks_the_cluster(tmp_path: Path, current: str | None, context: str | None,
                                       expected: str) -> None:
    """The server and the credentials both come from the chosen context."""
    path = write_kubeconfig(tmp_path / "kubeconfig", ["a", "b"], current)
    cfg = load_kubeconfig(path, context)
    assert cfg.host == server(expected)
    assert cfg.api_key == {"BearerToken": f"Bearer token-{expected}"}


@pytest.mark.parametrize(("current", "context", "named"), [
    pytest.param("a", "c", "context 'c'", id="unknown-context-is-no-fallback-to-the-current-one"),
    pytest.param(None, None, "current-context", id="neither-a-context-nor-a-current-one"),
])
def test_an_unusable_context_is_refused_naming_the_file(tmp_path: Path, current: str | None, context: str | None,
                                                        named: str) -> None:
    """One line: the file, the context asked for, and what is wrong."""
    path = write_kubeconfig(tmp_path / "kubeconfig", ["a", "b"], current)
    with pytest.raises(KubeconfigError, match=f"cannot use the kubeconfig at {path}.*{named}") as refused:
        load_kubeconfig(path, context, Sources(environ={}))  # not in a pod, wherever the tests run
    assert "\n" not in str(refused.value)


def test_a_context_from_the_second_file_of_a_list(tmp_path: Path) -> None:
    """A KUBECONFIG-style list is merged as kubectl merges it: the first file's current-context, any file's
    contexts."""
    first = write_kubeconfig(tmp_path / "first", ["a"], "a")
    second = write_kubeconfig(tmp_path / "second", ["b"], None)
    merged = f"{first}{os.pathsep}{second}"
    assert load_kubeconfig(merged, None).host == server("a")
    assert load_kubeconfig(merged, "b").host == server("b")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(KubeconfigError, match=f"cannot use the kubeconfig at {missing} "):
        load_kubeconfig(str(missing), "a")


def test_the_clients_global_default_is_left_alone(tmp_path: Path) -> None:
    """Each service gets a Configuration of its own; nothing else in the process sees the cluster."""
    before = client.Configuration.get_default_copy().host
    cfg = load_kubeconfig(write_kubeconfig(tmp_path / "kubeconfig", ["a"], "a"))
    assert cfg.host == server("a")
    assert client.Configuration.get_default_copy().host == before


@pytest.mark.parametrize("component", ["executor", "ingest"])
def test_kubus_names_itself_to_the_api_server(tmp_path: Path, component: str) -> None:
    """kube-apiserver names a write's field manager after the user agent's first word, as client-go's
    DefaultKubernetesUserAgent ("kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/...") gives
    kube-controller-manager's: kubus's writes must be managed by "kubus", not by the Python client's default
    ("OpenAPI-Generator/37.0.2/python", which any Python program has)."""
    from executor.config import ExecutorConfig
    from executor.service import connect
    from ingest.transport import api_client

    path = write_kubeconfig(tmp_path / "config", ["a"], "a")
    if component == "executor":
        async def agent_of_executor() -> str:
            http = await connect(ExecutorConfig(kubeconfig=path))
            await http.close()
            return http.user_agent

        agent = asyncio.run(agent_of_executor())
    else:
        agent = api_client(path, None, 1).user_agent
    word, _, rest = agent.partition("/")
    assert word == "kubus", agent
    assert rest.endswith(f" {component}") and "(" in rest, agent
