"""CreatePods: upstream's slowStartBatch, made idempotent.

Pods are created in batches of 1, 2, 4, ... (controller.SlowStartInitialBatchSize = 1), each batch
concurrently; after a batch with a failure the rest are not attempted and are reported `skipped`,
so a controller that cannot create pods (quota, admission, a bad template) makes one failing call,
not hundreds. A NamespaceTerminating refusal does not stop the batches: upstream's create function
returns nil for it (the namespace is going away, every create would fail the same way).

Idempotency: the reconciler names each pod from its key and puts the key in the
`kubus.io/idempotency-key` annotation, so a create that was applied but not answered (a timeout, an
executor killed before its ack) meets `409 AlreadyExists` on its retry, and a GET showing our key
makes that a success. A same-named pod with another key is someone else's: a failure.

Events: when the action names its `owner`, each pod's final outcome is recorded on it as upstream's
RealPodControl.CreatePods does (SuccessfulCreate, or FailedCreate but for NamespaceTerminating), once
its batch is reported (see executor/events.py).
"""

from __future__ import annotations

import asyncio
from typing import Final

import msgspec

from executor.claims import claim_failed
from executor.delivery import Delivery
from executor.effects import (
    Effect,
    RetryLater,
    failed,
    gave_up,
    head_of,
    metadata_of,
    object_subject,
    succeeded_with,
)
from executor.errors import NAMESPACE_TERMINATING, Interrupted, TransientError, api_status, has_cause
from executor.events import PodEvent, create_event, record_pod_events
from executor.resources import POD
from kube.names import NAME_ATTEMPTS
from messages.actions import FAILED, IDEMPOTENCY_ANNOTATION, SKIPPED, SUCCEEDED, CreatePods, PodToCreate
from messages.naming import generated_name

SLOW_START_INITIAL_BATCH: Final = 1


def batch_sizes(count: int, initial: int = SLOW_START_INITIAL_BATCH) -> list[int]:
    """The batch sizes slowStartBatch uses for `count` creates when none fails: 1, 2, 4, ..., the rest."""
    sizes = []
    size = min(count, initial)
    while count > 0:
        sizes.append(size)
        count -= size
        size = min(2 * size, count)
    return sizes


async def create_pods(delivery: Delivery, action: CreatePods) -> None:
    """Runs the batches, reporting each pod's result (and recording its event) as its batch completes."""
    names = [head_of(p.pod).name for p in action.pods]
    try:
        not_claimed = await claim_failed(delivery.api, action.namespace, action.after_claim)
    except TransientError as exc:
        if not delivery.final:
            raise RetryLater(exc) from exc
        not_claimed = gave_up(exc)
    if not_claimed is not None:
        for pod, name in zip(action.pods, names, strict=True):  # no call, so no event, as upstream
            await delivery.emit(pod.key, not_claimed, object_subject(action.namespace, name))
        return
    done = 0
    for size in batch_sizes(len(action.pods)):
        batch = action.pods[done:done + size]
        batch_names = names[done:done + size]
        done += size
        outcomes = await asyncio.gather(*(create_pod(delivery, action.namespace, p) for p in batch),
                                        return_exceptions=True)
        stop, retry, interrupted = False, None, False
        events: list[tuple[str, PodEvent | None]] = []
        for pod, name, outcome in zip(batch, batch_names, outcomes, strict=True):
            if isinstance(outcome, TransientError) and delivery.final:
                outcome = gave_up(outcome)
            if isinstance(outcome, Effect):
                name = outcome.object_name or name
                await delivery.emit(pod.key, outcome, object_subject(action.namespace, name))
                events.append((pod.key, create_event(outcome, name)))
                stop = stop or (outcome.outcome == FAILED and outcome.reason != NAMESPACE_TERMINATING)
            elif isinstance(outcome, TransientError):
                retry = outcome
            elif isinstance(outcome, Interrupted):
                interrupted = True
            else:
                raise outcome
        await record_pod_events(delivery.events, delivery.api, delivery.now, action.owner, action.component,
                                action.namespace, events)
        # unfinished pods are not reported: the redelivery decides them, and the ones already
        # created meet AlreadyExists with our key then
        if interrupted:
            raise Interrupted()
        if retry is not None:
            raise RetryLater(retry)
        if stop:
            break
    for pod, name in zip(action.pods[done:], names[done:], strict=True):
        await delivery.emit(pod.key, Effect(SKIPPED, reason="SlowStartStopped",
                                            message="not attempted: an earlier batch of this action failed"),
                            object_subject(action.namespace, name))


async def create_pod(delivery: Delivery, namespace: str, pod: PodToCreate) -> Effect:
    """One idempotent create; raises TransientError and Interrupted from the API call."""
    body = bytes(pod.pod)
    mine = metadata_of(body)
    if not mine.name or mine.annotations.get(IDEMPOTENCY_ANNOTATION) != pod.key:
        # without both, a retried create could make a second pod: refuse rather than risk it
        return Effect(FAILED, reason="NotIdempotent",
                      message=f"the pod body must carry metadata.name and the annotation "
                              f"{IDEMPOTENCY_ANNOTATION}={pod.key!r}")
    api = delivery.api
    name = mine.name
    for attempt in range(NAME_ATTEMPTS if mine.generate_name else 1):
        if attempt:  # the name was someone else's: the key's next name
            name = generated_name(mine.generate_name, pod.key, attempt)
            body = _renamed(body, name)
        reply = await api.call("POST", POD.path(namespace), body=body)
        if reply.ok:
            return succeeded_with(SUCCEEDED, reply.status, reply.data)
        status = api_status(reply)
        if reply.status == 409 and status.reason == "AlreadyExists":
            got = await api.call("GET", POD.path(namespace, name))
            if not got.ok:
                return Effect(FAILED, 409, "AlreadyExists",
                              f"{status.message}; reading it back answered {got.status}: {api_status(got).message}",
                              api_message=status.message)
            key = metadata_of(got.data).annotations.get(IDEMPOTENCY_ANNOTATION)
            if key == pod.key:
                return succeeded_with(SUCCEEDED, 409, got.data, "AlreadyExists", "created by an earlier attempt")
            collision = Effect(FAILED, 409, "AlreadyExists", f"{status.message}, and it is not ours "
                               f"({IDEMPOTENCY_ANNOTATION}={key!r})", api_message=status.message)
            continue
        if reply.status == 403 and has_cause(status, NAMESPACE_TERMINATING):
            return Effect(FAILED, 403, NAMESPACE_TERMINATING, status.message, api_message=status.message)
        return failed(status)
    return collision


def _renamed(body: bytes, name: str) -> bytes:
    pod = msgspec.json.decode(body)
    pod["metadata"]["name"] = name
    return msgspec.json.encode(pod)
