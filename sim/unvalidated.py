"""`POST /sim/unvalidated`: store an object the API server would refuse today, as if it had been
written before validation tightened.

Controllers meet objects that today's kube-apiserver would reject: ones persisted by an older
apiserver whose validation was looser, restored from an etcd backup, or replayed from an event log.
A DaemonSet with an empty selector, a selector its template does not match, a ``maxUnavailable`` of
``"abc"`` or a toleration with an unknown operator cannot be made through the API any more, so a test
of how a controller copes with them needs a back door. This is it:

    POST /sim/unvalidated
    {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "bad", "namespace": "ns"}, "spec": ...}

The object is created as a normal create would create it, with everything but the kind's validation:
its kind and apiVersion must be ones the sim serves, unknown fields are dropped (and reported in a
``Warning`` header, as ``fieldValidation=Warn`` does), kube-apiserver's defaults are applied, the
namespace must exist and not be terminating, the name must be free (``generateName`` works), and the
object gets its uid, resourceVersion, creationTimestamp and, for DaemonSets and ReplicaSets,
``generation: 1`` and the empty status. Watchers see an ordinary ``ADDED`` event: nothing tells the
object apart from one the API accepted. The answer is ``201`` with the object, or a ``Status`` error.

Later writes to the object go through the normal paths: a ``/status`` write is not validated against
the spec (as upstream), but an update of the spec is, and is refused until the object is fixed.
"""

from __future__ import annotations

from typing import Any

from sim import resources as R
from sim import status as errors
from sim.registry import Decoding, Registry
from sim.store import Entry

__all__ = ["PATH", "create_unvalidated"]

PATH = "/sim/unvalidated"


def create_unvalidated(registry: Registry, obj: Any, decoding: Decoding | None = None) -> Entry:
    """Creates ``obj`` (kind, apiVersion and, when namespaced, ``metadata.namespace`` given) without
    validating it; raises :class:`sim.status.ApiError` as a create would for anything else."""
    if not isinstance(obj, dict):
        raise errors.bad_request("the body of the request must be a JSON object")
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    resource = R.BY_KIND.get(kind) if isinstance(kind, str) else None
    if resource is None or api_version != resource.api_version:
        served = ", ".join(f"{r.api_version} {r.kind}" for r in R.ALL)
        raise errors.bad_request(f"no kind {kind!r} in version {api_version!r} is served; one of: {served}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise errors.bad_request("metadata must be an object")
    for key in ("name", "generateName", "namespace"):
        if key in meta and not isinstance(meta[key], str):
            raise errors.bad_request(f"metadata.{key} must be a string")
    namespace = meta.get("namespace") or ""
    if resource.namespaced and not namespace:
        raise errors.bad_request(f"a {resource.kind} needs metadata.namespace")
    return registry.create(resource, namespace, obj, decoding, validate=False)
