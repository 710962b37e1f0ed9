"""A ReplicaSet plan as action commands: what the executor is asked to do, with idempotency keys.

Every key starts with the decision's correlation id, so each effect is named once, forever: a
redelivered command is recognised by the executor, a re-published one by JetStream.
"""

from __future__ import annotations

from kube import codec
from messages.actions import Action
from reconciler.core.audit_targets import Known
from reconciler.core.owner_actions import Issuer, Planned
from reconciler.core.replicaset.handlers import API_VERSION, KIND
from reconciler.core.replicaset.sync import COMPONENT, Plan


def status_body(plan: Plan) -> dict[str, object]:
    """The status as the API shows it: `replicas` is the one count that is never omitted."""
    body: dict[str, object] = codec.to_builtins(plan.status)
    body.setdefault("replicas", 0)
    return body


def plan_actions(plan: Plan, correlation: str, issued_at: str, write_status: bool) -> Planned:
    rs = plan.rs
    if rs is None:
        return Planned([], Known())
    issuer = Issuer.of(KIND, API_VERSION, rs.metadata, str(plan.key), correlation, issued_at, COMPONENT)
    known = Known()
    adopting = {pod.metadata.uid for pod in plan.adopt}
    actions: list[Action] = []
    actions.extend(issuer.claims(plan.adopt, plan.release, {pod.metadata.uid for pod in plan.deletes}))
    # the sync's other creates and deletes wait on its claim too: upstream's ClaimPods fails the whole sync when
    # canAdopt finds the ReplicaSet gone or being deleted (TestDoNotAdoptOrCreateIfBeingDeletedRace)
    claiming = bool(plan.adopt)
    if plan.creates:
        actions.append(issuer.create_pods(plan.creates, known, claiming))
    actions.extend(issuer.delete_pod(pod, adopting, claiming) for pod in plan.deletes)
    if plan.status is not None and write_status:
        # updateReplicaSetStatus: UpdateStatus of the synced copy (its resourceVersion and metadata), and
        # after an error the whole newStatus on a fresh read
        actions.append(issuer.update_status(status_body(plan)))
    actions.extend(issuer.event(f"{correlation}/event/{bad.reason}", "Warning", bad.reason, bad.message, known)
                   for bad in plan.warnings)
    return Planned(actions, known)
