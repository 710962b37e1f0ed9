"""A DaemonSet's revision history: what upstream's constructHistory and cleanupHistory decide, as pure functions.

Upstream (pkg/controller/daemon/update.go, pkg/controller/history/controller_history.go) keeps one
ControllerRevision per pod template the DaemonSet has had. A revision's ``data`` is getPatch(ds): the
DaemonSet's ``spec.template`` as a strategic-merge patch that replaces the whole template. A
revision *is* the current one exactly when its data bytes equal getPatch of the DaemonSet now
(Match, ``bytes.Equal``): neither names nor hashes decide it. So a revision written by
kube-controller-manager is recognised here as long as :func:`revision_data` reproduces getPatch byte
for byte, and the pods' ``controller-revision-hash`` label is compared with the hash label *stored on*
the current revision, never with a freshly computed hash.

The hash itself differs from upstream's, and cannot be made equal: upstream's snapshot names and
labels a new DaemonSet revision with ``controller.ComputeHash(&ds.Spec.Template, collisionCount)``,
FNV-32a over go-spew's ``%#v`` dump of the Go ``v1.PodTemplateSpec`` struct (every field of every
nested Go type in declaration order, zero values included, so it changes with the Kubernetes
version's Go types, which kubus does not have). kubus uses :func:`revision_hash`, which is
``history.HashControllerRevision`` exactly (FNV-32 over the data bytes, then the decimal collision
count), the hash upstream gives StatefulSet revisions. Both controllers interoperate anyway: each
finds the other's revision by data, then uses the hash label written on it.

Everything here is pure: inputs are never mutated, time is never read, and the results are plans
(what to create, patch, relabel, delete) for the shell to carry out.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from kube import names
from kube.apps import ControllerRevision, DaemonSet
from kube.core import Pod
from kube.gojson import marshal
from kube.intstr import parse_int64
from kube.meta import ObjectMeta
from kube.ownership import new_controller_ref
from kube.times import parse_time

__all__ = [
    "DEFAULT_REVISION_HISTORY_LIMIT",
    "HISTORY_HASH_LABEL",
    "MAX_PREFIX_LENGTH",
    "UNIQUE_LABEL_KEY",
    "CreateConflict",
    "HistoryPlan",
    "cleanup_history",
    "construct_history",
    "equal_revision",
    "find_equal_revisions",
    "fnv32",
    "fnv32a",
    "live_hashes",
    "match",
    "max_revision",
    "new_revision",
    "relabel_pod_patch",
    "resolve_create_conflict",
    "revision_body",
    "revision_data",
    "revision_data_of",
    "revision_hash",
    "revision_name",
    "revision_number_patch",
    "safe_encode_string",
    "sort_controller_revisions",
    "unique_label_patch",
]

UNIQUE_LABEL_KEY: Final = "controller-revision-hash"
"""apps.DefaultDaemonSetUniqueLabelKey (= ControllerRevisionHashLabelKey): on revisions and on pods."""

HISTORY_HASH_LABEL: Final = "controller.kubernetes.io/hash"
"""history.ControllerRevisionHashLabel: EqualRevision compares it; DaemonSet revisions do not carry it."""

DEFAULT_REVISION_HISTORY_LIMIT: Final = 10
"""The API server's default for ``spec.revisionHistoryLimit``."""

MAX_PREFIX_LENGTH: Final = 223
"""ControllerRevisionName keeps at most this many bytes of the prefix, so that prefix-hash fits 253."""

API_VERSION: Final = "apps/v1"
KIND: Final = "DaemonSet"

_FNV32_OFFSET: Final = 0x811C9DC5
_FNV32_PRIME: Final = 0x01000193


# --- data -------------------------------------------------------------------------------------------------


