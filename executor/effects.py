"""What applying an action produced, and the delivery it is applied in.

An `Effect` is the outcome of one effect on the cluster (one pod of a CreatePods, or a whole
single-effect action); `Delivery.emit` turns it into the `ActionResult` that is published. A
handler either returns (everything reported) or raises `RetryLater` or `Interrupted`: the action
is unfinished, the effects reported so far are final, and a redelivery re-runs the rest
idempotently. Each result names its `subject`, the object the effect was on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import msgspec

from executor.errors import TransientError
from executor.kubeapi import KubeApi
from kube.meta import ObjectMeta, Status
from kube.times import format_micro_time
from messages.actions import FAILED, Action, ActionResult

if TYPE_CHECKING:
    from executor.events import EventRecorder


@dataclass(frozen=True, slots=True)
class Effect:
    outcome: str
    code: int = 0
    reason: str = ""
    message: str = ""
    object_uid: str = ""
    resource_version: str = ""
    # the API's own message when `message` adds to it (as client-go's error prints it): for events
    api_message: str = ""
    object_name: str = ""  # the name the API answered with (a create may move to another name)

    @property
    def error(self) -> str:
        """What upstream's `%v` of the error would print: the API's message."""
        return self.api_message or self.message


class RetryLater(Exception):
    """An unknown outcome (no answer, or a 504) outlasted this delivery's retries: NAK, and JetStream
    redelivers later; the idempotent re-run finds out what happened."""

    def __init__(self, cause: TransientError):
        super().__init__(str(cause))
        self.cause = cause


def failed(status: Status) -> Effect:
    """A permanent failure, carrying the API's Status as client-go's errors do."""
    return Effect(FAILED, status.code, status.reason, status.message, api_message=status.message)


def gave_up(error: TransientError) -> Effect:
    """An unknown outcome on the last delivery: reported as failed, with the last answer."""
    return Effect(FAILED, error.code, error.reason or "Timeout", f"gave up after the last delivery: {error.message}",
                  api_message=error.message)


class _Object(msgspec.Struct):
    """The metadata of any object; msgspec skips spec and status without building them."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


_object = msgspec.json.Decoder(_Object)


def metadata_of(data: bytes) -> ObjectMeta:
    """An object's metadata from its JSON; empty metadata when the JSON is not an object."""
    try:
        return _object.decode(data).metadata
    except msgspec.DecodeError:
        return ObjectMeta()


def object_subject(namespace: str, name: str) -> str:
    """An ActionResult's subject: "namespace/name", or "name" for a cluster-scoped object."""
    return f"{namespace}/{name}" if namespace else name


def succeeded_with(outcome: str, code: int, data: bytes, reason: str = "", message: str = "") -> Effect:
    meta = metadata_of(data)
    return Effect(outcome, code, reason, message, meta.uid, meta.resource_version, object_name=meta.name)


Report = Callable[[ActionResult], Awaitable[None]]


@dataclass(frozen=True)
class Delivery:
    """One delivery of one action: the API to apply it with and where its results go."""

    api: KubeApi
    action: Action
    number: int  # JetStream's delivery count, 1 on the first
    final: bool  # the last delivery: an unknown outcome is reported as failed, not redelivered
    executor: str
    report: Report
    now: Callable[[], datetime]
    events: EventRecorder  # the process's one recorder: its spam filter is shared by every delivery

    @property
    def tag(self) -> str:
        return str(type(self.action).__struct_config__.tag)

    async def emit(self, key: str, effect: Effect, subject: str) -> None:
        action = self.action
        await self.report(ActionResult(
            key=key, action_key=action.key, action=self.tag, decision_id=action.decision_id,
            controller=action.controller, outcome=effect.outcome, code=effect.code, reason=effect.reason,
            message=effect.message, object_uid=effect.object_uid, resource_version=effect.resource_version,
            executor=self.executor, attempts=self.number, finished_at=format_micro_time(self.now()),
            subject=subject))
