"""What applying an action produced.

An `Effect` is the outcome of one effect on the cluster (one pod of a CreatePods, or a whole
single-effect action); `Delivery.emit` (executor/delivery.py) turns it into the `ActionResult` that
is published. A handler either returns (everything reported) or raises `RetryLater` or
`Interrupted`: the action is unfinished, the effects reported so far are final, and a redelivery
re-runs the rest idempotently. Each result names its `subject`, the object the effect was on.
"""

from __future__ import annotations

import msgspec

from executor.errors import TransientError
from kube import codec
from kube.codec import HeadMeta
from kube.meta import ObjectMeta, Status
from messages.actions import FAILED


class Effect(msgspec.Struct, frozen=True, gc=False):
    """One effect's outcome. A frozen msgspec Struct rather than a frozen dataclass: one is built for every pod
    operation, and a frozen dataclass's __init__ sets each field through object.__setattr__ in Python (~11,000
    instructions for these eight); a Struct's is C. Its fields are strings and ints: no cycles (gc=False)."""

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


class StaleVersion(Exception):
    """A delete's resourceVersion precondition failed: the object changed since the ownership check proved
    that version its controller's (executor/ownership.py). Nothing was applied and nothing reported: the
    executor checks the object afresh (a GET) and applies the action again."""

    def __init__(self, status: Status):
        super().__init__(status.message)
        self.status = status


def failed(status: Status) -> Effect:
    """A permanent failure, carrying the API's Status as client-go's errors do."""
    return Effect(FAILED, status.code, status.reason, status.message, api_message=status.message)


def gave_up(error: TransientError) -> Effect:
    """An unknown outcome on the last delivery: reported as failed, with the last answer."""
    return Effect(FAILED, error.code, error.reason or "Timeout", f"gave up after the last delivery: {error.message}",
                  api_message=error.message)


def head_of(data: bytes) -> HeadMeta:
    """An object's name, generateName, namespace, uid and resourceVersion from its JSON; all empty when the JSON is
    not an object."""
    try:
        return codec.decode_head(data).metadata
    except msgspec.DecodeError:
        return HeadMeta()


def metadata_of(data: bytes) -> ObjectMeta:
    """All of an object's metadata from its JSON (for its annotations or deletion timestamp: the rest is in
    `head_of`); empty metadata when the JSON is not an object."""
    try:
        return codec.decode_metadata(data)
    except msgspec.DecodeError:
        return ObjectMeta()


def object_subject(namespace: str, name: str) -> str:
    """An ActionResult's subject: "namespace/name", or "name" for a cluster-scoped object."""
    return f"{namespace}/{name}" if namespace else name


def succeeded_with(outcome: str, code: int, data: bytes, reason: str = "", message: str = "") -> Effect:
    meta = head_of(data)
    return Effect(outcome, code, reason, message, meta.uid, meta.resource_version, object_name=meta.name)