def revision_data(ds: DaemonSet) -> bytes:
    """getPatch(ds): ``{"spec":{"template":<template + "$patch":"replace">}}`` as Go's json.Marshal writes it.

    Upstream marshals the typed DaemonSet, unmarshals it into a ``map[string]interface{}``, adds
    ``"$patch": "replace"`` to the template and marshals the two-level map again: compact, keys sorted at
    every level, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped. The template here is the one the API
    server returned (``to_builtins()`` keeps every field the server sent, defaulted ones and
    ``"creationTimestamp": null`` included), which is what kube-controller-manager's typed struct
    marshals to when it runs the same API version as the server.

    Known gaps, both inherited from ``kube.gojson``: a float prints as Python prints it, and the
    control characters U+0008/U+000C come out as ``\\b``/``\\f`` (Go 1.22 and later; earlier Go wrote
    ``\\u0008``/``\\u000c``). Pod templates hold neither in practice.
    """
    template = ds.spec.template.to_builtins()
    template["$patch"] = "replace"
    return marshal({"spec": {"template": template}})


def revision_data_of(revision: ControllerRevision) -> bytes:
    """The bytes of a stored revision's ``data`` (``Data.Raw``), as upstream compares them.

    The cache keeps ``data`` decoded, so the bytes are re-encoded the Go way. That is the original
    wherever the original was Go's canonical encoding, which holds for every revision written by
    kube-controller-manager or by kubus. JSON ``null`` or no data at all is empty, as a RawExtension
    decodes ``null`` to no bytes.
    """
    data = revision.data
    if data is None:
        return b""
    if isinstance(data, msgspec.Raw):
        return bytes(data)
    if isinstance(data, bytes | bytearray):
        return bytes(data)
    return marshal(data)


def match(ds: DaemonSet, revision: ControllerRevision, data: bytes | None = None) -> bool:
    """Match: the revision's data is byte for byte getPatch(ds). Pass ``data`` to reuse a computed getPatch."""
    return revision_data_of(revision) == (revision_data(ds) if data is None else data)


# --- hashing and naming -------------------------------------------------------------------------------------


def fnv32(data: bytes) -> int:
    """hash/fnv New32 (FNV-1: multiply, then xor) Sum32."""
    h = _FNV32_OFFSET
    for byte in data:
        h = ((h * _FNV32_PRIME) & 0xFFFFFFFF) ^ byte
    return h


def fnv32a(data: bytes) -> int:
    """hash/fnv New32a (FNV-1a: xor, then multiply) Sum32; what controller.ComputeHash uses."""
    h = _FNV32_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return h


def safe_encode_string(text: str) -> str:
    """rand.SafeEncodeString: every character mapped into the vowel-free alphabet by code point."""
    return "".join(names.ALPHABET[ord(char) % len(names.ALPHABET)] for char in text)


def revision_hash(data: bytes, collision_count: int | None) -> str:
    """history.HashControllerRevision over raw data: FNV-32 of the bytes, then of the decimal collision count.

    ``collision_count`` None adds nothing (a nil probe); 0 adds ``"0"``. The result is the decimal
    uint32 through SafeEncodeString, as upstream's (e.g. ``"5f8d9c7b6"``-like strings of 1 to 10
    characters). This is exactly what upstream computes for StatefulSet revisions; see the module
    docstring for why upstream's DaemonSet hash (ComputeHash over a go-spew dump) is not reproduced.
    """
    payload = data if collision_count is None else data + str(collision_count).encode()
    return safe_encode_string(str(fnv32(payload)))


def revision_name(prefix: str, hash_: str) -> str:
    """history.ControllerRevisionName: ``prefix-hash``, the prefix cut to 223 bytes.

    Upstream's DaemonSet snapshot writes ``ds.Name + "-" + hash`` without the cut; the two agree for
    every name up to 223 bytes. Beyond that upstream's create fails validation (longer than 253) on
    every sync, while this name stays valid. Go slices bytes; a cut inside a multi-byte character
    cannot happen for a valid object name, which is ASCII.
    """
    encoded = prefix.encode()
    if len(encoded) > MAX_PREFIX_LENGTH:
        prefix = encoded[:MAX_PREFIX_LENGTH].decode(errors="ignore")
    return f"{prefix}-{hash_}"


