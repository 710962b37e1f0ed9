"""One delivery of one action: the API to apply it with, the process's event recorder, and where the
results go (`Delivery.emit` turns an `Effect` into the published `ActionResult`).

Apart from executor/effects.py so that the events (executor/events.py), which deliveries carry,
and the effects, which both use, import one way: effects <- events <- delivery.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec

from executor.effects import Effect
from executor.events import EventRecorder
from executor.kubeapi import KubeApi
from executor.ownership import Proven
from kube.times import Clock, format_micro_time
from messages.actions import Action, ActionResult

Report = Callable[[ActionResult], Awaitable[None]]


class Delivery(msgspec.Struct, frozen=True):
    """One delivery of one action: the API to apply it with and where its results go. A frozen msgspec Struct,
    built in C: one is made per delivery and another per ownership check (`msgspec.structs.replace`), and a
    frozen dataclass sets each of its ten fields through object.__setattr__ in Python."""

    api: KubeApi
    action: Action
    number: int  # JetStream's delivery count, 1 on the first
    final: bool  # the last delivery: an unknown outcome is reported as failed, not redelivered
    executor: str
    report: Report
    now: Clock
    events: EventRecorder  # the process's one recorder: its spam filter is shared by every delivery
    # the version of the object a delete touches that the ownership check proved its controller's: the
    # delete's preconditions (None: unchecked, or gone when read: the uid alone)
    proven: Proven | None = None
    # a delete whose proven version is stale (409) raises StaleVersion for a fresh check, but on the last
    # proof it is reported failed (a Conflict), for the reconciler to decide again
    last_proof: bool = True

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
