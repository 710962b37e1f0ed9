"""Where the cluster comes from, as client-go resolves it: --kubeconfig, then the files $KUBECONFIG lists (merged,
first file wins per name and for the current-context), then ~/.kube/config, then the pod's ServiceAccount; and
tokens kept in files (the ServiceAccount's, a kubeconfig user's tokenFile) read again as they rotate."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.kubeconfig import TOKEN_REREAD_S, KubeconfigError, Sources, TokenFile, load_kubeconfig

IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def kubeconfig(path: Path, current: str | None, contexts: dict[str, str], user: dict[str, Any] | None = None) -> Path:
    """A kubeconfig whose contexts each name a cluster and a user of the same name: {context: server}."""
    document: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": c, "cluster": {"server": s}} for c, s in contexts.items()],
        "users": [{"name": c, "user": user or {"token": f"token-{path.name}-{c}"}} for c in contexts],
        "contexts": [{"name": c, "context": {"cluster": c, "user": c}} for c in contexts],
    }
    if current is not None:
        document["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path


@dataclass
class World:
    """A machine: kubeconfig files k1, k2 (and none-current, without a current-context), a home directory and a
    ServiceAccount directory, which the loader sees through Sources."""

    root: Path
    clock: list[float] = field(default_factory=lambda: [0.0])

    def __post_init__(self) -> None:
        kubeconfig(self.root / "k1", "a", {"a": "http://a.k1", "shared": "http://shared.k1"})
        kubeconfig(self.root / "k2", "b", {"b": "http://b.k2", "shared": "http://shared.k2"})
        kubeconfig(self.root / "none-current", None, {"c": "http://c.none"})
        self.sa = self.root / "serviceaccount"
        self.sa.mkdir()
        (self.sa / "token").write_text("sa-token-1\n")
        (self.sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")

    def home_config(self) -> None:
        kubeconfig(self.root / "home" / ".kube" / "config", "h", {"h": "http://h.home"})

    def sources(self, env: dict[str, str]) -> Sources:
        environ = {k: v.replace("$ROOT", str(self.root)).replace(":", os.pathsep) if k == "KUBECONFIG" else v
                   for k, v in env.items()}
        return Sources(environ=environ, serviceaccount_dir=self.sa, home=self.root / "home",
                       clock=lambda: self.clock[0])


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


@pytest.mark.parametrize(("path", "env", "home", "context", "host", "token"), [
    pytest.param("k2", {"KUBECONFIG": "$ROOT/k1"}, True, None, "http://b.k2", "token-k2-b",
                 id="--kubeconfig-wins-and-KUBECONFIG-is-not-read"),
    pytest.param(None, {"KUBECONFIG": "$ROOT/k1:$ROOT/k2"}, True, None, "http://a.k1", "token-k1-a",
                 id="KUBECONFIG-first-file-sets-the-current-context"),
    pytest.param(None, {"KUBECONFIG": "$ROOT/k2:$ROOT/k1"}, True, None, "http://b.k2", "token-k2-b",
                 id="KUBECONFIG-order-matters"),
    pytest.param(None, {"KUBECONFIG": "$ROOT/k1:$ROOT/k2"}, False, "shared", "http://shared.k1", "token-k1-shared",
                 id="KUBECONFIG-first-file-wins-per-name"),
    pytest.param(None, {"KUBECONFIG": "$ROOT/k2:$ROOT/k1"}, False, "shared", "http://shared.k2", "token-k2-shared",
                 id="KUBECONFIG-first-file-wins-per-name-reversed"),
    pytest.param(None, {"KUBECONFIG": "$ROOT/k1:$ROOT/k2"}, False, "b", "http://b.k2", "token-k2-b",
                 id="--context-from-the-second-file"),
    pytest.param(None, {"KUBECONFIG": "$ROOT/missing:$ROOT/none-current:$ROOT/k2"}, False, None, "http://b.k2",
                 "token-k2-b", id="KUBECONFIG-missing-files-skipped-current-context-from-a-later-file"),
    pytest.param(None, {}, True, None, "http://h.home", "token-config-h", id="home-kube-config"),
    pytest.param(None, {"KUBECONFIG": ""}, True, None, "http://h.home", "token-config-h",
                 id="empty-KUBECONFIG-is-unset"),
    pytest.param(None, {**IN_CLUSTER}, False, None, "https://10.96.0.1:443", "sa-token-1", id="in-cluster"),
    pytest.param(None, {**IN_CLUSTER, "KUBERNETES_SERVICE_HOST": "fd00::1"}, False, None, "https://[fd00::1]:443",
                 "sa-token-1", id="in-cluster-ipv6"),
    pytest.param(None, {**IN_CLUSTER, "KUBECONFIG": "$ROOT/k1"}, False, None, "http://a.k1", "token-k1-a",
                 id="a-kubeconfig-wins-over-in-cluster-as-in-client-go"),
    pytest.param(None, {**IN_CLUSTER}, True, None, "http://h.home", "token-config-h",
                 id="home-config-wins-over-in-cluster"),
    pytest.param(None, {**IN_CLUSTER, "KUBECONFIG": "$ROOT/none-current"}, False, None, "https://10.96.0.1:443",
                 "sa-token-1", id="a-kubeconfig-selecting-no-context-leaves-it-to-in-cluster"),
    pytest.param(None, {**IN_CLUSTER, "KUBECONFIG": "$ROOT/none-current"}, False, "c", "http://c.none",
                 "token-none-current-c", id="--context-selects-from-it"),
])
def test_resolution(world: World, path: str | None, env: dict[str, str], home: bool, context: str | None,
                    host: str, token: str) -> None:
    if home:
        world.home_config()
    cfg = load_kubeconfig(str(world.root / path) if path else None, context, world.sources(env))
    assert cfg.host == host
    assert cfg.get_api_key_with_prefix("BearerToken") == f"Bearer {token}"
    if host.startswith("https://"):
        assert cfg.ssl_ca_cert == str(world.sa / "ca.crt")


@pytest.mark.parametrize(("path", "env", "context", "message"), [
    pytest.param(None, {}, None, "no cluster to talk to: no kubeconfig at $ROOT/home/.kube/config, and kubus is "
                 "not in a pod", id="nothing-anywhere"),
    pytest.param(None, {"KUBECONFIG": "$ROOT/missing"}, None, r"no kubeconfig at \$KUBECONFIG \($ROOT/missing\)",
                 id="KUBECONFIG-of-missing-files"),
    pytest.param("missing", {**IN_CLUSTER}, None, "cannot use the kubeconfig at $ROOT/missing .no such file",
                 id="an-explicit-file-must-exist-even-in-a-pod"),
    pytest.param(None, {**IN_CLUSTER}, "prod", "with context 'prod'", id="--context-is-never-in-cluster"),
    pytest.param(None, {"KUBECONFIG": "$ROOT/k1"}, "prod", "with context 'prod'",
                 id="--context-not-in-the-kubeconfig"),
    pytest.param(None, {**IN_CLUSTER, "KUBERNETES_SERVICE_PORT": ""}, None, "not in a pod",
                 id="in-cluster-needs-host-and-port"),
])
def test_refused_in_one_line(world: World, path: str | None, env: dict[str, str], context: str | None,
                             message: str) -> None:
    with pytest.raises(KubeconfigError, match=message.replace("$ROOT", str(world.root))) as refused:
        load_kubeconfig(str(world.root / path) if path else None, context, world.sources(env))
    assert "\n" not in str(refused.value)


def test_in_cluster_without_its_ca_is_refused(world: World) -> None:
    (world.sa / "ca.crt").unlink()
    with pytest.raises(KubeconfigError, match=f"cannot read the in-cluster CA {world.sa / 'ca.crt'}"):
        load_kubeconfig(None, None, world.sources(IN_CLUSTER))


def test_in_cluster_without_a_token_is_not_in_cluster(world: World) -> None:
    (world.sa / "token").unlink()
    with pytest.raises(KubeconfigError, match="in a pod without a ServiceAccount token"):
        load_kubeconfig(None, None, world.sources(IN_CLUSTER))


def test_relative_paths_are_relative_to_their_file(world: World) -> None:
    """certificate-authority, client-certificate/-key and tokenFile of a file listed in KUBECONFIG are read
    beside that file, not in the working directory."""
    directory = world.root / "elsewhere"
    kubeconfig(directory / "config", "x", {"x": "http://x"}, user={"tokenFile": "tokens/x"})
    (directory / "tokens").mkdir()
    (directory / "tokens" / "x").write_text("from-the-file\n")
    cfg = load_kubeconfig(None, None, world.sources({"KUBECONFIG": f"$ROOT/k1:{directory / 'config'}"}))
    assert cfg.host == "http://a.k1"
    cfg = load_kubeconfig(None, "x", world.sources({"KUBECONFIG": f"$ROOT/k1:{directory / 'config'}"}))
    assert cfg.get_api_key_with_prefix("BearerToken") == "Bearer from-the-file"


@pytest.mark.parametrize("where", ["in-cluster", "tokenFile"])
def test_a_token_in_a_file_is_read_again_once_a_minute_old(world: World, where: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """As client-go's cached file token source: the file is read again at the first request a minute after the
    last read; a failed read (the file caught mid-rewrite) keeps the last token, with a warning."""
    token = world.sa / "token"
    if where == "tokenFile":
        kubeconfig(world.root / "tf", "t", {"t": "http://t"}, user={"tokenFile": str(token)})
        cfg = load_kubeconfig(str(world.root / "tf"), None, world.sources({}))
    else:
        cfg = load_kubeconfig(None, None, world.sources(IN_CLUSTER))

    def bearer() -> str | None:
        return cfg.get_api_key_with_prefix("BearerToken")  # what the client calls for every request

    assert bearer() == "Bearer sa-token-1"
    token.write_text("sa-token-2")
    world.clock[0] = TOKEN_REREAD_S - 1
    assert bearer() == "Bearer sa-token-1"
    world.clock[0] = TOKEN_REREAD_S
    assert bearer() == "Bearer sa-token-2"
    token.unlink()
    world.clock[0] = 2 * TOKEN_REREAD_S
    with caplog.at_level(logging.WARNING, "kubus.kubeconfig"):
        assert bearer() == "Bearer sa-token-2"
    assert f"cannot read the token file {token}" in caplog.text
    assert "sa-token" not in caplog.text
    token.write_text("sa-token-3")
    world.clock[0] = 2 * TOKEN_REREAD_S + 1
    assert bearer() == "Bearer sa-token-2", "a failed read waits its minute too"
    world.clock[0] = 3 * TOKEN_REREAD_S
    assert bearer() == "Bearer sa-token-3"


def test_an_empty_token_file_is_refused_at_start(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    with pytest.raises(KubeconfigError, match="is empty"):
        TokenFile(tmp_path / "token")


def test_a_yaml_error_does_not_quote_the_file(world: World) -> None:
    """The YAML parser's message quotes the offending line, which may be a token: only line and column."""
    broken = world.root / "broken"
    broken.write_text("users:\n- name: u\n  user: {token: s3cr3t-token\n")
    with pytest.raises(KubeconfigError, match="line") as refused:
        load_kubeconfig(str(broken), None, world.sources({}))
    assert "s3cr3t" not in str(refused.value)
