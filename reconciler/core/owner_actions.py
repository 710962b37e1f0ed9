"""Action pieces both controllers issue for the objects they own: the envelope, the object events are
recorded against, the claim patches (adopt with an owner re-check, release), and the pod creates and
deletes, status writes and events that upstream's podControl, status updates and recorder make the same
way for a DaemonSet and a ReplicaSet."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict

import msgspec

from kube import codec
from kube.core import Pod
from kube.meta import ObjectMeta
from kube.ownership import adopt_patch, release_patch
from messages.actions import (
    Action,
    Adoption,
    CreatePods,
    DeletePod,
    OwnerCheck,
    PatchPod,
    PodToCreate,
    RecordEvent,
    UpdateStatus,
)
from messages.keys import ADOPT, status_key
from reconciler.core.audit_targets import Known, event_on, name_in

_encode = msgspec.json.encode


class Planned(NamedTuple):
    """A plan's actions, with what it knew of the objects they carry encoded (the pods and revisions they
    create, the object their events are about): their audit targets need no decoding."""

    actions: list[Action]
    known: Known


class Common(TypedDict):
    decision_id: int
    controller: str
    issued_at: str


def object_reference(kind: str, api_version: str, meta: ObjectMeta) -> msgspec.Raw:
    """What events are recorded against (the recorder's GetReference of the controller)."""
    return msgspec.Raw(_encode({"kind": kind, "namespace": meta.namespace, "name": meta.name, "uid": meta.uid,
                                "apiVersion": api_version, "resourceVersion": meta.resource_version}))


@dataclass(frozen=True, slots=True)
class Issuer:
    """The controller (`meta`, of `kind`) issuing the actions of one sync, the decision's `correlation` id
    beginning every key: what every action it issues carries."""

    kind: str
    api_version: str
    meta: ObjectMeta
    correlation: str
    component: str  # the events' source component, e.g. "replicaset-controller"
    common: Common  # the actions' envelope; decision_id 0: the store embeds the id it assigns
    owner: msgspec.Raw  # object_reference of the controller

    @classmethod
    def of(cls, kind: str, api_version: str, meta: ObjectMeta, controller: str, correlation: str, issued_at: str,
           component: str) -> Issuer:
        return cls(kind, api_version, meta, correlation, component,
                   Common(decision_id=0, controller=controller, issued_at=issued_at),
                   object_reference(kind, api_version, meta))

    def adoption(self, uid: str) -> Adoption:
        """The controller adopting the object with `uid`: an owner re-check, then the patch."""
        meta = self.meta
        return Adoption(owner_check=self.owner_check(), patch_type="strategic",
                        patch=msgspec.Raw(adopt_patch(meta, self.api_version, self.kind, uid)))

    def adopting_first(self, uid: str, adopting: Collection[str]) -> Adoption | None:
        """The adoption an action on the object with `uid` waits on: one when the sync claims it (`adopting`)."""
        return self.adoption(uid) if uid in adopting else None

    def claims(self, adopt: Sequence[Pod], release: Sequence[Pod], touched: Collection[str] = ()) -> list[PatchPod]:
        """ControllerRefManager's patches: adoption only after the executor re-read the owner. The orphans
        whose uids are `touched` (deleted or patched by the same plan) are adopted by that action itself
        (`adopt_first`), so that nothing touches them before they are ours."""
        actions = []
        for pod in adopt:
            if pod.metadata.uid in touched:
                continue
            adopting = self.adoption(pod.metadata.uid)
            actions.append(PatchPod(
                key=f"{self.correlation}/{ADOPT}/{pod.metadata.uid}", namespace=pod.metadata.namespace,
                name=pod.metadata.name, uid=pod.metadata.uid, patch_type=adopting.patch_type, patch=adopting.patch,
                owner_check=adopting.owner_check, **self.common))
        actions.extend(PatchPod(
            key=f"{self.correlation}/release/{pod.metadata.uid}", namespace=pod.metadata.namespace,
            name=pod.metadata.name, uid=pod.metadata.uid, patch_type="strategic",
            patch=msgspec.Raw(release_patch(self.meta.uid, pod.metadata.uid)), **self.common) for pod in release)
        return actions

    def owner_check(self) -> OwnerCheck:
        """This controller, to be re-read fresh by the executor (upstream's canAdopt)."""
        return OwnerCheck(kind=self.kind, name=self.meta.name, uid=self.meta.uid)

    def create_pods(self, creates: Sequence[tuple[str, dict[str, Any]]] | Sequence[tuple[str, str, dict[str, Any]]],
                    known: Known, claiming: bool = False) -> CreatePods:
        """One CreatePods of `creates`, each ending with (idempotency key, pod body): a ReplicaSet's are just
        that, a DaemonSet's begin with the node. Indexed rather than unpacked: no tuple per pod. `claiming`: the
        same sync adopts orphans, so the creates wait on the owner's fresh read as the adoptions do."""
        known.names.update((c[-2], name_in(c[-1])) for c in creates)
        return CreatePods(
            key=f"{self.correlation}/create", namespace=self.meta.namespace, owner=self.owner,
            component=self.component, pods=[PodToCreate(key=c[-2], pod=msgspec.Raw(_encode(c[-1]))) for c in creates],
            after_claim=self.owner_check() if claiming else None, **self.common)

    def delete_pod(self, pod: Pod, adopting: Collection[str], claiming: bool = False) -> DeletePod:
        """A DeletePod of one of the controller's pods, or of an orphan it claims (`adopting`: adopted first);
        `claiming` as for create_pods."""
        uid = pod.metadata.uid
        adopt_first = self.adopting_first(uid, adopting)
        return DeletePod(
            key=f"{self.correlation}/delete/{uid}", namespace=pod.metadata.namespace, name=pod.metadata.name,
            uid=uid, owner=self.owner, component=self.component, adopt_first=adopt_first,
            after_claim=self.owner_check() if claiming and adopt_first is None else None, **self.common)

    def update_status(self, status: dict[str, object], status_fields: tuple[str, ...] = ()) -> UpdateStatus:
        """UpdateStatus of the synced copy (its resourceVersion and metadata), with `status_fields` of `status`
        set on a fresh read after an error (none: the whole status)."""
        meta = self.meta
        return UpdateStatus(
            key=status_key(self.correlation), kind=self.kind, namespace=meta.namespace, name=meta.name, uid=meta.uid,
            status=msgspec.Raw(_encode(status)), resource_version=meta.resource_version,
            metadata=msgspec.Raw(_encode(codec.to_builtins(meta))), status_fields=status_fields, **self.common)

    def event(self, key: str, type_: str, reason: str, message: str, known: Known) -> RecordEvent:
        """An Event on the controller (its target known to the audit trail without decoding)."""
        meta = self.meta
        known.targets[key] = event_on(key, meta.namespace, self.kind, meta.namespace, meta.name, meta.uid)
        return RecordEvent(key=key, namespace=meta.namespace, involved=self.owner, type=type_, reason=reason,
                           message=message, component=self.component, **self.common)