def new_revision(ds: DaemonSet, data: bytes, revision_number: int, collision_count: int | None) -> ControllerRevision:
    """The revision snapshot creates: named and labelled by the hash, owned by the DaemonSet.

    As upstream's snapshot (a superset of history.NewControllerRevision): the template's labels plus
    ``controller-revision-hash``, the DaemonSet's annotations, a controller reference to it, the data
    and the revision number. ``data`` is kept decoded, as the cache holds revisions; send
    :func:`revision_body` so the server stores these exact bytes.
    """
    hash_ = revision_hash(data, collision_count)
    labels = dict(ds.spec.template.metadata.labels)
    labels[UNIQUE_LABEL_KEY] = hash_
    meta = ObjectMeta(
        name=revision_name(ds.metadata.name, hash_),
        namespace=ds.metadata.namespace,
        labels=labels,
        annotations=dict(ds.metadata.annotations),
        owner_references=[new_controller_ref(ds.metadata, API_VERSION, KIND)],
    )
    return ControllerRevision(metadata=meta, data=msgspec.json.decode(data) if data else None,
                              revision=revision_number)


def revision_body(revision: ControllerRevision, data: bytes) -> bytes:
    """The create body for ``revision`` with ``data`` embedded verbatim.

    Re-encoding decoded data would lose Go's escaping of ``<``, ``>`` and ``&`` (and sort nothing),
    and kube-controller-manager compares the stored bytes: a revision kubus writes must hold the
    exact bytes getPatch produces, or upstream would not recognise it and would roll every pod.
    """
    body: dict[str, Any] = {
        "apiVersion": revision.api_version,
        "kind": revision.kind,
        "metadata": msgspec.to_builtins(revision.metadata),
        "data": msgspec.Raw(data),
        "revision": revision.revision,
    }
    return msgspec.json.encode(body)


# --- comparing and ordering ---------------------------------------------------------------------------------


def _int32_label(revision: ControllerRevision) -> int | None:
    """The history hash label as strconv.ParseInt(hs, 10, 32) reads it, cast to uint32; None if it does not parse."""
    text = revision.metadata.labels.get(HISTORY_HASH_LABEL)
    value = parse_int64(text) if text is not None else None
    if value is None or not -(2**31) <= value < 2**31:
        return None
    return value & 0xFFFFFFFF


def equal_revision(lhs: ControllerRevision | None, rhs: ControllerRevision | None) -> bool:
    """history.EqualRevision: both absent, or equal data, unless both carry differing hash labels.

    The hash labels compared are ``controller.kubernetes.io/hash`` (history's, not the DaemonSet's),
    and only when both parse as int32, which SafeEncodeString's letters make rare.
    """
    if lhs is None or rhs is None:
        return lhs is rhs
    left, right = _int32_label(lhs), _int32_label(rhs)
    if left is not None and right is not None and left != right:
        return False
    return revision_data_of(lhs) == revision_data_of(rhs)


def find_equal_revisions(revisions: Iterable[ControllerRevision],
                         needle: ControllerRevision) -> list[ControllerRevision]:
    """history.FindEqualRevisions: the revisions equal to ``needle``, in their given order."""
    return [revision for revision in revisions if equal_revision(revision, needle)]


_ZERO_TIME: Final = datetime(1, 1, 1, tzinfo=UTC)  # Go's zero time.Time: before every real timestamp


def _created(revision: ControllerRevision) -> datetime:
    stamp = revision.metadata.creation_timestamp
    if not stamp:
        return _ZERO_TIME
    try:
        return parse_time(stamp)
    except ValueError:
        return _ZERO_TIME


def sort_controller_revisions(revisions: Iterable[ControllerRevision]) -> list[ControllerRevision]:
    """history.SortControllerRevisions: by revision, then creation time, then name (a stable sort)."""
    return sorted(revisions, key=lambda r: (r.revision, _created(r), r.metadata.name))


def max_revision(revisions: Iterable[ControllerRevision]) -> int:
    """maxRevision: the highest revision number, 0 for none."""
    return max((r.revision for r in revisions if r.revision > 0), default=0)


# --- constructHistory ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateConflict:
    """What snapshot does when the create meets an existing revision of the same name.

    ``current`` is the existing revision when its data matches (someone, maybe this controller, made
    it already: it is the current revision). Otherwise ``collision_count`` is the DaemonSet's new
    ``status.collisionCount``; upstream writes it, returns the AlreadyExists error and the sync is
    retried with the new count, hence a new hash and name.
    """

    current: ControllerRevision | None = None
    collision_count: int | None = None


