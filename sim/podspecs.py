"""A created pod's spec pruned and defaulted once per distinct spec, not once per pod (issue 25).

The pods of a ReplicaSet or a DaemonSet are created with their template's spec, which the create's prune
(sim.schema) and defaults (sim.defaulting) walked again for every pod: ~200 k instructions of a DaemonSet pod's
~1.75 M in bench.sim_cpu_bench. Both are functions of the spec alone. A DaemonSet pins each pod to its node by a node
affinity, the one field of the spec that differs from pod to pod: neither reads it for the rest of the spec (the
prune's walk of the affinity adds only the affinity's own unknown fields and drops), and defaulting never touches it.

So the rest of the spec (the affinity's value replaced by null, its place kept) is remembered by its JSON, with what
prune and defaults change in it, at its top level: the fields they drop, and those they set (new, or another value),
in order. Each pod's spec gets those changes in place, its affinity left for the create's prune to walk. (Decoding
the whole result for each pod instead cost two thirds of what it saved.) A spec with unknown fields outside its
affinity is not remembered: its warnings (or its Strict error) come from the create's own walk, as before; nor is
one whose changes, so made, would not leave its fields in the order prune and defaults leave them.

With the changes goes the JSON of the spec they leave, without its affinity: what the validation's memory of pod
specs (sim.validation_apps) is keyed by, which it would encode again for every pod.

The key must stand for the spec exactly: a JSON body's values are JSON's own, whereas a tuple, a set, a date or bytes
(in-process callers, YAML bodies) would share a JSON with a list or a string and be pruned or defaulted differently,
so only bodies decoded from JSON are looked up.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from sim import defaulting, schema


class _Changes(msgspec.Struct, frozen=True):
    """What prune and defaults change at the top level of a spec: the fields they drop, then those they set, in
    order, each with its value, or the JSON of a list or an object (decoded for each spec: each gets its own)."""

    dropped: tuple[str, ...]
    sets: tuple[tuple[str, Any, bool], ...]  # (field, value, whether the value is JSON)
    rest_json: bytes  # the JSON of the spec so changed, without its affinity


_KEPT: Final = 64  # distinct specs remembered (their templates'); the oldest is forgotten first
# The changes of each remembered spec, or None for one with unknown fields (or changes out of order), by its JSON
_changes: dict[bytes, _Changes | None] = {}
_MISSING: Final = _Changes((), (), b"")  # a spec not seen lately
_encode = msgspec.json.encode
_decode = msgspec.json.decode


def prepare(spec: Any) -> bytes | None:
    """Prunes and pod-defaults `spec` (a pod's, from a JSON body) in place, but for its affinity (left as it is),
    and returns the JSON of the result without its affinity. None, having done nothing, when the rest of `spec` has
    unknown fields or changes that would reorder its fields, or when `spec` is no object."""
    if not isinstance(spec, dict):
        return None
    if "affinity" in spec:
        rest = dict(spec)
        rest["affinity"] = None
    else:
        rest = spec
    key = _encode(rest)
    changes = _changes.get(key, _MISSING)
    if changes is _MISSING:
        changes = _changes[key] = _changes_of(key)
        if len(_changes) > _KEPT:
            del _changes[next(iter(_changes))]
    if changes is None:
        return None
    for name in changes.dropped:
        del spec[name]
    for name, value, is_json in changes.sets:
        spec[name] = _decode(value) if is_json else value
    return changes.rest_json


def _changes_of(key: bytes) -> _Changes | None:
    """The top-level changes prune and defaults make to the spec `key`, or None."""
    before = _decode(key)
    pod = {"spec": _decode(key)}
    if schema.prune("Pod", pod):
        return None
    after = pod["spec"]
    defaulting.default_pod_spec(after)
    dropped = tuple(name for name in before if name not in after)
    changed = [(name, value) for name, value in after.items()
               if name not in before or _encode(before[name]) != _encode(value)]
    for name in dropped:
        del before[name]
    before.update(changed)
    if list(before) != list(after):  # a field dropped and set again (`tolerations: []`) went last: walked instead
        return None
    return _Changes(dropped, tuple((name, _encode(value), True) if isinstance(value, dict | list) else
                                   (name, value, False) for name, value in changed),
                    _encode({name: value for name, value in after.items() if name != "affinity"}))


def pinned_node(affinity: Any) -> str | None:
    """The node a DaemonSet's pod is pinned to, when its affinity is exactly the pin the DaemonSet controller writes
    (one required term of one matchFields requirement, `metadata.name In [node]`, and nothing else): None otherwise.

    The affinity is each pod's own, so no memory answers for it; but such a pin has nothing the create's prune could
    drop or report (every field known, no empty list), and of the validation's checks only the node name's can fail.
    Both walked it for every pod (~90 k instructions of a DaemonSet pod's create)."""
    if type(affinity) is not dict:  # most often None: a pod not pinned (raising and catching costs more)
        return None
    try:
        node = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
            "matchFields"][0]["values"][0]
    except (KeyError, IndexError, TypeError):  # not such a pin (a JSON object has no integer key)
        return None
    # equal to a pin made of strings, lists and objects only: so are the body's values (a number, a boolean or null
    # equals no string), and no field is missing or added
    return node if type(node) is str and affinity == _pin(node) else None


def _pin(node: str) -> dict[str, Any]:
    requirement = {"key": "metadata.name", "operator": "In", "values": [node]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [requirement]}]}}}
