"""The controller re-read fresh before a claim, as upstream's canAdopt (RecheckDeletionTimestamp): before an
adoption (`owner_check`, `adopt_first`), and before the creates and deletes of a sync that also claims orphans
(`after_claim`), which upstream never makes when the claim fails."""

from __future__ import annotations

from typing import Final

from executor.effects import Effect, failed, metadata_of
from executor.errors import api_status
from executor.kubeapi import KubeApi
from executor.resources import KINDS
from messages.actions import FAILED, NOT_ADOPTED, SKIPPED, OwnerCheck

ADOPTERS: Final = ("ReplicaSet", "DaemonSet")  # the kinds an owner_check may name


async def recheck_owner(api: KubeApi, namespace: str, check: OwnerCheck) -> Effect | None:
    """Upstream's canAdopt for ReplicaSets and DaemonSets: a fresh GET of the owner (never a cache),
    which must be the same object (uid) and not being deleted. None when it may adopt; else the
    failure; raises TransientError and Interrupted from the GET."""
    if check.kind not in ADOPTERS:
        return Effect(FAILED, reason="BadAction", message=f"owner_check kind {check.kind!r} is not one of "
                                                          f"{', '.join(ADOPTERS)}")
    got = await api.call("GET", KINDS[check.kind].path(namespace, check.name))
    if not got.ok:
        return failed(api_status(got))
    fresh = metadata_of(got.data)
    if fresh.uid != check.uid:
        return Effect(FAILED, reason="Gone", message=f"original {check.kind} {namespace}/{check.name} is gone: "
                                                     f"got uid {fresh.uid}, wanted {check.uid}")
    if fresh.deletion_timestamp:
        return Effect(FAILED, reason="Deleting", message=f"{namespace}/{check.name} has just been deleted at "
                                                         f"{fresh.deletion_timestamp}")
    return None


async def claim_failed(api: KubeApi, namespace: str, check: OwnerCheck | None, uid: str = "") -> Effect | None:
    """For an action of a sync that also claims orphans (`after_claim`): None when the owner, read fresh, may
    still adopt; otherwise the action is not applied, reported skipped with reason NOT_ADOPTED, as upstream's
    ClaimPods error ends that sync before it creates or deletes anything. Raises TransientError and Interrupted
    from the GET."""
    if check is None:
        return None
    refused = await recheck_owner(api, namespace, check)
    if refused is None:
        return None
    return Effect(SKIPPED, refused.code, NOT_ADOPTED,
                  f"the sync's claim failed, so not applied: {refused.reason + ': ' if refused.reason else ''}"
                  f"{refused.message}", uid, api_message=refused.error)
