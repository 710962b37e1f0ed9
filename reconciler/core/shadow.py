"""Shadow mode's acts: what a controller did, or would have done, as keys the comparator can match.

A shadow reconciler (`kubus up --shadow`, `kubus reconcile --shadow`; docs/shadow.md) decides as any other
but acts on nothing: each action of its decisions is recorded as a *would-do* act, and each watch event
that shows the acting controller (kube-controller-manager, or an acting kubus) at work is recorded as an
*upstream* act. Both are :class:`Act`s, keyed on what identifies a decision and not on generated names or
times: the verb, the owner (key and uid), the target (the node of a DaemonSet pod, the pod of a deletion,
adoption or release, the name of a ControllerRevision, which is the DaemonSet's name and the revision's
hash), the revision hash of a DaemonSet pod, and for a status write its fields. The comparator
(reconciler.core.comparing) folds them per owner and window.

Pure: acts are computed from the cache and the decisions, as the batch has them (reconciler.core.batch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

import msgspec

from kube.apps import ControllerRevision, DaemonSet, ReplicaSet
from kube.codec import decode
from kube.core import Pod
from kube.nodeaffinity import get_target_node_name
from kube.ownership import get_controller_of
from kube.pods import is_pod_active, is_pod_ready
from messages.actions import (
    BumpCollisionCount,
    CreateControllerRevision,
    CreatePods,
    DeleteControllerRevision,
    DeletePod,
    PatchControllerRevision,
    PatchPod,
    UpdateStatus,
)
from reconciler.core.cache import Change
from reconciler.core.controllers import Decided
from reconciler.core.daemonset.history import fnv32a, match, revision_data, revision_data_of
from reconciler.core.daemonset.rollout import allows_surge
from reconciler.core.ranking import ranks_by_related_pods_on_same_node, tie_class
from reconciler.core.replicaset.sync import indirectly_related_pods
from reconciler.core.view import CacheView

KUBUS: Final = "kubus"  # a would-do act of the shadow
UPSTREAM: Final = "upstream"  # an act of the acting controller, as the watch showed it
# How far upstream's clock, when it decided the same scale-down, may read from the shadow's at its decision: its
# own sync of the change (before the shadow's, which waits for ingest and the bus, or after, behind expectations)
# and the skew of two hosts' clocks. LogarithmicScaleDown buckets Ready and creation times on that clock, so a
# ReplicaSet deletion's tie class holds every pod upstream could have ranked equal with the pick at any moment of
# [now - CLOCK_SLACK, now + CLOCK_SLACK] (docs/shadow.md, the tie classes).
CLOCK_SLACK: Final = timedelta(seconds=2)

CREATE_POD: Final = "create_pod"
DELETE_POD: Final = "delete_pod"
ADOPT_POD: Final = "adopt_pod"
RELEASE_POD: Final = "release_pod"
CREATE_REVISION: Final = "create_revision"
PATCH_REVISION: Final = "patch_revision"
DELETE_REVISION: Final = "delete_revision"
ADOPT_REVISION: Final = "adopt_revision"
UPDATE_STATUS: Final = "update_status"
# not an act: a shadow's decision that wrote no status, with the status it saw (and so computed): the comparator
# reads the shadow's status as of its last decision, written or not (reconciler.core.comparing)
KEEP_STATUS: Final = "keep_status"
BUMP_COLLISION_COUNT: Final = "bump_collision_count"
# not an act of the controller: the owner was deleted (or began to be). The comparator reads it as context: an
# adoption the shadow would have made for an owner being deleted is refused by upstream's fresh read (canAdopt),
# and the garbage collector, not the controller, releases the pods of an owner deleted with --cascade=orphan
OWNER_DELETED: Final = "owner_deleted"

REVISION_KIND: Final = "ControllerRevision"
DISRUPTION_TARGET: Final = "DisruptionTarget"  # a pod condition: why it is being deleted (not its controller)
HASH_LABEL: Final = "controller-revision-hash"  # a DaemonSet pod's revision


@dataclass(frozen=True, slots=True)
class Act:
    """One act of either side. `target` and `hash` are the matching key with the verb and the owner; `ties`
    (would-do deletions only) names the pods upstream could equally have picked (its tie class, see
    `_ties`); `fields` is a status write's status; `ref` the would-do action's key or the upstream event's
    msg_id, for the lineage."""

    side: str
    controller_key: str  # "ReplicaSet/ns/name"
    owner_uid: str
    verb: str
    target: str = ""
    hash: str = ""
    seq: int = 0  # kubus: the newest event sequence the decision had seen; upstream: the event's
    ref: str = ""
    ties: tuple[str, ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)
    # upstream's act seen before the change that caused it (reconciler.core.shadow_order): the shadow holds the
    # owner back until the cause shows, and could not have decided this act itself
    early: bool = False
    # upstream's surge deletion made while the shadow's expectations of its own round held the owner back
    # (`_surge_replaced`): upstream split the round across more syncs and went on; the shadow could not decide it
    awaited: bool = False

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """The matching key, without the status fields (compared separately: see comparing)."""
        return (self.verb, self.controller_key, self.owner_uid, self.target, self.hash)


_OWNER_KINDS: Final = {"ReplicaSet": ReplicaSet, "DaemonSet": DaemonSet}


def _owner(namespace: str, ref: Any, view: CacheView) -> DaemonSet | ReplicaSet | None:
    if ref is None or ref.kind not in _OWNER_KINDS:
        return None
    owner = view.named(ref.kind, namespace, ref.name)
    if not isinstance(owner, _OWNER_KINDS[ref.kind]) or owner.metadata.uid != ref.uid:
        return None
    if owner.metadata.deletion_timestamp is not None:
        return None  # the garbage collector's work, not the controller's
    return owner


def _key(owner: DaemonSet | ReplicaSet) -> str:
    kind = "DaemonSet" if isinstance(owner, DaemonSet) else "ReplicaSet"
    return f"{kind}/{owner.metadata.namespace}/{owner.metadata.name}"


def _pod_target(pod: Pod, owner: DaemonSet | ReplicaSet) -> tuple[str, str]:
    """(target, hash) of a created pod: a DaemonSet's by node and revision hash; a ReplicaSet's pods are
    interchangeable (their names are generated), so its creates are counted, not named."""
    if isinstance(owner, DaemonSet):
        return get_target_node_name(pod) or "", pod.metadata.labels.get(HASH_LABEL, "")
    return "", ""


def _named(pod: Pod) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


def _deletion(pod: Pod, owner: DaemonSet | ReplicaSet) -> tuple[str, str]:
    """(target, hash) of a deleted pod: a DaemonSet's by node and hash (one pod per node), a ReplicaSet's by
    the pod itself."""
    if isinstance(owner, DaemonSet):
        return get_target_node_name(pod) or "", pod.metadata.labels.get(HASH_LABEL, "")
    return _named(pod), ""


# --- upstream: the watch --------------------------------------------------------------------------------------
def upstream_acts(change: Change, seq: int, msg_id: str, view: CacheView,
                  held: Container[str] = frozenset(), awaiting: Container[str] = frozenset()) -> list[Act]:
    """What the acting controller did, if this change (applied to `view`) shows it: a pod created or deleted
    with a controller reference to a ReplicaSet or DaemonSet, an adoption or a release, a ControllerRevision
    written, or a status written. Deletions are attributed to the pod's controller (the watch does not say
    who deleted it: see docs/shadow.md). A replayed change (a restart's catch-up) shows nothing new."""
    if change.replayed:
        return []
    if change.kind in ("Pod", REVISION_KIND):
        # `held`: the owners the shadow holds back for an act seen before its cause (reconciler.core.shadow_order)
        acts = (_pod_acts if change.kind == "Pod" else _revision_acts)(change, seq, msg_id, view)
        acts = [dataclasses.replace(a, early=True) if a.controller_key in held else a for a in acts]
        # `awaiting`: the owners whose expectations (of the shadow's own round) are not met yet
        return [dataclasses.replace(a, awaited=True)
                if a.verb == DELETE_POD and a.controller_key in awaiting and _surge_replaced(change, view) else a
                for a in acts]
    if change.kind in _OWNER_KINDS:
        return _status_acts(change, seq, msg_id)
    return []


def _act(owner: DaemonSet | ReplicaSet, verb: str, seq: int, msg_id: str, target: str = "", hash_: str = "",
         fields: dict[str, Any] | None = None) -> Act:
    return Act(UPSTREAM, _key(owner), owner.metadata.uid, verb, target, hash_, seq, msg_id,
               fields=fields or {})


def _pod_acts(change: Change, seq: int, msg_id: str, view: CacheView) -> list[Act]:
    old, new = change.old, change.new
    if not isinstance(old, Pod | None) or not isinstance(new, Pod | None):
        return []
    acts: list[Act] = []
    was_deleting = old is None or old.metadata.deletion_timestamp is not None
    if new is not None and old is None and new.metadata.deletion_timestamp is None:
        owner = _owner(new.metadata.namespace, get_controller_of(new.metadata), view)
        if owner is not None:
            acts.append(_act(owner, CREATE_POD, seq, msg_id, *_pod_target(new, owner)))
        return acts
    gone = new is None or new.metadata.deletion_timestamp is not None
    if gone and old is not None and not was_deleting:
        pod = old
        owner = _owner(pod.metadata.namespace, get_controller_of(pod.metadata), view)
        if owner is not None and not (isinstance(owner, ReplicaSet) and _disrupted(new or old)):
            acts.append(_act(owner, DELETE_POD, seq, msg_id, *_deletion(pod, owner)))
        return acts
    if old is not None and new is not None:
        old_ref, new_ref = get_controller_of(old.metadata), get_controller_of(new.metadata)
        if old_ref is None and new_ref is not None:
            owner = _owner(new.metadata.namespace, new_ref, view)
            if owner is not None:
                acts.append(_act(owner, ADOPT_POD, seq, msg_id, _named(new)))
        elif old_ref is not None and new_ref is None:
            owner = _owner(old.metadata.namespace, old_ref, view)
            if owner is not None:
                acts.append(_act(owner, RELEASE_POD, seq, msg_id, _named(old)))
    return acts


def _surge_replaced(change: Change, view: CacheView) -> bool:
    """The deleted pod is a DaemonSet's old pod, with maxSurge, on a node where a pod of the current revision is
    available, or the old pod is not Ready beside one: what rollingUpdate (an old pod beside an available new
    one) and podsShouldBeOnNode (an old pod not Ready beside a new one) delete once the new pod is there. Ready
    stands for available: minReadySeconds runs on upstream's clock."""
    pod = change.old
    if not isinstance(pod, Pod):
        return False
    owner = _owner(pod.metadata.namespace, get_controller_of(pod.metadata), view)
    if not isinstance(owner, DaemonSet) or not allows_surge(owner):
        return False
    data = revision_data(owner)
    current = next((r.metadata.labels.get(HASH_LABEL, "") for r in view.controlled_by(
        REVISION_KIND, owner.metadata.namespace, owner.metadata.uid)
        if isinstance(r, ControllerRevision) and match(owner, r, data)), None)
    if current is None or pod.metadata.labels.get(HASH_LABEL, "") == current:
        return False
    node = get_target_node_name(pod)
    new = [p for p in view.controlled_by("Pod", owner.metadata.namespace, owner.metadata.uid)
           if isinstance(p, Pod) and p.metadata.deletion_timestamp is None and get_target_node_name(p) == node
           and p.metadata.labels.get(HASH_LABEL, "") == current]
    return any(is_pod_ready(p) for p in new) or (bool(new) and not is_pod_ready(pod))


def _disrupted(pod: Pod) -> bool:
    """Marked DisruptionTarget before its deletion: deleted by the taint-eviction controller, an eviction or a
    preemption, never by the ReplicaSet controller (a DaemonSet's pod on a NoExecute-tainted node is the
    DaemonSet controller's to delete too, whichever gets there first: that one stays its act)."""
    return any(c.type == DISRUPTION_TARGET and c.status == "True" for c in pod.status.conditions)


def _revision_acts(change: Change, seq: int, msg_id: str, view: CacheView) -> list[Act]:
    old, new = change.old, change.new
    current = new if new is not None else old
    if current is None:
        return []
    owner = _owner(current.metadata.namespace, get_controller_of(current.metadata), view)
    if owner is None:
        if old is not None and new is not None and get_controller_of(old.metadata) is not None:
            return []
        return []
    name = current.metadata.name
    if old is None:
        return [_act(owner, CREATE_REVISION, seq, msg_id, revision_target(owner.metadata.name, current))]
    if new is None:
        return [_act(owner, DELETE_REVISION, seq, msg_id, name)]
    if get_controller_of(old.metadata) is None:
        return [_act(owner, ADOPT_REVISION, seq, msg_id, name)]
    if getattr(old, "revision", None) != getattr(new, "revision", None):
        return [_act(owner, PATCH_REVISION, seq, msg_id, name, fields={"revision": new.revision})]
    return []


def revision_target(owner_name: str, revision: ControllerRevision) -> str:
    """A created revision's key: its owner's name and a digest of its data, not its name. The data is what makes
    a revision the current one (upstream's Match), and kube-controller-manager names a DaemonSet's revision with
    a hash kubus does not reproduce (reconciler/core/daemonset/history.py): the same template is one act."""
    return f"{owner_name} data:{fnv32a(revision_data_of(revision)):08x}"


def _status_acts(change: Change, seq: int, msg_id: str) -> list[Act]:
    old, new = change.old, change.new
    if isinstance(old, DaemonSet | ReplicaSet) and (
            new is None or (isinstance(new, DaemonSet | ReplicaSet) and new.metadata.deletion_timestamp is not None
                            and old.metadata.deletion_timestamp is None)):
        return [_act(old, OWNER_DELETED, seq, msg_id)]
    if not isinstance(new, DaemonSet | ReplicaSet) or not isinstance(old, DaemonSet | ReplicaSet):
        return []
    if old.status == new.status or new.metadata.deletion_timestamp is not None:
        return []
    return [_act(new, UPDATE_STATUS, seq, msg_id, fields=msgspec.to_builtins(new.status))]


# --- kubus: the would-do acts of a decision --------------------------------------------------------------------
def would_do(decided: Decided, view: CacheView, now: datetime) -> list[Act]:
    """The acts of a shadow's decision at `now`, its actions as keys (events are not compared: see
    docs/shadow.md)."""
    kind, namespace, name = decided.controller_key.split("/", 2)
    owner = view.named(kind, namespace, name)
    if not isinstance(owner, DaemonSet | ReplicaSet):
        return []
    uid = owner.metadata.uid
    acts: list[Act] = []

    def add(verb: str, ref: str, target: str = "", hash_: str = "", ties: tuple[str, ...] = (),
            fields: dict[str, Any] | None = None) -> None:
        acts.append(Act(KUBUS, decided.controller_key, uid, verb, target, hash_, decided.stream_seq, ref, ties,
                        fields or {}))

    for action in decided.actions:
        if isinstance(action, CreatePods):
            for one in action.pods:
                pod = decode(one.pod, Pod)
                target, hash_ = _pod_target(pod, owner)
                surge = _surge_ties(target, hash_, owner, view) if isinstance(owner, DaemonSet) else ()
                add(CREATE_POD, one.key, target, hash_, ties=surge)
        elif isinstance(action, DeletePod):
            pod = view.named("Pod", action.namespace, action.name)
            if action.adopt_first is not None:
                add(ADOPT_POD, action.key, f"{action.namespace}/{action.name}")
            if isinstance(pod, Pod):
                add(DELETE_POD, action.key, *_deletion(pod, owner), ties=_ties(pod, owner, view, now))
            else:
                add(DELETE_POD, action.key, f"{action.namespace}/{action.name}")
        elif isinstance(action, PatchPod):
            target = f"{action.namespace}/{action.name}"
            if action.owner_check is not None or action.adopt_first is not None:
                add(ADOPT_POD, action.key, target)
            if action.owner_check is None and "/release/" in action.key:
                add(RELEASE_POD, action.key, target)
        elif isinstance(action, CreateControllerRevision):
            add(CREATE_REVISION, action.key, revision_target(name, decode(action.revision, ControllerRevision)))
        elif isinstance(action, PatchControllerRevision):
            if action.owner_check is not None:
                add(ADOPT_REVISION, action.key, action.name)
            else:
                patch = msgspec.json.decode(action.patch)
                revision = patch.get("revision") if isinstance(patch, dict) else None
                add(PATCH_REVISION, action.key, action.name, fields={"revision": revision})
        elif isinstance(action, DeleteControllerRevision):
            add(DELETE_REVISION, action.key, action.name)
        elif isinstance(action, UpdateStatus):
            add(UPDATE_STATUS, action.key, fields=msgspec.json.decode(action.status))
        elif isinstance(action, BumpCollisionCount):
            add(BUMP_COLLISION_COUNT, action.key, str(action.seen + 1))
    if _kept_status(decided):
        add(KEEP_STATUS, decided.correlation_id, fields=msgspec.to_builtins(owner.status))
    return acts


def _kept_status(decided: Decided) -> bool:
    """The sync computed the owner's status and wrote none: the status it computed is the one it saw. Not a
    sync that stopped before its status (waiting for its revision, an error, the owner gone)."""
    summary = decided.summary
    return (decided.error is None and summary.get("status_written") is False
            and not summary.get("waiting_for_history")
            and not any(isinstance(action, UpdateStatus) for action in decided.actions))


def _surge_ties(node: str, hash_: str, owner: DaemonSet, view: CacheView) -> tuple[str, ...]:
    """A DaemonSet's create beside an old, available pod is a surge pick: upstream's rollingUpdate with maxSurge
    walks its nodes in Go map order and starts new pods on the first nodes of an old, available pod and no new
    one, as far as the budget goes (candidateNewNodes). Those nodes (sorted, `node` included) are the create's tie
    class. A create beside an old pod that is not available is made whatever the order (allowedNewNodes), and one
    on a node without a pod by the manage loop: neither names a class (())."""
    if not allows_surge(owner):
        return ()
    by_node: dict[str, list[Pod]] = {}
    for p in view.controlled_by("Pod", owner.metadata.namespace, owner.metadata.uid):
        if isinstance(p, Pod) and p.metadata.deletion_timestamp is None:
            by_node.setdefault(get_target_node_name(p) or "", []).append(p)

    def eligible(pods: list[Pod]) -> bool:
        new = [p for p in pods if p.metadata.labels.get(HASH_LABEL, "") == hash_]
        old = [p for p in pods if p.metadata.labels.get(HASH_LABEL, "") != hash_]
        return not new and len(old) == 1 and is_pod_ready(old[0])

    if not eligible(by_node.get(node, [])):
        return ()
    return tuple(sorted(name for name, pods in by_node.items() if name and eligible(pods)))


def _ties(pod: Pod, owner: DaemonSet | ReplicaSet, view: CacheView, now: datetime) -> tuple[str, ...]:
    """The pods of `owner` upstream could have picked instead of `pod`, as the cache is when the shadow decides
    (the targets of their deletions, sorted; `pod`'s own included).

    A ReplicaSet's scale-down ranks its active pods (ActivePodsWithRanks) as its sync does, by the related
    pods on the same node (getIndirectlyRelatedPods: none for a ReplicaSet without a controller, so every rank
    is 0): pods whose rank is equal but for the UID (kubus's final tie-breaker; upstream's sort.Sort leaves
    equal pods in its informer's order) are one class. A DaemonSet's rolling step walks its nodes in Go map
    order: every pod of the same revision hash and readiness (the candidates the step takes from) is one
    class."""
    controlled = [p for p in view.controlled_by("Pod", owner.metadata.namespace, owner.metadata.uid)
                  if isinstance(p, Pod)]
    if isinstance(owner, DaemonSet):
        pods = [p for p in controlled if p.metadata.deletion_timestamp is None]
        if allows_surge(owner):
            # with surge an old pod goes once the new pod beside it is available: which node is no pick
            return (_deletion(pod, owner)[0],)
        same = [p for p in pods if p.metadata.labels.get(HASH_LABEL, "") == pod.metadata.labels.get(HASH_LABEL, "")
                and is_pod_ready(p) == is_pod_ready(pod)]
        return tuple(sorted(_deletion(p, owner)[0] for p in same))
    pods = [p for p in controlled if is_pod_active(p)]  # the sync's filteredPods
    if pod not in pods:
        return (_named(pod),)
    ranks = ranks_by_related_pods_on_same_node(pods, indirectly_related_pods(owner, view))
    return tuple(sorted(_named(p) for p in tie_class(pods, ranks, pod, now - CLOCK_SLACK, now + CLOCK_SLACK)))