def resolve_create_conflict(ds: DaemonSet, existing: ControllerRevision, data: bytes | None = None) -> CreateConflict:
    """snapshot's AlreadyExists branch, given the revision that holds the name.

    Upstream first re-reads the DaemonSet and gives up (retrying later) if its collision count moved
    since the sync began; that check needs a fresh read and belongs to the shell, which must only
    write the count returned here when the live count still equals ``ds.status.collision_count``.
    """
    if match(ds, existing, data):
        return CreateConflict(current=existing)
    return CreateConflict(collision_count=(ds.status.collision_count or 0) + 1)


@dataclass(frozen=True)
class HistoryPlan:
    """constructHistory's decisions, for the shell to carry out in upstream's order.

    Upstream's order: ``label_fixes`` (each an Update adding the unique label), then either the
    ``create`` (snapshot) or the dedup (``pod_relabels``, then ``deletes``) and the ``revision_bump``.
    ``current`` is the current revision as it is once the plan is done (with its label fixed and its
    number bumped) and ``hash`` the value of its unique label, which the pods are compared with. When
    ``collision_count`` is set the name was taken by a different revision: write the count, create
    nothing, and sync again; ``current`` is then None and so is ``hash``.
    """

    current: ControllerRevision | None
    hash: str | None
    old: list[ControllerRevision]
    data: bytes
    create: ControllerRevision | None = None
    label_fixes: list[ControllerRevision] = field(default_factory=list)
    revision_bump: tuple[ControllerRevision, int] | None = None
    deletes: list[ControllerRevision] = field(default_factory=list)
    pod_relabels: list[Pod] = field(default_factory=list)
    collision_count: int | None = None


def _with_unique_label(revision: ControllerRevision) -> ControllerRevision:
    fixed = copy.deepcopy(revision)
    fixed.metadata.labels = {**fixed.metadata.labels, UNIQUE_LABEL_KEY: fixed.metadata.name}
    return fixed


def construct_history(ds: DaemonSet, revisions: Iterable[ControllerRevision], pods: Iterable[Pod] = (),
                      taken: Mapping[str, ControllerRevision] | None = None) -> HistoryPlan:
    """constructHistory, dedupCurHistories and snapshot's decisions for ``ds``.

    ``revisions`` are the revisions the DaemonSet controls once claimed (controlledHistories: owned
    ones plus adopted orphans matching the selector); ``pods`` are its claimed pods (getDaemonPods),
    needed only to relabel them when duplicates are removed; ``taken`` maps names to every revision
    in the namespace the cache knows, so a name collision is seen before creating (upstream learns it
    from the create's AlreadyExists and ends the same way: :func:`resolve_create_conflict`).

    Upstream walks the revisions in the lister's order, which is a Go map's; here they are walked in
    name order, so among current revisions with the same highest number the one kept is the last
    by name (upstream keeps the last it happens to see).

    Dedup relabels every claimed pod whose ``controller-revision-hash`` differs from the kept
    revision's, pods of old revisions included, exactly as upstream does (it compares with the kept
    hash only, not with the duplicates' hashes).
    """
    data = revision_data(ds)
    ordered = sorted(revisions, key=lambda r: r.metadata.name)
    label_fixes: list[ControllerRevision] = []
    currents: list[ControllerRevision] = []
    old: list[ControllerRevision] = []
    for revision in ordered:
        if UNIQUE_LABEL_KEY not in revision.metadata.labels:
            revision = _with_unique_label(revision)
            label_fixes.append(revision)
        (currents if match(ds, revision, data) else old).append(revision)

    next_number = max_revision(old) + 1
    if not currents:
        return _snapshot(ds, data, next_number, old, label_fixes, ordered, taken)

    keep = currents[0]
    if len(currents) > 1:
        highest = 0
        for revision in currents:
            if revision.revision >= highest:
                keep, highest = revision, revision.revision
    keep_hash = keep.metadata.labels.get(UNIQUE_LABEL_KEY, "")
    relabels: list[Pod] = []
    deletes: list[ControllerRevision] = []
    if len(currents) > 1:
        relabels = [pod for pod in pods if pod.metadata.labels.get(UNIQUE_LABEL_KEY, "") != keep_hash]
        deletes = [revision for revision in currents if revision.metadata.name != keep.metadata.name]

    bump: tuple[ControllerRevision, int] | None = None
    current = keep
    if keep.revision < next_number:
        bump = (keep, next_number)
        current = copy.deepcopy(keep)
        current.revision = next_number
    return HistoryPlan(current=current, hash=keep_hash, old=old, data=data, label_fixes=label_fixes,
                       revision_bump=bump, deletes=deletes, pod_relabels=relabels)


