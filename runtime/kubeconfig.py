"""The one kubeconfig loader: ingest's watches and the executor's writes reach the cluster the same way.

`--kubeconfig` names a file, or a KUBECONFIG-style list of files (merged as kubectl merges them), and
`--context` one of its contexts. Without `--context` the kubeconfig's current-context is used, as kubectl
does; a `--context` the kubeconfig does not have is an error, never a quiet fall back to the current
one, so two services of one deployment can never talk to two different clusters.
"""

from __future__ import annotations

from kubernetes import client
from kubernetes import config as kube_config


class KubeconfigError(RuntimeError):
    """The kubeconfig is missing or unusable: the message says which file (and context) and why."""


def load_kubeconfig(path: str | None, context: str | None = None) -> client.Configuration:
    """A Configuration of its own, never the client's process-global default, from `path` (None:
    $KUBECONFIG or ~/.kube/config, as kubectl) and `context` (None: the current-context).

    Blocking (it reads files and may run an exec credential plugin). Refreshed credentials are not
    written back into the user's kubeconfig: a controller has no business editing that file."""
    cfg = client.Configuration()
    try:
        kube_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=cfg, persist_config=False)
    except Exception as exc:  # the loader raises ConfigException, OSError, yaml errors, ...: one line for all
        where = path or "$KUBECONFIG or ~/.kube/config"
        which = f" with context {context!r}" if context else ""
        fix = " and a --context it defines" if context else ""
        raise KubeconfigError(f"cannot use the kubeconfig at {where}{which} ({type(exc).__name__}: {exc}); "
                              f"pass --kubeconfig with a readable kubeconfig for the cluster{fix}") from None
    return cfg
