"""The one kubeconfig loader: ingest's watches and the executor's writes reach the cluster the same way.

Where the cluster comes from, as client-go's clientcmd resolves it for kubectl and kube-controller-manager:

1. `--kubeconfig PATH`: that file, which must exist (KUBECONFIG is then not read); a list of files, as in
   KUBECONFIG, is taken too, and each of them must exist;
2. else `$KUBECONFIG`, a list of files separated by os.pathsep (':'), merged as client-go merges them: files
   that do not exist are skipped, the first file to define a cluster, context or user by a name wins, and
   the first file that sets a current-context sets it; relative paths in a file are relative to that file;
3. else `~/.kube/config`;
4. else, when none of them exists or none selects a context (no `--context`, no current-context), the pod's
   ServiceAccount (in-cluster): https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the CA at
   .../serviceaccount/ca.crt and the token at .../serviceaccount/token.

`--context` picks a context of the kubeconfig (default: its current-context); one it does not define is an
error, never a quiet fall back, so two services of one deployment can never talk to two different clusters.

Tokens in files rotate: the kubelet rewrites a projected ServiceAccount token well before it expires, and a
kubeconfig user's `tokenFile` may be rewritten the same way. As client-go does, such a token is read again
when it is a minute old (at the next request after that: the client's `refresh_api_key_hook`); a failed read
keeps the token read before, with a warning, so a rewrite caught half-way does not fail requests.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]
from kubernetes import client
from kubernetes.config import kube_config

from runtime.running import StartupError

log = logging.getLogger("kubus.kubeconfig")

SERVICEACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_S = 60.0  # client-go's cachedFileTokenSource period
HOW = "pass --kubeconfig with a readable kubeconfig for the cluster"


def user_agent(component: str) -> str:
    """The User-Agent of kubus's API clients, shaped as client-go's DefaultKubernetesUserAgent
    ("kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc1234"): kube-apiserver names a write's field
    manager after the first word (before the "/"), so what kubus writes shows `manager: kubus` in managedFields
    and its requests `kubus/...` in the audit log, where the Python client's default, "OpenAPI-Generator/...",
    would name any Python program."""
    from importlib import metadata

    try:
        version = metadata.version("kubus")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return f"kubus/{version} ({sys.platform}/{platform.machine()}) {component}"


class KubeconfigError(StartupError):
    """The kubeconfig is missing or unusable: the message says which file (and context) and why. Bad start-up
    input: the service exits 2 (runtime/running.py), not 1, so that a supervisor does not restart it for ever."""


@dataclass(frozen=True)
class Sources:
    """Where the loader looks, besides `--kubeconfig`: the real ones by default; tests pass their own."""

    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    serviceaccount_dir: Path = SERVICEACCOUNT_DIR
    home: Path | None = None  # None: $HOME, as client-go's homedir
    clock: Callable[[], float] = time.monotonic

    def default_kubeconfig(self) -> Path:
        home = self.home or Path(self.environ.get("HOME") or os.path.expanduser("~"))
        return home / ".kube" / "config"


def load_kubeconfig(path: str | None, context: str | None = None, sources: Sources | None = None
                    ) -> client.Configuration:
    """A Configuration of its own, never the client's process-global default, from `path` (None: resolved
    as the module says) and `context` (None: the current-context).

    Blocking (it reads files and may run an exec credential plugin). Refreshed credentials are not
    written back into the user's kubeconfig: a controller has no business editing that file."""
    sources = sources or Sources()
    if path:
        files, where = [Path(p).expanduser() for p in path.split(os.pathsep) if p], path
        for missing in (f for f in files if not f.is_file()):
            raise KubeconfigError(f"cannot use the kubeconfig at {path} (no such file: {missing}); {HOW}")
    elif sources.environ.get("KUBECONFIG"):
        listed = [Path(p).expanduser() for p in sources.environ["KUBECONFIG"].split(os.pathsep) if p]
        files, where = [p for p in listed if p.is_file()], f"$KUBECONFIG ({sources.environ['KUBECONFIG']})"
    else:
        default = sources.default_kubeconfig()
        files, where = [default] if default.is_file() else [], str(default)
    merged = _merge(files, where)
    chosen = context or merged.get("current-context")
    if not chosen and not context:
        # client-go: a kubeconfig that selects nothing is "empty", and a pod's ServiceAccount is used instead
        if _in_cluster_possible(sources):
            return _in_cluster(sources)
        incluster = ("not in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset)"
                     if not (sources.environ.get("KUBERNETES_SERVICE_HOST")
                             and sources.environ.get("KUBERNETES_SERVICE_PORT"))
                     else f"in a pod without a ServiceAccount token at {sources.serviceaccount_dir / 'token'}")
        if files:
            raise KubeconfigError(f"cannot use the kubeconfig at {where}: it sets no current-context and no "
                                  f"--context was given, and kubus is {incluster}; {HOW} and a --context it defines")
        raise KubeconfigError(f"no cluster to talk to: no kubeconfig at {where}, and kubus is {incluster}; {HOW}")
    cfg = client.Configuration()
    try:
        loader = kube_config.KubeConfigLoader(config_dict=merged, active_context=context)  # type: ignore[no-untyped-call]
        loader.load_and_set(cfg)  # type: ignore[no-untyped-call]
    except Exception as exc:  # ConfigException, OSError, an exec plugin's failure, ...: one line for all
        which = f" with context {context!r}" if context else ""
        fix = " and a --context it defines" if context else ""
        raise KubeconfigError(f"cannot use the kubeconfig at {where}{which} ({type(exc).__name__}: "
                              f"{_one_line(exc)}); {HOW}{fix}") from None
    token_file = _user_of(merged, str(chosen)).get("tokenFile")
    if token_file:
        TokenFile(Path(token_file), sources.clock).install(cfg)
    log.info("kubeconfig: %s, context %s, server %s", where, chosen, cfg.host)
    return cfg


