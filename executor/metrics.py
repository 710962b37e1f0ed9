"""The metrics of one executor, on the prometheus registry it is given (runtime/metrics.py).

`kubus execute` and `kubus up` give the process's one registry (served on /metrics); without one (tests,
benchmarks) an executor counts on a registry of its own. The metrics:

- `kubus_actions_total{action,outcome}`: actions applied, by action and outcome;
- `kubus_executor_deliveries_total{disposition}`: acked, redelivered (an unknown outcome, no answer or a 504,
  outlasted the delivery's retries), interrupted (NAKed at shutdown). A dead-lettered action is counted where
  every consumer's are, `kubus_dead_lettered_total{origin="actions",reason}`;
- `kubus_executor_events_total{outcome}`: Events recorded, counted onto an existing Event, duplicate, dropped
  by the spam filter, failed;
- `kubus_executor_ownership_checks_total{by}`: deletes and patches checked (executor/ownership.py) by the
  object's last state on KUBUS_STATE with no GET (`index`: the name of the index of KUBUS_STATE that direct get
  replaced), by reading the object (`read`), and versions found stale by the delete's precondition (`stale`, each
  followed by a `read`);
- `rest_client_requests_total{code,method,host}`, `rest_client_request_duration_seconds{verb,host}` (client-go's);
- `kubus_executor_in_flight` (actions being applied) and `kubus_executor_events_pending` (recordings started in
  the background and not yet written: an action is acked before its events are, as client-go's broadcaster
  records them).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from runtime.metrics import CounterMap, RestClientMetrics, private

ACKED = "acked"
REDELIVERED = "redelivered"  # NAKed: an unknown outcome (no answer, a 504) outlasted this delivery's retries
INTERRUPTED = "interrupted"  # NAKed at shutdown, for another executor to take at once

EVENT_RECORDED = "recorded"  # a new Event object
EVENT_COUNTED = "counted"  # a repeat: the existing Event's count PATCHed up (client-go's EventCorrelator)
EVENT_DUPLICATE = "duplicate"  # AlreadyExists: an earlier delivery recorded it
EVENT_DROPPED = "dropped"  # by the spam filter
EVENT_FAILED = "failed"  # refused by the API, or it did not answer


class ExecutorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry if registry is not None else private()
        self.registry = registry
        self.results = CounterMap(Counter("kubus_actions_total", "Actions applied, by action and outcome",
                                          ["action", "outcome"], registry=registry))
        self.deliveries = CounterMap(Counter("kubus_executor_deliveries_total", "Action deliveries by disposition "
                                             "(acked, redelivered, interrupted)", ["disposition"], registry=registry))
        self.events = CounterMap(Counter("kubus_executor_events_total", "Events the executor recorded, by outcome "
                                         "(recorded, counted, duplicate, dropped, failed)", ["outcome"],
                                         registry=registry))
        self.checks = CounterMap(Counter("kubus_executor_ownership_checks_total", "Objects a delete or patch "
                                         "touches, checked by their last state on KUBUS_STATE (index), by a GET "
                                         "(read), or found stale by the delete's precondition (stale)", ["by"],
                                         registry=registry))
        self.rest = RestClientMetrics.of(registry)
        self.in_flight = 0
        self.events_pending = 0  # background recordings of events not yet finished (executor/events.py)
        Gauge("kubus_executor_in_flight", "Actions being applied", registry=registry).set_function(
            lambda: self.in_flight)
        Gauge("kubus_executor_events_pending", "Events being recorded in the background",
              registry=registry).set_function(lambda: self.events_pending)

    def result(self, action: str, outcome: str) -> None:
        self.results.inc((action, outcome))

    def delivery(self, disposition: str) -> None:
        self.deliveries.inc(disposition)

    def api_request(self, method: str, host: str, code: int, seconds: float) -> None:
        self.rest.observe(method, host, code, seconds)

    def ownership_check(self, by: str) -> None:
        self.checks.inc(by)

    def event(self, outcome: str) -> None:
        self.events.inc(outcome)

    def snapshot(self) -> dict[str, Any]:
        """Every counter as nested plain dicts, e.g. ``{"results": {"create_pods": {"succeeded": 50}}}``."""
        results: dict[str, dict[str, int]] = {}
        for (action, outcome), count in sorted(self.results.items()):
            results.setdefault(action, {})[outcome] = int(count)
        return {"results": results, "deliveries": {k: int(v) for k, v in sorted(self.deliveries.items())},
                "api_requests": self.rest.by_method(),
                "events": {k: int(v) for k, v in sorted(self.events.items())},
                "ownership_checks": {k: int(v) for k, v in sorted(self.checks.items())}, "in_flight": self.in_flight,
                "events_pending": self.events_pending}
