"""Counters of one executor process, kept as plain numbers for /metrics to render.

Names follow controller-runtime and client-go: `kubus_executor_results_total{action,outcome}`,
`kubus_executor_deliveries_total{disposition}` (acked, redelivered, interrupted; a dead-lettered action is
counted where every consumer's are, `kubus_dead_lettered_total{origin="actions",reason}`),
`rest_client_requests_total{method,code}`, `kubus_executor_events_total{outcome}` (events recorded,
counted onto an existing Event, duplicate, dropped by the spam filter, failed) and
`kubus_executor_actions_in_flight`, and `kubus_executor_events_pending` (recordings started in the background and
not yet written: an action is acked before its events are, as client-go's broadcaster records them).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

ACKED = "acked"
REDELIVERED = "redelivered"  # NAKed: an unknown outcome (no answer, a 504) outlasted this delivery's retries
INTERRUPTED = "interrupted"  # NAKed at shutdown, for another executor to take at once

EVENT_RECORDED = "recorded"  # a new Event object
EVENT_COUNTED = "counted"  # a repeat: the existing Event's count PATCHed up (client-go's EventCorrelator)
EVENT_DUPLICATE = "duplicate"  # AlreadyExists: an earlier delivery recorded it
EVENT_DROPPED = "dropped"  # by the spam filter
EVENT_FAILED = "failed"  # refused by the API, or it did not answer


@dataclass
class ExecutorMetrics:
    results: Counter[tuple[str, str]] = field(default_factory=Counter)  # (action tag, outcome)
    deliveries: Counter[str] = field(default_factory=Counter)  # disposition
    api_requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (HTTP method, code or "<error>")
    events: Counter[str] = field(default_factory=Counter)  # outcome
    in_flight: int = 0
    events_pending: int = 0  # background recordings of events not yet finished (executor/events.py)

    def result(self, action: str, outcome: str) -> None:
        self.results[(action, outcome)] += 1

    def delivery(self, disposition: str) -> None:
        self.deliveries[disposition] += 1

    def api_request(self, method: str, code: int) -> None:
        self.api_requests[(method, str(code) if code else "<error>")] += 1

    def event(self, outcome: str) -> None:
        self.events[outcome] += 1

    def snapshot(self) -> dict[str, Any]:
        """Every counter as nested plain dicts, e.g. ``{"results": {"create_pods": {"succeeded": 50}}}``."""
        results: dict[str, dict[str, int]] = {}
        for (action, outcome), count in sorted(self.results.items()):
            results.setdefault(action, {})[outcome] = count
        requests: dict[str, dict[str, int]] = {}
        for (method, code), count in sorted(self.api_requests.items()):
            requests.setdefault(method, {})[code] = count
        return {"results": results, "deliveries": dict(sorted(self.deliveries.items())),
                "api_requests": requests, "events": dict(sorted(self.events.items())), "in_flight": self.in_flight,
                "events_pending": self.events_pending}