def _merge(files: list[Path], where: str) -> dict[str, Any]:
    """client-go's merge: the first file to name a cluster, context or user wins, and the first current-context;
    paths made absolute against the file that holds them."""
    merged: dict[str, Any] = {"clusters": [], "contexts": [], "users": []}
    for file in files:
        try:
            document = yaml.safe_load(file.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise KubeconfigError(f"cannot use the kubeconfig at {where} ({file}: {_one_line(exc)}); {HOW}") from None
        if not isinstance(document, dict):
            raise KubeconfigError(f"cannot use the kubeconfig at {where} ({file} is not a kubeconfig); {HOW}")
        base = file.absolute().parent
        for section in ("clusters", "contexts", "users"):
            names = {entry.get("name") for entry in merged[section]}
            for entry in document.get(section) or []:
                if isinstance(entry, dict) and entry.get("name") not in names:
                    merged[section].append(_resolve_paths(section, entry, base))
                    names.add(entry.get("name"))
        if not merged.get("current-context") and document.get("current-context"):
            merged["current-context"] = document["current-context"]
    return merged


# the fields client-go resolves relative to the kubeconfig file that holds them (clientcmd.ResolvePaths)
_PATHS = {"clusters": ("cluster", ("certificate-authority",)),
          "users": ("user", ("client-certificate", "client-key", "tokenFile"))}


def _resolve_paths(section: str, entry: dict[str, Any], base: Path) -> dict[str, Any]:
    if section not in _PATHS:
        return entry
    key, fields = _PATHS[section]
    body = dict(entry.get(key) or {})
    for name in fields:
        value = body.get(name)
        if isinstance(value, str) and value and not os.path.isabs(value):
            body[name] = str(base / os.path.expanduser(value))
    return {**entry, key: body}


def _user_of(merged: dict[str, Any], context: str) -> dict[str, Any]:
    ctx = next((c.get("context") or {} for c in merged["contexts"] if c.get("name") == context), {})
    user = next((u.get("user") or {} for u in merged["users"] if u.get("name") == ctx.get("user")), {})
    return user if isinstance(user, dict) else {}


def _in_cluster_possible(sources: Sources) -> bool:
    """client-go's inClusterClientConfig.Possible: the service's address is in the environment and a token file
    is mounted."""
    env = sources.environ
    return bool(env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT")
                and (sources.serviceaccount_dir / "token").is_file())


def _in_cluster(sources: Sources) -> client.Configuration:
    host, port = sources.environ["KUBERNETES_SERVICE_HOST"], sources.environ["KUBERNETES_SERVICE_PORT"]
    ca = sources.serviceaccount_dir / "ca.crt"
    try:
        if not ca.read_bytes().strip():
            raise KubeconfigError(f"the in-cluster CA {ca} is empty; {HOW}")
    except OSError as exc:
        raise KubeconfigError(f"cannot read the in-cluster CA {ca} ({exc.strerror}); {HOW}") from None
    cfg = client.Configuration()
    cfg.host = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"  # net.JoinHostPort
    cfg.ssl_ca_cert = str(ca)
    TokenFile(sources.serviceaccount_dir / "token", sources.clock).install(cfg)
    log.info("kubeconfig: in-cluster ServiceAccount (%s), server %s", sources.serviceaccount_dir, cfg.host)
    return cfg


class TokenFile:
    """A bearer token kept in a file that is rewritten as it rotates: read again once it is TOKEN_REREAD_S old.

    Installed as the Configuration's refresh_api_key_hook, which the client calls for every request it
    authenticates (from the executor's and ingest's worker threads: hence the lock)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic,
                 period: float = TOKEN_REREAD_S) -> None:
        self.path = path
        self._clock = clock
        self._period = period
        self._lock = threading.Lock()
        self._token = self._read()  # the first read must work: a service starts with a token or not at all
        self._read_at = clock()

    def install(self, cfg: client.Configuration) -> None:
        cfg.api_key.pop("authorization", None)
        cfg.api_key_prefix.pop("BearerToken", None)
        cfg.api_key["BearerToken"] = f"Bearer {self._token}"
        cfg.refresh_api_key_hook = self.refresh  # type: ignore[assignment]  # the client types it None

    def refresh(self, cfg: client.Configuration) -> None:
        with self._lock:
            now = self._clock()
            if now - self._read_at >= self._period:
                self._read_at = now  # a failing file is tried once a period, not on every request
                try:
                    self._token = self._read()
                except KubeconfigError as exc:
                    log.warning("%s; using the token read before", exc)
            cfg.api_key["BearerToken"] = f"Bearer {self._token}"

    def _read(self) -> str:
        try:
            token = self.path.read_text().strip()  # client-go trims it too
        except OSError as exc:
            raise KubeconfigError(f"cannot read the token file {self.path} ({exc.strerror}); {HOW}") from None
        if not token:
            raise KubeconfigError(f"the token file {self.path} is empty; {HOW}")
        return token


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        # not str(exc): it quotes the offending line, which may be a token or a key
        mark = exc.problem_mark
        return f"YAML: {exc.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split()) or type(exc).__name__
