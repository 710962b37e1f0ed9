"""Fault injection: make a fraction of the requests for one resource and verb fail.

A rule is `RESOURCE:VERB:FRACTION:FAULT`, e.g. `pods:create:0.2:500`. FAULT is one of (all but
the last answered before the request is applied):

- `429` Too Many Requests, `500` Internal Error, `409` Conflict;
- `403` Forbidden as the ResourceQuota admission plugin refuses, `pods "web-x7k2p" is forbidden:
  exceeded quota: compute-resources, requested: pods=1, used: pods=10, limited: pods=10` (for other
  resources the quota counts `count/replicasets.apps` and so on);
- `422` Invalid, a Status with `details.causes` naming a field, as validation refuses;
- `timeout`: the server holds the request for `timeout_seconds` and answers 504;
- `timeout-applied`: the request is applied, then held and answered 504 — the case that tests a
  client's idempotency.

Refusals name the object as kube-apiserver would: a create's name, or the name the registry makes
from its generateName (admission runs after name generation). RESOURCE may be `*`, VERB any
Kubernetes verb or `*`; a subresource is addressed as `pods/status`.

Rules come from `kubus sim --fault RULE` (repeatable) or at run time from the admin endpoint
`PUT /sim/faults` with `{"rules": ["pods:create:0.2:500"], "seed": 1}` (`GET` shows them and
what they injected, `DELETE` clears them).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sim import status as errors
from sim.resources import ApiResource
from sim.validation import ApiFieldError

FAULTS = ("429", "500", "409", "403", "422", "timeout", "timeout-applied")


@dataclass
class FaultRule:
    resource: str
    verb: str
    fraction: float
    fault: str
    injected: int = field(default=0)

    @classmethod
    def parse(cls, text: str) -> FaultRule:
        parts = text.split(":")
        if len(parts) != 4:
            raise ValueError(f"fault rule {text!r}: expected RESOURCE:VERB:FRACTION:FAULT, "
                             f"e.g. pods:create:0.2:500")
        resource, verb, fraction_text, fault = parts
        try:
            fraction = float(fraction_text)
        except ValueError:
            raise ValueError(f"fault rule {text!r}: fraction {fraction_text!r} is not a number") from None
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fault rule {text!r}: fraction must be between 0 and 1")
        if fault not in FAULTS:
            raise ValueError(f"fault rule {text!r}: fault must be one of {', '.join(FAULTS)}")
        return cls(resource, verb, fraction, fault)

    def applies(self, resource: str, verb: str) -> bool:
        return self.resource in ("*", resource) and self.verb in ("*", verb)

    def describe(self) -> dict[str, Any]:
        return {"rule": f"{self.resource}:{self.verb}:{self.fraction}:{self.fault}", "injected": self.injected}


class AppliedThenTimeout(Exception):
    """Raised after a request was applied, to turn its answer into a 504."""


class FaultInjector:
    def __init__(self, rules: list[FaultRule] | None = None, seed: int | None = None,
                 timeout_seconds: float = 5.0):
        self.rules = list(rules or [])
        self._rng = random.Random(seed)
        self.timeout_seconds = timeout_seconds

    def configure(self, rules: list[FaultRule], seed: int | None = None) -> None:
        self.rules = rules
        if seed is not None:
            self._rng = random.Random(seed)

    def pick(self, resource: str, verb: str) -> FaultRule | None:
        for rule in self.rules:
            if rule.applies(resource, verb) and self._rng.random() < rule.fraction:
                rule.injected += 1
                return rule
        return None

    async def intercept(self, resource: ApiResource, verb: str, subresource: str | None,
                        name: Callable[[], Awaitable[str]]) -> None:
        """Raises the fault chosen for this request, if any; `timeout-applied` is left to the caller.

        ``name`` resolves the name the refusal shows, asked only for the faults that show one.
        """
        if not self.rules:
            return
        path = f"{resource.plural}/{subresource}" if subresource else resource.plural
        rule = self.pick(path, verb)
        if rule is None:
            return
        if rule.fault == "429":
            raise errors.too_many_requests()
        if rule.fault == "500":
            raise errors.internal("injected fault")
        if rule.fault == "409":
            raise errors.ApiError(409, "Conflict", f"Operation cannot be fulfilled on {path}: injected conflict")
        if rule.fault == "403":
            raise errors.quota_exceeded(resource, await name())
        if rule.fault == "422":
            shown = await name()
            raise errors.invalid(resource, shown, [ApiFieldError.invalid("metadata.name", shown, "injected fault")])
        if rule.fault == "timeout":
            await asyncio.sleep(self.timeout_seconds)
            raise errors.timeout("Timeout: request did not complete within requested timeout - context "
                                 "deadline exceeded")
        raise AppliedThenTimeout()
