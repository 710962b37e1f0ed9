"""What ingest has done, counted on the prometheus registry it is given (runtime/metrics.py): the process's when
`kubus ingest` or `kubus up` wires it (served on /metrics), one of its own otherwise (tests, benchmarks).

Each attribute is a labelled metric seen as a dict (`counters.lists[kind] += 1`), so `snapshot()` and /metrics
read the same numbers. What is not a metric (the resourceVersions acked, the objects without a uid) is kept
beside, as plain dicts.
"""

from __future__ import annotations

from collections import Counter as Tally
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from runtime.metrics import CounterMap, GaugeMap, RestClientMetrics, private


def _by_kind(registry: CollectorRegistry, name: str, documentation: str) -> CounterMap:
    return CounterMap(Counter(name, documentation, ["kind"], registry=registry))


class Counters:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry if registry is not None else private()
        self.registry = registry
        # (kind, type) -> newly stored events
        self.published = CounterMap(Counter("kubus_ingest_events_total", "Watch events published to JetStream",
                                            ["kind", "type"], registry=registry))
        self.duplicates = _by_kind(registry, "kubus_ingest_duplicates_total",
                                   "Publishes JetStream dropped as duplicates")
        self.publish_retries = _by_kind(registry, "kubus_ingest_publish_retries_total",
                                        "Publishes resent after a failure")
        # kind -> events not published because the stream already held a newer state of the object, or its
        # deletion: another replica published first (with two replicas, most of the slower one's events), or
        # this one is back from an outage with events the stream has moved past (ingest/publishing.py)
        self.superseded = _by_kind(registry, "kubus_ingest_superseded_total", "Events not published: the stream "
                                   "already held a newer state of the object, or its deletion")
        self.quarantined = _by_kind(registry, "kubus_ingest_quarantined_total",
                                    "Objects that did not decode, or were too large")
        self.compressed = _by_kind(registry, "kubus_ingest_compressed_total",
                                   "Events published compressed: over max_payload")
        self.too_large = _by_kind(registry, "kubus_ingest_too_large_total",
                                  "Objects too large for max_payload even compressed")
        self.lists = _by_kind(registry, "kubus_ingest_lists_total", "Full lists (start without checkpoint, 410 Gone)")
        self.gone = _by_kind(registry, "kubus_ingest_gone_total", "410 Gone answers that forced a relist")
        self.api_reconnects = _by_kind(registry, "kubus_ingest_api_reconnects_total",
                                       "Watches re-opened after an error")
        self.watching = GaugeMap(Gauge("kubus_ingest_watching", "1 while a kind's watch is open", ["kind"],
                                       registry=registry))
        self.rest = RestClientMetrics.of(registry)
        self.unroutable: Tally[str] = Tally()  # objects without a uid: logged, not published
        self.last_rv: dict[str, str] = {}  # kind -> resourceVersion up to which all events are acked

    def snapshot(self, nats_reconnects: int = 0) -> dict[str, Any]:
        by_kind: dict[str, dict[str, int]] = {}
        for (kind, event_type), n in sorted(self.published.items()):
            by_kind.setdefault(kind, {})[event_type] = int(n)

        def ints(counts: CounterMap) -> dict[str, int]:
            return {kind: int(n) for kind, n in counts.items()}

        return {
            "published": by_kind,
            "published_total": int(sum(self.published.values())),
            "duplicates": ints(self.duplicates),
            "duplicates_total": int(sum(self.duplicates.values())),
            "publish_retries": ints(self.publish_retries),
            "superseded": ints(self.superseded),
            "superseded_total": int(sum(self.superseded.values())),
            "quarantined": ints(self.quarantined),
            "compressed": ints(self.compressed),
            "too_large": ints(self.too_large),
            "unroutable": dict(self.unroutable),
            "lists": ints(self.lists),
            "relists": int(sum(self.lists.values())),
            "gone": ints(self.gone),
            "api_reconnects": ints(self.api_reconnects),
            "nats_reconnects": nats_reconnects,
            "last_resource_version": dict(self.last_rv),
            "watching": {kind: bool(up) for kind, up in self.watching.items()},
            "api_requests": self.rest.by_method(),
        }
