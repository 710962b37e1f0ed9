"""A created pod's spec pruned and defaulted once per distinct spec, not once per pod (issue 25).

The pods of a ReplicaSet or a DaemonSet are created with their template's spec, which the create's prune
(sim.schema) and defaults (sim.defaulting) walked again for every pod: ~200 k instructions of a DaemonSet pod's
~1.75 M in bench.sim_cpu_bench. Both are functions of the spec alone. A DaemonSet pins each pod to its node by a node
affinity, the one field of the spec that differs from pod to pod: neither reads it for the rest of the spec (the
prune's walk of the affinity adds only the affinity's own unknown fields and drops), and defaulting never touches it.

So the rest of the spec (the affinity's value replaced by null, its place kept) is remembered by its JSON, with the
JSON of what prune and defaults make of it; each pod gets a decode of that, with its own affinity, left for the
create's prune to walk. A spec with unknown fields outside its affinity is not remembered: its warnings (or its
Strict error) come from the create's own walk, as before. The key must stand for the spec exactly: a JSON body's
values are JSON's own, whereas a tuple, a set, a date or bytes (in-process callers, YAML bodies) would share a JSON
with a list or a string and be pruned or defaulted differently, so only bodies decoded from JSON are looked up.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from sim import defaulting, schema

_KEPT: Final = 64  # distinct specs remembered (their templates'); the oldest is forgotten first
# The JSON of each remembered spec pruned and defaulted, or None for one with unknown fields, by the spec's JSON
_prepared: dict[bytes, bytes | None] = {}
_MISSING: Final = b""  # no spec's JSON
_encode = msgspec.json.encode
_decode = msgspec.json.decode


def prepared(spec: Any) -> dict[str, Any] | None:
    """`spec` (a pod's, from a JSON body) pruned and pod-defaulted, but for its affinity (the same object, at its
    place, not yet pruned); None when the rest of `spec` has unknown fields, or when `spec` is no object."""
    if not isinstance(spec, dict):
        return None
    has_affinity = "affinity" in spec
    rest = {key: None if key == "affinity" else value for key, value in spec.items()} if has_affinity else spec
    key = _encode(rest)
    done = _prepared.get(key, _MISSING)
    if done is _MISSING:
        done = _prepared[key] = _prepare(key)
        if len(_prepared) > _KEPT:
            del _prepared[next(iter(_prepared))]
    if done is None:
        return None
    result: dict[str, Any] = _decode(done)
    if has_affinity:
        result["affinity"] = spec["affinity"]
    return result


def _prepare(key: bytes) -> bytes | None:
    """The JSON of the spec `key` pruned and defaulted, or None when it has unknown fields."""
    pod = {"spec": _decode(key)}
    if schema.prune("Pod", pod):
        return None
    defaulting.default_pod_spec(pod["spec"])
    return _encode(pod["spec"])