def _snapshot(ds: DaemonSet, data: bytes, number: int, old: list[ControllerRevision],
              label_fixes: list[ControllerRevision], ordered: Sequence[ControllerRevision],
              taken: Mapping[str, ControllerRevision] | None) -> HistoryPlan:
    wanted = new_revision(ds, data, number, ds.status.collision_count)
    existing = (taken or {}).get(wanted.metadata.name)
    if existing is None:
        existing = next((r for r in ordered if r.metadata.name == wanted.metadata.name), None)
    if existing is None:
        return HistoryPlan(current=wanted, hash=wanted.metadata.labels[UNIQUE_LABEL_KEY], old=old, data=data,
                           create=wanted, label_fixes=label_fixes)
    conflict = resolve_create_conflict(ds, existing, data)
    if conflict.current is not None:
        # Upstream returns the existing revision as it is: no label fix-up, no renumbering.
        current = conflict.current
        return HistoryPlan(current=current, hash=current.metadata.labels.get(UNIQUE_LABEL_KEY, ""), old=old,
                           data=data, label_fixes=label_fixes)
    return HistoryPlan(current=None, hash=None, old=old, data=data, label_fixes=label_fixes,
                       collision_count=conflict.collision_count)


# --- cleanupHistory -----------------------------------------------------------------------------------------


def live_hashes(pods: Iterable[Pod]) -> set[str]:
    """The non-empty ``controller-revision-hash`` labels of ``pods``.

    Upstream takes them from getNodesToDaemonPods(ds, includeDeletedTerminal=true): every claimed
    pod with a target node, terminating and deleted terminal pods included; pods whose target node
    cannot be found are left out. Pass those pods.
    """
    return {value for pod in pods if (value := pod.metadata.labels.get(UNIQUE_LABEL_KEY, ""))}


def cleanup_history(ds: DaemonSet, old: Iterable[ControllerRevision], live_pod_hashes: Iterable[str],
                    limit: int | None = None) -> list[ControllerRevision]:
    """cleanupHistory: the old revisions to delete, oldest (lowest revision) first.

    Keeps ``limit`` old revisions (``spec.revisionHistoryLimit`` when None, 10 when that is unset too),
    never deletes a revision whose unique label a live pod still carries (it does not count towards
    the kept ones either: upstream only counts deletions), and never sees the current revision,
    which is not among ``old``. Upstream sorts with an unstable sort on the revision number alone;
    ties are broken here by creation time and name, as SortControllerRevisions does.
    """
    olds = list(old)
    if limit is None:
        limit = ds.spec.revision_history_limit
        if limit is None:
            limit = DEFAULT_REVISION_HISTORY_LIMIT
    to_kill = len(olds) - limit
    if to_kill <= 0:
        return []
    live = set(live_pod_hashes)
    doomed: list[ControllerRevision] = []
    for revision in sort_controller_revisions(olds):
        if to_kill <= 0:
            break
        if revision.metadata.labels.get(UNIQUE_LABEL_KEY, "") in live:
            continue
        doomed.append(revision)
        to_kill -= 1
    return doomed


# --- request bodies -----------------------------------------------------------------------------------------


def relabel_pod_patch(hash_: str) -> bytes:
    """dedupCurHistories' merge patch moving a pod to the kept revision's hash."""
    return marshal({"metadata": {"labels": {UNIQUE_LABEL_KEY: hash_}}})


def unique_label_patch(revision: ControllerRevision) -> bytes:
    """A merge patch adding the unique label (the revision's name) that constructHistory puts on with an Update."""
    return marshal({"metadata": {"labels": {UNIQUE_LABEL_KEY: revision.metadata.name}}})


def revision_number_patch(number: int) -> bytes:
    """A merge patch setting ``revision``, the change constructHistory makes with an Update."""
    return marshal({"revision": number})
